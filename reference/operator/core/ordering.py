"""Candidate order, ranks and selection groups per routingPolicy.

| policy         | order                                                              |
|----------------|--------------------------------------------------------------------|
| geographyFirst | admission, locality, freshness, score descending, tie-break        |
| scoreFirst     | admission, freshness, score descending, locality, tie-break        |

The tie-break is (site, name, cluster). Groups are split by admission, locality and freshness under
geographyFirst and by admission and freshness under scoreFirst; a score never splits a group.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from reference.operator.core.admission import EXISTING_ONLY, NEW_AND_EXISTING
from reference.operator.core.locality import TIER_ORDER

ADMISSION_ORDER = {NEW_AND_EXISTING: 0, EXISTING_ONLY: 1}


@dataclass(frozen=True)
class Entry:
    """A candidate before serialisation, carrying what ordering and grouping need."""

    kind: str
    name: str
    site: str
    cluster: str
    fresh: bool
    admission_state: str
    tier: str
    score: float
    capacity_weight: int = 1
    pressure: float = 0.0  # the scoring strategy's normalised pressure, for dynamic placement
    credential: Any = None
    rank: int | None = None
    selection_group: int | None = None

    @property
    def identity(self) -> tuple[str, str, str, str]:
        return (self.kind, self.name, self.site, self.cluster)


def sort_key(entry: Entry, routing_policy: str) -> tuple[Any, ...]:
    admission = ADMISSION_ORDER[entry.admission_state]
    tier = TIER_ORDER[entry.tier]
    stale = 0 if entry.fresh else 1
    tie = (entry.site, entry.name, entry.cluster, entry.kind)
    if routing_policy == "scoreFirst":
        return (admission, stale, -entry.score, tier, *tie)
    if routing_policy == "geographyFirst":
        return (admission, tier, stale, -entry.score, *tie)
    raise ValueError(f"unknown routing policy {routing_policy!r}")


def group_key(entry: Entry, routing_policy: str) -> tuple[Any, ...]:
    if routing_policy == "scoreFirst":
        return (entry.admission_state, entry.fresh)
    return (entry.admission_state, entry.tier, entry.fresh)


def order(entries: list[Entry], routing_policy: str) -> list[Entry]:
    """Sort, drop repeated (kind, name, site, cluster) keeping the best, rank from 0, group per capability."""
    ordered = sorted(entries, key=lambda e: sort_key(e, routing_policy))
    seen: set[tuple[str, str, str, str]] = set()
    unique = []
    for entry in ordered:
        if entry.identity not in seen:
            seen.add(entry.identity)
            unique.append(entry)
    groups: dict[tuple[str, str], tuple[int, tuple[Any, ...]]] = {}
    out = []
    for rank, entry in enumerate(unique):
        capability = (entry.kind, entry.name)
        key = group_key(entry, routing_policy)
        previous = groups.get(capability)
        number = 0 if previous is None else previous[0] + (0 if previous[1] == key else 1)
        groups[capability] = (number, key)
        out.append(replace(entry, rank=rank, selection_group=number))
    return out
