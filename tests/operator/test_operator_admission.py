"""Instantaneous and stabilized admission with an injected clock."""

from __future__ import annotations

from typing import Any

import pytest
from operator_support import network, queue_provider, render_one, rows

from reference.operator.core import FixedClock, MetricSample, ResourceError
from reference.operator.core.admission import (
    EXCLUDED,
    EXISTING_ONLY,
    NEW_AND_EXISTING,
    AdmissionMemory,
    Policy,
    observe,
)
from reference.operator.core.scoring import Signals

PRESSURE = {
    "enterThreshold": 0.85,
    "exitThreshold": 0.70,
    "failureThreshold": 2,
    "successThreshold": 3,
    "minimumStateDuration": "10s",
    "recoveryHoldDown": "30s",
}


def stabilized(missing: str = "existingOnly", **pressure: Any) -> Policy:
    return Policy.from_spec(
        {"mode": "stabilized", "missingMetrics": missing, "pressure": {**PRESSURE, **pressure}}, "queueDepth"
    )


class Driver:
    """Feeds one provider's samples to the evaluator at chosen clock instants."""

    def __init__(self, policy: Policy, key: str = "net/p") -> None:
        self.policy, self.key, self.memory = policy, key, AdmissionMemory()

    def sample(self, at: float, queue: float, revision: int, healthy: bool = True) -> str:
        signals = Signals(queue_depth=queue, healthy=healthy)
        return self.memory.evaluate(self.key, observe(signals, revision, self.policy, True), self.policy, at)

    def missing(self, at: float) -> str:
        return self.memory.evaluate(self.key, observe(None, None, self.policy, True), self.policy, at)


# --- instantaneous ---------------------------------------------------------------------------------


def test_omitted_policy_is_instantaneous_compatibility() -> None:
    driver = Driver(Policy.from_spec(None, "queueDepth"))
    assert driver.sample(0, 0.9, 1) == EXISTING_ONLY
    assert driver.sample(1, 0.5, 2) == NEW_AND_EXISTING
    assert driver.sample(2, 0.85, 3) == EXISTING_ONLY
    assert driver.sample(3, 0.1, 4, healthy=False) == EXCLUDED
    assert driver.sample(4, 0.1, 5) == NEW_AND_EXISTING
    assert driver.missing(5) == NEW_AND_EXISTING, "no live metrics is neutral 0.5 and healthy"


def test_no_active_signal_keeps_healthy_providers_admitted() -> None:
    policy = Policy.from_spec(None, "noMetrics")
    memory = AdmissionMemory()
    observation = observe(Signals(queue_depth=1.0), 1, policy, True)
    assert memory.evaluate("k", observation, policy, 0) == NEW_AND_EXISTING
    unhealthy = observe(Signals(healthy=False), 2, policy, True)
    assert memory.evaluate("k", unhealthy, policy, 1) == EXCLUDED


def test_explicit_instantaneous_mode_applies_missing_metrics_policy() -> None:
    policy = Policy.from_spec({"mode": "instantaneous", "missingMetrics": "excluded"}, "queueDepth")
    driver = Driver(policy)
    assert driver.missing(0) == EXCLUDED
    assert driver.sample(1, 0.86, 1) == EXISTING_ONLY
    assert driver.sample(2, 0.2, 2) == NEW_AND_EXISTING


# --- stabilized ------------------------------------------------------------------------------------


def test_entering_existing_only_needs_consecutive_pressure() -> None:
    driver = Driver(stabilized())
    assert driver.sample(0, 0.1, 1) == NEW_AND_EXISTING
    assert driver.sample(10, 0.9, 2) == NEW_AND_EXISTING
    assert driver.sample(11, 0.5, 3) == NEW_AND_EXISTING, "a calm sample resets the pressure count"
    assert driver.sample(12, 0.9, 4) == NEW_AND_EXISTING
    assert driver.sample(13, 0.9, 5) == EXISTING_ONLY


def test_same_sample_is_never_counted_twice() -> None:
    driver = Driver(stabilized())
    driver.sample(0, 0.1, 1)
    assert driver.sample(20, 0.95, 7) == NEW_AND_EXISTING
    assert driver.sample(21, 0.95, 7) == NEW_AND_EXISTING
    assert driver.sample(22, 0.95, 7) == NEW_AND_EXISTING
    assert driver.sample(23, 0.95, 8) == EXISTING_ONLY


def test_minimum_state_duration_delays_entry() -> None:
    driver = Driver(stabilized())
    driver.sample(0, 0.9, 1)
    assert driver.sample(1, 0.9, 2) == NEW_AND_EXISTING, "two pressure samples but only 1 s in state"
    assert driver.sample(9, 0.9, 3) == NEW_AND_EXISTING
    assert driver.sample(10, 0.9, 4) == EXISTING_ONLY


def restricted_driver() -> Driver:
    driver = Driver(stabilized())
    driver.sample(0, 0.1, 1)
    driver.sample(10, 0.9, 2)
    assert driver.sample(11, 0.9, 3) == EXISTING_ONLY
    return driver


