"""Provider admission: instantaneous (admissionPolicy omitted) and stabilized, judged from the published states.

Stabilized tests count observations with forced reconciles (each scrapes once) and bound time with the host's
monotonic clock read around them, so "not before" and "by then" are judged without fixed sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest

from harness import producer_oracle, resources
from harness.producer_support import Scenario
from harness.waiting import wait_until_elapsed

ADMISSION = "routing-architecture-and-overlay-contract#admission-state-derivation"
GUIDE_ADMISSION = "routing-guide#9-admission-and-failover"
RELAPSE = (f"{ADMISSION}: \"Stabilized admission requires repeated pressure observations before entering "
           "existing_only, and repeated low-pressure observations plus a minimum state duration and recovery "
           "hold-down before returning to new_and_existing.\"; routing-guide#9-admission-and-failover: "
           "\"ExistingOnly --> NewAndExisting: sustained recovery\"")

NEW = "new_and_existing"
EXISTING = "existing_only"
ABSENT = "absent"
#: A second plaintext metrics backend, so one backend's /metrics can fail while the control provider keeps its.
OTHER_BACKEND = "provider-b"
#: Margin for comparing the harness clock with the operator's (both read the host's monotonic clock).
CLOCK_SLACK = 0.1

Signals = Mapping[str, float | str | None]


def order(scenario: Scenario, envelope: dict[str, Any]) -> list[str]:
    return producer_oracle.names(envelope, scenario.model)


def states(envelope: dict[str, Any]) -> dict[str, str]:
    return {str(c["cluster"]): str(c.get("admission_state")) for c in producer_oracle.candidates(envelope)}


def state(envelope: dict[str, Any], cluster: str) -> str:
    return states(envelope).get(cluster, ABSENT)


def expect(scenario: Scenario, envelope: dict[str, Any], expected: dict[str, str], why: str) -> None:
    """Exact admission states (ABSENT for removed providers); order and groups must match the states."""
    seen = {cluster: state(envelope, cluster) for cluster in expected}
    assert seen == expected, f"{why}: expected admission {expected}, got {seen} (order {order(scenario, envelope)})"
    assert states(envelope).keys() <= expected.keys(), f"{why}: unexpected candidates {states(envelope)}"
    producer_oracle.require(producer_oracle.group_problems(envelope), why)


def two_providers(scenario: Scenario, admission: dict[str, Any] | None, *, queue_a: float = 1,
                  healthy_a: float = 1, metrics_a: dict[str, Any] | None = None) -> float:
    """Provider a on the test's metrics backend, control provider b (q=5) on another; returns the render time.

    a with a short queue ranks first while both are admitted; b never changes.
    """
    scenario.set_pools({"a": {"queueDepth": queue_a, "healthy": healthy_a}})
    scenario.set_pools({"b": {"queueDepth": 5, "healthy": 1}}, OTHER_BACKEND)
    scenario.provider("a", metrics=metrics_a if metrics_a is not None else True)
    scenario.provider("b", metrics={"url": scenario.site.backend(OTHER_BACKEND).url})
    scenario.network(routing="scoreFirst", scoring="queueDepth", admission=admission)
    scenario.settled(scenario.envelope(what="a first overlay"))
    return time.monotonic()


def set_queue(scenario: Scenario, queue: float | None) -> None:
    scenario.set_pools({"a": {"queueDepth": queue}})


# ------------------------------------------------------------------------------------- instantaneous


@pytest.mark.conformance(id="PROD-ADM-INSTANT-UNHEALTHY-EXCLUDED", profile="producer", level="core",
                         feature="admission", spec=ADMISSION,
                         statements=["OC-ORDERING-NONE-REMOVED", "RG-ADMISSION-AGN-REMOVES-EXCLUDED",
                                     "RG-ADMISSION-AGN-NO-NONE", "RG-ADMISSION-TRANSITION-HARD-FAILURE",
                                     "RG-ADMISSION-TRANSITION-READMIT", "OC-RERANKING-NORMALIZE",
                                     "OC-ORDERING-AFTER-HARD-CONSTRAINTS", "RG-ADMISSION-HARD-FAILURE-IMMEDIATE",
                                     "RG-NOTMEAN-NOMETRICS-STILL-APPLY"])
@pytest.mark.parametrize("strategy", ["queueDepth", "noMetrics"])
def test_unhealthy_provider_is_removed_at_once(scenario: Scenario, strategy: str) -> None:
    """Zero ready pods is a hard health failure: admission none, removed from the overlay at the next reconcile.

    Provider a has no ready pods from the start and the best queue; c loses its pods later; both come back
    as soon as pods are ready again. Fails if unhealthy providers are published (even existing_only), if
    removal waits for more observations, or if health is ignored under noMetrics.
    """
    scenario.set_pools({"a": {"queueDepth": 0, "healthy": 0}, "b": {"queueDepth": 5, "healthy": 2},
                         "c": {"queueDepth": 3, "healthy": 2}})
    for short in ("a", "b", "c"):
        scenario.provider(short, metrics=True)
    scenario.network(routing="scoreFirst", scoring=strategy)
    envelope = scenario.envelope(what="a first overlay")
    expect(scenario, envelope, {"a": ABSENT, "b": NEW, "c": NEW}, "a has no ready pods")

    scenario.set_pools({"c": {"healthy": 0}})
    expect(scenario, scenario.reconcile(), {"a": ABSENT, "b": NEW, "c": ABSENT}, "c lost its ready pods")

    scenario.set_pools({"a": {"healthy": 1}, "c": {"healthy": 1}})
    envelope = scenario.reconcile()
    expect(scenario, envelope, {"a": NEW, "b": NEW, "c": NEW}, "pods ready again, no admissionPolicy")
    expected = ["a", "c", "b"] if strategy == "queueDepth" else ["a", "b", "c"]
    assert order(scenario, envelope) == expected, f"recovered order: expected {expected}"


@pytest.mark.conformance(id="PROD-ADM-INSTANT-PRESSURE", profile="producer", level="core", feature="admission",
                         spec=ADMISSION,
                         statements=["OC-ORDERING-ENRICHMENT", "OC-ORDERING-ADMISSION-PRIORITY"])
@pytest.mark.parametrize("routing", ["scoreFirst", "geographyFirst"])
def test_pressure_restricts_to_existing_only(scenario: Scenario, routing: str) -> None:
    """Normalized pressure at or over 0.85 publishes existing_only, after every admitted candidate, in its own group.

    Queues 9 and 8.6 of 10 are pressured, 8.4 and 5 are not. Fails if the threshold is ignored or misplaced
    (states differ), if admission does not dominate score, or if a group mixes admission states.
    """
    queues = {"a": 9, "b": 8.6, "c": 8.4, "d": 5}
    scenario.set_pools({short: {"queueDepth": queue, "healthy": 1} for short, queue in queues.items()})
    for short in queues:
        scenario.provider(short, metrics=True)
    scenario.network(routing=routing, scoring="queueDepth")
    envelope = scenario.envelope(what="a first overlay")
    expect(scenario, envelope, {"a": EXISTING, "b": EXISTING, "c": NEW, "d": NEW}, "queues 9, 8.6, 8.4, 5 of 10")
    assert order(scenario, envelope) == ["d", "c", "b", "a"], "admitted first, each part by score"
    groups = producer_oracle.groups(envelope, scenario.model)
    assert groups == [["d", "c"], ["b", "a"]], f"one group per admission state; got {groups}"


@pytest.mark.conformance(id="PROD-ADM-INSTANT-RECOVERY", profile="producer", level="core", feature="admission",
                         spec=ADMISSION,
                         statements=["OC-ADMISSION-OMITTED-LEGACY", "RG-ADMISSION-OMITTED-INSTANTANEOUS",
                                     "RG-ADMISSION-TRANSITION-PRESSURE", "PS-LIMITS-STABILIZED-ADMISSION"])
def test_instantaneous_admission_follows_each_sample(scenario: Scenario) -> None:
    """Without admissionPolicy every reconcile decides from its own sample: no hysteresis either way.

    Fails if recovery or restriction needs more than one observation (stabilized behaviour by default).
    """
    two_providers(scenario, None, queue_a=9)
    expect(scenario, scenario.envelope(what="a first overlay"), {"a": EXISTING, "b": NEW}, "a pressured")
    set_queue(scenario, 1)
    envelope = scenario.reconcile()
    expect(scenario, envelope, {"a": NEW, "b": NEW}, "the first reconcile after a's queue dropped to 1")
    assert order(scenario, envelope) == ["a", "b"], "a (0.9) before b (0.5)"
    set_queue(scenario, 9)
    envelope = scenario.reconcile()
    expect(scenario, envelope, {"a": EXISTING, "b": NEW}, "the first reconcile after a's queue rose to 9")
    assert order(scenario, envelope) == ["b", "a"], "admitted b before restricted a"


# ---------------------------------------------------------------------------------------- stabilized


def enter_existing_only(scenario: Scenario, rendered: float, minimum: float, failures: int) -> tuple[float, float]:
    """Pressure a until it is existing_only; returns monotonic times around the reconcile that restricted it.

    The bound is derived, not a deadline: the minimum state duration has run before the first pressured
    sample (a entered its state at the first render, no later than `rendered`), and every forced reconcile
    scrapes one new sample, so the `failures`-th pressured reconcile (failureThreshold) is the last at which
    a may still be new_and_existing. A reconcile the test did not force can only make the count arrive
    earlier, which is accepted here (PROD-ADM-STAB-ENTER-COUNT judges the exact count).
    """
    wait_until_elapsed(rendered, minimum + CLOCK_SLACK)
    set_queue(scenario, 9)
    for _ in range(failures):
        begun = time.monotonic()
        envelope = scenario.reconcile()
        if state(envelope, "a") == EXISTING:
            return begun, time.monotonic()
        assert state(envelope, "a") == NEW, f"a pressured but healthy: {states(envelope)}"
    raise AssertionError(f"a stayed {NEW} through {failures} pressured samples (failureThreshold {failures}) with "
                         f"the minimum state duration over")


@pytest.mark.conformance(id="PROD-ADM-STAB-ENTER-COUNT", profile="producer", level="extended",
                         feature="stabilizedAdmission", spec=ADMISSION,
                         statements=["OC-ADMISSION-STABILIZED-ENTER", "RG-ADMISSION-TRANSITION-PRESSURE",
                                     "RG-ADMISSION-MODE-STABILIZED", "OC-ADMISSION-WIRE-STATES",
                                     "PS-LIMITS-STABILIZED-ADMISSION", "OC-ADMISSION-KEYED-BY-IDENTITY",
                                     "RG-ADMISSION-HARD-FAILURE-IMMEDIATE"])
def test_stabilized_enters_after_failure_threshold(scenario: Scenario) -> None:
    """existing_only only after failureThreshold pressured observations, not after one fewer.

    The minimum state duration has passed before pressure starts, so only the count holds the provider.
    Fails if pressure restricts at once (instantaneous), after failureThreshold - 1, or never.
    """
    failures = 3
    rendered = two_providers(scenario, resources.stabilized(failures=failures, successes=2, minimum="1s",
                                                            hold_down="2s"))
    wait_until_elapsed(rendered, 1.0 + CLOCK_SLACK)
    set_queue(scenario, 9)
    for count in range(1, failures):
        expect(scenario, scenario.reconcile(), {"a": NEW, "b": NEW}, f"after {count} of {failures} pressured samples")
    envelope = scenario.reconcile()
    expect(scenario, envelope, {"a": EXISTING, "b": NEW}, f"after {failures} of {failures} pressured samples")
    assert order(scenario, envelope) == ["b", "a"], "restricted a after admitted b"


@pytest.mark.conformance(id="PROD-ADM-STAB-RESTART-RESETS-COUNT", profile="producer", level="extended",
                         feature="stabilizedAdmission",
                         spec=f"{ADMISSION}: \"Restarting the operator resets the hysteresis counters and requires "
                              "fresh observations before a restrictive provider is promoted.\"",
                         statements=["OC-ADMISSION-RESTART-RESETS"])
@pytest.mark.lasts(3)
def test_restart_resets_the_pressure_count(scenario: Scenario) -> None:
    """Pressured samples counted before a restart do not count after it.

    failureThreshold 4: three pressured samples leave a new_and_existing; the operator restarts. The new
    process holds a's state for the minimum duration from its first observation, so the test forces one
    reconcile, waits out the minimum from its end, and forces another: the new process has taken at most
    three pressured samples (one when it starts, two forced), so a must still be new_and_existing, and
    within four more it is existing_only (the restarted operator counts afresh). Fails if the counters
    survive the restart (a restricted while the new process has counted fewer than four) or pressure no
    longer counts after it.
    """
    failures = 4
    rendered = two_providers(scenario, resources.stabilized(failures=failures, successes=2, minimum="1s",
                                                            hold_down="1s"))
    wait_until_elapsed(rendered, 1.0 + CLOCK_SLACK)
    set_queue(scenario, 9)
    for count in range(1, failures):
        expect(scenario, scenario.reconcile(), {"a": NEW, "b": NEW}, f"after {count} of {failures} pressured samples")
    scenario.restart_operator()
    expect(scenario, scenario.reconcile(), {"a": NEW, "b": NEW}, "the first forced reconcile after the restart")
    wait_until_elapsed(time.monotonic(), 1.0 + CLOCK_SLACK)
    expect(scenario, scenario.reconcile(), {"a": NEW, "b": NEW},
           f"the second forced reconcile after the restart, its minimum state duration over ({failures - 1} "
           f"pressured samples were counted by the old process, at most 3 by the new one)")
    for _ in range(failures):
        envelope = scenario.reconcile()
        if state(envelope, "a") == EXISTING:
            break
        expect(scenario, envelope, {"a": NEW, "b": NEW}, "pressured samples after the restart")
    else:
        raise AssertionError(f"a stayed {NEW} through {failures + 2} pressured samples after the restart "
                             f"(failureThreshold {failures}): pressure no longer counts")
    assert order(scenario, envelope) == ["b", "a"], "restricted a after admitted b"


@pytest.mark.conformance(id="PROD-ADM-STAB-EXIT-HOLD-DOWN", profile="producer", level="extended",
                         feature="stabilizedAdmission", spec=ADMISSION,
                         statements=["RG-ADMISSION-TRANSITION-RECOVERY", "PS-LIMITS-STABILIZED-ADMISSION"])
@pytest.mark.lasts(3)
def test_stabilized_exit_waits_for_hold_down(scenario: Scenario) -> None:
    """Back to new_and_existing only after successThreshold low samples AND recoveryHoldDown since recovery began.

    Low samples are taken back to back: the success count is met at once, the minimum state duration (1 s)
    ends next, the hold-down (2 s) last. Fails if the provider returns before the hold-down has run, or not
    soon after it has.
    """
    minimum, hold = 1.0, 2.0
    rendered = two_providers(scenario, resources.stabilized(failures=2, successes=2, minimum="1s", hold_down="2s"))
    _, entered = enter_existing_only(scenario, rendered, minimum, failures=2)

    set_queue(scenario, 2)
    recovery_begun = time.monotonic()
    envelope = scenario.reconcile()
    recovery_seen = time.monotonic()
    expect(scenario, envelope, {"a": EXISTING, "b": NEW}, "one low sample")
    held_by_hold_down = 0
    # Low samples back to back until one begins after the hold-down (counted from the first low sample, which
    # the operator took before `recovery_seen`) is certainly over: that one must have returned a.
    count = 1
    while True:
        count += 1
        begun = time.monotonic()
        envelope = scenario.reconcile()
        finished = time.monotonic()
        since_recovery = finished - recovery_begun
        if finished < recovery_begun + hold - CLOCK_SLACK:
            expect(scenario, envelope, {"a": EXISTING, "b": NEW},
                   f"{count} low samples, {since_recovery:.2f}s into a {hold:.0f}s hold-down")
            if begun > entered + minimum + CLOCK_SLACK:
                held_by_hold_down += 1
        elif begun > recovery_seen + hold + CLOCK_SLACK:
            expect(scenario, envelope, {"a": NEW, "b": NEW},
                   f"{count} low samples, {since_recovery:.2f}s after recovery began (hold-down {hold:.0f}s)")
            break
        elif state(envelope, "a") == NEW:
            break
    if not held_by_hold_down:  # nothing was judged: no sample fell inside the window
        pytest.skip(f"no reconcile fell between the minimum state duration and the {hold:.0f}s hold-down ({count} "
                    "samples): this backend's reconcile round trip is too slow for the test to judge it")
    assert order(scenario, envelope) == ["a", "b"], "recovered a (0.8) before b (0.5)"


@pytest.mark.conformance(id="PROD-ADM-STAB-EXIT-COUNT", profile="producer", level="extended",
                         feature="stabilizedAdmission", spec=ADMISSION,
                         statements=["RG-ADMISSION-TRANSITION-RECOVERY", "PS-LIMITS-STABILIZED-ADMISSION"])
@pytest.mark.lasts(3.5)
def test_stabilized_exit_needs_success_threshold(scenario: Scenario) -> None:
    """With the hold-down and minimum state duration over, recovery still needs successThreshold low samples.

    Then, the minimum state duration over again, the count into existing_only starts afresh: one pressured
    sample (failureThreshold 2) leaves the recovered provider admitted, the second restricts it. Fails if the
    provider returns after fewer low samples once the timers have run, or not at the count, or if pressure
    counted before the recovery carries over, or the count is lost after it.
    """
    minimum, hold, successes = 1.0, 1.0, 3
    rendered = two_providers(scenario, resources.stabilized(failures=2, successes=successes, minimum="1s",
                                                            hold_down="1s"))
    _, entered = enter_existing_only(scenario, rendered, minimum, failures=2)
    set_queue(scenario, 2)
    expect(scenario, scenario.reconcile(), {"a": EXISTING, "b": NEW}, f"1 of {successes} low samples")
    first_low = time.monotonic()
    wait_until_elapsed(max(first_low + hold, entered + minimum), CLOCK_SLACK)
    for count in range(2, successes):
        expect(scenario, scenario.reconcile(), {"a": EXISTING, "b": NEW},
               f"{count} of {successes} low samples, timers over")
    expect(scenario, scenario.reconcile(), {"a": NEW, "b": NEW}, f"{successes} of {successes} low samples")
    wait_until_elapsed(time.monotonic(), minimum + CLOCK_SLACK)
    set_queue(scenario, 9)
    expect(scenario, scenario.reconcile(), {"a": NEW, "b": NEW}, "1 of 2 pressured samples after the recovery")
    expect(scenario, scenario.reconcile(), {"a": EXISTING, "b": NEW}, "2 of 2 pressured samples after the recovery")


@pytest.mark.conformance(id="PROD-ADM-STAB-EXIT-MINIMUM-STATE", profile="producer", level="extended",
                         feature="stabilizedAdmission",
                         spec=f"{ADMISSION}: \"repeated low-pressure observations plus a minimum state duration and "
                              "recovery hold-down before returning to new_and_existing.\"",
                         statements=["OC-ADMISSION-STABILIZED-RECOVER"])
@pytest.mark.lasts(6)
def test_stabilized_exit_waits_for_the_minimum_state_duration(scenario: Scenario) -> None:
    """Count and hold-down met, a restricted provider still waits out minimumStateDuration (3 s) in existing_only.

    successThreshold 2 and recoveryHoldDown 1 s are both met 1 s into the recovery, while the provider has
    been existing_only for under 3 s; it must stay there, and return at the first sample after 3 s. Fails if
    the minimum state duration is applied only on the way into existing_only, or not at all.
    """
    minimum, hold = 3.0, 1.0
    rendered = two_providers(scenario, resources.stabilized(failures=2, successes=2, minimum="3s", hold_down="1s"))
    begun, entered = enter_existing_only(scenario, rendered, minimum, failures=2)
    set_queue(scenario, 2)
    expect(scenario, scenario.reconcile(), {"a": EXISTING, "b": NEW}, "1 of 2 low samples")
    wait_until_elapsed(time.monotonic(), hold + CLOCK_SLACK)
    envelope = scenario.reconcile()
    held_until = time.monotonic()
    if held_until >= begun + minimum - CLOCK_SLACK:  # nothing was judged: the window closed before the sample
        pytest.skip(f"this backend's reconciles outran the {minimum:.0f}s minimum state duration "
                    f"({held_until - begun:.1f}s for two samples and the hold-down): the test cannot judge it here")
    expect(scenario, envelope, {"a": EXISTING, "b": NEW},
           f"2 of 2 low samples, the hold-down over, {held_until - begun:.1f}s into a {minimum:.0f}s minimum state")
    wait_until_elapsed(entered, minimum + CLOCK_SLACK)
    expect(scenario, scenario.reconcile(), {"a": NEW, "b": NEW}, "3 low samples, the minimum state duration over")


@pytest.mark.conformance(id="PROD-ADM-STAB-RELAPSE-RESTARTS-RECOVERY", profile="producer", level="extended",
                         feature="stabilizedAdmission", spec=RELAPSE,
                         statements=["RG-ADMISSION-TRANSITION-RECOVERY", "OC-ADMISSION-KEYED-BY-IDENTITY"])
@pytest.mark.lasts(3.5)
def test_relapse_restarts_the_recovery_count(scenario: Scenario) -> None:
    """A pressured sample in the middle of a recovery starts the count of low samples again.

    successThreshold is 3: two low samples, one pressured sample, then low samples again. With the minimum
    state duration and (from the second low sample after the relapse on) the hold-down over, the provider
    stays existing_only through the second low sample after the relapse and returns at the third. Fails if
    the relapse leaves the earlier low samples counted (a would return at the second low sample after the
    relapse, or the first), or if recovery then needs more than successThreshold low samples.
    """
    minimum, hold, successes = 1.0, 1.0, 3
    rendered = two_providers(scenario, resources.stabilized(failures=2, successes=successes, minimum="1s",
                                                            hold_down="1s"))
    _, entered = enter_existing_only(scenario, rendered, minimum, failures=2)
    wait_until_elapsed(entered, minimum + CLOCK_SLACK)
    set_queue(scenario, 2)
    for count in range(1, successes):
        expect(scenario, scenario.reconcile(), {"a": EXISTING, "b": NEW}, f"{count} of {successes} low samples")
    set_queue(scenario, 9)
    expect(scenario, scenario.reconcile(), {"a": EXISTING, "b": NEW},
           f"a pressured sample after {successes - 1} of {successes} low ones")

    set_queue(scenario, 2)
    expect(scenario, scenario.reconcile(), {"a": EXISTING, "b": NEW}, "the first low sample after the relapse")
    first_low = time.monotonic()  # the operator took that sample before this instant
    wait_until_elapsed(first_low, hold + CLOCK_SLACK)
    for count in range(2, successes):
        expect(scenario, scenario.reconcile(), {"a": EXISTING, "b": NEW},
               f"{count} of {successes} low samples since the relapse, the timers over")
    envelope = scenario.reconcile()
    expect(scenario, envelope, {"a": NEW, "b": NEW}, f"{successes} of {successes} low samples since the relapse")
    assert order(scenario, envelope) == ["a", "b"], "recovered a (0.8) before b (0.5)"


@pytest.mark.conformance(id="PROD-ADM-STAB-MISSING-EXISTING-ONLY", profile="producer", level="extended",
                         feature="stabilizedAdmission", spec=ADMISSION,
                         statements=["OC-ADMISSION-MISSING-FAILS-CLOSED"])
@pytest.mark.parametrize("missing", ["series-absent", "scrape-failed"])
def test_missing_signal_fails_closed_to_existing_only(scenario: Scenario,
                                                      missing: str) -> None:
    """A missing configured signal publishes existing_only (missingMetrics existingOnly) at the next reconcile.

    Fails if the missing signal scores neutral and stays admitted (the compatibility behaviour applies only
    without admissionPolicy), is removed, or waits for failureThreshold (3) observations.
    """
    two_providers(scenario, resources.stabilized(failures=3, successes=2, minimum="1s", hold_down="2s",
                                                 missing="existingOnly"))
    expect(scenario, scenario.envelope(what="a first overlay"), {"a": NEW, "b": NEW}, "a fresh low sample")
    lose_signal(scenario, missing)
    envelope = scenario.reconcile()
    expect(scenario, envelope, {"a": EXISTING, "b": NEW}, f"{missing}: the first reconcile without a's queue")
    assert order(scenario, envelope) == ["b", "a"], "restricted a after admitted b"


@pytest.mark.conformance(id="PROD-ADM-STAB-MISSING-EXCLUDED", profile="producer", level="extended",
                         feature="stabilizedAdmission", spec=ADMISSION,
                         statements=["RG-ADMISSION-MISSING-EXCLUDED", "OC-ADMISSION-MISSING-FAILS-CLOSED"])
@pytest.mark.parametrize("missing", ["series-absent", "scrape-failed"])
def test_missing_signal_excluded_when_configured(scenario: Scenario,
                                                 missing: str) -> None:
    """With missingMetrics excluded a missing configured signal removes the provider at the next reconcile.

    Fails if the provider stays (neutral or existing_only) or removal waits for more observations.
    """
    two_providers(scenario, resources.stabilized(failures=3, successes=2, minimum="1s", hold_down="2s",
                                                 missing="excluded"))
    expect(scenario, scenario.envelope(what="a first overlay"), {"a": NEW, "b": NEW}, "a fresh low sample")
    lose_signal(scenario, missing)
    expect(scenario, scenario.reconcile(), {"a": ABSENT, "b": NEW}, f"{missing}: the first reconcile without a")


def lose_signal(scenario: Scenario, how: str) -> None:
    """Make a's queue signal missing: its series disappears, or its metrics endpoint fails."""
    if how == "series-absent":
        set_queue(scenario, None)
    else:
        scenario.fail_metrics(scenario.metrics_backend)


