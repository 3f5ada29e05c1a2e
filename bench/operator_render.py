"""Render time of the operator's pure core at 10, 100 and 1000 InferenceProviders, and DirSource load time.

One timed call is `render(Resources.from_objects(objects), samples, [], FixedClock())`: the resource dicts
converted, admission evaluated from one queueDepth sample per provider, candidates built and ordered,
the envelope digested and the ConfigMap built, exactly what a reconcile does after its scrape. Providers
are spread over three GridSites (the gateway's local site, another zone of its region, another region)
and three models, so three locality tiers, a spread of scores and both admission states are ordered. Both
routing policies are timed. Loading the same resources from YAML files through DirSource (parse,
schema check, defaults) is timed separately: the loop pays it whenever a resource file changes.
"""

from __future__ import annotations

import functools
import gc
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from time import perf_counter_ns, process_time_ns
from typing import Any

import yaml

from bench.core import BenchResult, Target, emit, percentile, table
from harness import resources
from reference.operator.core import FixedClock, MetricSample, Resources, render
from reference.operator.sources import DirSource, resource_files
from reference.operator.triggers import fingerprint

SIZES = (10, 100, 1000)
TARGET_SIZE = 1000
TARGET_MEDIAN_MS = 200.0
QUICK_DIR_SIZE = 100
ROUTING_POLICIES = ("geographyFirst", "scoreFirst")
NETWORK = "bench-net"
GATEWAY = "bench-gateway"
LOCAL_SITE = "site-local"
#: (name, region, zone): the local site, another zone of its region, and another region.
SITES = ((LOCAL_SITE, "region-1", "zone-1a"), ("site-near", "region-1", "zone-1b"), ("site-far", "region-2", "zone-2a"))
MODELS = ("bench-model-a", "bench-model-b", "bench-model-c")
QUEUE_CAPACITY = 10
EXPECTED_TIERS = {"same_site", "same_region", "cross_region"}


