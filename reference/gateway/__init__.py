"""Reference Praxis-compatible gateway: config, filters, snapshot routing, proxy and admin."""
