"""Progress lines for long conformance runs: which test of how many is running, and what it waits for.

A run on kind or of the mesh profile takes minutes to most of an hour, and pytest's dots say
nothing about which test is running or why it is slow. This plugin writes, through pytest's terminal
reporter (not the tests' captured output), one line as each conformance test starts::

    [consumer 12/155] CONS-RELOAD-ACCEPT[x] ...

(the profile, the test's place in the run and the run's count of conformance tests, the conformance id),
and, while a wait of harness.waiting lasts (after harness.waiting.NOTICE_AFTER_S, then every
NOTICE_EVERY_S; never more than one line per THROTTLE_S from one process), what it waits for::

    [consumer 12/155] CONS-RELOAD-ACCEPT[x] waiting 15s (of 30s) for revision abc to serve

and, when it fails, the first line of its assertion, as the report quotes it::

    [consumer 40/155] CONS-SEL-ROUND-ROBIN FAILED (call): 'provider-a' count 3774 outside [3156, 3473]

It is on by default, for ``agn-conformance run`` and a plain ``pytest suites`` alike, and also when the
output is a CI log rather than a terminal, since an unexplained pause is what makes a long run look hung
and a log then shows where a run stopped; ``--no-progress`` turns it off (``agn-conformance run --
--no-progress``), and ``--collect-only`` (``agn-conformance list``) prints none. Tests without the
``conformance`` marker get no lines, so the project's own test runs look as before. Alone and not verbose,
a test's result letter follows its line; with ``-v`` pytest's own line for each test stays whole.

Under pytest-xdist the controller prints, as it prints the workers' results: each worker writes the labels
of its collected tests to a file in a directory the controller gives it (its ``workerinput``), the
controller prints the start line when the worker's ``logstart`` reaches it, and a worker sends its wait
notices as datagrams to a Unix socket the controller listens on in a thread. Without Unix sockets the
workers' wait notices are not shown; the start lines are.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.failure_text import failure_message
from harness.waiting import WaitNotice, observe_waits

__all__ = ["PLUGIN_NAME", "THROTTLE_S", "Progress", "label", "wait_text"]

PLUGIN_NAME = "agn-conformance-progress"
#: At most one wait line per this many seconds from one process (a process runs one test at a time).
THROTTLE_S = 5.0
#: How much of a failure's first line the progress line shows (the report and JUnit keep all of it).
FIRST_LINE_CHARS = 300
#: The key of the controller's channel description in an xdist worker's ``workerinput``.
WORKER_INPUT_KEY = "agn_conformance_progress"
#: What a line says of a wait is cut to about this many characters.
WHAT_LIMIT = 160
_STOP = b"\0stop"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agn-conformance", "AI Grid Network conformance")
    group.addoption("--no-progress", action="store_true", default=False,
                    help="do not print a line as each conformance test starts, nor what a long wait waits for")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--no-progress", False) or config.getoption("collectonly", False):
        return
    if hasattr(config, "workerinput") and WORKER_INPUT_KEY not in config.workerinput:
        return  # a worker of a controller that shows no progress
    config.pluginmanager.register(Progress(config), PLUGIN_NAME)


def label(item: pytest.Item) -> tuple[str, str] | None:
    """(profile, conformance id with its parameters) of a conformance test that will run; None otherwise.

    A test already marked to be skipped (a slow test not selected) will not run and is not counted.
    """
    marker = item.get_closest_marker("conformance")
    if marker is None or item.get_closest_marker("skip") is not None:
        return None
    test_id = str(marker.kwargs.get("id", item.name))
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        test_id = f"{test_id}[{callspec.id}]"
    return str(marker.kwargs.get("profile", "?")), test_id


def wait_text(notice: WaitNotice) -> str:
    """What a wait line says of a wait: its kind, how long so far and at most, and what it waits for."""
    what = " ".join(notice.what.split())
    if len(what) > WHAT_LIMIT:
        what = what[:WHAT_LIMIT - 3] + "..."
    spent = f"{notice.elapsed_s:.0f}s (of {notice.limit_s:.0f}s)"
    if notice.kind == "hold":
        return f"checking for {spent}: {what}"
    if notice.kind == "elapse":
        return f"waiting out {spent}: {what}"
    return f"waiting {spent} for {what}"


class Progress:
    """The run's progress: labels of the tests that will run, the order they started in, the current test.

    One object per process; its role follows from where it runs: the only process (prints everything), an
    xdist worker (prints nothing, tells the controller) or the xdist controller (prints what workers do).
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.labels: dict[str, tuple[str, str]] = {}  # nodeid -> (profile, conformance id)
        self.started: dict[str, int] = {}  # nodeid -> its place in the run
        self.current: str | None = None
        self.lock = threading.RLock()
        self.last_notice = float("-inf")
        workerinput: Mapping[str, Any] | None = getattr(config, "workerinput", None)
        self.channel: dict[str, str] | None = dict(workerinput[WORKER_INPUT_KEY]) if workerinput else None
        self.worker_id = str(workerinput.get("workerid", "?")) if workerinput else None
        self.sender: socket.socket | None = None
        self.server: _Server | None = None  # the xdist controller's listener, made with the first worker
        self.previous_observer = observe_waits(self.on_wait)

    # ------------------------------------------------------------------------------------- collection

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            found = label(item)
            if found is not None:
                self.labels[item.nodeid] = found
        if self.worker_id is not None and self.channel is not None:
            path = Path(self.channel["dir"]) / f"labels-{self.worker_id}.json"
            temporary = path.with_suffix(".tmp")
            with contextlib.suppress(OSError):  # a worker on another host: no start lines for its tests
                temporary.write_text(json.dumps(self.labels), encoding="utf-8")
                os.replace(temporary, path)  # the controller never reads half a file

    # ---------------------------------------------------------------------------------------- the run

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        """Number the test and, where this process prints, say that it starts (before pytest's own line)."""
        if self.server is not None and nodeid not in self.labels:
            self.add_labels(self.server.labels())
        if nodeid not in self.labels:
            return
        with self.lock:
            self.current = nodeid
            self.started.setdefault(nodeid, len(self.started) + 1)
        if self.worker_id is None:
            self.emit(f"{self.prefix(nodeid)} ...")

    def add_labels(self, labels: Mapping[str, tuple[str, str]]) -> None:
        with self.lock:
            self.labels.update(labels)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Where this process prints, a failed conformance test's line says what failed: its assertion's first
        line, as the report and JUnit quote it (harness.failure_text)."""
        if self.worker_id is not None or not report.failed or report.nodeid not in self.labels:
            return
        first = (failure_message(report).splitlines() or [""])[0]
        self.emit(f"{self.prefix(report.nodeid)} FAILED ({report.when}): {first[:FIRST_LINE_CHARS]}")

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        with self.lock:
            if self.current == nodeid:
                self.current = None

    def prefix(self, nodeid: str | None) -> str:
        """``[profile n/N] ID`` of a test, or the plugin's name outside any conformance test."""
        if nodeid is None or nodeid not in self.labels:
            return "[agn-conformance]"
        profile, test_id = self.labels[nodeid]
        return f"[{profile} {self.started.get(nodeid, '?')}/{len(self.labels)}] {test_id}"

    def on_wait(self, notice: WaitNotice) -> None:
        """Observer of harness.waiting: a line (or, on an xdist worker, a datagram) for a wait that lasts."""
        with self.lock:
            nodeid = self.current
            now = time.monotonic()
            if nodeid is None or now - self.last_notice < THROTTLE_S:
                return
            self.last_notice = now
        if self.worker_id is not None:
            self.send({"nodeid": nodeid, "text": wait_text(notice)})
        else:
            self.emit(f"{self.prefix(nodeid)} {wait_text(notice)} ...")

    def emit(self, line: str) -> None:
        """Write `line` to the terminal, on a new line, so that pytest's own output still reads right.

        Alone and not verbose, the line is left open: the test's result letter follows it. Verbose, pytest
        is made to start a new line before it writes again (its verbose result names the test). On the xdist
        controller, not verbose, the line is ended: the next letter may be another worker's test's.
        """
        reporter: Any = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        verbose = self.config.get_verbosity(pytest.Config.VERBOSITY_TEST_CASES) > 0
        capture: Any = self.config.pluginmanager.get_plugin("capturemanager")
        with self.lock, (capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()):
            writer = self.config.get_terminal_writer()
            text = ("\n" if writer.width_of_current_line else "") + line + " "
            if self.server is not None and not verbose:
                text = text.rstrip() + "\n"
            writer.write(text, flush=True)
            if verbose:
                reporter.currentfspath = -2  # what the reporter sets itself after writing on a line

    def send(self, message: Mapping[str, str]) -> None:
        """Send a wait notice to the xdist controller; dropped when the controller cannot take it now."""
        if self.channel is None or not self.channel.get("socket") or not hasattr(socket, "AF_UNIX"):
            return
        try:
            if self.sender is None:
                self.sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self.sender.setblocking(False)
            self.sender.sendto(json.dumps(message).encode("utf-8"), self.channel["socket"])
        except OSError:
            pass  # a full or closed socket: progress is not worth blocking or failing a test for

    # -------------------------------------------------------------------------------------- xdist

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """On the xdist controller: tell each worker where its labels go and where its notices go."""
        if self.server is None:
            self.server = _Server(self)
        node.workerinput[WORKER_INPUT_KEY] = self.server.channel()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        observe_waits(self.previous_observer)
        if self.sender is not None:
            self.sender.close()
        if self.server is not None:
            self.server.close()


