"""Shared pieces of the benchmarks: percentiles, target checks, tables and the result record."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter_ns
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def child_env() -> dict[str, str]:
    """The environment for child processes: the checkout first on PYTHONPATH, unbuffered output."""
    env = dict(os.environ)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(ROOT) if not existing else os.pathsep.join([str(ROOT), existing])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted, non-empty sequence."""
    if not sorted_values:
        raise ValueError("percentile of an empty sample")
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


@dataclass(frozen=True)
class Target:
    """A speed target: `value` compared with `limit` in the direction `op` ("<=" or ">=")."""

    metric: str
    value: float
    op: str
    limit: float
    unit: str

    @property
    def passed(self) -> bool:
        return self.value <= self.limit if self.op == "<=" else self.value >= self.limit

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "MISS"

    def line(self) -> str:
        limit = f"{_num(self.limit)} {self.unit}"
        return f"target {self.metric} {self.op} {limit}: {_num(self.value)} {self.unit}  {self.status}"

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "value": self.value, "op": self.op, "limit": self.limit,
                "unit": self.unit, "status": self.status}


@dataclass
class BenchResult:
    """What one benchmark measured: its JSON section, its printed tables and its targets."""

    name: str
    data: dict[str, Any] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"skipped": self.skipped} if self.skipped else dict(self.data)
        out["targets"] = [t.as_dict() for t in self.targets]
        return out


def _num(value: float) -> str:
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"


def fmt(value: object) -> str:
    """A table cell: numbers rounded for reading, everything else as text."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return _num(value)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table; numeric columns are right-aligned."""
    cells = [[fmt(c) for c in row] for row in rows]
    numeric = [all(isinstance(row[i], int | float) and not isinstance(row[i], bool) for row in rows)
               for i in range(len(headers))]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]

    def line(row: Sequence[str]) -> str:
        pairs = enumerate(zip(row, widths, strict=True))
        parts = [c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in pairs]
        return "  ".join(parts).rstrip()

    out = [title, line(list(headers)), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def emit(text: str = "") -> None:
    """Print progress and tables as they are produced (a long benchmark shows where it is)."""
    print(text, flush=True)
    sys.stdout.flush()


def timer_overhead(iterations: int) -> list[int]:
    """What timing nothing costs: two perf_counter_ns calls, `iterations` times (reported, not subtracted)."""
    samples = [0] * iterations
    for i in range(iterations):
        t0 = perf_counter_ns()
        samples[i] = perf_counter_ns() - t0
    return samples


def summary_us(samples: list[int]) -> dict[str, float]:
    """p50, p99 and mean in microseconds of per-call nanosecond samples, and how many there were."""
    ordered = sorted(samples)
    return {"p50_us": percentile(ordered, 50) / 1000, "p99_us": percentile(ordered, 99) / 1000,
            "mean_us": sum(ordered) / len(ordered) / 1000, "iterations": len(ordered)}
