"""Fresh selection: modes, first viable group, admission, cursors per snapshot, decision cost."""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from typing import Any

import pytest
from gateway_support import candidate, envelope, route_filter, run_request

from reference.gateway.selection import make_rng, pick
from reference.gateway.snapshot import Snapshot
from reference.gateway.snapshot_store import SnapshotStore, build_snapshot

MODEL = "m"


def snap(cands: list[dict[str, Any]], mode: str | None = None) -> Snapshot:
    return build_snapshot(envelope(cands, mode=mode), None, None)


def picks(snapshot: Snapshot, n: int, seed: str = "fixed") -> list[str]:
    plan = snapshot.plan("inference_model", MODEL)
    assert plan is not None
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        chosen = pick(plan, rng)
        assert chosen is not None
        out.append(chosen.cluster)
    return out


def test_no_policy_is_deterministic_first_admitted_in_producer_order() -> None:
    snapshot = snap(
        [
            candidate(MODEL, "s1", "c-none", admission_state="none"),
            candidate(MODEL, "s2", "c-existing", admission_state="existing_only"),
            candidate(MODEL, "s3", "c-first"),
            candidate(MODEL, "s4", "c-second"),
        ]
    )
    assert set(picks(snapshot, 20)) == {"c-first"}
    plan = snapshot.plan("inference_model", MODEL)
    assert plan is not None and plan.mode_label == "deterministic" and plan.group is not None
    assert plan.group.number is None


def test_policy_without_groups_falls_back_to_deterministic() -> None:
    snapshot = snap([candidate(MODEL, "s1", "c1"), candidate(MODEL, "s2", "c2")], mode="roundRobin")
    assert set(picks(snapshot, 10)) == {"c1"}
    plan = snapshot.plan("inference_model", MODEL)
    assert plan is not None and plan.mode_label == "deterministic"


def test_deterministic_with_groups_takes_first_of_first_viable_group() -> None:
    snapshot = snap(
        [
            candidate(MODEL, "s1", "c1", selection_group=0, admission_state="existing_only"),
            candidate(MODEL, "s2", "c2", selection_group=1),
            candidate(MODEL, "s3", "c3", selection_group=1),
        ],
        mode="deterministic",
    )
    assert set(picks(snapshot, 10)) == {"c2"}


def test_round_robin_cycles_exactly_within_the_first_group() -> None:
    snapshot = snap(
        [
            candidate(MODEL, "s1", "a", selection_group=0),
            candidate(MODEL, "s2", "b", selection_group=0),
            candidate(MODEL, "s3", "c", selection_group=0),
            candidate(MODEL, "s4", "fallback", selection_group=1),
        ],
        mode="roundRobin",
    )
    assert picks(snapshot, 9) == ["a", "b", "c"] * 3


def test_round_robin_skips_an_inadmissible_first_group() -> None:
    snapshot = snap(
        [
            candidate(MODEL, "s1", "a", selection_group=0, admission_state="none"),
            candidate(MODEL, "s2", "b", selection_group=1, admission_state="existing_only"),
            candidate(MODEL, "s3", "c", selection_group=2),
            candidate(MODEL, "s4", "d", selection_group=2),
            candidate(MODEL, "s5", "e", selection_group=3),
        ],
        mode="roundRobin",
    )
    assert picks(snapshot, 6) == ["c", "d"] * 3
    plan = snapshot.plan("inference_model", MODEL)
    assert plan is not None and plan.group is not None and plan.group.number == 2


def test_round_robin_cursors_are_per_capability() -> None:
    snapshot = snap(
        [
            candidate(MODEL, "s1", "a", selection_group=0),
            candidate(MODEL, "s2", "b", selection_group=0),
            candidate("other", "s1", "a", selection_group=0),
            candidate("other", "s2", "b", selection_group=0),
        ],
        mode="roundRobin",
    )
    rng = random.Random(1)
    first = snapshot.plan("inference_model", MODEL)
    second = snapshot.plan("inference_model", "other")
    assert first is not None and second is not None
    chosen = [pick(first, rng), pick(first, rng), pick(second, rng)]
    assert [c.cluster for c in chosen if c is not None] == ["a", "b", "a"]


def test_a_new_snapshot_starts_fresh_cursors_but_an_unchanged_one_keeps_them() -> None:
    cands = [candidate(MODEL, "s1", "a", selection_group=0), candidate(MODEL, "s2", "b", selection_group=0)]
    store = SnapshotStore(snap(cands, mode="roundRobin"))
    assert picks(store.current, 1) == ["a"]
    same = snap(cands, mode="roundRobin")
    assert store.replace(same).result == "unchanged"
    assert picks(store.current, 1) == ["b"]
    changed = snap([*cands, candidate(MODEL, "s3", "c", selection_group=0)], mode="roundRobin")
    assert store.replace(changed).result == "accepted"
    assert picks(store.current, 3) == ["a", "b", "c"]


