"""``python -m bench``: run the benchmarks, print their tables and a summary, write the JSON results.

Exit status: 0 when every selected benchmark ran (whatever its targets say: a MISS is a finding,
not a failure), 1 when a benchmark could not run, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    conformance_wall,
    gossip,
    kind_wall,
    mesh,
    operator_render,
    provider_hop,
    proxy,
    route_change,
    selection,
    site_pick,
    validation,
)
from bench.core import BenchResult, emit, fmt, table

BENCHMARKS: dict[str, Callable[[bool], BenchResult]] = {
    "selection": selection.run,
    "site_pick": site_pick.run,
    "validation": validation.run,
    "proxy": proxy.run,
    "provider_hop": provider_hop.run,
    "operator_render": operator_render.run,
    "route_change": route_change.run,
    "gossip": gossip.run,
    "mesh": mesh.run,
    "conformance_wall": conformance_wall.run,
    "kind_wall": kind_wall.run,
}
#: Run only when named with --only (kind clusters for the better part of an hour).
OPT_IN = frozenset({"kind_wall"})
DEFAULT_OUT = "bench-results.json"
SCHEMA = "agn-bench/1"


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown benchmark {unknown[0] if unknown else text!r}; "
                                         f"choose from {', '.join(BENCHMARKS)}")
    return names


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="reduced iterations and windows (a few seconds); skips conformance_wall")
    parser.add_argument("--only", action="append", type=_names, default=None, metavar="NAME",
                        help=f"run only these benchmarks (repeat or comma-separate): {', '.join(BENCHMARKS)}")
    parser.add_argument("--out", type=Path, default=Path(DEFAULT_OUT),
                        help=f"where to write the JSON results (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    args.selected = [n for n in BENCHMARKS if (args.only is None and n not in OPT_IN)
                     or any(n in group for group in args.only or [])]
    return args


def _machine() -> dict[str, Any]:
    try:
        load = [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        load = []
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "loadavg_at_start": load}


def _summary(results: dict[str, BenchResult], errors: dict[str, str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, result in results.items():
        if result.skipped:
            rows.append({"benchmark": name, "metric": "-", "status": f"SKIPPED ({result.skipped})"})
        for target in result.targets:
            rows.append({"benchmark": name, **target.as_dict()})
    for name, message in errors.items():
        rows.append({"benchmark": name, "metric": "-", "status": f"ERROR ({message})"})
    return rows


def _print_summary(rows: list[dict[str, Any]], elapsed: float, out: Path) -> None:
    emit()
    emit(table(
        "summary",
        ("benchmark", "metric", "value", "target", "status"),
        [(r["benchmark"], r["metric"],
          f"{fmt(r['value'])} {r['unit']}" if "value" in r else "-",
          f"{r['op']} {fmt(r['limit'])} {r['unit']}" if "limit" in r else "-",
          r["status"]) for r in rows],
    ))
    emit(f"total {elapsed:.1f} s; results written to {out}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    machine = _machine()
    results: dict[str, BenchResult] = {}
    errors: dict[str, str] = {}
    for name in args.selected:
        emit(f"\n=== {name} ===")
        try:
            results[name] = BENCHMARKS[name](args.quick)
        except Exception as exc:  # one broken benchmark must not hide the others' figures
            traceback.print_exc()
            errors[name] = " ".join(str(exc).split())[:300] or type(exc).__name__
    elapsed = time.perf_counter() - started
    rows = _summary(results, errors)
    doc = {
        "schema": SCHEMA,
        "started_at": stamp,
        "duration_s": elapsed,
        "quick": args.quick,
        "machine": machine,
        "benchmarks": {name: result.as_dict() for name, result in results.items()}
        | {name: {"error": message} for name, message in errors.items()},
        "summary": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    _print_summary(rows, elapsed, args.out)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
