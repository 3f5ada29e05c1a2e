"""agn-overlay-sync as a real process: watch, deliver, reject, report, and stop cleanly on SIGTERM."""

from __future__ import annotations

import copy
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness import contract

SCOPE = contract.ScopeSpec(network="grid-a", gateway="gw", namespace="ns", local_site="site-a")
ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def write_configmap(path: Path, overlay: bytes) -> None:
    """The ConfigMap object as the operator's dir sink writes it (temp file + rename)."""
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "grid-a-gw-overlay", "namespace": "ns", "annotations": {}},
        "data": {"routing-overlay.json": overlay.decode(), "routing-config.json": overlay.decode()},
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(doc))
    os.replace(tmp, path)


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 10.0) -> T:
    """Poll `probe` until it returns something other than None/False; fail saying what was last seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            value = probe()
        except (OSError, httpx.HTTPError) as exc:
            value, last = None, exc
        if value:
            return value
        if value is not None:
            last = value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}")


class SyncProcess:
    def __init__(self, args: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reference.overlay_sync.cli", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        self.stderr_pump = threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True)
        self.stderr_pump.start()

    @staticmethod
    def _pump(stream: Any, sink: Callable[[str], None]) -> None:
        for line in stream:
            sink(line.rstrip("\n"))

    def admin_address(self, timeout: float = 10.0) -> str:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no ADMIN line; exit={self.proc.poll()} stderr={self.stderr[-5:]}") from None
        assert line.startswith("ADMIN "), line
        return line.split()[1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[[list[str]], SyncProcess]]:
    started: list[SyncProcess] = []

    def launch(args: list[str]) -> SyncProcess:
        process = SyncProcess(args)
        started.append(process)
        return process

    yield launch
    for process in started:
        process.stop()


def samples(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def count(base: str, name: str, **labels: str) -> float:
    return samples(base).get((name, tuple(sorted(labels.items()))), 0.0)


def test_end_to_end_delivery_rejection_and_shutdown(tmp_path: Path, start: Callable[[list[str]], SyncProcess]) -> None:
    cm = tmp_path / "operator-out" / "configmap.yaml"
    cm.parent.mkdir()
    target = tmp_path / "overlay"
    scope = ",".join(f"{k}={v}" for k, v in SCOPE.as_dict().items())
    sync = start([
        "--configmap-file", str(cm), "--target-dir", str(target), "--admin", "127.0.0.1:0",
        "--expected-scope", scope, "--debounce-ms", "20", "--resync-seconds", "600",
    ])
    address = sync.admin_address()
    base = f"http://{address}"
    assert httpx.get(f"{base}/healthy", timeout=5).status_code == 200
    not_ready = wait_for("the first read_error to be reported",
                         lambda: (r := httpx.get(f"{base}/ready", timeout=5)).json().get("last_outcome") and r)
    assert not_ready.status_code == 503 and "read_error" in not_ready.json()["reason"]

    first = contract.envelope([contract.candidate("m1", "site-a", "c1")], SCOPE, generation=1)
    write_configmap(cm, contract.encode(first))
    overlay_file = target / "routing-overlay.json"
    wait_for("revision 1 in the target", lambda: overlay_file.exists() and overlay_file.read_bytes()
             == contract.encode(first))
    assert os.readlink(overlay_file) == "..data/routing-overlay.json"
    ready = httpx.get(f"{base}/ready", timeout=5)
    assert ready.status_code == 200 and ready.json()["revision"] == contract.revision_of(first)

    second = contract.envelope(
        [contract.candidate("m1", "site-a", "c1"), contract.candidate("m2", "site-a", "c2")], SCOPE, generation=2
    )
    write_configmap(cm, contract.encode(second))
    wait_for("revision 2 in the target", lambda: overlay_file.read_bytes() == contract.encode(second))
    wait_for("2 accepted syncs", lambda: count(base, "grid_overlay_sync_syncs_total", outcome="accepted") == 2)
    assert count(base, "grid_overlay_sync_delivered_generation") == 2

    broken = copy.deepcopy(second)
    broken["overlay"]["candidates"][1]["cluster"] = "edited-after-sealing"
    write_configmap(cm, contract.encode(broken))
    wait_for("a digest_mismatch rejection",
             lambda: count(base, "grid_overlay_sync_rejections_total", reason="digest_mismatch") == 1)
    assert overlay_file.read_bytes() == contract.encode(second)
    assert httpx.get(f"{base}/ready", timeout=5).json()["last_reason"] == "digest_mismatch"

    wrong_scope = contract.envelope([contract.candidate("m1", "site-a", "c1")],
                                    contract.ScopeSpec("grid-a", "other-gw", "ns", "site-a"))
    write_configmap(cm, contract.encode(wrong_scope))
    wait_for("a scope_mismatch rejection",
             lambda: count(base, "grid_overlay_sync_rejections_total", reason="scope_mismatch") == 1)
    assert overlay_file.read_bytes() == contract.encode(second)

    rerender = contract.envelope(second["overlay"]["candidates"], SCOPE, generation=3)
    write_configmap(cm, contract.encode(rerender))
    wait_for("an unchanged sync", lambda: count(base, "grid_overlay_sync_syncs_total", outcome="unchanged") >= 1)
    assert overlay_file.read_bytes() == contract.encode(second)
    final = samples(base)
    assert final[("grid_overlay_sync_syncs_total", (("outcome", "accepted"),))] == 2
    assert final[("grid_overlay_sync_syncs_total", (("outcome", "rejected"),))] == 2

    began = time.monotonic()
    sync.proc.send_signal(signal.SIGTERM)
    assert sync.proc.wait(timeout=5) == 0, sync.stderr[-5:]
    assert time.monotonic() - began < 3
    sync.stderr_pump.join(timeout=5)
    attempts = sum(value for (name, _), value in final.items() if name == "grid_overlay_sync_syncs_total")
    assert sum(1 for line in sync.stderr if " sync outcome=" in line) == attempts, sync.stderr
    host, port = address.rsplit(":", 1)
    with socket.socket() as probe:
        probe.bind((host, int(port)))  # the admin port was released


def test_existing_overlay_is_served_after_restart(tmp_path: Path, start: Callable[[list[str]], SyncProcess]) -> None:
    cm = tmp_path / "configmap.yaml"
    target = tmp_path / "overlay"
    doc = contract.envelope([contract.candidate("m1", "site-a", "c1")], SCOPE)
    write_configmap(cm, contract.encode(doc))
    args = ["--configmap-file", str(cm), "--target-dir", str(target), "--admin", "127.0.0.1:0"]
    first = start(args)
    base = f"http://{first.admin_address()}"
    wait_for("readiness", lambda: httpx.get(f"{base}/ready", timeout=5).status_code == 200)
    first.proc.send_signal(signal.SIGTERM)
    assert first.proc.wait(timeout=5) == 0
    cm.write_text("kind: ConfigMap\ndata: {}\n")  # the key is gone while the sidecar is down
    second = start(args)
    base = f"http://{second.admin_address()}"
    wait_for("a read_error", lambda: count(base, "grid_overlay_sync_syncs_total", outcome="read_error") == 1)
    ready = httpx.get(f"{base}/ready", timeout=5)
    assert ready.status_code == 200 and ready.json()["revision"] == contract.revision_of(doc)
    assert count(base, "grid_overlay_sync_degraded") == 1
    assert httpx.get(f"{base}/nope", timeout=5).status_code == 404


def test_bad_arguments_and_busy_admin_port(tmp_path: Path) -> None:
    base_args = [sys.executable, "-m", "reference.overlay_sync.cli", "--configmap-file", str(tmp_path / "c.yaml"),
                 "--target-dir", str(tmp_path / "t")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bad = subprocess.run([*base_args, "--expected-scope", "cluster=x"], capture_output=True, text=True,
                         env=env, timeout=30)
    assert bad.returncode == 2 and "--expected-scope: unknown scope key 'cluster'" in bad.stderr
    missing = subprocess.run(base_args[:3], capture_output=True, text=True, env=env, timeout=30)
    assert missing.returncode == 2 and "--configmap-file" in missing.stderr
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        busy = subprocess.run([*base_args, "--admin", f"127.0.0.1:{port}"], capture_output=True, text=True,
                              env=env, timeout=30)
    assert busy.returncode == 1 and "cannot bind" in busy.stderr


def test_watch_step_is_bounded_and_reaches_the_file_source(tmp_path: Path) -> None:
    from reference.overlay_sync.cli import make_source, parse_args
    from reference.overlay_sync.source import DEFAULT_WATCH_STEP_MS, FileConfigMapSource

    base = ["--configmap-file", str(tmp_path / "c.yaml"), "--target-dir", str(tmp_path / "t")]
    for value in ("0", "1001"):
        with pytest.raises(SystemExit) as exit_info:
            parse_args([*base, "--watch-step-ms", value])
        assert exit_info.value.code == 2
    default = make_source(parse_args(base))
    tuned = make_source(parse_args([*base, "--watch-step-ms", "10"]))
    assert isinstance(default, FileConfigMapSource) and isinstance(tuned, FileConfigMapSource)
    assert (default.step_ms, tuned.step_ms) == (DEFAULT_WATCH_STEP_MS, 10)
