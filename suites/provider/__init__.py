"""Provider profile: a provider gateway behind the mTLS provider hop (trust, exact routes, credentials)."""
