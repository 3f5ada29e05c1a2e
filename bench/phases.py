"""Where a conformance run's seconds go: a pytest plugin the conformance_wall benchmark loads.

Loaded with ``-p bench.phases`` (and ``AGN_BENCH_PHASES=<file>``), it times what the harness does, by
activity, and writes them as JSON when the session ends (under pytest-xdist each worker writes its part
beside the file and the controller merges them; the seconds are then test-seconds over all workers):

- pytest phases per test (setup, call, teardown) and the session outside them (collection, report);
- activities inside those phases: starting gateways, fake backends and operators (process start and
  readiness), stopping processes, polling waits (reload debounce, convergence, deadlines), traffic.

Each second is counted once, for the outermost activity running (a readiness poll inside a gateway start
counts as the gateway start); what no activity claims is "test code" (requests, assertions, rendering).
The harness functions are wrapped where the modules that call them hold them, once collection has
imported the suites, so nothing of the harness changes for a run without the plugin.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ENV = "AGN_BENCH_PHASES"
OTHER = "test code"

#: (module, attribute path) -> activity. Methods are wrapped on their class; functions in every module
#: that imported them.
ACTIVITIES: dict[tuple[str, str], str] = {
    ("harness.backends.local", "LocalBackend.start_gateway"): "gateway start",
    ("harness.backends.local", "LocalBackend.start_providers"): "fake backend start",
    ("harness.backends.local", "LocalBackend.start_tls_metrics"): "fake backend start",
    ("harness.backends.local", "LocalBackend.start_operator"): "operator start",
    ("harness.backends.local", "LocalBackend.start_overlay_sync"): "overlay-sync start",
    ("harness.process", "ManagedProcess.stop"): "process stop",
    ("harness.process", "ManagedProcess.kill"): "process stop",
    ("harness.traffic", "send"): "traffic",
    ("harness.waiting", "poll_until"): "waiting",
    ("harness.waiting", "wait_until_elapsed"): "waiting",
}


class Clock:
    """Time per activity, per test; an activity running inside another (on the same thread) is part of it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.local = threading.local()
        self.test = "<session>"
        self.by_test: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.calls: dict[str, int] = defaultdict(int)

    def timed(self, activity: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if getattr(self.local, "busy", False):
                return fn(*args, **kwargs)
            self.local.busy = True
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.local.busy = False
                elapsed = time.perf_counter() - started
                with self.lock:
                    self.by_test[self.test][activity] += elapsed
                    self.calls[activity] += 1

        return wrapper


def _resolve(module: str, path: str) -> tuple[Any, str, Any] | None:
    owner: Any = sys.modules.get(module)
    if owner is None:
        return None
    *parents, name = path.split(".")
    for part in parents:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    target = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    return (owner, name, target) if target is not None else None


def _holders(fn: Any) -> Iterator[tuple[Any, str]]:
    """Every loaded harness or suite module attribute that is `fn` (``from x import fn`` copies it)."""
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if not name.startswith(("harness", "suites")):
            continue
        for attr, value in list(vars(module).items()):
            if value is fn:
                yield module, attr


class PhasesPlugin:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.clock = Clock()
        self.started = time.perf_counter()
        self.phases: dict[str, dict[str, float]] = defaultdict(dict)
        self.wrapped = False

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.wrapped:
            return
        self.wrapped = True
        for (module, path), activity in ACTIVITIES.items():
            found = _resolve(module, path)
            if found is None:
                continue
            owner, name, target = found
            wrapper = self.clock.timed(activity, target)
            if isinstance(owner, type):
                setattr(owner, name, wrapper)
            else:
                for holder, attr in list(_holders(target)):
                    setattr(holder, attr, wrapper)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        self.clock.test = item.nodeid
        try:
            return (yield)
        finally:
            self.clock.test = "<session>"

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.phases[report.nodeid][report.when] = report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        worker = getattr(session.config, "workerinput", None)
        if worker is not None:  # an xdist worker: its activities, for the controller to merge
            part = {"by_test": {k: dict(v) for k, v in self.clock.by_test.items()}, "calls": dict(self.clock.calls)}
            self.out.with_name(f"{self.out.name}.{worker['workerid']}").write_text(json.dumps(part))
            return
        for part_file in sorted(self.out.parent.glob(f"{self.out.name}.gw*")):
            part = json.loads(part_file.read_text())
            for nodeid, activities in part["by_test"].items():
                for activity, seconds in activities.items():
                    self.clock.by_test[nodeid][activity] += seconds
            for activity, count in part["calls"].items():
                self.clock.calls[activity] += count
            part_file.unlink()
        tests = []
        for nodeid, phases in self.phases.items():
            activities = dict(self.clock.by_test.get(nodeid, {}))
            total = sum(phases.values())
            activities[OTHER] = max(0.0, total - sum(activities.values()))
            tests.append({"id": nodeid, "phases": phases, "total_s": total, "activities": activities})
        session_s = time.perf_counter() - self.started
        outside = dict(self.clock.by_test.get("<session>", {}))
        doc = {"session_s": session_s, "tests": tests, "outside_tests": outside,
               "calls": dict(self.clock.calls)}
        self.out.write_text(json.dumps(doc, indent=1))


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get(ENV)
    if out:
        config.pluginmanager.register(PhasesPlugin(Path(out)), "agn-bench-phases")
