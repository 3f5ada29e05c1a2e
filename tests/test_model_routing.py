"""The executable routing model (harness.model): each rule with a case and its twin, the strategies' overlays
valid under the contract, and the model agreeing with the hand-written consumer cases whatever surrounds them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import contract
from harness.model import routing as r
from harness.model import strategies as s
from harness.model.routing import EXISTING_ONLY, NEW_AND_EXISTING, NONE, Candidate, Request, Snapshot

M = "model-x"
OTHER = "model-y"
SCOPE = contract.ScopeSpec("net", "gw", "ns", "site-a")
PROVIDERS = [s.Provider("provider-a", "site-a"), s.Provider("provider-b", "site-a"),
             s.Provider("provider-c", "site-b"), s.Provider("provider-d", "site-c")]
FAST = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def c(cluster: str, group: int | None = None, admission: str = NEW_AND_EXISTING, *, model: str = M,
      site: str = "site-a", fresh: bool = True) -> Candidate:
    return Candidate(model, site, cluster, group, admission, fresh)


def served(snapshot: Snapshot, request: Request | str, bindings: r.Bindings | None = None) -> set[str] | int:
    """The clusters the model permits, or the refusal when it permits nothing else."""
    verdict = r.allowed(snapshot, Request(request) if isinstance(request, str) else request, bindings)
    if not verdict.candidates:
        assert verdict.refusal is not None
        return verdict.refusal
    return set(verdict.clusters)


def bound(session: str, *candidates: Candidate) -> dict[tuple[str, str], frozenset[r.Identity]]:
    return {(session, candidates[0].model): frozenset(x.identity for x in candidates)}


# ------------------------------------------------------------------------------------------ rules


def test_a_model_no_candidate_names_gets_404_and_a_named_one_is_served() -> None:
    snap = Snapshot((c("provider-a"),))
    assert served(snap, OTHER) == 404
    assert served(snap, M) == {"provider-a"}


def test_a_model_named_only_by_a_tool_gets_404_and_its_inference_twin_is_served() -> None:
    tool = contract.envelope([contract.candidate(M, "site-a", "provider-a", kind="mcp_tool")], SCOPE)
    twin = contract.envelope([contract.candidate(M, "site-a", "provider-a")], SCOPE)
    assert served(Snapshot.from_overlay(tool), M) == 404
    assert served(Snapshot.from_overlay(twin), M) == {"provider-a"}


@pytest.mark.parametrize("mode", [None, *r.CORE_MODES])
def test_none_is_never_eligible_and_its_admitted_twin_is(mode: str | None) -> None:
    assert served(Snapshot((c("provider-a", 0, NONE), c("provider-b", 0)), mode), M) == {"provider-b"}
    twin = served(Snapshot((c("provider-a", 0), c("provider-b", 0)), mode), M)
    assert isinstance(twin, set) and "provider-a" in twin


def test_existing_only_takes_no_new_request_but_its_bound_session() -> None:
    snap = Snapshot((c("provider-a", admission=EXISTING_ONLY), c("provider-b")))
    assert served(snap, M) == {"provider-b"}
    assert served(snap, Request(M, "k")) == {"provider-b"}
    # the bound session may continue there ("when permitted") or be selected afresh
    assert served(snap, Request(M, "k"), bound("k", snap.candidates[0])) == {"provider-a", "provider-b"}


def test_a_model_taking_no_new_work_gets_404_and_its_twin_with_one_admitted_is_served() -> None:
    assert served(Snapshot((c("provider-a", 0, NONE), c("provider-b", 1, EXISTING_ONLY))), M) == 404
    assert served(Snapshot((c("provider-a", 0, NONE), c("provider-b", 1))), M) == {"provider-b"}


@pytest.mark.parametrize("mode", ["roundRobin", "random"])
def test_the_first_viable_group_serves_and_the_groups_after_it_do_not(mode: str) -> None:
    skipped = Snapshot((c("provider-a", 0, EXISTING_ONLY), c("provider-b", 1), c("provider-c", 1),
                        c("provider-d", 2)), mode)
    assert served(skipped, M) == {"provider-b", "provider-c"}
    viable = Snapshot((c("provider-a", 0), c("provider-b", 1), c("provider-c", 1), c("provider-d", 2)), mode)
    assert served(viable, M) == {"provider-a"}


def test_the_first_viable_group_is_the_lowest_number_not_the_first_listed() -> None:
    """The contract orders groups; the model reads their numbers, not their place, and agrees either way."""
    assert served(Snapshot((c("provider-b", 1), c("provider-a", 0)), "random"), M) == {"provider-a"}


def test_deterministic_takes_the_first_member_and_round_robin_any_member() -> None:
    members = (c("provider-c", 0), c("provider-a", 0), c("provider-b", 1))
    assert served(Snapshot(members, "deterministic"), M) == {"provider-c"}
    assert served(Snapshot(members, "roundRobin"), M) == {"provider-c", "provider-a"}


def test_an_omitted_policy_is_deterministic_and_a_stated_mode_applies() -> None:
    members = (c("provider-a", 0), c("provider-b", 0))
    assert served(Snapshot(members, None), M) == {"provider-a"}
    assert served(Snapshot(members, "random"), M) == {"provider-a", "provider-b"}


def test_without_groups_a_mode_is_deterministic_first_admitted_and_with_groups_it_applies() -> None:
    assert served(Snapshot((c("provider-b"), c("provider-a")), "roundRobin"), M) == {"provider-b"}
    assert served(Snapshot((c("provider-b", 0), c("provider-a", 0)), "roundRobin"), M) == {"provider-b", "provider-a"}


def test_stale_and_remote_candidates_keep_the_producer_order() -> None:
    stale_first = Snapshot((c("provider-a", fresh=False), c("provider-b")))
    assert served(stale_first, M) == {"provider-a"}
    remote_first = Snapshot((c("provider-a", 0, site="elsewhere"), c("provider-b", 0)), "deterministic")
    assert served(remote_first, M) == {"provider-a"}
    assert served(Snapshot((c("provider-b"), c("provider-a", fresh=False))), M) == {"provider-b"}


def test_a_session_bound_to_an_admitted_candidate_is_reused_even_outside_the_active_group() -> None:
    snap = Snapshot((c("provider-a", 0), c("provider-b", 1)), "roundRobin")
    later = snap.candidates[1]
    assert served(snap, Request(M, "k"), bound("k", later)) == {"provider-b"}
    assert served(snap, Request(M, "k")) == {"provider-a"}
    assert served(snap, Request(M, "other"), bound("k", later)) == {"provider-a"}, "another key has no binding"
    assert served(snap, Request(M), bound("k", later)) == {"provider-a"}, "an unkeyed request has no binding"


def test_a_session_bound_to_a_none_or_vanished_candidate_is_selected_afresh() -> None:
    gone = c("provider-c")
    snap = Snapshot((c("provider-a", admission=NONE), c("provider-b")))
    assert served(snap, Request(M, "k"), bound("k", snap.candidates[0])) == {"provider-b"}
    assert served(snap, Request(M, "k"), bound("k", gone)) == {"provider-b"}
    assert served(snap, Request(M, "k"), bound("k", snap.candidates[1])) == {"provider-b"}


def test_an_existing_only_binding_without_fresh_candidates_may_continue_or_be_refused() -> None:
    snap = Snapshot((c("provider-a", 0, EXISTING_ONLY),))
    verdict = r.allowed(snap, Request(M, "k"), bound("k", snap.candidates[0]))
    assert verdict.permits(200, "provider-a") and verdict.permits(404, None)
    assert not verdict.permits(200, "provider-b") and not verdict.permits(503, None)
    assert served(Snapshot((c("provider-a", 0, NONE),)), Request(M, "k"), bound("k", c("provider-a", 0))) == 404


def test_a_served_keyed_request_is_bound_and_a_refused_or_unkeyed_one_is_not() -> None:
    snap = Snapshot((c("provider-a", 0), c("provider-b", 0)), "roundRobin")
    keyed = Request(M, "k")
    verdict = r.allowed(snap, keyed)
    after = r.bindings_after({}, keyed, verdict, "provider-b")
    assert after == bound("k", snap.candidates[1])
    assert served(snap, keyed, after) == {"provider-b"}
    assert r.bindings_after({}, keyed, verdict, None) == {}
    assert r.bindings_after({}, Request(M), verdict, "provider-b") == {}


def test_permits_reads_a_reply() -> None:
    verdict = r.allowed(Snapshot((c("provider-a"),)), Request(M))
    assert verdict.permits(200, "provider-a")
    assert not verdict.permits(200, "provider-b") and not verdict.permits(404, None)
    refused = r.allowed(Snapshot((c("provider-a"),)), Request(OTHER))
    assert refused.permits(404, None) and not refused.permits(503, None) and not refused.permits(200, "provider-a")
    assert "404" in refused.describe() and "IR-BEHAVIOR-NO-MATCH-404" in refused.describe()


def test_inputs_without_a_reading_are_refused_and_their_twins_are_not() -> None:
    with pytest.raises(r.OutsideModel, match="extended"):
        Snapshot((c("provider-a", 0),), "weightedRandom")
    with pytest.raises(r.OutsideModel, match="unknown selection mode"):
        Snapshot((c("provider-a", 0),), "leastLoaded")
    with pytest.raises(r.OutsideModel, match="some candidates carry a selection_group"):
        r.fresh_selection(Snapshot((c("provider-a", 0), c("provider-b"))), M)
    assert served(Snapshot((c("provider-a", 0), c("provider-b", 0)), "random"), M) == {"provider-a", "provider-b"}
    with pytest.raises(r.OutsideModel):
        c("provider-a", admission="maybe")


# ----------------------------------------------------------------------------------- strategies


def _check_contract_groups(snapshot: Snapshot) -> None:
    """The rules strictOverlayValidation adds, which every generated overlay must keep (so a strict gateway
    accepts it): per capability all or none grouped, from 0, contiguous, non-decreasing, one admission state
    per group; no duplicate (name, site, cluster)."""
    identities = [x.identity for x in snapshot.candidates]
    assert len(identities) == len(set(identities))
    for model in snapshot.models():
        members = snapshot.of(model)
        groups = [x.group for x in members]
        if groups[0] is None:
            assert all(g is None for g in groups)
            continue
        numbers = [g for g in groups if g is not None]
        assert len(numbers) == len(groups) and numbers[0] == 0
        assert all(b in (a, a + 1) for a, b in zip(numbers, numbers[1:], strict=False))
        states: dict[int | None, str] = {}
        for x in members:
            assert states.setdefault(x.group, x.admission) == x.admission


@FAST
@given(s.routing_cases([f"{M}-{i}" for i in range(3)], PROVIDERS))
def test_routing_cases_are_valid_overlays_a_strict_gateway_accepts(case: s.RoutingCase) -> None:
    from reference.overlay import parse_overlay  # the reference claims strictOverlayValidation

    snap = case.snapshot
    assert snap.mode in (None, *r.CORE_MODES)
    assert 2 <= len(snap.models()) <= 3 and all(1 <= len(snap.of(m)) <= 6 for m in snap.models())
    assert all(len({x.group for x in snap.of(m)}) <= 3 for m in snap.models())
    _check_contract_groups(snap)
    doc = s.envelope(snap, SCOPE, 3)
    assert contract.revision_of(doc) == contract.digest(doc["overlay"])
    assert Snapshot.from_overlay(doc) == snap
    parse_overlay(contract.encode(doc), SCOPE.as_dict(), [p.cluster for p in PROVIDERS])
    names = {x.model for x in case.requests}
    assert 24 <= len(case.requests) <= 40 and names <= {*(f"{M}-{i}" for i in range(3)), *s.near_misses(
        [f"{M}-{i}" for i in range(3)])}


@FAST
@given(s.affinity_cases([f"{M}-{i}" for i in range(3)], PROVIDERS))
def test_affinity_cases_name_each_cluster_once_per_model_at_its_own_site(case: s.AffinityCase) -> None:
    homes = {p.cluster: p.site for p in PROVIDERS}
    for snap in (case.before, case.after):
        _check_contract_groups(snap)
        for model in snap.models():
            clusters = [x.cluster for x in snap.of(model)]
            assert len(clusters) == len(set(clusters))
        assert all(homes[x.cluster] == x.site for x in snap.candidates)


def test_near_misses_name_no_model_and_sit_next_to_them() -> None:
    models = ["m-abc-g0", "m-abc-g1", "m-abc-g2"]
    assert s.near_misses(models) == ("m-abc-g", "m-abc-g0-x")
    assert s.near_misses(["solo"]) == ("sol", "solo-x")


def test_with_probe_adds_one_served_model() -> None:
    snap = s.with_probe(Snapshot((c("provider-b", 0, NONE),), "random"), "probe", PROVIDERS[0])
    assert served(snap, "probe") == {"provider-a"} and served(snap, M) == 404


# ------------------------------------------------------------------- agreement with the suite's cases


def _doc(*items: dict[str, Any], mode: str | None = None) -> Snapshot:
    """A hand-written case as the suite publishes it: contract candidates in an envelope."""
    return Snapshot.from_overlay(json.loads(contract.encode(contract.envelope(items, SCOPE, selection_mode=mode))))


def _cand(provider: str, model: str = M, **extra: Any) -> dict[str, Any]:
    return contract.candidate(model, "site-a", provider, **extra)


#: (suite test, snapshot, request, bindings, what that test expects: the clusters served, or a status).
HAND_WRITTEN: list[tuple[str, Snapshot, Request, r.Bindings, set[str] | int]] = [
    ("CONS-SEL-DETERMINISTIC-DEFAULT",
     _doc(_cand("provider-a", admission_state="existing_only"), _cand("provider-b"), _cand("provider-c")),
     Request(M), {}, {"provider-b"}),
    ("CONS-SEL-DETERMINISTIC",
     _doc(_cand("provider-c", selection_group=0), _cand("provider-a", selection_group=0),
          _cand("provider-b", selection_group=1), mode="deterministic"), Request(M), {}, {"provider-c"}),
    ("CONS-SEL-POLICY-WITHOUT-GROUPS", _doc(_cand("provider-b"), _cand("provider-a"), mode="roundRobin"),
     Request(M), {}, {"provider-b"}),
    ("CONS-SEL-GROUPS-WITHOUT-POLICY",
     _doc(_cand("provider-a", selection_group=0), _cand("provider-b", selection_group=0),
          _cand("provider-c", selection_group=1)), Request(M), {}, {"provider-a"}),
    ("CONS-SEL-ROUND-ROBIN",
     _doc(*(_cand(p, selection_group=0) for p in ("provider-a", "provider-b", "provider-c")),
          _cand("provider-d", selection_group=1), mode="roundRobin"), Request(M), {},
     {"provider-a", "provider-b", "provider-c"}),
    ("CONS-GROUP-FALLBACK-EXISTING-ONLY",
     _doc(_cand("provider-a", selection_group=0, admission_state="existing_only"),
          _cand("provider-b", selection_group=0, admission_state="existing_only"),
          _cand("provider-c", selection_group=1), mode="deterministic"), Request(M), {}, {"provider-c"}),
    ("CONS-GROUP-FALLBACK-DEEP",
     _doc(_cand("provider-a", selection_group=0, admission_state="none"),
          _cand("provider-b", selection_group=1, admission_state="existing_only"),
          _cand("provider-c", selection_group=2), _cand("provider-d", OTHER, selection_group=0),
          mode="deterministic"), Request(M), {}, {"provider-c"}),
    ("CONS-GROUP-FALLBACK-NONE",
     _doc(_cand("provider-a", selection_group=0, admission_state="none"), _cand("provider-d", selection_group=1),
          mode="roundRobin"), Request(M), {}, {"provider-d"}),
    ("CONS-ADMISSION-DRAWS-SKIP-INELIGIBLE",
     _doc(_cand("provider-a", selection_group=0, admission_state="existing_only"),
          _cand("provider-c", selection_group=0, admission_state="existing_only"),
          _cand("provider-b", selection_group=1), _cand("provider-d", selection_group=1), mode="random"),
     Request(M), {}, {"provider-b", "provider-d"}),
    ("CONS-ADMISSION-NONE-NEVER", _doc(_cand("provider-a", admission_state="none"), _cand("provider-b", OTHER)),
     Request(M), {}, 404),
    ("CONS-ADMISSION-EXISTING-ONLY-NEW",
     _doc(_cand("provider-a", admission_state="existing_only"), _cand("provider-b", admission_state="existing_only"),
          _cand("provider-c", OTHER)), Request(M, "fresh"), {}, 404),
    ("CONS-STALE-LAST-RESORT", _doc(_cand("provider-a", fresh=False)), Request(M), {}, {"provider-a"}),
    ("CONS-STALE-PRODUCER-ORDER", _doc(_cand("provider-a", fresh=False), _cand("provider-b")), Request(M), {},
     {"provider-a"}),
    ("CONS-404-UNKNOWN-MODEL", _doc(_cand("provider-a")), Request(M + "-unknown"), {}, 404),
    ("CONS-404-OTHER-KIND", _doc(_cand("provider-a", kind="mcp_tool"), _cand("provider-b", OTHER)), Request(M), {},
     404),
    ("CONS-AFFINITY-HEADER-REUSE", _doc(_cand("provider-b"), _cand("provider-a")), Request(M, "k"),
     {("k", M): frozenset({(M, "site-a", "provider-a")})}, {"provider-a"}),
    ("CONS-AFFINITY-FAILOVER-EXCLUDED", _doc(_cand("provider-a", admission_state="none"), _cand("provider-b")),
     Request(M, "k"), {("k", M): frozenset({(M, "site-a", "provider-a")})}, {"provider-b"}),
    ("CONS-AFFINITY-FAILOVER-GONE", _doc(_cand("provider-c"), _cand("provider-b")), Request(M, "k"),
     {("k", M): frozenset({(M, "site-a", "provider-a")})}, {"provider-c"}),
]


@pytest.mark.parametrize(("snapshot", "request_", "bindings", "expected"),
                         [pytest.param(*case[1:], id=case[0]) for case in HAND_WRITTEN])
def test_the_model_agrees_with_the_hand_written_cases(snapshot: Snapshot, request_: Request, bindings: r.Bindings,
                                                      expected: set[str] | int) -> None:
    assert served(snapshot, request_, bindings) == expected


def _surrounded(snapshot: Snapshot, others: list[Candidate], places: list[int]) -> Snapshot:
    """`snapshot` with other models' candidates inserted at `places`."""
    merged = list(snapshot.candidates)
    for other, place in zip(others, places, strict=False):
        merged.insert(min(place, len(merged)), other)
    return Snapshot(tuple(merged), snapshot.mode)


@settings(max_examples=60, deadline=None, database=None)
@given(case=st.sampled_from(HAND_WRITTEN),
       others=st.lists(st.builds(Candidate, st.sampled_from(["model-z", "model-w"]), st.sampled_from(["site-a", "x"]),
                                 st.sampled_from([p.cluster for p in PROVIDERS]), st.none(),
                                 st.sampled_from(r.ADMISSION_STATES)), max_size=5, unique_by=lambda x: x.identity),
       places=st.lists(st.integers(0, 8), min_size=5, max_size=5))
def test_the_hand_written_cases_hold_whatever_other_models_surround_them(
        case: tuple[str, Snapshot, Request, r.Bindings, set[str] | int], others: list[Candidate],
        places: list[int]) -> None:
    """Other models' candidates anywhere in the list change no expectation of a hand-written case: a request
    is matched against its own model's candidates in their own order."""
    _, snapshot, sent, bindings, expected = case
    assert served(_surrounded(snapshot, others, places), sent, bindings) == expected
