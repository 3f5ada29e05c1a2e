"""Progress lines: one as each conformance test starts, one while a long wait lasts (throttled), through the
terminal reporter, with -q and -v, under pytest-xdist, and none with --no-progress."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import waiting
from harness.progress import wait_text
from harness.waiting import WaitNotice, hold_for, observe_waits, poll_until, wait_until_elapsed

ROOT = Path(__file__).resolve().parents[1]

#: The tiny suite announces waits after 0.2 s, then every 0.2 s, at most one line per 0.5 s from a process.
CONFTEST = '''
from harness import progress, waiting

waiting.NOTICE_AFTER_S = 0.2
waiting.NOTICE_EVERY_S = 0.2
progress.THROTTLE_S = 0.5
'''

SUITE = '''
import time

import pytest

from harness.waiting import poll_until


def _mark(test_id, level="core", feature="groups"):
    return pytest.mark.conformance(id=test_id, profile="consumer", level=level, feature=feature, spec="s")


@_mark("T-PASS")
def test_pass():
    assert True


@_mark("T-WAIT")
def test_wait():
    start = time.monotonic()
    poll_until(lambda: time.monotonic() - start, lambda spent: spent > 1.4, what="the <slow> revision to serve",
               timeout=30)
    print("captured by the test")
    assert False, "failed after waiting"


@_mark("T-PARAM")
@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert True


@_mark("T-NOT-SELECTED")
@pytest.mark.skip(reason="slow test not selected")
def test_skipped_by_marker():
    pass


def test_unmarked():
    assert True
'''

#: The conformance tests of SUITE that run.
RUN = ["T-PASS", "T-WAIT", "T-PARAM[1]", "T-PARAM[2]"]
START = re.compile(r"\[consumer (\d+)/(\d+)\] (\S+) \.\.\.")
WAIT = re.compile(r"\[consumer \d+/4\] T-WAIT waiting (\d+)s \(of 30s\) for the <slow> revision to serve")


def run_suite(tmp_path: Path, *args: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_tiny_suite.py").write_text(SUITE)
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text() + CONFTEST)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "COLUMNS": "200", **env_vars}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tmp_path), *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)


def starts(output: str) -> list[tuple[int, int, str]]:
    return [(int(n), int(total), test_id) for n, total, test_id in START.findall(output)]


@pytest.mark.parametrize("verbosity", ["-q", "-v"])
def test_each_conformance_test_gets_a_line_and_a_long_wait_says_what_it_waits_for(
        tmp_path: Path, verbosity: str) -> None:
    done = run_suite(tmp_path, verbosity)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    # in order, numbered out of the conformance tests that run (not the unmarked or the marked-skip one)
    assert starts(out) == [(i + 1, 4, test_id) for i, test_id in enumerate(RUN)], out
    waits = [int(seconds) for seconds in WAIT.findall(out)]
    # announced after 0.2 s, then throttled to one line per 0.5 s while the wait lasts about 1.4 s
    assert 1 <= len(waits) <= 3, out
    assert waits == sorted(waits)
    # the lines go to the terminal, not into what the failing test captured
    captured = out.split("Captured stdout call", 1)[1].split("=====", 1)[0]
    assert "captured by the test" in captured and "[consumer" not in captured
    # a failure's line quotes its assertion's first line, as the report does
    assert re.search(r"^\[consumer 2/4\] T-WAIT FAILED \(call\): failed after waiting", out, re.M), out
    if verbosity == "-v":  # pytest's own verbose line for each test is still there, whole
        assert re.search(r"^test_tiny_suite\.py::test_wait FAILED", out, re.M), out
        assert re.search(r"^test_tiny_suite\.py::test_pass PASSED", out, re.M), out
    else:
        assert re.search(r"^\[consumer 1/4\] T-PASS \.\.\. \.", out, re.M), out  # the letter follows the line


def test_no_progress_turns_it_off(tmp_path: Path) -> None:
    done = run_suite(tmp_path, "-q", "--no-progress")
    assert done.returncode == 1
    assert not START.search(done.stdout) and not WAIT.search(done.stdout), done.stdout
    assert "[consumer" not in done.stdout


def test_under_xdist_the_controller_prints_every_workers_progress(tmp_path: Path) -> None:
    temp = Path(tempfile.mkdtemp(prefix="agnp-"))  # short: the controller's socket is named inside it
    try:
        done = run_suite(tmp_path, "-q", "-n", "2", TMPDIR=str(temp))
        assert not list(temp.glob("agn-progress-*")), "the controller removes its channel"
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    lines = starts(out)
    assert sorted(test_id for _, _, test_id in lines) == sorted(RUN), out
    assert [n for n, _, _ in lines] == [1, 2, 3, 4] and {total for _, total, _ in lines} == {4}
    assert WAIT.search(out), out  # a worker's wait, printed by the controller
    assert re.search(r"T-WAIT FAILED \(call\): failed after waiting", out), out  # and its failure


# ------------------------------------------------------------------------------------- the observer


@pytest.fixture
def notices(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[WaitNotice]]:
    """What harness.waiting tells an observer, with waits announced after 0.05 s and every 0.05 s."""
    monkeypatch.setattr(waiting, "NOTICE_AFTER_S", 0.05)
    monkeypatch.setattr(waiting, "NOTICE_EVERY_S", 0.05)
    seen: list[WaitNotice] = []
    previous = observe_waits(seen.append)
    yield seen
    observe_waits(previous)


def test_a_lasting_wait_tells_the_observer_what_it_waits_for(notices: list[WaitNotice]) -> None:
    start = time.monotonic()
    poll_until(lambda: time.monotonic() - start, lambda spent: spent > 0.3, what="a revision", timeout=5)
    assert notices and {(n.what, n.kind, n.limit_s) for n in notices} == {("a revision", "until", 5.0)}
    assert all(n.elapsed_s >= 0.05 for n in notices)
    assert [n.elapsed_s for n in notices] == sorted(n.elapsed_s for n in notices)


def test_holds_and_elapsed_time_are_announced_too(notices: list[WaitNotice]) -> None:
    hold_for(lambda: True, bool, seconds=0.2, what="the old revision keeps serving")
    wait_until_elapsed(time.monotonic(), 0.2, what="the session TTL")
    assert {(n.kind, n.what) for n in notices} == {("hold", "the old revision keeps serving"),
                                                   ("elapse", "the session TTL")}


def test_a_short_wait_is_not_announced(notices: list[WaitNotice], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "NOTICE_AFTER_S", 5.0)
    poll_until(lambda: 1, lambda value: value == 1, what="at once", timeout=5)
    assert notices == []


def test_a_failing_observer_does_not_change_how_a_wait_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "NOTICE_AFTER_S", 0.0)

    def broken(notice: WaitNotice) -> None:
        raise RuntimeError("terminal gone")

    previous = observe_waits(broken)
    try:
        start = time.monotonic()
        assert poll_until(lambda: time.monotonic() - start, lambda spent: spent > 0.1, what="x", timeout=5) > 0.1
    finally:
        observe_waits(previous)


def test_wait_text() -> None:
    assert wait_text(WaitNotice("revision r2 to serve", 12.4, 30.0, "until")) == \
        "waiting 12s (of 30s) for revision r2 to serve"
    assert wait_text(WaitNotice("no reload\nhappens", 6, 10, "hold")) == "checking for 6s (of 10s): no reload happens"
    assert wait_text(WaitNotice("the TTL", 6, 10, "elapse")) == "waiting out 6s (of 10s): the TTL"
    assert len(wait_text(WaitNotice("x" * 1000, 6, 10, "until"))) < 200
