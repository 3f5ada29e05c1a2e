"""Selection groups, admission states and selection modes, judged from what served each request."""

from __future__ import annotations

import pytest

from harness.grid import Gateway, Site
from harness.stats import assert_distribution, assert_round_robin, plan_distribution

GUIDE = "routing-guide"
FILTER = "intelligent-route-filter: Selection"


def _serve_all(gw: Gateway, model: str, n: int) -> list[str | None]:
    out = []
    for _ in range(n):
        reply = gw.request(model)
        assert reply.status == 200, reply.describe()
        out.append(reply.backend)
    return out


@pytest.mark.conformance(id="CONS-SEL-DETERMINISTIC-DEFAULT", profile="consumer", level="core",
                         feature="deterministic", spec=FILTER + ": missing policy uses deterministic first-admitted")
def test_no_policy_serves_first_admitted(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, admission_state="existing_only"),
        site.candidate("provider-b", model),
        site.candidate("provider-c", model),
    ]), model)
    served = set(_serve_all(gw, model, 20))
    assert served == {"provider-b"}, f"first admitted candidate is provider-b; served {served}"


@pytest.mark.conformance(id="CONS-SEL-DETERMINISTIC", profile="consumer", level="core", feature="deterministic",
                         spec=GUIDE + " 2. Deterministic selection")
def test_deterministic_mode_always_first_of_group(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-c", model, selection_group=0),
        site.candidate("provider-a", model, selection_group=0),
        site.candidate("provider-b", model, selection_group=1),
    ], mode="deterministic"), model)
    served = set(_serve_all(gw, model, 20))
    assert served == {"provider-c"}, f"deterministic must always pick provider-c; served {served}"


@pytest.mark.conformance(id="CONS-SEL-POLICY-WITHOUT-GROUPS", profile="consumer", level="core", feature="groups",
                         spec=FILTER + ": missing group metadata uses deterministic first-admitted ordering")
def test_policy_without_groups_is_deterministic(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-b", model), site.candidate("provider-a", model)],
                             mode="roundRobin"), model)
    assert set(_serve_all(gw, model, 12)) == {"provider-b"}


@pytest.mark.conformance(id="CONS-SEL-ROUND-ROBIN", profile="consumer", level="core", feature="roundRobin",
                         spec=GUIDE + " 3. Round-robin: rotates inside the active group only")
def test_round_robin_exact_cycle_never_touches_fallback(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0),
        site.candidate("provider-b", model, selection_group=0),
        site.candidate("provider-c", model, selection_group=0),
        site.candidate("provider-d", model, selection_group=1),
    ], mode="roundRobin"), model)
    sequence = [b or "<none>" for b in _serve_all(gw, model, 30)]
    assert_round_robin(sequence, {"provider-a", "provider-b", "provider-c"})


@pytest.mark.conformance(id="CONS-SEL-ROUND-ROBIN-FALLBACK", profile="consumer", level="core", feature="roundRobin",
                         spec=GUIDE + " 3. Round robin in the first viable group")
def test_round_robin_in_first_viable_group(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0, admission_state="existing_only"),
        site.candidate("provider-b", model, selection_group=1),
        site.candidate("provider-c", model, selection_group=1),
        site.candidate("provider-d", model, selection_group=2),
    ], mode="roundRobin"), model)
    sequence = [b or "<none>" for b in _serve_all(gw, model, 20)]
    assert_round_robin(sequence, {"provider-b", "provider-c"})


@pytest.mark.conformance(id="CONS-SEL-RANDOM", profile="consumer", level="core", feature="random",
                         spec=GUIDE + " 4. Random: uniform among the active group")
def test_random_is_uniform_within_group(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0),
        site.candidate("provider-b", model, selection_group=0),
        site.candidate("provider-c", model, selection_group=0),
        site.candidate("provider-d", model, selection_group=1),
    ], mode="random"), model)
    plan = plan_distribution({"provider-a": 1 / 3, "provider-b": 1 / 3, "provider-c": 1 / 3, "provider-d": 0.0})
    print(plan.describe())
    tally = gw.send(model, plan.sample_size, concurrency=16)
    assert tally.statuses == {200: plan.sample_size}, tally.describe()
    assert_distribution(tally.backends, plan)


