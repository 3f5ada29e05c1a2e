"""`python -m bench --quick` runs end to end and writes a complete results file.

Only the shape of the results is checked: speed targets belong to the benchmark output, not to tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 180  # the quick run takes about 35 s idle (it starts real processes); a busy 2-core CI box is slower


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
    assert set(benches) == {"selection", "site_pick", "validation", "proxy", "provider_hop", "operator_render",
                            "route_change", "gossip", "mesh", "conformance_wall"}

    cases = benches["selection"]["cases"]
    seen = {(c["path"], c["mode"], c["candidates"]) for c in cases}
    for path in ("pick", "filter"):
        for mode in ("roundRobin", "weightedRandom", "deterministic", "ungrouped-deterministic"):
            for count in (1, 64, 1024):
                assert (path, mode, count) in seen, f"selection case {path}/{mode}/{count} missing"
    for case in cases:
        for key in ("p50_us", "p99_us", "mean_us", "iterations"):
            _positive(case[key], f"selection {case['path']}/{case['mode']}/{case['candidates']} {key}")

    site_cases = {(c["path"], c["state"], c["sites"]) for c in benches["site_pick"]["cases"]}
    assert site_cases == {(path, state, sites) for path in ("pick", "filter") for state in ("room", "full")
                          for sites in (3, 16, 64)}, site_cases
    for case in benches["site_pick"]["cases"]:
        _positive(case["p50_us"], f"site_pick {case['path']}/{case['state']}/{case['sites']} p50")

    steps = {s["step"]: s for s in benches["validation"]["steps"]}
    assert benches["validation"]["candidates"] == 1024
    for key in ("median_ms", "p99_ms", "runs"):
        _positive(steps["parse_overlay"][key], f"validation {key}")

    mesh = benches["mesh"]
    for key in ("routable_s", "dead_s", "degraded_s"):
        assert mesh[key], f"mesh {key} has no samples"
        for value in mesh[key]:
            _positive(value, f"mesh {key}")
    _positive(mesh["detection_bound_s"], "mesh detection_bound_s")

    proxy = benches["proxy"]
    assert proxy["ports_released"] is True
    assert {r["path"] for r in proxy["runs"]} == {"direct", "gateway"}
    for run in proxy["runs"]:
        for key in ("rps", "p50_ms", "p99_ms", "requests"):
            _positive(run[key], f"proxy {run['path']} {key}")
    for pair in proxy["comparison"]:
        for key in ("direct_rps", "gateway_rps", "ratio"):
            _positive(pair[key], f"proxy comparison {key}")

    hop = benches["provider_hop"]
    assert hop["ports_released"] is True and hop["notes"], hop.get("notes")
    assert {(r["path"], r["load"]) for r in hop["runs"]} == {("plaintext", "1x16"), ("mtls", "1x16")}
    for run in hop["runs"]:
        for key in ("rps", "p50_ms", "p99_ms", "requests", "hop_connections_open"):
            _positive(run[key], f"provider_hop {run['path']} {key}")
        assert run["p50_ms"] <= run["p99_ms"], run
        # keep-alive to B: A holds at most one pooled connection per load-generator connection
        assert run["hop_connections_open"] <= 16, run
    assert [(c["path"], c["load"]) for c in hop["comparison"]] == [("mtls", "1x16")]
    _positive(hop["headline"]["ratio"], "provider_hop headline ratio")
    runs = {h["client"]: h for h in hop["handshake"]["runs"]}
    assert set(runs) == {"keep-alive", "fresh"}
    for client, run in runs.items():
        for key in ("rps", "p50_ms", "p99_ms", "requests"):
            _positive(run[key], f"provider_hop handshake {client} {key}")
    # the fresh client handshakes for every request it completes; the keep-alive one reuses its connection
    assert runs["fresh"]["connections_in_window"] >= runs["fresh"]["requests"] - 1, runs["fresh"]
    assert runs["keep-alive"]["connections_in_window"] <= 1, runs["keep-alive"]
    assert len(hop["handshake"]["cost"]) == 1

    render = benches["operator_render"]
    seen_render = {(c["routing"], c["providers"]) for c in render["cases"]}
    routings, sizes = ("geographyFirst", "scoreFirst"), (10, 100, 1000)
    assert seen_render == {(routing, count) for routing in routings for count in sizes}
    for case in render["cases"]:
        for key in ("median_ms", "p95_ms", "min_ms", "max_ms", "cpu_median_ms", "runs"):
            _positive(case[key], f"operator_render {case['routing']}/{case['providers']} {key}")
        assert case["min_ms"] <= case["median_ms"] <= case["p95_ms"] <= case["max_ms"], case
    loading = render["dir_source"]
    assert loading["resources"] == loading["files"] > loading["providers"] > 0
    for step in ("load", "fingerprint"):
        for key in ("median_ms", "p95_ms", "runs"):
            _positive(loading[step][key], f"operator_render dir_source {step} {key}")

    route = benches["route_change"]
    assert route["ports_released"] is True
    assert route["reload_debounce_ms"] == 500
    configs = list(route["configs"])
    assert configs == ["current", "previous"]
    assert len(route["iterations"]) == route["changes"] * len(configs) and route["changes"] == 3
    stages = ("metric_set_s", "rendered_s", "delivered_s", "accepted_s", "served_s")
    for config in configs:
        mine = [it for it in route["iterations"] if it["config"] == config]
        directions = [it["to"] for it in mine]
        assert all(a != b for a, b in zip(directions, directions[1:], strict=False)), directions
        for it in mine:
            for key in stages:
                _positive(it[key], f"route_change {config} iteration {it['iteration']} {key}")
            # each stage feeds the next: the gateway cannot serve a revision before it was delivered
            assert it["metric_set_s"] <= it["rendered_s"] <= it["delivered_s"] <= it["served_s"], it
            assert it["delivered_s"] <= it["accepted_s"], it
        for stage in stages:
            stats = route["summary"][config]["stages"][stage]
            assert stats["n"] == 3, stats
            for key in ("median_s", "p95_s", "max_s"):
                _positive(stats[key], f"route_change {config} {stage} {key}")

    wrk = proxy["wrk"]
    if shutil.which("wrk") is None:
        assert "not installed" in wrk["skipped"], wrk
    else:
        assert {(r["path"], r["load"]) for r in wrk["runs"]} == {("direct", "wrk 32c"), ("gateway", "wrk 32c")}
        for run in wrk["runs"]:
            assert run["non_2xx"] == 0 and run["socket_errors"] == 0, run
            for key in ("rps", "p50_ms", "p99_ms", "requests"):
                _positive(run[key], f"proxy wrk {run['path']} {key}")
        _positive(wrk["comparison"][0]["ratio"], "proxy wrk ratio")
        assert proxy["headline_source"].startswith("wrk"), proxy["headline_source"]

    gossip = benches["gossip"]
    assert [row["members"] for row in gossip["summary"]] == [3, 20]
    for row in gossip["summary"]:
        _positive(row["bytes_per_s_mean"], f"gossip {row['members']} bytes/s")
        assert 0 < row["detection_s_max"] <= row["bound_s"], row

    assert benches["conformance_wall"]["skipped"]
    summary = [row for row in doc["summary"] if "value" in row]
    assert {row["benchmark"] for row in summary} == {"selection", "site_pick", "validation", "proxy", "provider_hop",
                                                     "operator_render", "route_change", "gossip", "mesh"}
    for row in summary:
        assert row["status"] in ("PASS", "MISS"), row
        assert isinstance(row["value"], int | float), row
