"""Selection decision time of the reference gateway at 1, 64 and 1024 candidates of one capability.

Two paths are timed per call with perf_counter_ns on a snapshot built from a validated overlay:
`pick` is the decision itself (snapshot plan lookup plus the mode's pick); `filter` is the whole
intelligent_route request step (header strip, capability lookup, pick, metadata and metrics), with
the request context built outside the timed region. The timer's own cost is measured and reported,
not subtracted.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from multidict import CIMultiDict

from bench.core import BenchResult, Target, emit, summary_us, table, timer_overhead
from bench.overlays import KIND, MODEL, SCOPE, SHAPES, Shape, envelope_bytes
from reference.gateway.context import RequestContext
from reference.gateway.filters.intelligent_route import IntelligentRouteFilter
from reference.gateway.filters.intelligent_route_config import IntelligentRouteConfig
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.selection import make_rng, pick
from reference.gateway.snapshot import Snapshot
from reference.gateway.snapshot_store import build_snapshot

SIZES = (1, 64, 1024)
TARGET_SIZE = 1024
TARGET_P50_US = 20.0
PATH = "/v1/chat/completions"


def snapshot_for(count: int, shape: Shape) -> Snapshot:
    """Validate the shape's envelope into a snapshot and check its plan is the one to be measured."""
    snapshot = build_snapshot(envelope_bytes(count, shape), SCOPE.as_dict(), None)
    plan = snapshot.plan(KIND, MODEL)
    expected_mode = shape.mode if shape.grouped and shape.mode else "deterministic"
    expected_members = count if shape.grouped else 1
    if plan is None or plan.group is None or plan.mode != expected_mode or \
            len(plan.group.members) != expected_members:
        raise RuntimeError(f"snapshot for {shape.label}/{count} does not have the expected plan")
    return snapshot




def _time_pick(snapshot: Snapshot, iterations: int) -> list[int]:
    rng = make_rng("agn-bench")
    plan_of = snapshot.plan
    samples = [0] * iterations
    for i in range(iterations):
        t0 = perf_counter_ns()
        chosen = pick(plan_of(KIND, MODEL), rng)  # type: ignore[arg-type]
        samples[i] = perf_counter_ns() - t0
        if chosen is None:
            raise RuntimeError("selection returned no candidate")
    return samples


def _time_filter(snapshot: Snapshot, iterations: int) -> list[int]:
    metrics = GatewayMetrics()
    route = IntelligentRouteFilter(IntelligentRouteConfig(), snapshot, metrics, rng=make_rng("agn-bench"))
    samples = [0] * iterations
    try:
        for i in range(iterations):
            ctx = RequestContext("POST", PATH, PATH, CIMultiDict({"X-Model": MODEL}), b"")
            t0 = perf_counter_ns()
            rejection = route.on_request(ctx)
            samples[i] = perf_counter_ns() - t0
            if rejection is not None or ctx.cluster is None:
                raise RuntimeError(f"intelligent_route did not route: {rejection}")
    finally:
        route.close()
    return samples




def run(quick: bool) -> BenchResult:
    iterations = 5_000 if quick else 100_000
    warmup = 500 if quick else 5_000
    timers: dict[str, Callable[[Snapshot, int], list[int]]] = {"pick": _time_pick, "filter": _time_filter}
    emit(f"selection: {iterations:,} timed calls per case after {warmup:,} warm-up calls")
    overhead = summary_us(timer_overhead(iterations))
    rows: list[dict[str, Any]] = []
    for shape in SHAPES:
        for count in SIZES:
            snapshot = snapshot_for(count, shape)
            for path, timer in timers.items():
                timer(snapshot, warmup)
                gc.collect()
                stats = summary_us(timer(snapshot, iterations))
                rows.append({"path": path, "mode": shape.label, "candidates": count, **stats})
    by_case = {(r["mode"], r["candidates"], r["path"]): r for r in rows}
    emit(table(
        "selection decision time (microseconds per call; pick = plan lookup + pick, filter = whole "
        "intelligent_route step)",
        ("mode", "candidates", "pick p50", "pick p99", "pick mean",
         "filter p50", "filter p99", "filter mean"),
        [(shape.label, count, *(by_case[(shape.label, count, path)][stat]
                                for path in ("pick", "filter") for stat in ("p50_us", "p99_us", "mean_us")))
         for shape in SHAPES for count in SIZES],
    ))
    emit(f"timer overhead (two perf_counter_ns calls, included above): p50 {overhead['p50_us']:.3f} us, "
         f"p99 {overhead['p99_us']:.3f} us")
    worst = max((r for r in rows if r["path"] == "pick" and r["candidates"] == TARGET_SIZE),
                key=lambda r: r["p50_us"])
    target = Target(f"selection p50 at {TARGET_SIZE} candidates (slowest mode: {worst['mode']})",
                    worst["p50_us"], "<=", TARGET_P50_US, "us")
    emit(target.line())
    return BenchResult("selection", {"cases": rows, "timer_overhead": overhead}, [target])