@pytest.mark.conformance(id="PROD-ADM-STAB-HARD-FAILURE", profile="producer", level="extended",
                         feature="stabilizedAdmission", spec=GUIDE_ADMISSION,
                         statements=["OC-ADMISSION-HARD-FAILURE-NONE", "RG-ADMISSION-TRANSITION-HARD-FAILURE",
                                     "RG-ADMISSION-TRANSITION-EXISTING-HARD-FAILURE",
                                     "RG-ADMISSION-AGN-REMOVES-EXCLUDED", "RG-ADMISSION-AGN-NO-NONE",
                                     "RG-ADMISSION-HARD-FAILURE-IMMEDIATE"])
@pytest.mark.parametrize("start", [NEW, EXISTING])
def test_hard_failure_removes_at_once_despite_hysteresis(scenario: Scenario, start: str) -> None:
    """Zero ready pods removes the provider at the next reconcile, whatever the pressure counters say.

    Fails if health failures go through the failureThreshold (3) hysteresis or only restrict the provider.
    """
    minimum = 1.0
    rendered = two_providers(scenario, resources.stabilized(failures=3, successes=3, minimum="1s", hold_down="2s"))
    if start == EXISTING:
        enter_existing_only(scenario, rendered, minimum, failures=3)
    scenario.set_pools({"a": {"healthy": 0}})
    expect(scenario, scenario.reconcile(), {"a": ABSENT, "b": NEW}, f"a was {start}, then lost its ready pods")


