"""Reconcile triggers: refresh interval parsing and caps, resource fingerprints, force-refresh annotation,
all driven by an injected clock."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from reference.operator.core import FixedClock
from reference.operator.triggers import (
    FORCE_REFRESH,
    Triggers,
    fingerprint,
    force_tokens,
    parse_interval,
    refresh_interval,
)


def net(interval: str | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {} if interval is None else {"metricsRefreshInterval": interval}
    return {"kind": "GridNetwork", "metadata": {"name": "n", "annotations": annotations or {}}, "spec": spec}


def prov(tls: bool) -> dict[str, Any]:
    config: dict[str, Any] = {"signalNames": {"queueDepth": "q"}}
    if tls:
        config["tls"] = {"caSecretRef": {"name": "ca", "namespace": "grid-system"}}
    return {"kind": "InferenceProvider", "metadata": {"name": "p"}, "spec": {"metricsConfig": config}}


@pytest.mark.parametrize(("text", "seconds"), [("10s", 10.0), ("1500ms", 1.5), ("1000ms", 1.0), ("1s", 1.0)])
def test_parse_interval(text: str, seconds: float) -> None:
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["0s", "500ms", "999ms", "1.5s", "1m", "", "10"])
def test_parse_interval_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="metricsRefreshInterval"):
        parse_interval(text)


def test_refresh_interval_defaults_and_caps() -> None:
    assert refresh_interval([net()]) == 300.0
    assert refresh_interval([net(), prov(tls=False)]) == 300.0
    assert refresh_interval([net(), prov(tls=True)]) == 60.0
    assert refresh_interval([net("120s"), prov(tls=True)]) == 60.0
    assert refresh_interval([net("10s"), prov(tls=True)]) == 10.0
    assert refresh_interval([net("1500ms"), net("20s")]) == 1.5
    inherited = {"kind": "InferenceProvider", "metadata": {"name": "q"}, "spec": {"tls": {}, "metricsConfig": {}}}
    assert refresh_interval([net(), inherited]) == 60.0


def test_fingerprint_changes_on_edit_add_and_remove(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    a.write_text("x: 1\n")
    first = fingerprint([a])
    assert fingerprint([a]) == first
    stat = a.stat()
    a.write_text("x: 2\n")
    os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime and size: content still counts
    second = fingerprint([a])
    assert second != first
    b = tmp_path / "b.yaml"
    b.write_text("y: 1\n")
    third = fingerprint([a, b])
    assert third != second
    assert fingerprint([a]) == second


def test_force_tokens() -> None:
    objs = [net(annotations={FORCE_REFRESH: "1"}), prov(tls=False)]
    assert force_tokens(objs) == {"GridNetwork/n": "1"}


def test_due_initial_then_quiet_then_periodic() -> None:
    clock = FixedClock()
    triggers = Triggers(clock)
    assert triggers.due(10.0, "fp", {}) == ["initial"]
    triggers.ran("fp", {})
    assert triggers.due(10.0, "fp", {}) == []
    assert triggers.wait_time(10.0) == 10.0
    clock.advance(9.5)
    assert triggers.due(10.0, "fp", {}) == []
    assert triggers.wait_time(10.0) == pytest.approx(0.5)
    clock.advance(0.5)
    assert triggers.due(10.0, "fp", {}) == ["periodic"]
    assert triggers.wait_time(10.0) == 0.0


def test_due_on_resource_change() -> None:
    triggers = Triggers(FixedClock())
    triggers.ran("fp1", {})
    assert triggers.due(300.0, "fp2", {}) == ["resources"]
    triggers.ran("fp2", {})
    assert triggers.due(300.0, "fp2", {}) == []


def test_due_on_force_refresh_value_change() -> None:
    triggers = Triggers(FixedClock())
    triggers.ran("fp", {"GridNetwork/n": "1"})
    assert triggers.due(300.0, "fp", {"GridNetwork/n": "1"}) == []
    assert triggers.due(300.0, "fp", {"GridNetwork/n": "2"}) == ["force-refresh"]
    assert triggers.due(300.0, "fp", {"GridNetwork/n": "1", "InferenceProvider/p": "a"}) == ["force-refresh"]
    assert triggers.due(300.0, "fp", {}) == []
