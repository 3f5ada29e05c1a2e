"""Route-change latency through the whole producer chain, with real processes on loopback.

The reference operator (`run --poll 0.1`) scrapes two fake EPP backends and renders a scoreFirst +
queueDepth + deterministic overlay; overlay-sync delivers it from the ConfigMap file into the gateway's
overlay directory; the reference gateway reloads it with a 500 ms debounce (the Praxis production
default) and routes. Each iteration swaps the two backends' queue depths, forces a reconcile with a new
force-refresh annotation on the GridNetwork, and measures from the swap to the first request answered
by the newly preferred backend. Directions alternate.

Each stage is timed from the swap, as first observed by one polling loop: metric set (both backends
answered the change and the annotation is written), rendered (ConfigMap file rewritten), delivered
(overlay file replaced), accepted (the gateway logged the reload as accepted) and serving (first request
answered by the new backend; requests are only sent once the overlay is delivered, since no gateway can
serve a revision it has not been given, so probing does not load the machine during the debounce).

Two chains run side by side and their route changes are interleaved, so noise from the shared machine
falls on both alike: `current` (the components' defaults: the operator watches its manifests directory,
its watcher and the gateway's look for events every 10 ms and overlay-sync's every 2 ms, the gateway
validates inside the debounce window) and `previous` (the settings before: the operator's and the gateway's
watchers stepping every 2 ms, which cost idle CPU in every operator and gateway).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
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
#: A p95 is reported from at least this many route changes per configuration (nearest rank: the 38th of 40).
FULL_CHANGES = 40
QUICK_CHANGES = 3
RELOAD_DEBOUNCE_MS = 500
OPERATOR_POLL_S = 0.1
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
ACCEPTED_LINE = "overlay reload accepted"
#: Stage names in path order; each is seconds from the metric swap.
STAGES = ("metric_set_s", "rendered_s", "delivered_s", "accepted_s", "served_s")


@dataclasses.dataclass(frozen=True)
class Settings:
    """How the chain's components are tuned: extra operator and overlay-sync arguments, gateway env."""

    name: str
    description: str
    operator_args: tuple[str, ...] = ()
    sync_args: tuple[str, ...] = ()
    gateway_env: Mapping[str, str] = dataclasses.field(default_factory=dict)


CURRENT = Settings("current", "component defaults (manifest watch; watchers step every 10 ms in the operator and "
                   "the gateway, every 2 ms in overlay-sync; validation inside the debounce)")
PREVIOUS = Settings("previous", "operator and gateway watchers stepping every 2 ms (costing each idle watcher 8.5 ms "
                    "of CPU per second instead of 3.5)", operator_args=("--watch-step-ms", "2"),
                    gateway_env={"AGN_GATEWAY_WATCH_STEP_MS": "2"})
CONFIGS = (CURRENT, PREVIOUS)


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


def count_in_file(path: Path, needle: str) -> int:
    """How many times `needle` occurs in a log file (0 when it cannot be read)."""
    try:
        return path.read_text(errors="replace").count(needle)
    except OSError:
        return 0


class Chain:
    """The started processes of one configuration and how to observe each stage."""

    def __init__(self, supervisor: Supervisor, workdir: Path, settings: Settings) -> None:
        self.supervisor = supervisor
        self.workdir = workdir
        self.settings = settings
        self.manifests = workdir / "manifests"
        self.out = workdir / "out"
        self.overlay = workdir / "overlay" / "routing-overlay.json"
        self.services: list[Running] = []
        self.backends: dict[str, str] = {}
        self.url = ""
        self.configmap = Path()
        self.gateway_log = Path()

    def ports(self) -> list[tuple[str, int]]:
        return [port for service in self.services for port in service.ports()]

    def _start(self, name: str, argv: list[str], patterns: dict[str, str],
               env: Mapping[str, str] | None = None) -> Running:
        proc = self.supervisor.start(f"{name}-{self.settings.name}", argv, env={**child_env(), **(env or {})},
                                     cwd=ROOT)
        running = Running(proc, wait_for_lines(proc, patterns, START_TIMEOUT_S) if patterns else {})
        self.services.append(running)
        return running

    def start(self, client: httpx.Client) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
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
                                       str(self.manifests), "--out", str(self.out), "--poll", str(OPERATOR_POLL_S),
                                       *self.settings.operator_args], {})
        configmaps = poll_until(lambda: sorted(self.out.glob("*.configmap.yaml")), bool,
                                what="the operator to write a ConfigMap", timeout=START_TIMEOUT_S)
        self.configmap = configmaps[0]
        scope = ",".join(f"{k}={v}" for k, v in SCOPE.as_dict().items())
        self._start("bench-overlay-sync", [
            sys.executable, "-m", "reference.overlay_sync", "--configmap-file", str(self.configmap),
            "--target-dir", str(self.overlay.parent), "--expected-scope", scope, *self.settings.sync_args], {})
        poll_until(self.overlay.exists, bool, what="overlay-sync to deliver the first overlay", timeout=START_TIMEOUT_S)
        config = render_gateway_config(
            VARIANT, listen="127.0.0.1:0", admin="127.0.0.1:0", overlay_file=str(self.overlay), scope=SCOPE,
            clusters=self.backends, hop_clusters=list(self.backends), management_cluster=None)
        (self.workdir / "praxis.yaml").write_text(config)
        gateway = self._start("bench-gateway", [sys.executable, "-m", "reference.gateway.cli", "-c",
                                                str(self.workdir / "praxis.yaml")],
                              {"listen": r"^LISTENING \S+ (\S+)$", "admin": r"^ADMIN (\S+)$"},
                              env=self.settings.gateway_env)
        self.gateway_log = gateway.process.log_path
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

    def accepted(self) -> int:
        return count_in_file(self.gateway_log, ACCEPTED_LINE)

    def logs(self) -> str:
        return "\n".join(f"--- {s.process.name}\n{s.process.log_tail(10)}" for s in self.services)