@pytest.mark.conformance(id="PROD-ADM-STAB-SAMPLE-ONCE", profile="producer", level="extended",
                         feature="stabilizedAdmission", spec=ADMISSION,
                         statements=["OC-ADMISSION-STABILIZED-ENTER"])
def test_reused_stale_sample_counts_once(scenario: Scenario) -> None:
    """A sample reused from the stale window is not a new observation: it never advances the pressure count.

    One pressured sample (failureThreshold 2) is followed by failed scrapes that reuse it; the provider must
    stay admitted through them, and the next real pressured sample completes the count. Fails if a reused
    sample counts again (restricted during the failures) or the pending count is lost.
    """
    minimum, window = 1.0, 5
    rendered = two_providers(scenario, resources.stabilized(failures=2, successes=2, minimum="1s", hold_down="1s"),
                             metrics_a={"stale_seconds": window})
    wait_until_elapsed(rendered, minimum + CLOCK_SLACK)
    set_queue(scenario, 9)
    good = time.monotonic()
    expect(scenario, scenario.reconcile(), {"a": NEW, "b": NEW}, "1 of 2 pressured samples")
    scenario.fail_metrics(scenario.metrics_backend)
    for attempt in range(1, 4):
        envelope = scenario.reconcile()
        assert time.monotonic() < good + window - CLOCK_SLACK, "the reconciles outran the stale window"
        expect(scenario, envelope, {"a": NEW, "b": NEW}, f"failed scrape {attempt} reusing the pressured sample")
    scenario.restore_metrics(scenario.metrics_backend)
    expect(scenario, scenario.reconcile(), {"a": EXISTING, "b": NEW}, "a second, new pressured sample")


