"""`python -m bench --quick` runs end to end and writes a complete results file.

Only the shape of the results is checked: speed targets belong to the benchmark output, not to tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 60  # the quick run takes seconds; this bounds it on a loaded 2-core machine


def _positive(value: Any, where: str) -> None:
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    assert numeric and value > 0, f"{where} = {value!r}"


def test_quick_run_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "summary" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["quick"] is True
    benches = doc["benchmarks"]
    assert set(benches) == {"selection", "validation", "proxy", "conformance_wall"}

    cases = benches["selection"]["cases"]
    seen = {(c["path"], c["mode"], c["candidates"]) for c in cases}
    for path in ("pick", "filter"):
        for mode in ("roundRobin", "weightedRandom", "deterministic", "ungrouped-deterministic"):
            for count in (1, 64, 1024):
                assert (path, mode, count) in seen, f"selection case {path}/{mode}/{count} missing"
    for case in cases:
        for key in ("p50_us", "p99_us", "mean_us", "iterations"):
            _positive(case[key], f"selection {case['path']}/{case['mode']}/{case['candidates']} {key}")

    steps = {s["step"]: s for s in benches["validation"]["steps"]}
    assert benches["validation"]["candidates"] == 1024
    for key in ("median_ms", "p99_ms", "runs"):
        _positive(steps["parse_overlay"][key], f"validation {key}")

    proxy = benches["proxy"]
    assert proxy["ports_released"] is True
    assert {r["path"] for r in proxy["runs"]} == {"direct", "gateway"}
    for run in proxy["runs"]:
        for key in ("rps", "p50_ms", "p99_ms", "requests"):
            _positive(run[key], f"proxy {run['path']} {key}")
    for pair in proxy["comparison"]:
        for key in ("direct_rps", "gateway_rps", "ratio"):
            _positive(pair[key], f"proxy comparison {key}")

    assert benches["conformance_wall"]["skipped"]
    summary = [row for row in doc["summary"] if "value" in row]
    assert {row["benchmark"] for row in summary} == {"selection", "validation", "proxy"}
    for row in summary:
        assert row["status"] in ("PASS", "MISS"), row
        assert isinstance(row["value"], int | float), row