class _Server:
    """The xdist controller's side: a directory for the workers' labels and a socket for their notices."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.dir = Path(tempfile.mkdtemp(prefix="agn-progress-"))
        self.read: set[str] = set()
        self.socket_path = ""
        self.sock: socket.socket | None = None
        self.thread: threading.Thread | None = None
        if hasattr(socket, "AF_UNIX"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                sock.bind(str(self.dir / "notices"))
            except OSError:  # a temporary directory too deep for a socket's name: no wait notices
                sock.close()
                return
            self.sock, self.socket_path = sock, str(self.dir / "notices")
            self.thread = threading.Thread(target=self.receive, name="agn-conformance-progress", daemon=True)
            self.thread.start()

    def channel(self) -> dict[str, str]:
        return {"dir": str(self.dir), "socket": self.socket_path}

    def labels(self) -> dict[str, tuple[str, str]]:
        """The labels of every worker's file not read yet (each worker collected the same tests)."""
        found: dict[str, tuple[str, str]] = {}
        with self.progress.lock:  # the receiving thread asks too
            for path in sorted(self.dir.glob("labels-*.json")):
                if path.name in self.read:
                    continue
                with contextlib.suppress(OSError, ValueError, TypeError, IndexError):
                    labels = json.loads(path.read_text("utf-8"))
                    found.update({str(k): (str(v[0]), str(v[1])) for k, v in labels.items()})
                    self.read.add(path.name)
        return found

    def receive(self) -> None:
        """Print each worker's wait notice as it arrives, until told to stop."""
        assert self.sock is not None
        for data in self._datagrams():
            try:
                message = json.loads(data.decode("utf-8"))
                nodeid, text = str(message["nodeid"]), str(message["text"])
            except (ValueError, KeyError, TypeError):
                continue
            if nodeid not in self.progress.labels:
                self.progress.add_labels(self.labels())
            self.progress.emit(f"{self.progress.prefix(nodeid)} {text} ...")

    def _datagrams(self) -> Iterator[bytes]:
        assert self.sock is not None
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            if data == _STOP:
                return
            yield data

    def close(self) -> None:
        if self.sock is not None and self.thread is not None:
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as stopper:
                stopper.sendto(_STOP, self.socket_path)
            self.thread.join(timeout=5.0)
            self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)