def test_random_is_uniform_over_the_group_and_never_leaves_it() -> None:
    snapshot = snap(
        [
            candidate(MODEL, "s1", "a", selection_group=0),
            candidate(MODEL, "s2", "b", selection_group=0),
            candidate(MODEL, "s3", "c", selection_group=0),
            candidate(MODEL, "s4", "fallback", selection_group=1),
        ],
        mode="random",
    )
    counts = Counter(picks(snapshot, 30_000))
    assert set(counts) == {"a", "b", "c"}
    for cluster in "abc":
        assert abs(counts[cluster] / 30_000 - 1 / 3) < 0.02, counts


def test_weighted_random_follows_weights_in_the_first_viable_group_only() -> None:
    snapshot = snap(
        [
            candidate(
                MODEL,
                "s0",
                "blocked",
                selection_group=0,
                traffic_weight=1000,
                admission_state="existing_only",
            ),
            candidate(MODEL, "s1", "a", selection_group=1, traffic_weight=50),
            candidate(MODEL, "s2", "b", selection_group=1, traffic_weight=30),
            candidate(MODEL, "s3", "c", selection_group=1, traffic_weight=20),
            candidate(MODEL, "s4", "fallback", selection_group=2, traffic_weight=1000),
        ],
        mode="weightedRandom",
    )
    n = 40_000
    counts = Counter(picks(snapshot, n))
    assert set(counts) == {"a", "b", "c"}
    for cluster, share in (("a", 0.5), ("b", 0.3), ("c", 0.2)):
        assert abs(counts[cluster] / n - share) < 0.015, counts


def test_nothing_admitted_means_no_pick() -> None:
    snapshot = snap(
        [
            candidate(MODEL, "s1", "a", selection_group=0, admission_state="existing_only"),
            candidate(MODEL, "s2", "b", selection_group=1, admission_state="none"),
        ],
        mode="roundRobin",
    )
    plan = snapshot.plan("inference_model", MODEL)
    assert plan is not None and pick(plan, random.Random(0)) is None


def test_seeded_generators_reproduce_and_unseeded_ones_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGN_GATEWAY_SEED", "42")
    assert [make_rng().random() for _ in range(3)] == [make_rng().random() for _ in range(3)]
    monkeypatch.delenv("AGN_GATEWAY_SEED")
    assert make_rng().random() != make_rng().random()


def test_route_filter_reports_mode_and_group_metadata() -> None:
    route = route_filter(
        {"overlay_file": "/x/routing-overlay.json"},
        envelope(
            [
                candidate(MODEL, "s1", "a", selection_group=0, admission_state="existing_only", rank=0),
                candidate(MODEL, "s2", "b", selection_group=1, rank=1, selection_tier="remote"),
            ],
            mode="roundRobin",
        ),
    )
    ctx, rejection = run_request(route, MODEL)
    assert rejection is None and ctx.cluster == "b"
    md = ctx.metadata
    assert md["intelligent_route.selection_group"] == 1
    assert md["intelligent_route.selection_mode"] == "round_robin"
    assert md["intelligent_route.rank"] == 1
    assert md["intelligent_route.selection_tier"] == "remote"
    assert md["intelligent_route.candidate_count"] == 2


def test_decision_cost_at_1024_candidates() -> None:
    cands = [
        candidate(MODEL, f"s{i}", f"c{i}", selection_group=i // 256, traffic_weight=1 + i % 7)
        for i in range(1024)
    ]
    route = route_filter({"overlay_file": "/x/routing-overlay.json"}, envelope(cands, mode="weightedRandom"))
    plan = route.store.current.plan("inference_model", MODEL)
    assert plan is not None and plan.group is not None and len(plan.group.members) == 256
    samples = []
    for _ in range(2000):
        start = time.perf_counter()
        ctx, rejection = run_request(route, MODEL)
        samples.append(time.perf_counter() - start)
        assert rejection is None
    median_us = statistics.median(samples) * 1e6
    assert median_us < 60, f"median decision (incl. request setup) took {median_us:.1f} us"
    rng = random.Random(3)
    pick_samples = []
    for _ in range(2000):
        start = time.perf_counter()
        pick(plan, rng)
        pick_samples.append(time.perf_counter() - start)
    assert statistics.median(pick_samples) * 1e6 < 20
