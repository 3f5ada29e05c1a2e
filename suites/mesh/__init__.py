"""The mesh profile: several operators gossiping; eligibility, propagation, filtering and staleness."""
