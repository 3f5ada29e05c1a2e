"""The kind bench is opt-in, skips with the preflight's reason, and splits a run's seconds by profile."""

from __future__ import annotations

import pytest

from bench import __main__ as bench_main
from bench import kind_wall
from bench.conformance_wall import breakdown


def test_kind_wall_runs_only_when_named() -> None:
    assert "kind_wall" not in bench_main.parse_args([]).selected
    assert "conformance_wall" in bench_main.parse_args([]).selected
    assert bench_main.parse_args(["--only", "kind_wall"]).selected == ["kind_wall"]


def test_kind_wall_skips_with_the_preflight_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kind_wall, "preflight_kind", lambda *_a, **_k: "no kind node image on the Docker engine")
    result = kind_wall.run(quick=False)
    assert result.skipped == "kind cannot run here: no kind node image on the Docker engine"
    assert kind_wall.run(quick=True).skipped == "not run in --quick"


def test_seconds_are_split_by_the_suite_each_test_belongs_to() -> None:
    tests = [{"id": f".tox/e/lib/site-packages/suites/{p}/test_x.py::t{i}", "total_s": s, "phases": {},
              "activities": {}} for i, (p, s) in enumerate([("consumer", 1.5), ("consumer", 2.0), ("mesh", 4.0)])]
    tests.append({"id": "tests/test_suites_helper.py::t", "total_s": 0.5, "phases": {}, "activities": {}})
    parts = breakdown({"tests": tests, "session_s": 9.0}, 10.0)
    assert parts["profiles_s"] == {"consumer": 3.5, "mesh": 4.0, "other": 0.5}


def test_used_memory_is_read_from_the_host() -> None:
    used = kind_wall.used_memory_mib()
    assert used > 0
    with kind_wall.PeakMemory() as memory:
        pass
    assert memory.peak >= memory.baseline > 0
