"""Wall time of whole conformance runs: the consumer profile against the reference gateway, the producer
profile against the reference operator, the mesh profile against three reference operators gossiping.

`agn-conformance run --profile <profile> --report <tmp>` runs as a subprocess (the installed console
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

#: Wall-time target per profile: the consumer suite judges a gateway, the producer suite an operator, the
#: mesh suite three operators (it starts a mesh of its own for each test that crashes or cuts a site).
TARGETS_S = {"consumer": 60.0, "producer": 90.0, "mesh": 120.0}
TIMEOUT_S = 900.0


def command(report: Path, profile: str = "consumer") -> list[str]:
    script = shutil.which("agn-conformance")
    base = [script] if script else [sys.executable, "-m", "harness.cli"]
    return [*base, "run", "--profile", profile, "--report", str(report)]


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


def run_profile(profile: str, workdir: Path) -> dict[str, Any]:
    """One `agn-conformance run --profile <profile>`: wall time, exit code (None on timeout), outcomes."""
    report = workdir / f"{profile}-report.yaml"
    argv = command(report, profile)
    emit(f"conformance_wall: {' '.join(argv[-5:])} (timeout {TIMEOUT_S:.0f} s)")
    supervisor = Supervisor(workdir / f"{profile}-logs")
    try:
        started = time.perf_counter()
        proc = supervisor.start(f"agn-conformance-{profile}", argv, env=child_env(), cwd=ROOT)
        code = proc.wait(TIMEOUT_S)
        wall = time.perf_counter() - started
        tail = proc.log_tail(15)
    finally:
        supervisor.stop_all()
    if code is None:
        emit(f"note: the {profile} run was still running after {TIMEOUT_S:.0f} s and was stopped:\n{tail}")
    elif code != 0:
        emit(f"note: the {profile} conformance run exited {code}; its output ends with:\n{tail}")
    return {"profile": profile, "wall_s": wall, "exit_code": code, "outcomes": outcomes(report),
            "command": argv[:-1] + [f"<tmp>/{report.name}"]}


def run(quick: bool) -> BenchResult:
    """Each profile runs on its own, so each wall time is judged against that profile's target."""
    if quick:
        emit("conformance_wall: skipped in --quick")
        return BenchResult("conformance_wall", skipped="not run in --quick")
    with tempfile.TemporaryDirectory(prefix="agn-bench-conformance-") as tmp:
        runs = [run_profile(profile, Path(tmp)) for profile in TARGETS_S]
    emit(table(
        "conformance runs (exit code '-' = stopped at the timeout)",
        ("profile", "wall s", "exit code", *OUTCOME_COLUMNS),
        [(r["profile"], r["wall_s"], "-" if r["exit_code"] is None else r["exit_code"],
          *(r["outcomes"].get(column, "-") for column in OUTCOME_COLUMNS)) for r in runs],
    ))
    targets = [Target(f"{r['profile']} conformance run wall time", r["wall_s"], "<=", TARGETS_S[r["profile"]], "s")
               for r in runs]
    for target in targets:
        emit(target.line())
    return BenchResult("conformance_wall", {"runs": runs}, targets)
