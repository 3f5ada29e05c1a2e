"""Wall time of whole conformance runs against the reference, and where the seconds go.

Two runs as a user runs them (the default workers): the consumer profile alone, and the four profiles of
the default run; beside them, in the same bench run, the same two in one worker (`--workers 1`), so the
concurrency's saving is a ratio measured side by side, and the consumer profile once more with every
reference gateway started cold (a descriptor without the reference's `gateway.launcher`), so the warm
start's saving is a ratio measured side by side too. Each is `agn-conformance run --profile <profiles>
--report <tmp>` as a subprocess (the installed console script, or the same CLI through ``python -m harness.cli`` in a
checkout), in its own process group so everything it started is stopped with it if it overruns, with the
bench.phases plugin loaded: the breakdown by pytest phase, by harness activity (process start and
readiness, stopping, polling waits, traffic) and the slowest tests come from it.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from bench import phases
from bench.core import ROOT, BenchResult, Target, child_env, emit, table
from harness.impl import reference_document
from harness.process import Supervisor

#: Wall-time targets of the runs measured: the consumer profile alone, and the default four profiles.
TARGETS_S = {"consumer": 20.0, "consumer,producer,provider,mesh": 60.0}
TIMEOUT_S = 900.0
SLOWEST = 10


#: The label of the consumer run whose reference gateways start cold.
COLD = "consumer (gateways started cold)"


def command(report: Path, profile: str = "consumer", impl: Path | None = None,
            extra: tuple[str, ...] = ()) -> list[str]:
    script = shutil.which("agn-conformance")
    base = [script] if script else [sys.executable, "-m", "harness.cli"]
    chosen = ["--impl", str(impl)] if impl is not None else []
    return [*base, "run", "--profile", profile, "--report", str(report), *chosen, *extra]


def cold_descriptor(path: Path) -> Path:
    """The reference descriptor without its launcher: each gateway a fresh ``python -m reference.gateway``."""
    doc = reference_document()
    doc["implementation"]["project"] = "reference-gateway-cold-start"
    doc["gateway"].pop("launcher")
    doc["gateway"]["command"] = ["{python}", "-m", "reference.gateway", "-c", "{config}"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


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


def breakdown(doc: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """Seconds by pytest phase and by harness activity, and the slowest tests, from the phases plugin."""
    by_phase: Counter[str] = Counter()
    by_activity: Counter[str] = Counter()
    for test in doc.get("tests", []):
        by_phase.update(test["phases"])
        by_activity.update(test["activities"])
    session_s = float(doc.get("session_s", 0.0))
    by_phase["outside tests (collection, report)"] = max(0.0, session_s - sum(by_phase.values()))
    by_phase["before the session (interpreter, plugins)"] = max(0.0, wall_s - session_s)
    slowest = sorted(doc.get("tests", []), key=lambda t: t["total_s"], reverse=True)[:SLOWEST]
    by_profile: Counter[str] = Counter()
    for test in doc.get("tests", []):  # ids name the suite: .../suites/<profile>/test_x.py::name
        parts = test["id"].split("::", 1)[0].replace("\\", "/").split("/")
        by_profile[parts[parts.index("suites") + 1] if "suites" in parts[:-1] else "other"] += test["total_s"]
    return {"phases_s": dict(by_phase), "activities_s": dict(by_activity), "calls": doc.get("calls", {}),
            "profiles_s": dict(by_profile),
            "slowest": [{"id": t["id"], "total_s": t["total_s"], "activities": t["activities"]} for t in slowest]}


def _print_breakdown(run: dict[str, Any]) -> None:
    parts = run.get("breakdown")
    if not parts:
        return
    wall = run["wall_s"] or 1.0
    # with several workers the seconds are test-seconds over all of them: shares are of their sum
    phase_total = sum(parts["phases_s"].values()) or wall
    emit(table(f"{run['profile']}: seconds by pytest phase (wall {wall:.0f} s)", ("phase", "s", "share"),
               [(name, value, f"{100 * value / phase_total:.0f}%") for name, value in
                sorted(parts["phases_s"].items(), key=lambda kv: -kv[1])]))
    activity_total = sum(parts["activities_s"].values()) or wall
    emit(table(f"{run['profile']}: seconds inside tests by harness activity (outermost counts)",
               ("activity", "s", "share", "calls"),
               [(name, value, f"{100 * value / activity_total:.0f}%", parts["calls"].get(name, "-"))
                for name, value in sorted(parts["activities_s"].items(), key=lambda kv: -kv[1])]))
    rows = []
    for test in parts["slowest"]:
        top = sorted(test["activities"].items(), key=lambda kv: -kv[1])[:2]
        rows.append((test["id"].split("::", 1)[-1][:70], test["total_s"], ", ".join(f"{k} {v:.1f}" for k, v in top)))
    emit(table(f"{run['profile']}: slowest tests", ("test", "s", "mostly"), rows))


def run_profile(profile: str, workdir: Path, impl: Path | None = None, name: str | None = None, *,
                extra: tuple[str, ...] = (), timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """One `agn-conformance run --profile <profile> [extra]`: wall time, exit code (None on timeout), outcomes."""
    label = (name or profile).replace(",", "-").replace(" ", "-").strip("()")
    label = "".join(c for c in label if c.isalnum() or c == "-")
    report = workdir / f"{label}-report.yaml"
    phases_file = workdir / f"{label}-phases.json"
    argv = [*command(report, profile, impl, extra), "--", "-p", "bench.phases"]
    emit(f"conformance_wall: {' '.join(argv[-8:])} (timeout {timeout_s:.0f} s)")
    supervisor = Supervisor(workdir / f"{label}-logs")
    env = {**child_env(), phases.ENV: str(phases_file)}
    try:
        started = time.perf_counter()
        proc = supervisor.start(f"agn-conformance-{label}", argv, env=env, cwd=ROOT)
        code = proc.wait(timeout_s)
        wall = time.perf_counter() - started
        tail = proc.log_tail(15)
    finally:
        supervisor.stop_all()
    if code is None:
        emit(f"note: the {profile} run was still running after {timeout_s:.0f} s and was stopped:\n{tail}")
    elif code != 0:
        emit(f"note: the {profile} conformance run exited {code}; its output ends with:\n{tail}")
    try:
        parts = breakdown(json.loads(phases_file.read_text()), wall)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        emit(f"note: no phase breakdown for the {profile} run ({exc})")
        parts = {}
    shown = [f"<tmp>/{Path(a).name}" if a in (str(report), str(impl)) else a for a in argv]
    return {"profile": name or profile, "wall_s": wall, "exit_code": code, "outcomes": outcomes(report),
            "command": shown, "breakdown": parts}


def run(quick: bool) -> BenchResult:
    """Each run is judged against its own target; the breakdowns say where its seconds went."""
    if quick:
        emit("conformance_wall: skipped in --quick")
        return BenchResult("conformance_wall", skipped="not run in --quick")
    with tempfile.TemporaryDirectory(prefix="agn-bench-conformance-") as tmp:
        runs = [run_profile(profile, Path(tmp)) for profile in TARGETS_S]
        serial = [run_profile(profile, Path(tmp), name=f"{profile} (one worker)", extra=("--workers", "1"))
                  for profile in TARGETS_S]
        cold = run_profile("consumer", Path(tmp), cold_descriptor(Path(tmp) / "cold-start.yaml"), COLD)
    emit(table(
        "conformance runs (exit code '-' = stopped at the timeout)",
        ("profile", "wall s", "exit code", *OUTCOME_COLUMNS),
        [(r["profile"], r["wall_s"], "-" if r["exit_code"] is None else r["exit_code"],
          *(r["outcomes"].get(column, "-") for column in OUTCOME_COLUMNS)) for r in runs],
    ))
    for r in [*runs, *serial, cold]:
        _print_breakdown(r)
    emit(table("the default run (workers auto) beside the same run in one worker, measured in this bench run",
               ("profiles", "workers auto s", "one worker s", "auto / one"),
               [(r["profile"], r["wall_s"], one["wall_s"],
                 f"{r['wall_s'] / one['wall_s']:.2f}" if one["wall_s"] else "-")
                for r, one in zip(runs, serial, strict=True)]))
    warm = runs[0]
    emit(table("consumer run, warm-started gateways (the reference descriptor) beside cold-started ones",
               ("gateways", "wall s", "gateway start s", "gateway starts"),
               [(r["profile"], r["wall_s"], r.get("breakdown", {}).get("activities_s", {}).get("gateway start", "-"),
                 r.get("breakdown", {}).get("calls", {}).get("gateway start", "-")) for r in (warm, cold)]))
    if cold["wall_s"]:
        emit(f"warm / cold consumer wall time: {warm['wall_s'] / cold['wall_s']:.2f}")
    targets = [Target(f"{r['profile']} conformance run wall time", r["wall_s"], "<=", TARGETS_S[r["profile"]], "s")
               for r in runs]
    for target in targets:
        emit(target.line())
    return BenchResult("conformance_wall", {"runs": runs, "one_worker": serial, "cold_consumer": cold}, targets)