# ------------------------------------------------------------------------------------------ defaults

GUIDE_DEFAULTS = (f"{GUIDE_ADMISSION}: \"If pressure is omitted, AGN uses the six values shown below as defaults.\" "
                  "(enterThreshold: 0.85, failureThreshold: 2, minimumStateDuration: 10s)")
#: The guide's default minimumStateDuration, waited out before pressure so only threshold and count decide.
DEFAULT_MINIMUM = 10.0


@pytest.mark.conformance(id="PROD-ADM-STAB-DEFAULT-PRESSURE", profile="producer", level="extended",
                         feature="stabilizedAdmission", spec=GUIDE_DEFAULTS,
                         statements=["RG-ADMISSION-PRESSURE-DEFAULTS", "RG-ADMISSION-DEFAULT-ENTER",
                                     "RG-ADMISSION-DEFAULT-FAILURE-THRESHOLD"])
@pytest.mark.lasts(DEFAULT_MINIMUM)
def test_omitted_pressure_enters_at_the_guide_defaults(scenario: Scenario) -> None:
    """mode stabilized with pressure omitted: 0.86 twice restricts, 0.86 once and 0.84 ever after do not.

    Provider a goes from 0.1 to 0.86 once the default minimum state duration (10 s) has run; provider c sits
    at 0.84 throughout. Fails if the omitted block means a lower enterThreshold than 0.85 (c restricted), a
    higher one or a larger failureThreshold than 2 (a still admitted after two pressured samples), or a
    failureThreshold of 1 (a restricted at the first).
    """
    scenario.set_pools({"c": {"queueDepth": 8.4, "healthy": 1}})
    scenario.provider("c", metrics=True)
    rendered = two_providers(scenario, {"mode": "stabilized"})
    expect(scenario, scenario.envelope(what="a first overlay"), {"a": NEW, "b": NEW, "c": NEW}, "before pressure")
    wait_until_elapsed(rendered, DEFAULT_MINIMUM + CLOCK_SLACK)
    set_queue(scenario, 8.6)
    expect(scenario, scenario.reconcile(), {"a": NEW, "b": NEW, "c": NEW}, "a at 0.86 once, c at 0.84")
    envelope = scenario.reconcile()
    expect(scenario, envelope, {"a": EXISTING, "b": NEW, "c": NEW}, "a at 0.86 twice, c at 0.84 throughout")


