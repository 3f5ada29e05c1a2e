"""SWIM gossip in the pure membership core: bytes per second per member, and failure-detection time.

Runs the reference SWIM members on the deterministic in-memory network with a fake clock (the
injected transport and clock), so minutes of protocol time take milliseconds and the figures do not
depend on this machine's load. Reports steady-state sent bytes per second per member at 3 and 20
members, and the time from a member crashing until every other member holds it dead, against the
bound the configured timing gives (memberlist's local profile).
"""

from __future__ import annotations

import statistics
from typing import Any

from bench.core import BenchResult, Target, emit, table
from reference.operator.mesh.sim import Simulation
from reference.operator.mesh.swim import ALIVE, DEAD, LOCAL, failure_detection_bound

SIZES = (3, 20)
STEADY_S = 120.0
JOIN_TIMEOUT_S = 120.0


def _joined(sim: Simulation, size: int) -> bool:
    return all(sum(1 for m in node.members() if m.status == ALIVE) == size - 1 for node in sim.running())


def _one(size: int, seed: int) -> dict[str, Any]:
    sim = Simulation(LOCAL, seed=seed)
    for index in range(size):
        sim.add(f"m{index}", seeds=[f"m{index - 1}"] if index else [])
    if not sim.run_until(lambda: _joined(sim, size), JOIN_TIMEOUT_S):
        raise RuntimeError(f"{size} simulated members did not converge within {JOIN_TIMEOUT_S:.0f}s")
    before = {node.name: node.stats.sent_bytes for node in sim.running()}
    sim.run_for(STEADY_S)
    rates = [(node.stats.sent_bytes - before[node.name]) / STEADY_S for node in sim.running()]
    victim = f"m{size - 1}"
    sim.stop(victim)
    stopped = sim.now
    others = sim.running()
    def all_dead() -> bool:
        views = [node.member(victim) for node in others]
        return all(view is not None and view.status == DEAD for view in views)

    if not sim.run_until(all_dead, 10 * failure_detection_bound(LOCAL, size)):
        raise RuntimeError(f"member {victim} was never declared dead by all {size - 1} others")
    return {"members": size, "seed": seed, "bytes_per_s_mean": statistics.fmean(rates),
            "bytes_per_s_max": max(rates), "detection_s": sim.now - stopped,
            "bound_s": failure_detection_bound(LOCAL, size)}


def run(quick: bool) -> BenchResult:
    seeds = range(2 if quick else 10)
    rows = [_one(size, seed) for size in SIZES for seed in seeds]
    summary: list[dict[str, Any]] = []
    for size in SIZES:
        mine = [r for r in rows if r["members"] == size]
        summary.append({
            "members": size, "runs": len(mine),
            "bytes_per_s_mean": statistics.fmean(r["bytes_per_s_mean"] for r in mine),
            "bytes_per_s_max": max(r["bytes_per_s_max"] for r in mine),
            "detection_s_median": statistics.median(r["detection_s"] for r in mine),
            "detection_s_max": max(r["detection_s"] for r in mine),
            "bound_s": mine[0]["bound_s"],
        })
    emit(table(
        f"SWIM gossip in the simulated core (memberlist local timing; {STEADY_S:.0f}s steady state per run)",
        ("members", "runs", "bytes/s per member (mean)", "bytes/s (max member)", "detection median s",
         "detection max s", "bound s"),
        [(s["members"], s["runs"], round(s["bytes_per_s_mean"]), round(s["bytes_per_s_max"]),
          round(s["detection_s_median"], 2), round(s["detection_s_max"], 2), round(s["bound_s"], 2))
         for s in summary],
    ))
    targets = [Target(f"failure detection at {s['members']} members (max over runs)", s["detection_s_max"], "<=",
                      s["bound_s"], "s") for s in summary]
    return BenchResult("gossip", {"runs": rows, "summary": summary}, targets)
