"""The reference AGN operator: a pure rendering core plus the adapters that feed and publish it."""
