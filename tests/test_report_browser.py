"""The HTML report in a real browser: headless Chromium opens the page, runs its script and Plotly's, and the
test checks what a reader would see (no console error, a failure's message on screen, charts drawn, filters
that hide rows, a chart drawn when its section opens) and keeps a screenshot.

The browser is driven over the DevTools protocol (websocket-client, which the kubernetes client already
brings). Without Chromium the test skips, saying so; the browser's whole process group is ended when the test
ends, pass or fail.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.impl import Implementation
from harness.report import TestResult, build_report, write_html

websocket = pytest.importorskip("websocket", reason="websocket-client (a dependency of kubernetes) is not installed")

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
HOSTILE = '<script>alert("x")</script> & <img src=x onerror=alert(1)>'
#: Seconds the browser gets to start, and the page to load (Plotly's script is 4-5 MB of JavaScript).
START_TIMEOUT = 15.0
LOAD_TIMEOUT = 30.0


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium on PATH (Debian: apt-get install chromium); the page is checked in a browser only "
                "where one is installed")


class DevTools:
    """A minimal DevTools protocol session: commands with their replies, and every event kept for the checks."""

    def __init__(self, url: str) -> None:
        self.socket = websocket.create_connection(url, timeout=LOAD_TIMEOUT, suppress_origin=True)
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self.session: str | None = None

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params}
        if self.session is not None and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self.session
        self.socket.send(json.dumps(message))
        while True:
            reply = json.loads(self.socket.recv())
            if reply.get("id") == number:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return dict(reply.get("result") or {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            self.socket.settimeout(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(websocket.WebSocketTimeoutException):
                self.events.append(json.loads(self.socket.recv()))
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout:.0f}s for {method}; events: "
                                     f"{sorted({str(e.get('method')) for e in self.events})}")
        self.socket.settimeout(LOAD_TIMEOUT)

    def value(self, expression: str) -> Any:
        """The value of a JavaScript expression evaluated in the page (its exception fails the test)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} raised {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self) -> list[dict[str, Any]]:
        """Uncaught exceptions, console errors, error log entries and dialogs (an alert() is a script that ran)."""
        return [e for e in self.events
                if e.get("method") in ("Runtime.exceptionThrown", "Page.javascriptDialogOpening")
                or (e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") in ("error", "assert"))
                or (e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error")]

    def close(self) -> None:
        self.socket.close()


def _live_members(group: int) -> list[int]:
    """Processes of the process group that are still running (a zombie has ended, only its entry is left)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    """Headless Chromium in a process group of its own, ended with everything it started when the test ends."""
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    log = (tmp_path / "chromium.log").open("wb")
    proc = subprocess.Popen(
        [_browser(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1280,1600",
         "about:blank"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    tools: DevTools | None = None
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT
        while not (port_file.is_file() and len(port_file.read_text().split()) >= 2):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"Chromium did not start (exit {proc.poll()}):\n"
                            f"{(tmp_path / 'chromium.log').read_text(errors='replace')[-3000:]}")
            time.sleep(0.05)
        port, path = port_file.read_text().split()[:2]
        tools = DevTools(f"ws://127.0.0.1:{port}{path}")
        target = tools.send("Target.createTarget", url="about:blank")["targetId"]
        tools.session = tools.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            tools.send(f"{domain}.enable")
        tools.send("Emulation.setDeviceMetricsOverride", width=1280, height=1600, deviceScaleFactor=1, mobile=False)
        yield tools
    finally:
        if tools is not None:
            with contextlib.suppress(Exception):  # a browser already gone is what closing wants
                tools.send("Browser.close")
            tools.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of the group is left, pass or fail
        proc.wait()
        log.close()
        deadline = time.monotonic() + 5
        while _live_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _live_members(proc.pid), "a Chromium process outlived the test"


def _report_page(path: Path) -> Path:
    """A run with a failing distribution test, a passing test with a revision timeline, a skip and a mesh test."""
    distribution = {"t": 0.8, "kind": "distribution", "counts": {"provider-a": 700, "provider-b": 300},
                    "expected": {"provider-a": 0.5, "provider-b": 0.5},
                    "intervals": {"provider-a": [440, 560], "provider-b": [440, 560]}, "alpha": 1e-6, "n": 1000,
                    "passed": False, "what": HOSTILE}
    revisions = ({"t": 0.2, "kind": "revision", "stage": "rendered", "revision": "r1", "site": "west"},
                 {"t": 0.9, "kind": "revision", "stage": "accepted", "revision": "r1", "site": "west"},
                 {"t": 1.4, "kind": "revision", "stage": "serving", "revision": "r1", "site": "west"},
                 {"t": 1.0, "kind": "action", "what": HOSTILE})
    members = ({"t": 0.0, "kind": "member", "observer": "site-a", "member": "site-c", "state": "alive"},
               {"t": 2.0, "kind": "member", "observer": "site-a", "member": "site-c", "state": "dead"})

    def result(test_id: str, outcome: str, **fields: Any) -> TestResult:
        base: dict[str, Any] = {"profile": "consumer", "level": "core", "feature": "random", "spec": "spec 3.1",
                                "duration_s": 1.0}
        return TestResult(id=test_id, outcome=outcome, **{**base, **fields})  # type: ignore[arg-type]

    results = [
        result("CONS-SEL-RANDOM", "failed", timeline=(distribution,),
               message=f"selection distribution does not match: 'provider-a' count 700 outside [440, 560]\n{HOSTILE}"),
        result("CONS-RELOAD", "passed", feature="hotReload", timeline=revisions),
        result("CONS-AFFINITY", "skipped", feature="headerAffinity", message="needs root"),
        result("MESH-DEAD", "passed", profile="mesh", feature="membership", timeline=members),
    ]
    report = build_report(results, Implementation("Example Corp", "gw", "1.0", ()), backend="local",
                          harness_version="0.1.0", profiles=("consumer", "mesh"), features_claimed=())
    return write_html(report, results, path)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


VISIBLE = "(function (el) { return !!el && el.getClientRects().length > 0; })"
ROWS = """Array.from(document.querySelectorAll('tr.test-row')).filter(function (row) {
            return row.getClientRects().length > 0; }).map(function (row) { return row.dataset.test; })"""


def test_the_page_reads_in_a_real_browser(browser: DevTools, tmp_path: Path) -> None:
    page = _report_page(tmp_path / "report.html")
    browser.send("Page.navigate", url=page.resolve().as_uri())
    browser.wait_for("Page.loadEventFired", LOAD_TIMEOUT)

    assert browser.value("typeof window.Plotly") == "object", "Plotly's inlined script ran"
    message = "document.querySelector('article.failure-card pre.message')"
    assert browser.value(f"{VISIBLE}({message})") is True, "the failure's message is on screen"
    assert "count 700 outside [440, 560]" in browser.value(f"{message}.textContent")
    assert browser.value("document.querySelectorAll('article.failure-card .main-svg').length") > 0, "chart drawn"
    assert browser.value("document.querySelectorAll('img').length") == 0, "no test text became markup"

    assert sorted(browser.value(ROWS)) == ["CONS-AFFINITY", "CONS-RELOAD", "CONS-SEL-RANDOM", "MESH-DEAD"]
    browser.value("document.querySelector('input[name=\"outcome\"][value=\"passed\"]').click()")
    assert sorted(browser.value(ROWS)) == ["CONS-AFFINITY", "CONS-SEL-RANDOM"], "passed rows hidden"
    assert browser.value("document.querySelector('tr.test-row[data-test=\"CONS-RELOAD\"]').hidden") is True
    assert browser.value("document.getElementById('filter-count').textContent") == "2 of 4 tests shown"
    browser.value("(function (s) { s.value = 'mesh'; s.dispatchEvent(new Event('change', {bubbles: true})); })"
                  "(document.querySelector('select[name=\"profile\"]'))")
    assert browser.value(ROWS) == [], "mesh has no test left once passed ones are hidden"
    assert browser.value(f"{VISIBLE}(document.querySelector('article.failure-card'))") is False
    assert browser.value(f"{VISIBLE}(document.getElementById('no-failure-shown'))") is True
    browser.value("document.querySelector('#filters button[type=\"reset\"]').click()")
    browser.value("new Promise(function (done) { window.setTimeout(done, 50); })")
    assert len(browser.value(ROWS)) == 4, "Show all brings every row back"

    lazy = "document.querySelector('tr.evidence-row[data-test=\"CONS-RELOAD\"]')"
    assert browser.value(f"{lazy}.querySelectorAll('.main-svg').length") == 0, "drawn only when opened"
    browser.value(f"{lazy}.querySelector('details').open = true")
    browser.value("new Promise(function (done) { window.setTimeout(done, 300); })")
    assert browser.value(f"{lazy}.querySelectorAll('.main-svg').length") > 0, "drawn once its section opened"

    shot = base64.b64decode(browser.send("Page.captureScreenshot", format="png")["data"])
    (tmp_path / "report.png").write_bytes(shot)
    assert len(shot) > 20_000 and _png_size(shot) == (1280, 1600)
    assert browser.errors() == [], "the page logged errors or opened a dialog"