GUIDE_MINIMUM_DEFAULT = (f"{GUIDE_ADMISSION}: \"If pressure is omitted, AGN uses the six values shown below as "
                         "defaults.\" (minimumStateDuration: 10s); that it gates entering existing_only too comes from "
                         "the CRD's \"minimum time in a state before leaving it\" and the public grid operator")
#: Reconciles that end this long before the default minimum has run may not restrict: the operator's first
#: sample can precede the first overlay the suite saw by no more than the time it took to see it.
MINIMUM_MARGIN = 2.0


@pytest.mark.conformance(id="PROD-ADM-STAB-DEFAULT-MINIMUM-STATE", profile="producer", level="extended",
                         feature="stabilizedAdmission", spec=GUIDE_MINIMUM_DEFAULT,
                         statements=["RG-ADMISSION-DEFAULT-MIN-STATE"])
@pytest.mark.lasts(DEFAULT_MINIMUM)
def test_omitted_pressure_holds_a_new_state_for_the_default_minimum(scenario: Scenario) -> None:
    """mode stabilized with pressure omitted, a at 0.86 from its first render: every reconcile that ends
    within the default minimum state duration (10 s) less a 2 s margin leaves a new_and_existing, although
    two pressured samples (the default failureThreshold) are taken long before; the first reconcile after
    10 s restricts it. Fails if the omitted block means no minimum (or a far shorter one) on the way in.
    """
    rendered = two_providers(scenario, {"mode": "stabilized"}, queue_a=8.6)
    reconciles = 0
    while True:
        envelope = scenario.reconcile()
        if time.monotonic() >= rendered + DEFAULT_MINIMUM - MINIMUM_MARGIN:
            break
        reconciles += 1
        expect(scenario, envelope, {"a": NEW, "b": NEW},
               f"a at 0.86 for {reconciles} reconciles, {time.monotonic() - rendered:.1f}s after its first render")
    assert reconciles >= 2, f"only {reconciles} reconciles ran before the minimum; two pressured samples are needed"
    wait_until_elapsed(rendered, DEFAULT_MINIMUM + CLOCK_SLACK)
    expect(scenario, scenario.reconcile(), {"a": EXISTING, "b": NEW}, "a at 0.86 once the default 10 s have run")


