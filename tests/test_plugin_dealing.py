"""Under pytest-xdist the plugin collects a test marked `lasts` at the head of a worker's part, and tests of one
xdist_group together at the head of another."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SUITE = '''
import os
import pytest

def _log(name):
    with open(os.environ["ORDER_LOG"], "a") as log:
        log.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {name}\\n")

@pytest.mark.parametrize("n", range(7))
@pytest.mark.conformance(id="T-SHORT", profile="consumer", level="core", feature="groups", spec="s")
def test_short(n):
    _log(f"short{n}")

@pytest.mark.lasts(LASTS)
@pytest.mark.conformance(id="T-LONG", profile="consumer", level="core", feature="groups", spec="s")
def test_long():
    _log("long")
'''

GROUPED = '''
@pytest.mark.parametrize("n", range(3))
@pytest.mark.xdist_group("together")
@pytest.mark.conformance(id="T-GROUPED", profile="consumer", level="core", feature="groups", spec="s")
def test_grouped(n):
    _log(f"grouped{n}")
'''

#: Logs each worker's collection order, as the plugin leaves it, to COLLECTED_LOG.
ORDER_HOOK = '''

def pytest_collection_finish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.environ["COLLECTED_LOG"], "a") as log:
        log.write(worker + " " + " ".join(item.name for item in session.items) + "\\n")
'''


def _run(tmp_path: Path, lasts: str, *workers: str, suite: str = SUITE
         ) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    (tmp_path / "test_tiny_suite.py").write_text(suite.replace("LASTS", lasts))
    (tmp_path / "conftest.py").write_text("import os\n" + (ROOT / "conftest.py").read_text() + ORDER_HOOK)
    log = tmp_path / "order.log"
    log.unlink(missing_ok=True)
    (tmp_path / "collected.log").unlink(missing_ok=True)
    outer = {"PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"}  # set when these tests run under xdist
    env = {**{k: v for k, v in os.environ.items() if k not in outer}, "ORDER_LOG": str(log),
           "COLLECTED_LOG": str(tmp_path / "collected.log"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path), *workers,
            "--conformance-report", str(tmp_path / "report.yaml")]
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    lines = log.read_text().split("\n") if log.exists() else []
    return done, [line.split() for line in lines if line]


def test_a_long_test_opens_a_worker_part_and_a_bad_length_is_refused(tmp_path: Path) -> None:
    done, order = _run(tmp_path, "5", "-n", "2", "--dist", "worksteal")
    assert done.returncode == 0, done.stdout + done.stderr
    first = {}
    for worker, name in order:
        first.setdefault(worker, name)
    assert "long" in first.values(), order  # collected last, run first on its worker
    assert len(order) == 8

    done, order = _run(tmp_path, "5")  # one process: collection order, the long test last
    assert done.returncode == 0 and order[-1] == ["main", "long"], done.stdout + done.stderr
    done, order = _run(tmp_path, "'five'")
    assert done.returncode == 4 and not order, done.stdout + done.stderr
    assert "test_long: lasts(seconds) needs a positive number of seconds, got 'five'" in done.stdout + done.stderr


def test_a_group_opens_a_worker_part_of_its_own(tmp_path: Path) -> None:
    done, order = _run(tmp_path, "5", "-n", "2", "--dist", "worksteal", suite=SUITE + GROUPED)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(name for _, name in order) == sorted([f"short{n}" for n in range(7)] + ["long"]
                                                       + [f"grouped{n}" for n in range(3)])
    collected = {line.split()[0]: line.split()[1:] for line in (tmp_path / "collected.log").read_text().splitlines()}
    assert set(collected) == {"gw0", "gw1"} and collected["gw0"] == collected["gw1"], collected
    second_part = collected["gw0"][5:]  # worksteal hands the first 5 of 11 to one worker, the other 6 to the other
    assert collected["gw0"][0] == "test_long" and second_part[:3] == [f"test_grouped[{n}]" for n in range(3)], \
        collected["gw0"]

    done, order = _run(tmp_path, "5", suite=SUITE + GROUPED)  # the twin: one process keeps collection order
    assert done.returncode == 0, done.stdout + done.stderr
    assert [name for _, name in order][-4:] == ["long", "grouped0", "grouped1", "grouped2"]
