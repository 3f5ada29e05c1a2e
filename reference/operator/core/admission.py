"""Provider admission: the wire state a provider is published with, held over time when stabilized.

Admission is decided in the control plane only. The evaluator keeps a small per-provider memory
(counters, state start, recovery start, last sample revision) keyed by provider identity, reads time
only from the injected clock value, and never counts the same sample twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from reference.operator.core.model import ResourceError
from reference.operator.core.scoring import NEUTRAL, Signals

NEW_AND_EXISTING = "new_and_existing"
EXISTING_ONLY = "existing_only"
EXCLUDED = "none"

FRESH = "fresh"
MISSING = "missing"
NOT_CONFIGURED = "not_configured"

_PRESSURE_FIELDS = (
    "enterThreshold",
    "exitThreshold",
    "failureThreshold",
    "successThreshold",
    "minimumStateDuration",
    "recoveryHoldDown",
)
_DEFAULT_PRESSURE: dict[str, Any] = {
    "enterThreshold": 0.85,
    "exitThreshold": 0.70,
    "failureThreshold": 2,
    "successThreshold": 3,
    "minimumStateDuration": "10s",
    "recoveryHoldDown": "30s",
}
_SECONDS = re.compile(r"[1-9][0-9]*s")


@dataclass(frozen=True)
class Policy:
    """`compat` is the behaviour of an omitted admissionPolicy: instantaneous, missing signal neutral."""

    mode: str = "instantaneous"
    compat: bool = True
    signal: str | None = None
    enter_threshold: float = 0.85
    exit_threshold: float = 0.70
    failure_threshold: int = 1
    success_threshold: int = 1
    minimum_state_duration: float = 0.0
    recovery_hold_down: float = 0.0
    missing_state: str = EXISTING_ONLY

    @classmethod
    def from_spec(cls, config: Mapping[str, Any] | None, strategy: str) -> Policy:
        signal = {"queueDepth": "queueDepth", "kvCachePressure": "kvCacheUtilization"}.get(strategy)
        if config is None:
            return cls(signal=signal)
        mode = config.get("mode", "stabilized")
        if mode not in ("instantaneous", "stabilized"):
            raise ResourceError("spec.admissionPolicy.mode: must be instantaneous or stabilized")
        missing = config.get("missingMetrics", "existingOnly")
        if missing not in ("existingOnly", "excluded"):
            raise ResourceError("spec.admissionPolicy.missingMetrics: must be existingOnly or excluded")
        pressure = config.get("pressure")
        if pressure is None:
            pressure = _DEFAULT_PRESSURE
        elif not isinstance(pressure, Mapping):
            raise ResourceError("spec.admissionPolicy.pressure: expected an object")
        for key in _PRESSURE_FIELDS:
            if key not in pressure:
                raise ResourceError(f"spec.admissionPolicy.pressure.{key}: required when pressure is given")
        enter, exit_ = _ratio(pressure, "enterThreshold"), _ratio(pressure, "exitThreshold")
        if not exit_ < enter:
            raise ResourceError("spec.admissionPolicy.pressure.exitThreshold: must be below enterThreshold")
        return cls(
            mode=mode,
            compat=False,
            signal=signal,
            enter_threshold=enter,
            exit_threshold=exit_,
            failure_threshold=_count(pressure, "failureThreshold"),
            success_threshold=_count(pressure, "successThreshold"),
            minimum_state_duration=_duration(pressure, "minimumStateDuration"),
            recovery_hold_down=_duration(pressure, "recoveryHoldDown"),
            missing_state=EXISTING_ONLY if missing == "existingOnly" else EXCLUDED,
        )


def _ratio(pressure: Mapping[str, Any], key: str) -> float:
    value = pressure[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise ResourceError(f"spec.admissionPolicy.pressure.{key}: must be a number in [0, 1]")
    return float(value)


def _count(pressure: Mapping[str, Any], key: str) -> int:
    value = pressure[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise ResourceError(f"spec.admissionPolicy.pressure.{key}: must be an integer 1..100")
    return value


def _duration(pressure: Mapping[str, Any], key: str) -> float:
    value = pressure[key]
    if not isinstance(value, str) or not _SECONDS.fullmatch(value):
        raise ResourceError(f"spec.admissionPolicy.pressure.{key}: must be positive whole seconds like 10s")
    return float(value[:-1])


@dataclass(frozen=True)
class Observation:
    """What the evaluator sees of one provider in one reconcile."""

    kind: str
    signals: Signals | None = None
    revision: int | None = None

    @property
    def hard_failure(self) -> bool:
        return self.signals is not None and not self.signals.healthy


def observe(signals: Signals | None, revision: int | None, policy: Policy, signal_mapped: bool) -> Observation:
    """Classify a provider's current sample for the policy's pressure signal.

    `signals` is None when there is no usable (present and unexpired) sample; `signal_mapped` says
    whether the provider maps the strategy's signal name at all.
    """
    if policy.signal is None or not signal_mapped:
        return Observation(NOT_CONFIGURED, signals, revision)
    if signals is None or _pressure(signals, policy) is None:
        return Observation(MISSING, signals, revision)
    return Observation(FRESH, signals, revision)


def _pressure(signals: Signals, policy: Policy) -> float | None:
    if policy.signal == "queueDepth":
        return signals.queue_depth
    if policy.signal == "kvCacheUtilization":
        return signals.kv_cache_utilization
    return None


def instantaneous_state(observation: Observation, policy: Policy) -> str:
    """One observation, no memory: unhealthy excluded, pressure at or over enter restricted."""
    if observation.hard_failure:
        return EXCLUDED
    if observation.kind == NOT_CONFIGURED:
        return NEW_AND_EXISTING
    if observation.kind == MISSING:
        if policy.compat:
            return NEW_AND_EXISTING if policy.enter_threshold > NEUTRAL else EXISTING_ONLY
        return policy.missing_state
    assert observation.signals is not None
    value = _pressure(observation.signals, policy)
    return EXISTING_ONLY if value is not None and value >= policy.enter_threshold else NEW_AND_EXISTING


@dataclass
class _Entry:
    state: str
    since: float
    pressure_count: int = 0
    recovery_count: int = 0
    recovery_since: float | None = None
    last_revision: int | None = None

    def reset_counters(self) -> None:
        self.pressure_count = 0
        self.recovery_count = 0
        self.recovery_since = None

    def enter(self, state: str, now: float) -> None:
        self.state = state
        self.since = now
        self.reset_counters()


class AdmissionMemory:
    """Cross-reconcile admission state keyed by provider identity; a restart starts it empty."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def state_of(self, key: str) -> str | None:
        entry = self._entries.get(key)
        return entry.state if entry else None

    def retain(self, keys: Iterable[str]) -> None:
        """Forget providers that no longer exist so their history cannot leak into a new one."""
        keep = set(keys)
        for key in [k for k in self._entries if k not in keep]:
            del self._entries[key]

    def evaluate(self, key: str, observation: Observation, policy: Policy, now: float) -> str:
        if policy.mode == "instantaneous":
            state = instantaneous_state(observation, policy)
            self._entries[key] = _Entry(state=state, since=now)
            return state
        entry = self._entries.get(key)
        if entry is None:
            initial = policy.missing_state if observation.kind == MISSING else NEW_AND_EXISTING
            entry = self._entries[key] = _Entry(state=initial, since=now)
        if observation.kind == FRESH:
            if observation.revision is not None and entry.last_revision == observation.revision:
                return entry.state
            entry.last_revision = observation.revision
        else:
            entry.last_revision = None
        if observation.hard_failure:
            entry.enter(EXCLUDED, now)
        elif observation.kind == NOT_CONFIGURED:
            entry.enter(NEW_AND_EXISTING, now)
        elif observation.kind == MISSING:
            entry.enter(policy.missing_state, now)
        else:
            self._step(entry, observation, policy, now)
        return entry.state

    @staticmethod
    def _step(entry: _Entry, observation: Observation, policy: Policy, now: float) -> None:
        assert observation.signals is not None
        value = _pressure(observation.signals, policy)
        assert value is not None
        in_state = now - entry.since
        if entry.state == NEW_AND_EXISTING:
            entry.recovery_count = 0
            entry.recovery_since = None
            entry.pressure_count = entry.pressure_count + 1 if value >= policy.enter_threshold else 0
            if entry.pressure_count >= policy.failure_threshold and in_state >= policy.minimum_state_duration:
                entry.enter(EXISTING_ONLY, now)
            return
        entry.pressure_count = 0
        if value > policy.exit_threshold:
            entry.recovery_count = 0
            entry.recovery_since = None
            return
        entry.recovery_count += 1
        if entry.recovery_since is None:
            entry.recovery_since = now
        if (
            entry.recovery_count >= policy.success_threshold
            and now - entry.recovery_since >= policy.recovery_hold_down
            and in_state >= policy.minimum_state_duration
        ):
            entry.enter(NEW_AND_EXISTING, now)