@pytest.mark.conformance(id="PROD-ADM-STAB-MISSING-DEFAULT", profile="producer", level="extended",
                         feature="stabilizedAdmission",
                         spec=f"{ADMISSION}: \"When a configured signal is missing or expired, the policy fails closed "
                              "to existing_only by default (or none when missingMetrics: excluded).\"",
                         statements=["OC-ADMISSION-MISSING-FAILS-CLOSED", "RG-ADMISSION-MISSING-METRICS-DEFAULT"])
def test_omitted_missing_metrics_fails_closed_to_existing_only(scenario: Scenario) -> None:
    """missingMetrics omitted: a's vanished queue series publishes existing_only at the next reconcile.

    On a cluster the API server fills the CRD's default before the operator reads the resource; on the
    local backend the operator reads the file as written and must default it the same way. Fails if the
    omitted field means excluded (a removed) or neutral (a still admitted).
    """
    policy = resources.stabilized(failures=3, successes=2, minimum="1s", hold_down="2s")
    del policy["missingMetrics"]
    two_providers(scenario, policy)
    expect(scenario, scenario.envelope(what="a first overlay"), {"a": NEW, "b": NEW}, "a fresh low sample")
    set_queue(scenario, None)
    expect(scenario, scenario.reconcile(), {"a": EXISTING, "b": NEW}, "the first reconcile without a's queue")