def objects(count: int, routing: str) -> list[dict[str, Any]]:
    """A network, its three sites and `count` queueDepth-scored providers, in the shape the CRDs define."""
    out = [resources.grid_network(NETWORK, [resources.gateway_ref(LOCAL_SITE, GATEWAY)], routing=routing,
                                  scoring="queueDepth", selection="deterministic")]
    out += [resources.grid_site(name, NETWORK, region=region, zone=zone) for name, region, zone in SITES]
    for i in range(count):
        name = provider_name(i)
        out.append(resources.inference_provider(
            name, NETWORK, site=SITES[i % len(SITES)][0], cluster=f"cluster-{i:04d}",
            models=(MODELS[(i // len(SITES)) % len(MODELS)],),
            metrics=resources.metrics_config("http://127.0.0.1:9", name, queue_capacity=QUEUE_CAPACITY,
                                             signals=("queueDepth", "healthy"))))
    return out


def provider_name(index: int) -> str:
    return f"provider-{index:04d}"


def samples(count: int) -> list[MetricSample]:
    """One sample per provider; depths 0..9 of capacity 10, so 9 lands in existing_only (>= 0.85)."""
    return [MetricSample(provider=provider_name(i), revision=1, queue_depth=float((i * 7) % QUEUE_CAPACITY))
            for i in range(count)]


def render_once(objs: list[dict[str, Any]], metric_samples: list[MetricSample]) -> int:
    """The measured call; returns the candidate count so the caller can check the work was done."""
    rendered = render(Resources.from_objects(objs), metric_samples, [], FixedClock())
    return sum(r.candidate_count for r in rendered)


def check_render(objs: list[dict[str, Any]], metric_samples: list[MetricSample], count: int) -> None:
    """Every provider becomes a candidate, over every locality tier and both admission states."""
    rendered = render(Resources.from_objects(objs), metric_samples, [], FixedClock())
    candidates = [c for r in rendered for c in r.envelope["overlay"]["candidates"]]
    tiers = {c["selection_tier"] for c in candidates}
    states = {c["admission_state"] for c in candidates}
    if len(candidates) != count or (count >= 10 and (tiers != EXPECTED_TIERS or len(states) != 2)):
        raise RuntimeError(f"render of {count} providers gave {len(candidates)} candidates, tiers {sorted(tiers)}, "
                           f"admission states {sorted(states)}")


def timed(call: Callable[[], Any], runs: int) -> tuple[list[float], list[float]]:
    """Wall and process-CPU milliseconds per call, each sorted.

    On a shared machine the wall figure includes time other processes held the cores; the CPU figure
    shows what the call itself cost, so the two side by side tell contention from slowness.
    """
    wall, cpu = [], []
    for _ in range(runs):
        c0, t0 = process_time_ns(), perf_counter_ns()
        call()
        wall.append((perf_counter_ns() - t0) / 1e6)
        cpu.append((process_time_ns() - c0) / 1e6)
    return sorted(wall), sorted(cpu)


def stats(timings: tuple[list[float], list[float]]) -> dict[str, float]:
    wall, cpu = timings
    return {"median_ms": statistics.median(wall), "p95_ms": percentile(wall, 95), "min_ms": wall[0],
            "max_ms": wall[-1], "cpu_median_ms": statistics.median(cpu), "runs": len(wall)}


def runs_for(count: int, quick: bool) -> int:
    if quick:
        return {10: 20, 100: 10}.get(count, 3)
    return {10: 300, 100: 100}.get(count, 30)


def render_cases(quick: bool) -> list[dict[str, Any]]:
    rows = []
    for routing in ROUTING_POLICIES:
        for count in SIZES:
            objs, metric_samples = objects(count, routing), samples(count)
            check_render(objs, metric_samples, count)
            gc.collect()
            timings = timed(functools.partial(render_once, objs, metric_samples), runs_for(count, quick))
            rows.append({"routing": routing, "providers": count, **stats(timings)})
    return rows


def write_manifests(directory: Path, objs: list[dict[str, Any]]) -> None:
    """One YAML file per resource, as a GitOps checkout would hold them."""
    for obj in objs:
        (directory / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml").write_text(yaml.safe_dump(obj))


def dir_source_case(quick: bool) -> dict[str, Any]:
    """DirSource.load of the providers (plus network and sites), and the fingerprint the loop takes every poll.

    --quick loads QUICK_DIR_SIZE providers: a 1000-file load takes seconds.
    """
    objs = objects(QUICK_DIR_SIZE if quick else TARGET_SIZE, "scoreFirst")
    runs = 2 if quick else 5
    with tempfile.TemporaryDirectory(prefix="agn-bench-dirsource-") as tmp:
        directory = Path(tmp)
        write_manifests(directory, objs)
        source = DirSource(directory)
        loaded = source.load()  # warm-up; also loads the CRD schemas once
        if loaded.issues or len(loaded.objects) != len(objs):
            raise RuntimeError(f"DirSource loaded {len(loaded.objects)} of {len(objs)} resources; "
                               f"first issue: {loaded.issues[0] if loaded.issues else None}")
        gc.collect()
        load = timed(source.load, runs)
        prints = timed(lambda: fingerprint(resource_files(directory)), runs * 4)
    return {"providers": len(objs) - 1 - len(SITES), "resources": len(objs), "files": len(objs),
            "load": stats(load), "fingerprint": stats(prints)}


def run(quick: bool) -> BenchResult:
    emit(f"operator_render: {', '.join(map(str, SIZES))} providers over {len(SITES)} sites and {len(MODELS)} "
         f"models, queueDepth scoring, {' and '.join(ROUTING_POLICIES)}")
    rows = render_cases(quick)
    emit(table(
        "operator core render: Resources.from_objects + render (milliseconds per call; cpu = this process's CPU time)",
        ("routing", "providers", "median ms", "p95 ms", "min ms", "max ms", "cpu median ms", "runs"),
        [(r["routing"], r["providers"], r["median_ms"], r["p95_ms"], r["min_ms"], r["max_ms"], r["cpu_median_ms"],
          r["runs"]) for r in rows],
    ))
    loading = dir_source_case(quick)
    emit(table(
        f"DirSource with {loading['resources']:,} resources in {loading['files']:,} YAML files "
        "(milliseconds; informational)",
        ("step", "median ms", "p95 ms", "min ms", "max ms", "cpu median ms", "runs"),
        [(step, s["median_ms"], s["p95_ms"], s["min_ms"], s["max_ms"], s["cpu_median_ms"], s["runs"])
         for step, s in (("load", loading["load"]), ("fingerprint", loading["fingerprint"]))],
    ))
    worst = max((r for r in rows if r["providers"] == TARGET_SIZE), key=lambda r: r["median_ms"])
    target = Target(f"render median at {TARGET_SIZE} providers (slowest policy: {worst['routing']})",
                    worst["median_ms"], "<=", TARGET_MEDIAN_MS, "ms")
    emit(target.line())
    data = {"sites": [list(s) for s in SITES], "models": list(MODELS), "cases": rows, "dir_source": loading}
    return BenchResult("operator_render", data, [target])
