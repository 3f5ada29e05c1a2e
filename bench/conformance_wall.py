"""Wall time of a whole consumer-profile conformance run against the reference gateway.

`agn-conformance run --profile consumer --report <tmp>` runs as a subprocess (the installed console
script, or the same CLI through ``python -m harness.cli`` in a checkout), in its own process group so
everything it started is stopped with it if it overruns.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from bench.core import ROOT, BenchResult, Target, child_env, emit, table
from harness.process import Supervisor

TARGET_S = 60.0
TIMEOUT_S = 900.0


def command(report: Path) -> list[str]:
    script = shutil.which("agn-conformance")
    base = [script] if script else [sys.executable, "-m", "harness.cli"]
    return [*base, "run", "--profile", "consumer", "--report", str(report)]


OUTCOME_COLUMNS = tuple(f"{level} {stat}" for level in ("core", "extended")
                        for stat in ("passed", "failed", "skipped"))


def outcomes(report: Path) -> dict[str, int]:
    """Passed/failed/skipped per level, summed over the report's profiles (empty when unreadable)."""
    try:
        doc: Any = yaml.safe_load(report.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    counts: Counter[str] = Counter()
    profiles = doc.get("profiles") if isinstance(doc, dict) else None
    for profile in profiles if isinstance(profiles, list) else []:
        for level in ("core", "extended"):
            section = profile.get(level) if isinstance(profile, dict) else None
            stats = section.get("statistics") if isinstance(section, dict) else None
            for stat, value in (stats or {}).items():
                if isinstance(value, int):
                    counts[f"{level} {stat}"] += value
    return {key: counts[key] for key in OUTCOME_COLUMNS} if counts else {}


def run(quick: bool) -> BenchResult:
    if quick:
        emit("conformance_wall: skipped in --quick")
        return BenchResult("conformance_wall", skipped="not run in --quick")
    with tempfile.TemporaryDirectory(prefix="agn-bench-conformance-") as tmp:
        report = Path(tmp) / "conformance-report.yaml"
        argv = command(report)
        emit(f"conformance_wall: {' '.join(argv[-5:])} (timeout {TIMEOUT_S:.0f} s)")
        supervisor = Supervisor(Path(tmp) / "logs")
        try:
            started = time.perf_counter()
            proc = supervisor.start("agn-conformance", argv, env=child_env(), cwd=ROOT)
            code = proc.wait(TIMEOUT_S)
            wall = time.perf_counter() - started
            tail = proc.log_tail(15)
        finally:
            supervisor.stop_all()
        counts = outcomes(report)
    if code is None:
        raise RuntimeError(f"conformance run still running after {TIMEOUT_S:.0f} s:\n{tail}")
    emit(table(
        "consumer conformance run",
        ("wall s", "exit code", *counts),
        [(wall, code, *counts.values())],
    ))
    if code != 0:
        emit(f"note: the conformance run exited {code}; its output ends with:\n{tail}")
    target = Target("conformance run wall time", wall, "<=", TARGET_S, "s")
    emit(target.line())
    data = {"wall_s": wall, "exit_code": code, "outcomes": counts,
            "command": argv[:-1] + ["<tmp>/conformance-report.yaml"]}
    return BenchResult("conformance_wall", data, [target])