@pytest.mark.conformance(id="PROD-ADM-STAB-NOT-CONFIGURED", profile="producer", level="extended",
                         feature="stabilizedAdmission",
                         spec=f"{ADMISSION}: \"With no active signal configured, AGN treats the observation as "
                              "NotConfigured and keeps otherwise healthy providers new_and_existing.\"",
                         statements=["OC-ADMISSION-NOT-CONFIGURED", "RG-ADMISSION-NOT-CONFIGURED",
                                     "RG-NEED-STABILIZED-ADMISSION"])
@pytest.mark.parametrize("unconfigured", ["signal-unmapped", "no-strategy"])
def test_pressure_without_a_configured_signal_never_restricts(scenario: Scenario, unconfigured: str) -> None:
    """A stabilized policy whose signal is not configured keeps pressured healthy providers new_and_existing.

    a and c both sit at queue 9 of 10 for three reconciles after the minimum state duration (failureThreshold
    2). signal-unmapped: a's metricsConfig maps no queueDepth name, c maps it, under queueDepth; c is the
    twin that shows the pressure counts where the signal is configured. no-strategy: the network scores
    noMetrics, so neither has an active signal. Fails if "not configured" is treated as a missing signal
    (existing_only, or removed) or a pressured sample is counted without a configured signal.
    """
    scenario.set_pools({"a": {"queueDepth": 9, "healthy": 1}, "c": {"queueDepth": 9, "healthy": 1}})
    scenario.set_pools({"b": {"queueDepth": 5, "healthy": 1}}, OTHER_BACKEND)
    unmapped = unconfigured == "signal-unmapped"
    scenario.provider("a", metrics={"signals": ("kvCacheUtilization", "healthy")} if unmapped else True)
    scenario.provider("c", metrics=True)
    scenario.provider("b", metrics={"url": scenario.site.backend(OTHER_BACKEND).url})
    scenario.network(routing="scoreFirst", scoring="queueDepth" if unmapped else "noMetrics",
                     admission=resources.stabilized(failures=2, successes=2, minimum="1s", hold_down="1s"))
    scenario.settled(scenario.envelope(what="a first overlay"))
    rendered = time.monotonic()
    wait_until_elapsed(rendered, 1.0 + CLOCK_SLACK)
    for count in range(1, 3):
        envelope = scenario.reconcile()
        assert state(envelope, "a") == NEW, f"{unconfigured}: a after {count} pressured reconciles: {states(envelope)}"
    expect(scenario, scenario.reconcile(), {"a": NEW, "b": NEW, "c": EXISTING if unmapped else NEW},
           f"{unconfigured}: 3 reconciles at queue 9 of 10 after the minimum state duration")


