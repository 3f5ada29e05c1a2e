"""The mesh profile's site-to-site layer: membership, shared provider state and site eligibility.

Membership is SWIM over UDP: `swim` is the protocol core (no I/O; a clock and a transport are
injected), `codec` its wire format, `transport` the UDP endpoint, `runner` runs a member on the asyncio
loop, and `memnet` with `sim` give a deterministic in-memory network for tests and benchmarks. Member
payloads (versioned, size-bounded bytes) ride on the membership gossip and carry the provider records
of `records`; `sites` decides when a discovered site becomes eligible for routing.

Import the submodules directly; this package module stays import-free so that the operator core can
use one submodule without loading the others.
"""
