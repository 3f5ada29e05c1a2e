"""The serving profile's harness side: what the harness plays and drives when it judges a gateway's
measured site availability (grid_site_route)."""
