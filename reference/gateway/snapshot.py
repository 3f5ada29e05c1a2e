"""An accepted overlay prepared for the request path.

Everything a routing decision needs is computed once here, when a snapshot is built: per capability
the first viable selection group, its eligible members, cumulative weights and the stable_id index
used by session affinity. A request then does one dict lookup and an O(1) (weighted: O(log n)) pick.
Round-robin cursors live on the group objects, so a replacement snapshot starts with fresh cursors.
"""

from __future__ import annotations

from itertools import accumulate

from reference.overlay import Candidate, Overlay

NEW_AND_EXISTING = "new_and_existing"
EXISTING_ONLY = "existing_only"
REUSABLE_STATES = frozenset({NEW_AND_EXISTING, EXISTING_ONLY})

# Overlay wire names of the selection modes -> the snake_case names used in metadata and metric labels.
MODE_LABELS = {
    "deterministic": "deterministic",
    "roundRobin": "round_robin",
    "random": "random",
    "weightedRandom": "weighted_random",
}


class ActiveGroup:
    """The members of the first viable group that fresh selections may pick, in producer order."""

    __slots__ = ("number", "members", "cumulative", "total", "cursor")

    def __init__(self, number: int | None, members: tuple[Candidate, ...]) -> None:
        self.number = number
        self.members = members
        self.cumulative = tuple(accumulate(c.traffic_weight or 0 for c in members))
        self.total = self.cumulative[-1] if self.cumulative else 0
        self.cursor = 0


class CapabilityPlan:
    """Precomputed selection state for one (kind, name) in one snapshot."""

    __slots__ = ("kind", "name", "candidates", "reusable", "group", "mode", "mode_label")

    def __init__(self, kind: str, name: str, candidates: tuple[Candidate, ...], overlay_mode: str) -> None:
        self.kind = kind
        self.name = name
        self.candidates = candidates
        # stable_id -> candidate, for session bindings; existing_only stays reusable, none does not
        self.reusable: dict[str, Candidate] = {
            c.hop_id: c for c in candidates if c.admission_state in REUSABLE_STATES
        }
        grouped = bool(candidates) and candidates[0].selection_group is not None
        # Without groups there is nothing for a policy to act on: first admitted in producer order.
        self.mode = overlay_mode if grouped else "deterministic"
        self.mode_label = MODE_LABELS[self.mode]
        self.group = _first_viable_group(candidates, grouped, self.mode)


def _first_viable_group(candidates: tuple[Candidate, ...], grouped: bool, mode: str) -> ActiveGroup | None:
    if not grouped:
        eligible = tuple(c for c in candidates if c.admission_state == NEW_AND_EXISTING)
        return ActiveGroup(None, eligible[:1]) if eligible else None
    numbers = sorted({c.selection_group for c in candidates if c.selection_group is not None})
    for number in numbers:
        members = tuple(
            c for c in candidates if c.selection_group == number and c.admission_state == NEW_AND_EXISTING
        )
        if mode == "weightedRandom":
            members = tuple(c for c in members if (c.traffic_weight or 0) > 0)
        if members:
            return ActiveGroup(number, members)
    return None


class Snapshot:
    """One immutable routing snapshot: the overlay it came from plus its prepared plans.

    `revision` is what provider hops carry (envelope format only); `semantic_key` decides whether a
    reload changed anything (envelope revision, or the SHA-256 of the bytes for legacy payloads).
    """

    __slots__ = ("overlay", "format", "revision", "semantic_key", "local_site", "plans", "candidate_count")

    def __init__(self, overlay: Overlay, semantic_key: str) -> None:
        self.overlay = overlay
        self.format = overlay.format
        self.revision = overlay.revision if overlay.format == "envelope" else None
        self.semantic_key = semantic_key
        self.local_site = overlay.local_site
        mode = overlay.effective_mode
        self.plans: dict[tuple[str, str], CapabilityPlan] = {
            cap: CapabilityPlan(cap[0], cap[1], members, mode)
            for cap, members in overlay.by_capability.items()
        }
        self.candidate_count = len(overlay.candidates)

    def plan(self, kind: str, name: str) -> CapabilityPlan | None:
        return self.plans.get((kind, name))
