"""The wrk path of the benchmarks: its result line is parsed strictly, and a short real run against the
fake backend gives figures (skipped where wrk is not installed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.overlays import MODEL
from bench.services import start_backend, wait_ports_free
from bench.wrk import MARKER, WrkError, WrkRun, find_wrk, lua_string, parse_output, run_wrk, write_script
from harness.process import Supervisor

RESULT = {"requests": 120, "duration_us": 1_000_500, "bytes": 9000,
          "errors": {"connect": 0, "read": 1, "write": 0, "status": 2, "timeout": 0},
          "latency_us": {"min": 90, "max": 4000, "mean": 310.5, "stdev": 40.0, "p50": 300, "p90": 400, "p99": 900,
                         "p999": 3000}}


def test_parse_output_takes_the_result_line_among_wrk_report_lines() -> None:
    text = ("Running 1s test @ http://127.0.0.1:1/x\n  1 threads and 4 connections\nRequests/sec: 119.94\n"
            f"{MARKER}{json.dumps(RESULT)}\n")
    assert parse_output(text) == RESULT


@pytest.mark.parametrize("text, message", [
    ("Requests/sec: 10\n", "no WRK_JSON line"),
    (f"{MARKER}{{not json\n", "not JSON"),
    (f"{MARKER}{json.dumps({'requests': 1})}\n", "lacks"),
])
def test_parse_output_refuses_output_without_a_complete_result(text: str, message: str) -> None:
    with pytest.raises(WrkError, match=message):
        parse_output(text)


def test_lua_string_escapes_quotes_and_backslashes() -> None:
    assert lua_string('{"a": "b\\\\c"}') == '"{\\"a\\": \\"b\\\\\\\\c\\"}"'


def test_figures_from_a_result() -> None:
    row = WrkRun(RESULT, connections=4, threads=1).as_row()
    assert row["non_2xx"] == 2 and row["socket_errors"] == 1
    assert row["rps"] == pytest.approx(118 / 1.0005)
    assert row["p50_ms"] == 0.3 and row["p99_ms"] == 0.9


def test_a_short_wrk_run_against_the_fake_backend(tmp_path: Path) -> None:
    wrk = find_wrk()
    if wrk is None:
        pytest.skip("wrk is not installed (Debian: apt-get install wrk)")
    supervisor = Supervisor(tmp_path / "logs")
    try:
        backend = start_backend(supervisor)
        script = write_script(tmp_path, json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}))
        url = f"http://{backend.addresses['listen']}/v1/chat/completions"
        run = run_wrk(supervisor, wrk, script, url, connections=4, threads=1, seconds=1)
    finally:
        supervisor.stop_all()
    assert wait_ports_free(backend.ports()) == []
    row = run.as_row()
    assert row["requests"] > 0, row
    assert row["non_2xx"] == 0 and row["socket_errors"] == 0, row
    assert row["rps"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"], row


def test_wrk_refuses_a_target_off_loopback(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path / "logs")
    with pytest.raises(ValueError, match="non-loopback"):
        run_wrk(supervisor, "wrk", tmp_path / "post.lua", "http://192.0.2.1/x", connections=1, threads=1, seconds=1)
    supervisor.stop_all()
