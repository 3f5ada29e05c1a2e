"""Fresh selection inside the first viable group of a capability, per the overlay's selection mode."""

from __future__ import annotations

import os
import random
from bisect import bisect_right

from reference.gateway.snapshot import CapabilityPlan
from reference.overlay import Candidate

SEED_ENV = "AGN_GATEWAY_SEED"


def make_rng(seed: str | None = None) -> random.Random:
    """A generator seeded from the OS, or from AGN_GATEWAY_SEED for reproducible runs."""
    seed = seed if seed is not None else os.environ.get(SEED_ENV)
    if seed is not None and seed != "":
        return random.Random(seed)
    return random.Random(int.from_bytes(os.urandom(16), "big"))


def pick(plan: CapabilityPlan, rng: random.Random) -> Candidate | None:
    """One new-request pick; None when no group of the capability can take new work."""
    group = plan.group
    if group is None:
        return None
    members = group.members
    mode = plan.mode
    if mode == "roundRobin":
        index = group.cursor
        group.cursor = (index + 1) % len(members)
        return members[index]
    if mode == "random":
        return members[rng.randrange(len(members))]
    if mode == "weightedRandom":
        return members[bisect_right(group.cumulative, rng.randrange(group.total))]
    return members[0]
