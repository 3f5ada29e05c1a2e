"""Serving profile: a grid gateway choosing sites with grid_site_route by measured site availability."""
