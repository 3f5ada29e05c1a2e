"""Hypothesis strategies of serving snapshots and request sequences for the routing model.

Every snapshot drawn here is valid under the overlay contract and under the stricter rules an implementation
may claim (strictOverlayValidation), so any consumer gateway must accept it: per capability, selection
groups are all present or all absent, start at 0, are contiguous and non-decreasing in candidate order, and
each group has one admission state (the overlay contract: "selection_group is a zero-based, contiguous
priority group for each capability"); no two candidates share kind, name, site and cluster; only core
selection modes appear (or none: selection_policy omitted), never the extended weightedRandom. Clusters
are the grid's own, so every candidate can serve. `envelope` turns a snapshot into a sealed v1 envelope with
harness.contract, so its revision and digests are right.

Request sequences name the snapshot's models and near misses of them: a name that is a prefix of every real
one and a real one with a suffix, which no candidate names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from harness import contract
from harness.model.routing import (
    DETERMINISTIC,
    EXISTING_ONLY,
    INFERENCE_MODEL,
    NEW_AND_EXISTING,
    NONE,
    RANDOM,
    ROUND_ROBIN,
    Candidate,
    Request,
    Snapshot,
)

__all__ = ["REMOTE_SITES", "AffinityCase", "Provider", "RoutingCase", "affinity_cases", "capability", "envelope",
           "near_misses", "requests", "routing_cases", "snapshots", "with_probe"]

#: Site labels no provider of a grid uses: a candidate carrying one is hosted elsewhere, reached through its
#: cluster all the same (the consumer does not recompute geography: IR-SELECTION-NO-RECOMPUTE).
REMOTE_SITES: tuple[str, ...] = ("site-gen-remote", "site-gen-far")
#: The selection modes a core test may publish; None omits selection_policy (deterministic by default).
#: Hypothesis draws the first one most often and shrinks towards it: roundRobin, whose every turn visits
#: another member of the group, shows a wrong group soonest.
MODES: tuple[str | None, ...] = (ROUND_ROBIN, DETERMINISTIC, RANDOM, None)
#: Admission states as drawn for a group or an ungrouped candidate: admitted for new work twice as often as
#: each of the others, so a capability often has more than one viable group.
DRAWN_STATES: tuple[str, ...] = (NEW_AND_EXISTING, EXISTING_ONLY, NEW_AND_EXISTING, NONE)


@dataclass(frozen=True)
class Provider:
    """An upstream cluster the gateway under test reaches, and the site its provider runs at."""

    cluster: str
    site: str


@st.composite
def capability(draw: Any, model: str, providers: Sequence[Provider], *, max_candidates: int = 6,
               unique_clusters: bool = False, max_groups: int = 3, max_group_size: int = 3) -> tuple[Candidate, ...]:
    """The candidates of one model, in the producer's order: 1 to `max_candidates` distinct (site, cluster)
    pairs in 1 to `max_groups` contiguous groups of 1 to `max_group_size` (or, now and then, ungrouped), with
    admission states drawn per group (per candidate when ungrouped) and now and then a stale candidate.

    `unique_clusters` gives each candidate its own cluster at its provider's site, so the cluster that served
    a request names the candidate (what the session tests need to follow a binding).
    """
    pool = [(p.site, p.cluster) for p in providers]
    if not unique_clusters:
        pool += [(s, p.cluster) for s in REMOTE_SITES for p in providers]
    limit = min(max_candidates, len(pool))
    grouped = draw(st.sampled_from((True, True, False)))
    sizes: list[int] = []
    if grouped:
        for size in draw(st.lists(st.integers(1, max_group_size), min_size=1, max_size=max_groups)):
            if sum(sizes) < limit:
                sizes.append(min(size, limit - sum(sizes)))
        count = sum(sizes)
    else:
        count = draw(st.integers(1, limit))
    if unique_clusters:
        places = draw(st.permutations(pool))[:count]
    else:
        places = draw(st.lists(st.sampled_from(pool), min_size=count, max_size=count, unique=True))
    stale = draw(st.lists(st.sampled_from((False, False, True)), min_size=count, max_size=count))
    if not grouped:
        states = draw(st.lists(st.sampled_from(DRAWN_STATES), min_size=count, max_size=count))
        return tuple(Candidate(model, site, cluster, None, state, not old)
                     for (site, cluster), state, old in zip(places, states, stale, strict=True))
    group_states = draw(st.lists(st.sampled_from(DRAWN_STATES), min_size=len(sizes), max_size=len(sizes)))
    numbers = [number for number, size in enumerate(sizes) for _ in range(size)]
    return tuple(Candidate(model, site, cluster, number, group_states[number], not old)
                 for (site, cluster), number, old in zip(places, numbers, stale, strict=True))


@st.composite
def snapshots(draw: Any, models: Sequence[str], providers: Sequence[Provider], *, max_candidates: int = 6,
              unique_clusters: bool = False, modes: Sequence[str | None] = MODES) -> Snapshot:
    """A snapshot naming two or more of `models` (all of them at most), its capabilities interleaved in the
    candidate list (each keeping its own order), with one selection mode drawn from `modes`."""
    if any(mode not in MODES for mode in modes):
        raise ValueError(f"a core test publishes only the core modes or none, not {list(modes)}")
    count = draw(st.integers(min(2, len(models)), len(models)))
    caps = [list(draw(capability(m, providers, max_candidates=max_candidates, unique_clusters=unique_clusters)))
            for m in models[:count]]
    order = draw(st.permutations([index for index, cap in enumerate(caps) for _ in cap]))
    merged = [caps[index].pop(0) for index in order]
    return Snapshot(tuple(merged), draw(st.sampled_from(list(modes))))


def near_misses(models: Sequence[str]) -> tuple[str, ...]:
    """Model names no candidate names: the longest common prefix of `models` (shorter than each), and the
    first one with a suffix. A gateway matching prefixes or leading substrings routes them."""
    first = models[0]
    common = first
    for name in models[1:]:
        while not name.startswith(common):
            common = common[:-1]
    prefix = common[:-1] if common in models else common
    return tuple(dict.fromkeys(name for name in (prefix, first + "-x") if name and name not in models))


def requests(models: Sequence[str], unknown: Sequence[str] = (), *, sessions: int = 0, min_size: int = 24,
             max_size: int = 40) -> st.SearchStrategy[tuple[Request, ...]]:
    """Request sequences over `models`, and now and then (one request in four or so) over `unknown` names no
    candidate has; with `sessions`, a request carries one of that many session labels or none (a label names
    a session per model: callers make the session key from both)."""
    labels: st.SearchStrategy[str | None] = st.none()
    if sessions:
        labels = st.one_of(st.none(), st.sampled_from([f"s{i}" for i in range(sessions)]))
    names = [*models, *models, *models, *unknown] if unknown else list(models)
    one = st.builds(Request, st.sampled_from(names), labels)
    return st.lists(one, min_size=min_size, max_size=max_size).map(tuple)


@dataclass(frozen=True)
class RoutingCase:
    """One snapshot to publish and the requests to send while it serves."""

    snapshot: Snapshot
    requests: tuple[Request, ...]


@dataclass(frozen=True)
class AffinityCase:
    """Two snapshots published one after the other, with keyed and unkeyed requests sent while each serves;
    session labels carry over, so some sessions bound under `before` come back under `after`."""

    before: Snapshot
    before_requests: tuple[Request, ...]
    after: Snapshot
    after_requests: tuple[Request, ...]


def routing_cases(models: Sequence[str], providers: Sequence[Provider], *, min_requests: int = 24,
                  max_requests: int = 40) -> st.SearchStrategy[RoutingCase]:
    """A snapshot of `models` (up to six candidates each, clusters shared across sites) with unkeyed requests
    for them, for models the snapshot left out and for near misses."""
    return st.builds(RoutingCase, snapshots(models, providers),
                     requests(models, near_misses(models), min_size=min_requests, max_size=max_requests))


def affinity_cases(models: Sequence[str], providers: Sequence[Provider], *, sessions: int = 4,
                   min_requests: int = 12, max_requests: int = 24) -> st.SearchStrategy[AffinityCase]:
    """Two snapshots of `models` over the same candidates (each cluster once per model, at its provider's site),
    so a candidate's admission, group and order change between them, or it leaves; requests carry session
    labels from one pool of `sessions`."""
    def one() -> st.SearchStrategy[Snapshot]:
        return snapshots(models, providers, max_candidates=len(providers), unique_clusters=True)

    sent = requests(models, near_misses(models), sessions=sessions, min_size=min_requests, max_size=max_requests)
    return st.builds(AffinityCase, one(), sent, one(), sent)


def with_probe(snapshot: Snapshot, model: str, provider: Provider) -> Snapshot:
    """`snapshot` with one more model, served by `provider` alone: what a test waits on to see the snapshot
    serve, whatever the generated models answer."""
    probe = Candidate(model, provider.site, provider.cluster, 0, NEW_AND_EXISTING)
    return Snapshot((*snapshot.candidates, probe), snapshot.mode)


def envelope(snapshot: Snapshot, scope: contract.ScopeSpec, generation: int) -> dict[str, Any]:
    """The sealed v1 envelope publishing `snapshot` for the gateway of `scope`."""
    items = []
    for c in snapshot.candidates:
        extra: dict[str, Any] = {"admission_state": c.admission, "fresh": c.fresh}
        if c.group is not None:
            extra["selection_group"] = c.group
        items.append(contract.candidate(c.model, c.site, c.cluster, kind=INFERENCE_MODEL, **extra))
    return contract.envelope(items, scope, selection_mode=snapshot.mode, generation=generation)