def first_seen(probes: dict[str, tuple[str | None, Callable[[], bool]]], start: float,
               what: str) -> dict[str, float]:
    """Seconds from `start` until each probe first held. A probe runs only once the stage it names as its
    prerequisite was seen (a later stage cannot come first; requests are not sent before delivery), and every
    round runs each due probe until all have held."""
    seen: dict[str, float] = {}
    deadline = start + ITERATION_TIMEOUT_S
    while True:
        for stage, (after, probe) in probes.items():
            if stage not in seen and (after is None or after in seen) and probe():
                seen[stage] = time.monotonic() - start
        if len(seen) == len(probes):
            return seen
        if time.monotonic() >= deadline:
            missing = [stage for stage in probes if stage not in seen]
            raise TimeoutError(f"{what}: {', '.join(missing)} not observed within {ITERATION_TIMEOUT_S:.0f}s "
                               f"(seen {seen})")
        time.sleep(PROBE_INTERVAL_S)


def change_route(chain: Chain, client: httpx.Client, iteration: int, preferred: str) -> dict[str, Any]:
    """Swap the queue depths, force a reconcile and observe each stage of the change."""
    configmap_before, overlay_before = read_bytes(chain.configmap), read_bytes(chain.overlay)
    accepted_before = chain.accepted()
    start = time.monotonic()
    chain.set_preferred(client, preferred)
    write_atomic(chain.manifests / "network.yaml", yaml.safe_dump(network(f"route-{iteration}-{time.time_ns()}")))
    metric_set = time.monotonic() - start
    last: list[str] = []

    def moved() -> bool:
        try:
            last[:] = [chain.served(client)]
        except httpx.HTTPError as exc:
            last[:] = [f"{type(exc).__name__}: {exc}"]
        return last[0] == preferred

    probes: dict[str, tuple[str | None, Callable[[], bool]]] = {
        "rendered_s": (None, lambda: read_bytes(chain.configmap) != configmap_before),
        "delivered_s": ("rendered_s", lambda: read_bytes(chain.overlay) != overlay_before),
        "accepted_s": ("delivered_s", lambda: chain.accepted() > accepted_before),
        "served_s": ("delivered_s", moved),
    }
    try:
        seen = first_seen(probes, start, f"{chain.settings.name}: route change to {preferred}")
    except TimeoutError as exc:
        raise RuntimeError(f"{exc}; last answer {last[0] if last else None}\n{chain.logs()}") from exc
    return {"config": chain.settings.name, "iteration": iteration, "to": preferred, "metric_set_s": metric_set,
            **{stage: seen[stage] for stage in STAGES[1:]}}


def stats(values: Sequence[float]) -> dict[str, float]:
    """Median, nearest-rank p95 and max of a sample, with its size."""
    ordered = sorted(values)
    return {"n": len(ordered), "median_s": statistics.median(ordered), "p95_s": percentile(ordered, 95),
            "max_s": ordered[-1]}


