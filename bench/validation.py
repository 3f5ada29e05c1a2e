"""Time to validate a 1024-candidate envelope: bytes through parse_overlay, as a reload does.

The envelope uses a weightedRandom group with stable ids and weights on every candidate, so every
per-candidate check runs. `snapshot` adds the request-path preparation a gateway does after
validation (plans, cumulative weights, identity index).
"""

from __future__ import annotations

import gc
import statistics
from time import perf_counter_ns
from typing import Any

from bench.core import BenchResult, Target, emit, percentile, table
from bench.overlays import SCOPE, SHAPES, envelope_bytes
from reference.gateway.snapshot_store import build_snapshot
from reference.overlay import parse_overlay

CANDIDATES = 1024
TARGET_MS = 100.0


def _runs(step: str, data: bytes, count: int) -> list[float]:
    scope = SCOPE.as_dict()
    out = []
    for _ in range(count):
        t0 = perf_counter_ns()
        if step == "parse_overlay":
            overlay = parse_overlay(data, scope)
            accepted = len(overlay.candidates)
        else:
            accepted = build_snapshot(data, scope, None).candidate_count
        out.append((perf_counter_ns() - t0) / 1e6)
        if accepted != CANDIDATES:
            raise RuntimeError(f"{step} accepted {accepted} candidates, expected {CANDIDATES}")
    return out


def run(quick: bool) -> BenchResult:
    count = 5 if quick else 30
    shape = next(s for s in SHAPES if s.label == "weightedRandom")
    data = envelope_bytes(CANDIDATES, shape)
    emit(f"validation: {CANDIDATES} candidates, {len(data):,} bytes, "
         f"{count} timed runs per step after 2 warm-up")
    rows: list[dict[str, Any]] = []
    for step in ("parse_overlay", "snapshot"):
        _runs(step, data, 2)
        gc.collect()
        ordered = sorted(_runs(step, data, count))
        rows.append({
            "step": step,
            "median_ms": statistics.median(ordered),
            "p99_ms": percentile(ordered, 99),
            "min_ms": ordered[0],
            "max_ms": ordered[-1],
            "runs": count,
        })
    emit(table(
        f"overlay validation of {CANDIDATES} candidates (milliseconds)",
        ("step", "median ms", "p99 ms", "min ms", "max ms", "runs"),
        [(r["step"], r["median_ms"], r["p99_ms"], r["min_ms"], r["max_ms"], r["runs"]) for r in rows],
    ))
    parse = rows[0]
    targets = [
        Target("parse_overlay median", parse["median_ms"], "<=", TARGET_MS, "ms"),
        Target("parse_overlay p99", parse["p99_ms"], "<=", TARGET_MS, "ms"),
    ]
    for target in targets:
        emit(target.line())
    return BenchResult("validation", {"candidates": CANDIDATES, "bytes": len(data), "steps": rows}, targets)
