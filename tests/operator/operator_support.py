"""Builders for the operator core tests: resources in the shape the CRDs define."""

from __future__ import annotations

import contextlib
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reference.operator.core import FixedClock, MetricSample, Resources, render
from reference.operator.core.admission import AdmissionMemory

NETWORK = "net-1"
REPO = Path(__file__).resolve().parents[2]


def network(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "gatewayRefs": [{"name": "gw-1", "namespace": "praxis-system", "localSiteName": "site-a"}],
    }
    body.update(spec)
    return {
        "kind": "GridNetwork",
        "metadata": {"name": NETWORK, "uid": "uid-1", "generation": 3},
        "spec": body,
    }


def site(
    name: str,
    region: str | None = None,
    zone: str | None = None,
    phase: str = "Active",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"gridNetworkRef": NETWORK}
    if region:
        spec["region"] = region
    if zone:
        spec["zone"] = zone
    return {
        "kind": "GridSite",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"phase": phase},
    }


def provider(name: str, model: str = "m", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"gridNetworkRef": NETWORK, "models": [{"name": model}], "endpoint": "http://x"}
    status = spec.pop("status", None)
    body.update(spec)
    obj: dict[str, Any] = {"kind": "InferenceProvider", "metadata": {"name": name}, "spec": body}
    if status:
        obj["status"] = status
    return obj


def queue_provider(name: str, model: str = "m", **spec: Any) -> dict[str, Any]:
    return provider(name, model, metricsConfig={"signalNames": {"queueDepth": "q"}, "queueCapacity": 10}, **spec)


def render_one(
    objects: list[dict[str, Any]],
    samples: list[MetricSample] | None = None,
    records: list[Any] | None = None,
    clock: FixedClock | None = None,
    memory: AdmissionMemory | None = None,
) -> dict[str, Any]:
    out = render(Resources.from_objects(objects), samples or [], records or [], clock or FixedClock(), memory)
    assert len(out) == 1
    return out[0].envelope


def rows(envelope: dict[str, Any], *fields: str) -> list[tuple[Any, ...]]:
    return [tuple(c.get(f) for f in fields) for c in envelope["overlay"]["candidates"]]


@contextlib.contextmanager
def fake_backend(name: str = "p1") -> Iterator[str]:
    """The fake EPP backend as a child process; yields its base URL and always stops it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.fakes.cli", "--name", name, "--site", "site-a", "--listen", "127.0.0.1:0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + 20
        line = ""
        while time.monotonic() < deadline and not line:
            if selector.select(timeout=deadline - time.monotonic()):
                line = proc.stdout.readline()
                if not line:
                    break
        assert line.startswith("LISTENING "), f"fake backend did not start; saw {line!r}"
        yield "http://" + line.split()[1]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
