"""Route-change latency through the whole producer chain, with real processes on loopback.

The reference operator (`run --poll 0.1`) scrapes two fake EPP backends and renders a scoreFirst +
queueDepth + deterministic overlay; overlay-sync delivers it from the ConfigMap file into the gateway's
overlay directory; the reference gateway reloads it with a 500 ms debounce (the Praxis production
default) and routes. Each iteration swaps the two backends' queue depths, forces a reconcile with a new
force-refresh annotation on the GridNetwork, and measures from the swap to the first request answered
by the newly preferred backend. Directions alternate. The time each stage was first observed (ConfigMap
rewritten, overlay delivered, traffic moved) is reported too, from the same polling loop.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.core import ROOT, BenchResult, Target, child_env, emit, percentile, table
from bench.services import START_TIMEOUT_S, Running, wait_for_lines, wait_ports_free
from harness import resources
from harness.contract import ScopeSpec
from harness.gateway_config import VARIANTS, render_gateway_config
from harness.process import Supervisor
from harness.waiting import poll_until

#: The p95 of metric swap to first request on the new backend, with the production 500 ms reload debounce.
TARGET_P95_S = 0.65
RELOAD_DEBOUNCE_MS = 500
ITERATION_TIMEOUT_S = 20.0
PROBE_INTERVAL_S = 0.005
NETWORK, GATEWAY, NAMESPACE, SITE = "bench-route-net", "bench-edge", "agn-system", "bench-site"
MODEL = "bench-route-model"
BACKENDS = ("pool-east", "pool-west")
LOW, HIGH = 2.0, 6.0  # queue depths of capacity 10: both stay new_and_existing, only the score differs
FORCE_REFRESH = "grid.praxis.fast/force-refresh"
SCOPE = ScopeSpec(NETWORK, GATEWAY, NAMESPACE, SITE)
#: The core gateway variant with the Praxis production reload debounce instead of the suites' short one.
VARIANT = dataclasses.replace(VARIANTS["core"], name="core-production-debounce",
                              extra={"reload": {"enabled": True, "debounce_ms": RELOAD_DEBOUNCE_MS}})


def network(token: str) -> dict[str, Any]:
    """The GridNetwork; only a new force-refresh token makes the operator scrape again (refresh is 300 s)."""
    obj = resources.grid_network(NETWORK, [resources.gateway_ref(SITE, GATEWAY, NAMESPACE)], routing="scoreFirst",
                                 scoring="queueDepth", selection="deterministic", refresh="300s")
    obj["metadata"]["annotations"] = {FORCE_REFRESH: token}
    return obj


def provider(name: str, address: str) -> dict[str, Any]:
    base = f"http://{address}"
    return resources.inference_provider(
        name, NETWORK, site=SITE, cluster=name, models=(MODEL,), endpoint=base,
        metrics=resources.metrics_config(base, name, queue_capacity=10, signals=("queueDepth",)))


def write_atomic(path: Path, text: str) -> None:
    """The operator never sees a half-written file (hidden temporary names are not resources)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def set_queue(client: httpx.Client, address: str, pool: str, value: float) -> None:
    body = {"metrics": [{"name": resources.QUEUE_METRIC, "labels": {"name": pool}, "value": value}]}
    client.post(f"http://{address}/admin/config", json=body).raise_for_status()


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