GUIDE_RECOVERY_DEFAULTS = (f"{GUIDE_ADMISSION}: \"If pressure is omitted, AGN uses the six values shown below as "
                           "defaults.\" (exitThreshold: 0.70, successThreshold: 3, recoveryHoldDown: 30s)")
DEFAULT_HOLD_DOWN = 30.0


@pytest.mark.conformance(id="PROD-ADM-STAB-DEFAULT-RECOVERY", profile="producer", level="extended",
                         feature="stabilizedAdmission", spec=GUIDE_RECOVERY_DEFAULTS,
                         statements=["RG-ADMISSION-DEFAULT-EXIT", "RG-ADMISSION-DEFAULT-SUCCESS-THRESHOLD",
                                     "RG-ADMISSION-DEFAULT-HOLD-DOWN"])
@pytest.mark.lasts(DEFAULT_MINIMUM + DEFAULT_HOLD_DOWN)
def test_omitted_pressure_recovers_at_the_guide_defaults(scenario: Scenario) -> None:
    """mode stabilized with pressure omitted: back after 3 samples at or under 0.70 and the 30 s hold-down.

    a and c enter existing_only together (0.9 twice, after the default 10 s minimum state duration). Then a
    drops to 0.69 and c to 0.71 for good: one sample, then none until a's hold-down (from its first low
    sample) is over, then a second (a still held: two of three) and a third (a back). Fails if the omitted
    block means an exitThreshold above 0.71 or under 0.69, a successThreshold other than 3, no hold-down, or
    one over 30 s. (A shorter hold-down than 30 s is not seen: the samples that could show it would also
    count towards the success threshold.)
    """
    scenario.set_pools({"c": {"queueDepth": 1, "healthy": 1}})
    scenario.provider("c", metrics=True)
    rendered = two_providers(scenario, {"mode": "stabilized"})
    wait_until_elapsed(rendered, DEFAULT_MINIMUM + CLOCK_SLACK)
    scenario.set_pools({short: {"queueDepth": 9} for short in ("a", "c")})
    scenario.reconcile()
    restricted = {"a": EXISTING, "b": NEW, "c": EXISTING}
    expect(scenario, scenario.reconcile(), restricted, "a and c at 0.9 twice")

    scenario.set_pools({"a": {"queueDepth": 6.9}, "c": {"queueDepth": 7.1}})
    expect(scenario, scenario.reconcile(), restricted, "a at 0.69 once, c at 0.71")
    first_low = time.monotonic()  # the operator took a's first low sample before this instant
    wait_until_elapsed(first_low, DEFAULT_HOLD_DOWN + CLOCK_SLACK)
    expect(scenario, scenario.reconcile(), restricted, "a at 0.69 twice, the 30s hold-down over")
    envelope = scenario.reconcile()
    expect(scenario, envelope, {**restricted, "a": NEW}, "a at 0.69 three times, c at 0.71, the hold-down over")
    assert order(scenario, envelope) == ["b", "a", "c"], "admitted b (0.5) and a (0.31) before restricted c"


@pytest.mark.conformance(id="PROD-ADM-KV-SIGNAL", profile="producer", level="extended",
                         feature="kvCachePressure",
                         spec=f"{GUIDE_ADMISSION}: \"For KV-cache pressure, map kvCacheUtilization.\"; {ADMISSION}: "
                              "the pressure signal is the one scoringPolicy selects",
                         statements=["RG-ADMISSION-KV-SIGNAL"])
def test_kv_cache_strategy_admits_by_kv_utilization(scenario: Scenario) -> None:
    """Under kvCachePressure, KV utilization 0.9 restricts a provider and a queue of 9 of 10 does not.

    a has KV 0.9 and an empty queue, b KV 0.2 and a full queue. Fails if admission reads queue depth whatever
    the strategy (a admitted, b restricted) or ignores pressure under kvCachePressure.
    """
    scenario.set_pools({"a": {"queueDepth": 0, "kvCacheUtilization": 0.9, "healthy": 1},
                        "b": {"queueDepth": 9, "kvCacheUtilization": 0.2, "healthy": 1}})
    scenario.provider("a", metrics=True)
    scenario.provider("b", metrics=True)
    scenario.network(routing="scoreFirst", scoring="kvCachePressure")
    envelope = scenario.envelope(lambda env: set(states(env)) == {"a", "b"}, what="a first overlay with a and b")
    expect(scenario, envelope, {"a": EXISTING, "b": NEW}, "KV 0.9 and 0.2, queues 0 and 9 of 10")
    assert order(scenario, envelope) == ["b", "a"], "admitted b before restricted a"
