"""grid_site_route's decision per request at 3, 16 and 64 sites, in the reference gateway.

Two paths are timed per call with perf_counter_ns: `pick` is the pick itself over the model's ready sites
(two choices while every site has room; a capacity draw once every site is full), `filter` the whole
grid_site_route request step (model header, snapshot lookup, prefix keys of a short prompt, pick, headers,
metadata and counters), with the request context built outside the timed region. The sites' load comes
from relayed EPP series fed through the runtime's own poll handler, as a peer's answer would be. The
timer's own cost is measured and reported, not subtracted.
"""

from __future__ import annotations

import gc
import json
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from multidict import CIMultiDict

from bench.core import BenchResult, Target, emit, summary_us, table, timer_overhead
from reference.gateway.context import RequestContext
from reference.gateway.filters.grid_site_route import GridSiteRouteFilter
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.site_route import pick
from reference.gateway.site_route.availability import SiteView
from reference.gateway.site_route.runtime import SiteRouteRuntime
from reference.gateway.site_route.serving_config import load_serving
from reference.gateway.site_route.settings import GridSiteRouteConfig

SITES = (3, 16, 64)
TARGET_SITES = 64
TARGET_P50_US = 50.0
MODEL = "bench-model"
PATH = "/v1/chat/completions"
#: Each site's published load while it has room (3 running of the floor ceiling 8) and when it is full.
ROOM = {"running": 3.0, "waiting": 0.0}
FULL = {"running": 8.0, "waiting": 2.0}


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _serving(count: int) -> dict[str, Any]:
    peer = {"server_name": "bench.signals", "interval_ms": 500, "grid_ca_path": "ca.pem",
            "client_cert_path": "client.pem", "client_key_path": "client.key"}
    sites = [f"site-{i:02d}" for i in range(count)]
    return {"local_site": sites[0], "window_secs": 60, "load_window_ms": 60_000,
            "candidates": [{"kind": "inference_model", "name": MODEL, "site": s, "cluster": f"{s}-pool"}
                           for s in sites],
            "peers": [{"site": s, "addr": f"127.0.0.1:{20000 + i}", **peer} for i, s in enumerate(sites)]}


def _rig(count: int, load: dict[str, float], workdir: Path) -> GridSiteRouteFilter:
    """A filter over `count` sites that each published `load` (polls fed to the runtime, no network)."""
    path = workdir / f"serving-{count}.json"
    path.write_text(json.dumps(_serving(count)))
    serving = load_serving(path)
    clock = _Clock()
    config = GridSiteRouteConfig()
    declared = frozenset(c.cluster for c in serving.candidates)
    runtime = SiteRouteRuntime(config, path, path.read_bytes(), serving, declared, GatewayMetrics().site_route(),
                               clock=clock)
    for _round in range(2):
        clock.now += 0.5
        stamp = int(clock.now * 1000)
        for peer in serving.peers:
            labels = f'grid_site="{peer.site}",grid_provider="{peer.site}-pool"'
            text = "".join(f"{name}{{{labels}}} {value} {stamp}\n" for name, value in (
                ("llm_d_epp_average_running_requests", load["running"]),
                ("llm_d_epp_average_queue_size", load["waiting"]), ("llm_d_epp_ready_endpoints", 1.0)))
            runtime.on_poll(peer, "ok", text, None)
    ready = runtime.snapshot.models[MODEL].ready
    if len(ready) != count or not all(v.measured for v in ready):
        raise RuntimeError(f"{count} sites: {len(ready)} ready, not every one measured")
    return GridSiteRouteFilter(config, runtime, random.Random(7))




def _time_pick(route: GridSiteRouteFilter, iterations: int) -> list[int]:
    sites: tuple[SiteView, ...] = tuple(route.runtime.snapshot.models[MODEL].ready)
    rng = random.Random(11)
    choose = pick.choose
    samples = [0] * iterations
    for i in range(iterations):
        t0 = perf_counter_ns()
        choose(sites, rng)
        samples[i] = perf_counter_ns() - t0
    return samples


def _time_filter(route: GridSiteRouteFilter, iterations: int) -> list[int]:
    samples = [0] * iterations
    for i in range(iterations):
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": f"question {i}"}]}).encode()
        ctx = RequestContext("POST", PATH, PATH, CIMultiDict({"X-Model": MODEL}), body)
        t0 = perf_counter_ns()
        answer = route.on_request(ctx)
        samples[i] = perf_counter_ns() - t0
        if answer is not None or ctx.cluster is None:
            raise RuntimeError(f"grid_site_route did not route: {answer}")
    return samples




def run(quick: bool) -> BenchResult:
    iterations = 2_000 if quick else 50_000
    warmup = 200 if quick else 2_000
    timers: dict[str, Callable[[GridSiteRouteFilter, int], list[int]]] = {"pick": _time_pick, "filter": _time_filter}
    emit(f"site_pick: {iterations:,} timed calls per case after {warmup:,} warm-up calls")
    overhead = summary_us(timer_overhead(iterations))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agn-bench-site-pick-") as tmp:
        for state, load in (("room", ROOM), ("full", FULL)):
            for count in SITES:
                route = _rig(count, load, Path(tmp))
                for path, timer in timers.items():
                    timer(route, warmup)
                    gc.collect()
                    rows.append({"path": path, "sites": count, "state": state, **summary_us(timer(route, iterations))})
    by_case = {(r["state"], r["sites"], r["path"]): r for r in rows}
    emit(table(
        "grid_site_route decision time (microseconds per call; pick = the pick over the ready sites, filter = "
        "whole request step; room = two choices, full = capacity draw)",
        ("sites", "state", "pick p50", "pick p99", "filter p50", "filter p99", "filter mean"),
        [(count, state, *(by_case[(state, count, path)][stat] for path, stat in
                          (("pick", "p50_us"), ("pick", "p99_us"), ("filter", "p50_us"), ("filter", "p99_us"),
                           ("filter", "mean_us"))))
         for state in ("room", "full") for count in SITES]))
    emit(f"timer overhead (two perf_counter_ns calls, included above): p50 {overhead['p50_us']:.3f} us")
    worst = max((r for r in rows if r["path"] == "filter" and r["sites"] == TARGET_SITES), key=lambda r: r["p50_us"])
    target = Target(f"grid_site_route step p50 at {TARGET_SITES} sites ({worst['state']})", worst["p50_us"], "<=",
                    TARGET_P50_US, "us")
    emit(target.line())
    return BenchResult("site_pick", {"cases": rows, "timer_overhead": overhead}, [target])