class Chain:
    """The started processes and how to observe each stage."""

    def __init__(self, supervisor: Supervisor, workdir: Path) -> None:
        self.supervisor = supervisor
        self.workdir = workdir
        self.manifests = workdir / "manifests"
        self.out = workdir / "out"
        self.overlay = workdir / "overlay" / "routing-overlay.json"
        self.services: list[Running] = []
        self.backends: dict[str, str] = {}
        self.url = ""
        self.configmap = Path()

    def ports(self) -> list[tuple[str, int]]:
        return [port for service in self.services for port in service.ports()]

    def _start(self, name: str, argv: list[str], patterns: dict[str, str]) -> Running:
        proc = self.supervisor.start(name, argv, env=child_env(), cwd=ROOT)
        running = Running(proc, wait_for_lines(proc, patterns, START_TIMEOUT_S) if patterns else {})
        self.services.append(running)
        return running

    def start(self, client: httpx.Client) -> None:
        for name in BACKENDS:
            argv = [sys.executable, "-m", "harness.fakes.cli", "--name", name, "--site", SITE,
                    "--listen", "127.0.0.1:0"]
            backend = self._start(f"bench-{name}", argv, {"listen": r"^LISTENING (\S+)$"})
            self.backends[name] = backend.addresses["listen"]
        self.set_preferred(client, BACKENDS[0])
        self.manifests.mkdir()
        write_atomic(self.manifests / "network.yaml", yaml.safe_dump(network("initial")))
        write_atomic(self.manifests / "providers.yaml",
                     yaml.safe_dump_all([provider(name, address) for name, address in self.backends.items()]))
        self._start("bench-operator", [sys.executable, "-m", "reference.operator", "run", "--manifests",
                                       str(self.manifests), "--out", str(self.out), "--poll", "0.1"], {})
        configmaps = poll_until(lambda: sorted(self.out.glob("*.configmap.yaml")), bool,
                                what="the operator to write a ConfigMap", timeout=START_TIMEOUT_S)
        self.configmap = configmaps[0]
        scope = ",".join(f"{k}={v}" for k, v in SCOPE.as_dict().items())
        self._start("bench-overlay-sync", [
            sys.executable, "-m", "reference.overlay_sync", "--configmap-file", str(self.configmap),
            "--target-dir", str(self.overlay.parent), "--expected-scope", scope], {})
        poll_until(self.overlay.exists, bool, what="overlay-sync to deliver the first overlay", timeout=START_TIMEOUT_S)
        config = render_gateway_config(
            VARIANT, listen="127.0.0.1:0", admin="127.0.0.1:0", overlay_file=str(self.overlay), scope=SCOPE,
            clusters=self.backends, hop_clusters=list(self.backends), management_cluster=None)
        (self.workdir / "praxis.yaml").write_text(config)
        gateway = self._start("bench-gateway", [sys.executable, "-m", "reference.gateway.cli", "-c",
                                                str(self.workdir / "praxis.yaml")],
                              {"listen": r"^LISTENING \S+ (\S+)$", "admin": r"^ADMIN (\S+)$"})
        self.url = f"http://{gateway.addresses['listen']}/v1/chat/completions"
        poll_until(lambda: self.served(client), lambda b: b == BACKENDS[0],
                   what=f"{BACKENDS[0]} to serve the first overlay", timeout=START_TIMEOUT_S)

    def set_preferred(self, client: httpx.Client, preferred: str) -> None:
        """The preferred backend gets the short queue (higher queueDepth score), the other the long one."""
        for name, address in self.backends.items():
            set_queue(client, address, name, LOW if name == preferred else HIGH)

    def served(self, client: httpx.Client) -> str:
        resp = client.post(self.url, json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        return resp.headers.get("x-agn-backend", "") if resp.status_code == 200 else f"status {resp.status_code}"

    def logs(self) -> str:
        return "\n".join(f"--- {s.process.name}\n{s.process.log_tail(10)}" for s in self.services)


def first_seen(probes: dict[str, Callable[[], bool]], start: float, what: str) -> dict[str, float]:
    """Seconds from `start` until each probe first held; all probes run every round until the last holds."""
    seen: dict[str, float] = {}
    deadline = start + ITERATION_TIMEOUT_S
    while len(seen) < len(probes):
        for stage, probe in probes.items():
            if stage not in seen and probe():
                seen[stage] = time.monotonic() - start
        if time.monotonic() >= deadline:
            missing = [stage for stage in probes if stage not in seen]
            raise TimeoutError(f"{what}: {', '.join(missing)} not observed within {ITERATION_TIMEOUT_S:.0f}s "
                               f"(seen {seen})")
        time.sleep(PROBE_INTERVAL_S)
    return seen


def change_route(chain: Chain, client: httpx.Client, iteration: int, preferred: str) -> dict[str, Any]:
    """Swap the queue depths, force a reconcile and observe each stage of the change."""
    configmap_before, overlay_before = read_bytes(chain.configmap), read_bytes(chain.overlay)
    start = time.monotonic()
    chain.set_preferred(client, preferred)
    write_atomic(chain.manifests / "network.yaml", yaml.safe_dump(network(f"route-{iteration}-{time.time_ns()}")))
    last: list[str] = []

    def moved() -> bool:
        try:
            last[:] = [chain.served(client)]
        except httpx.HTTPError as exc:
            last[:] = [f"{type(exc).__name__}: {exc}"]
        return last[0] == preferred

    probes = {
        "rendered_s": lambda: read_bytes(chain.configmap) != configmap_before,
        "delivered_s": lambda: read_bytes(chain.overlay) != overlay_before,
        "served_s": moved,
    }
    try:
        seen = first_seen(probes, start, f"route change to {preferred}")
    except TimeoutError as exc:
        raise RuntimeError(f"{exc}; last answer {last[0] if last else None}\n{chain.logs()}") from exc
    return {"iteration": iteration, "to": preferred, **seen}


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_s": statistics.median(ordered), "p95_s": percentile(ordered, 95), "max_s": ordered[-1]}


def run(quick: bool) -> BenchResult:
    count = 3 if quick else 10
    emit(f"route_change: operator -> overlay-sync -> gateway (reload debounce {RELOAD_DEBOUNCE_MS} ms), "
         f"{count} route changes alternating between {' and '.join(BACKENDS)}")
    with tempfile.TemporaryDirectory(prefix="agn-bench-route-") as tmp:
        supervisor = Supervisor(Path(tmp) / "logs")
        chain = Chain(supervisor, Path(tmp))
        rows: list[dict[str, Any]] = []
        try:
            with httpx.Client(timeout=5.0) as client:
                chain.start(client)
                for i in range(count):
                    preferred = BACKENDS[(i + 1) % len(BACKENDS)]
                    rows.append(change_route(chain, client, i + 1, preferred))
        finally:
            supervisor.stop_all()
        busy = wait_ports_free(chain.ports())
    emit(table(
        "route change (seconds from the metric swap; rendered = ConfigMap rewritten, delivered = overlay file "
        "replaced, served = first request on the new backend)",
        ("iteration", "to", "rendered s", "delivered s", "served s"),
        [(r["iteration"], r["to"], r["rendered_s"], r["delivered_s"], r["served_s"]) for r in rows],
    ))
    summary = {stage: _stats([r[stage] for r in rows]) for stage in ("rendered_s", "delivered_s", "served_s")}
    emit(table(
        "route change summary (seconds)",
        ("stage", "median s", "p95 s", "max s"),
        [(stage.removesuffix("_s"), s["median_s"], s["p95_s"], s["max_s"]) for stage, s in summary.items()],
    ))
    if busy:
        emit(f"note: ports still bound after stopping: {busy}")
    target = Target(f"route change p95 of {count} (metric swap to first request on the new backend)",
                    summary["served_s"]["p95_s"], "<=", TARGET_P95_S, "s")
    emit(target.line())
    data = {"iterations": rows, "summary": summary, "changes": count, "reload_debounce_ms": RELOAD_DEBOUNCE_MS,
            "operator_poll_s": 0.1, "ports_released": not busy}
    return BenchResult("route_change", data, [target])
