"""Mesh timings with three reference operators gossiping over UDP on loopback (the mesh suite's topology).

* new provider routable: with site-c Active at site-a, a new InferenceProvider is written into site-c's
  resource directory; measured until site-a's rendered ConfigMap lists its model (site-c's operator
  renders and announces it, the announcement reaches site-a, site-a re-renders).
* failure detection: site-c's operator is SIGKILLed; measured until site-a's mesh status holds it dead and
  until site-a's overlay marks its candidate `fresh: false`. Each sample uses a mesh of its own.

Timing is the harness's (harness.mesh_oracle.SwimTiming): the detection target is its bound.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.core import BenchResult, Target, emit, percentile, table
from harness import mesh_oracle as oracle
from harness.impl import load_impl
from harness.mesh import Mesh, MeshScenario
from harness.waiting import poll_until

MEMBERS = 3
TIMEOUT_S = 60.0
#: Routable within two probe intervals of gossip plus a render on each side.
ROUTABLE_TARGET_S = 3.0


def _routable(scenario: MeshScenario, index: int) -> float:
    model = scenario.model(f"new-{index}")
    started = time.perf_counter()
    scenario.provider("site-c", f"new-{index}", [model])
    scenario.wait_envelope("site-a", lambda e: bool(oracle.from_site(e, model, "site-c")),
                           what=f"site-c's new provider {model}", timeout=TIMEOUT_S)
    return time.perf_counter() - started


def _live_world(mesh: Mesh, name: str, ttl: int = 3600) -> tuple[MeshScenario, str]:
    scenario = MeshScenario(mesh, name)
    scenario.network(ttl=ttl)
    model = scenario.model("c")
    scenario.trust("site-a", "site-c")
    scenario.provider("site-c", "pc", [model])
    scenario.wait_envelope("site-a", lambda e: [r.get("fresh") for r in oracle.from_site(e, model, "site-c")] == [True],
                           what="site-c's fresh candidate", timeout=TIMEOUT_S)
    return scenario, model


def _detection(workdir: Path, sample: int) -> tuple[float, float]:
    mesh = Mesh.start(load_impl("reference"), workdir / f"detect-{sample}")
    try:
        scenario, model = _live_world(mesh, f"bench-detect-{sample}")
        a = mesh.site("site-a")
        started = time.perf_counter()
        mesh.kill("site-c")
        poll_until(lambda: oracle.member_status(a.mesh_status(), "site-c"), lambda s: s == "dead",
                   timeout=TIMEOUT_S, what="site-a to hold site-c dead", interval=0.01, max_interval=0.01)
        dead = time.perf_counter() - started
        poll_until(lambda: [r.get("fresh") for r in oracle.from_site(scenario.envelope("site-a"), model, "site-c")],
                   lambda f: f == [False], timeout=TIMEOUT_S, what="a degraded candidate", interval=0.01,
                   max_interval=0.01)
        return dead, time.perf_counter() - started
    finally:
        mesh.close()


def run(quick: bool) -> BenchResult:
    rounds, samples = (3, 1) if quick else (10, 3)
    timing = oracle.SwimTiming()
    bound = timing.detection_bound(MEMBERS)
    with tempfile.TemporaryDirectory(prefix="agn-bench-mesh-") as tmp:
        workdir = Path(tmp)
        mesh = Mesh.start(load_impl("reference"), workdir / "routable")
        try:
            scenario, _model = _live_world(mesh, "bench-routable")
            routable = sorted(_routable(scenario, i) for i in range(rounds))
        finally:
            mesh.close()
        detections = [_detection(workdir, i) for i in range(samples)]
    dead = sorted(d for d, _ in detections)
    degraded = sorted(g for _, g in detections)
    emit(table(
        f"mesh timings, 3 sites (probe interval {timing.probe_interval:g} s, suspicion mult {timing.suspicion_mult})",
        ("measure", "n", "median s", "p95 s", "max s"),
        [("new provider at site-c routable at site-a", len(routable), statistics.median(routable),
          percentile(routable, 95), routable[-1]),
         ("crash -> site-a holds site-c dead", len(dead), statistics.median(dead), percentile(dead, 95), dead[-1]),
         ("crash -> candidate fresh: false at site-a", len(degraded), statistics.median(degraded),
          percentile(degraded, 95), degraded[-1])],
    ))
    targets = [
        Target("new provider routable, median", statistics.median(routable), "<=", ROUTABLE_TARGET_S, "s"),
        Target("failure detection, max", dead[-1], "<=", bound, "s"),
    ]
    for target in targets:
        emit(target.line())
    return BenchResult("mesh", {"routable_s": routable, "dead_s": dead, "degraded_s": degraded,
                                "detection_bound_s": bound}, targets)
