"""grid_site_route: choose a site for each request from the load every site publishes.

One module per job: the filter block (settings), the operator's serving config (serving_config), the
relayed series (signals, signals_store), what they say about a site (availability, shedding), the
immutable view the request path reads (snapshot), the pick among sites (pick), prefix affinity
(prefix), the client answers (answers), the pollers and the serving-config watcher (pollers,
watcher), the metrics (route_metrics) and what ties them together at run time (runtime).
"""
