"""Request filters. Each module parses its own config block and implements one filter type."""