WEIGHTS = {
    "50-30-20": {"provider-a": 50, "provider-b": 30, "provider-c": 20},
    "70-30": {"provider-a": 70, "provider-b": 30},
    "1-1-1": {"provider-a": 1, "provider-b": 1, "provider-c": 1},
}


@pytest.mark.conformance(id="CONS-SEL-WEIGHTED", profile="consumer", level="extended", feature="weightedRandom",
                         spec=GUIDE + " 5. Weighted-random: weights apply only within the first viable group")
@pytest.mark.parametrize("weights", list(WEIGHTS), ids=list(WEIGHTS))
def test_weighted_random_shares_within_group(gw: Gateway, site: Site, model: str, weights: str) -> None:
    chosen = WEIGHTS[weights]
    candidates = [site.candidate(p, model, selection_group=0, traffic_weight=w) for p, w in chosen.items()]
    candidates.append(site.candidate("provider-d", model, selection_group=1, traffic_weight=1000))
    gw.publish(site.envelope(candidates, mode="weightedRandom"), model)
    total = sum(chosen.values())
    expected = {p: w / total for p, w in chosen.items()}
    expected["provider-d"] = 0.0
    plan = plan_distribution(expected)
    print(plan.describe())
    tally = gw.send(model, plan.sample_size, concurrency=16)
    assert tally.statuses == {200: plan.sample_size}, tally.describe()
    assert_distribution(tally.backends, plan)


@pytest.mark.conformance(id="CONS-GROUP-FALLBACK-EXISTING-ONLY", profile="consumer", level="core", feature="groups",
                         spec=GUIDE + " 1. Selection groups; 9. Admission and failover")
def test_group_without_new_work_falls_back(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0, admission_state="existing_only"),
        site.candidate("provider-b", model, selection_group=0, admission_state="existing_only"),
        site.candidate("provider-c", model, selection_group=1),
    ], mode="deterministic"), model)
    assert set(_serve_all(gw, model, 10)) == {"provider-c"}


@pytest.mark.conformance(id="CONS-GROUP-FALLBACK-NONE", profile="consumer", level="core", feature="admission",
                         spec=FILTER + ": admission_state=none is never eligible")
def test_excluded_group_falls_back(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0, admission_state="none"),
        site.candidate("provider-d", model, selection_group=1),
    ], mode="roundRobin"), model)
    assert set(_serve_all(gw, model, 10)) == {"provider-d"}


@pytest.mark.conformance(id="CONS-ADMISSION-NONE-NEVER", profile="consumer", level="core", feature="admission",
                         spec=FILTER + ": admission_state=none is never eligible")
def test_only_excluded_candidates_give_404(gw: Gateway, site: Site, model: str) -> None:
    other = model + "-other"
    doc = site.envelope([
        site.candidate("provider-a", model, admission_state="none"),
        site.candidate("provider-b", other),
    ])
    gw.publish(doc, other)
    reply = gw.request(model)
    assert reply.status == 404 and reply.backend is None, f"no eligible candidate must give 404; got {reply.describe()}"
    twin = site.envelope([site.candidate("provider-a", model), site.candidate("provider-b", other)])
    gw.publish(twin, model)
    assert gw.request(model).backend == "provider-a", "the same candidate admitted is routed"


@pytest.mark.conformance(id="CONS-ADMISSION-EXISTING-ONLY-NEW", profile="consumer", level="core", feature="admission",
                         spec=FILTER + ": existing_only is eligible only through an already-bound session")
def test_existing_only_never_takes_new_requests(gw: Gateway, site: Site, model: str) -> None:
    other = model + "-other"
    gw.publish(site.envelope([
        site.candidate("provider-a", model, admission_state="existing_only"),
        site.candidate("provider-b", model, admission_state="existing_only"),
        site.candidate("provider-c", other),
    ]), other)
    for reply in (gw.request(model), gw.request(model, headers={"x-session-id": f"fresh-{model}"})):
        assert reply.status == 404, f"existing_only must not take new work; got {reply.describe()}"
    twin = site.envelope([site.candidate("provider-a", model), site.candidate("provider-b", model,
                                                                            admission_state="existing_only"),
                          site.candidate("provider-c", other)])
    gw.publish(twin, model)
    assert gw.request(model).backend == "provider-a", "the same candidate admitted for new work takes it"