def test_recovery_needs_successes_hold_down_and_minimum_duration() -> None:
    driver = restricted_driver()
    assert driver.sample(12, 0.5, 4) == EXISTING_ONLY
    assert driver.sample(13, 0.5, 5) == EXISTING_ONLY
    assert driver.sample(14, 0.5, 6) == EXISTING_ONLY, "three successes but hold-down not served"
    assert driver.sample(41, 0.5, 7) == EXISTING_ONLY, "29 s since the recovery began"
    assert driver.sample(42, 0.5, 8) == NEW_AND_EXISTING


def test_value_between_thresholds_restarts_recovery() -> None:
    driver = restricted_driver()
    driver.sample(12, 0.5, 4)
    driver.sample(13, 0.5, 5)
    assert driver.sample(14, 0.8, 6) == EXISTING_ONLY, "0.8 is above exit: no recovery"
    driver.sample(15, 0.5, 7)
    driver.sample(16, 0.5, 8)
    assert driver.sample(44, 0.5, 9) == EXISTING_ONLY, "hold-down restarted at 15"
    assert driver.sample(45, 0.5, 10) == NEW_AND_EXISTING


def test_repeated_sample_does_not_complete_recovery() -> None:
    driver = restricted_driver()
    driver.sample(12, 0.5, 4)
    assert driver.sample(50, 0.5, 4) == EXISTING_ONLY
    assert driver.sample(60, 0.5, 4) == EXISTING_ONLY
    driver.sample(61, 0.5, 5)
    assert driver.sample(62, 0.5, 6) == NEW_AND_EXISTING


@pytest.mark.parametrize(("missing", "expected"), [("existingOnly", EXISTING_ONLY), ("excluded", EXCLUDED)])
def test_missing_signal_fails_closed_at_once(missing: str, expected: str) -> None:
    driver = Driver(stabilized(missing))
    assert driver.sample(0, 0.1, 1) == NEW_AND_EXISTING
    assert driver.missing(1) == expected
    assert Driver(stabilized(missing)).missing(0) == expected, "a first observation that is missing"


def test_hard_health_failure_excludes_at_once_and_recovers_through_hysteresis() -> None:
    driver = Driver(stabilized())
    driver.sample(0, 0.1, 1)
    assert driver.sample(1, 0.1, 2, healthy=False) == EXCLUDED
    assert driver.sample(2, 0.1, 3) == EXCLUDED
    driver.sample(3, 0.1, 4)
    assert driver.sample(31, 0.1, 5) == EXCLUDED, "hold-down since 2 not yet 30 s"
    assert driver.sample(32, 0.1, 6) == NEW_AND_EXISTING


def test_memory_is_keyed_by_provider_identity() -> None:
    policy = stabilized()
    memory = AdmissionMemory()

    def feed(key: str, at: float, queue: float, revision: int) -> str:
        return memory.evaluate(key, observe(Signals(queue_depth=queue), revision, policy, True), policy, at)

    feed("a", 0, 0.1, 1)
    feed("b", 0, 0.1, 1)
    feed("a", 10, 0.9, 2)
    assert feed("b", 11, 0.9, 2) == NEW_AND_EXISTING
    assert feed("a", 11, 0.9, 3) == EXISTING_ONLY
    memory.retain(["b"])
    assert memory.state_of("a") is None and memory.state_of("b") == NEW_AND_EXISTING


def test_expired_sample_counts_as_missing_in_render() -> None:
    clock = FixedClock(seconds=100)
    objects = [
        network(
            scoringPolicy={"strategy": "queueDepth"},
            admissionPolicy={"mode": "stabilized", "missingMetrics": "excluded"},
        ),
        queue_provider("p1"),
        queue_provider("p2"),
    ]
    samples = [MetricSample("p1", 1, queue_depth=1, expires_at=99), MetricSample("p2", 1, queue_depth=1)]
    envelope = render_one(objects, samples, clock=clock)
    assert rows(envelope, "cluster", "admission_state") == [("p2", NEW_AND_EXISTING)]


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"pressure": {"enterThreshold": 0.9}}, "exitThreshold"),
        ({"pressure": {**PRESSURE, "minimumStateDuration": "0s"}}, "minimumStateDuration"),
        ({"pressure": {**PRESSURE, "recoveryHoldDown": "30"}}, "recoveryHoldDown"),
        ({"pressure": {**PRESSURE, "exitThreshold": 0.9}}, "exitThreshold"),
        ({"pressure": {**PRESSURE, "failureThreshold": 0}}, "failureThreshold"),
        ({"missingMetrics": "sometimes"}, "missingMetrics"),
        ({"mode": "eventually"}, "mode"),
    ],
)
def test_bad_policies_name_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ResourceError, match=key):
        Policy.from_spec(config, "queueDepth")


def test_pressure_defaults_when_omitted() -> None:
    policy = Policy.from_spec({"mode": "stabilized"}, "kvCachePressure")
    assert (policy.failure_threshold, policy.success_threshold) == (2, 3)
    assert (policy.minimum_state_duration, policy.recovery_hold_down) == (10.0, 30.0)
    assert policy.signal == "kvCacheUtilization"