#: Each step of the path as the time between two consecutive stages.
STEPS = (("metric set", None, "metric_set_s"), ("operator: reconcile + render", "metric_set_s", "rendered_s"),
         ("overlay-sync: watch + validate + write", "rendered_s", "delivered_s"),
         ("gateway: watch + debounce + swap", "delivered_s", "accepted_s"),
         ("first request on the new backend", "accepted_s", "served_s"))


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per configuration: each stage's time from the swap and each step's own duration."""
    out: dict[str, Any] = {}
    for config in dict.fromkeys(r["config"] for r in rows):
        mine = [r for r in rows if r["config"] == config]
        steps = {label: stats([r[end] - (r[begin] if begin else 0.0) for r in mine]) for label, begin, end in STEPS}
        out[config] = {"stages": {stage: stats([r[stage] for r in mine]) for stage in STAGES}, "steps": steps}
    return out


def run(quick: bool) -> BenchResult:
    count = QUICK_CHANGES if quick else FULL_CHANGES
    emit(f"route_change: operator -> overlay-sync -> gateway (reload debounce {RELOAD_DEBOUNCE_MS} ms), "
         f"{count} route changes per configuration alternating between {' and '.join(BACKENDS)}; "
         f"configurations interleaved: " + "; ".join(f"{c.name} = {c.description}" for c in CONFIGS))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agn-bench-route-") as tmp:
        supervisor = Supervisor(Path(tmp) / "logs")
        chains = [Chain(supervisor, Path(tmp) / c.name, c) for c in CONFIGS]
        try:
            with httpx.Client(timeout=5.0) as client:
                for chain in chains:
                    chain.start(client)
                for i in range(count):
                    preferred = BACKENDS[(i + 1) % len(BACKENDS)]
                    # alternate which configuration goes first, so neither always follows the other
                    for chain in chains if i % 2 == 0 else chains[::-1]:
                        rows.append(change_route(chain, client, i + 1, preferred))
        finally:
            supervisor.stop_all()
        busy = wait_ports_free([port for chain in chains for port in chain.ports()])
    return report(rows, count, busy)


def report(rows: list[dict[str, Any]], count: int, busy: list[tuple[str, int]]) -> BenchResult:
    names = [c.name for c in CONFIGS]
    summary = summarize(rows)
    emit(table(
        "route change, seconds from the metric swap to each stage (metric set = both backends changed and the "
        "annotation written; rendered = ConfigMap rewritten; delivered = overlay file replaced; accepted = the "
        "gateway's reload accepted; served = first request on the new backend)",
        ("config", "iteration", "to", "metric set", "rendered", "delivered", "accepted", "served"),
        [(r["config"], r["iteration"], r["to"], *(r[stage] for stage in STAGES)) for r in rows],
    ))
    emit(table(
        "route change by stage, seconds from the metric swap (n = route changes per configuration)",
        ("stage", *(f"{n} {col}" for n in names for col in ("n", "median", "p95"))),
        [(stage.removesuffix("_s"), *(v for n in names for v in (summary[n]["stages"][stage]["n"],
                                                                 summary[n]["stages"][stage]["median_s"],
                                                                 summary[n]["stages"][stage]["p95_s"])))
         for stage in STAGES],
    ))
    emit(table(
        "route change by step, seconds each step took (between consecutive stages)",
        ("step", *(f"{n} {col}" for n in names for col in ("n", "median", "p95"))),
        [(label, *(v for n in names for v in (summary[n]["steps"][label]["n"], summary[n]["steps"][label]["median_s"],
                                              summary[n]["steps"][label]["p95_s"])))
         for label, _, _ in STEPS],
    ))
    if busy:
        emit(f"note: ports still bound after stopping: {busy}")
    served = {n: summary[n]["stages"]["served_s"] for n in names}
    for name in names[1:]:
        emit(f"{name}: served p95 {served[name]['p95_s']:.3f} s, median {served[name]['median_s']:.3f} s "
             f"(n={served[name]['n']}); {CURRENT.name}: p95 {served[CURRENT.name]['p95_s']:.3f} s, median "
             f"{served[CURRENT.name]['median_s']:.3f} s (n={served[CURRENT.name]['n']})")
    if count < FULL_CHANGES:
        emit(f"note: {count} route changes per configuration (quick); a p95 needs at least {FULL_CHANGES}")
    target = Target(f"route change p95 of {count} (metric swap to first request on the new backend, "
                    f"{CURRENT.name} settings)", served[CURRENT.name]["p95_s"], "<=", TARGET_P95_S, "s")
    emit(target.line())
    data = {"iterations": rows, "summary": summary, "changes": count, "configs": {c.name: c.description
                                                                                  for c in CONFIGS},
            "reload_debounce_ms": RELOAD_DEBOUNCE_MS, "operator_poll_s": OPERATOR_POLL_S, "ports_released": not busy}
    return BenchResult("route_change", data, [target])
