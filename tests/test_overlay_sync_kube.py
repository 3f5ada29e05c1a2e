"""agn-overlay-sync --configmap NAMESPACE/NAME: the ConfigMap watched through a recording Kubernetes API.

Each version a watch event delivers goes through the same validation and atomic delivery as the file
mode; an invalid update keeps the last good revision; an expired watch (410) is answered by listing
again; API errors are retried with backoff; only that one ConfigMap is ever requested.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import contract
from reference.kube_client import api_client
from reference.overlay_sync import cli
from reference.overlay_sync.kube_source import KubeConfigMapSource
from reference.overlay_sync.source import SourceError
from tests.kube_api_fake import FakeKubeApi, Request
from tests.test_overlay_sync_cli import SCOPE, SyncProcess, count, wait_for

NAMESPACE = "ns"
NAME = "grid-a-gw-overlay"
LIST_PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
SLOW_START = 60.0  # the first request of a fresh process imports the kubernetes client (seconds on a busy host)


def configmap(overlay: bytes, name: str = NAME) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {"routing-overlay.json": overlay.decode(), "routing-config.json": overlay.decode()},
    }


def revision(generation: int, *clusters: str) -> dict[str, Any]:
    candidates = [contract.candidate(f"m{i}", "site-a", c) for i, c in enumerate(clusters)]
    return contract.envelope(candidates, SCOPE, generation=generation)


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        yield fake


@pytest.fixture
def start() -> Iterator[Callable[[list[str]], SyncProcess]]:
    started: list[SyncProcess] = []

    def launch(args: list[str]) -> SyncProcess:
        process = SyncProcess(args)
        started.append(process)
        return process

    yield launch
    for process in started:
        process.stop()


def lists(api: FakeKubeApi) -> list[Request]:
    return api.calls(watch=False)


def test_watch_delivers_revisions_and_keeps_the_last_good_one(
    api: FakeKubeApi, tmp_path: Path, start: Callable[[list[str]], SyncProcess]
) -> None:
    first = revision(1, "c1")
    api.put(configmap(contract.encode(first)))
    api.put(configmap(contract.encode(revision(9, "other")), name="unrelated"))
    target = tmp_path / "overlay"
    scope = ",".join(f"{k}={v}" for k, v in SCOPE.as_dict().items())
    sync = start(
        [
            "--configmap",
            f"{NAMESPACE}/{NAME}",
            "--kubeconfig",
            str(api.kubeconfig(tmp_path / "kubeconfig")),
            "--target-dir",
            str(target),
            "--admin",
            "127.0.0.1:0",
            "--expected-scope",
            scope,
            "--resync-seconds",
            "600",
        ]
    )
    base = f"http://{sync.admin_address(timeout=SLOW_START)}"
    overlay_file = target / "routing-overlay.json"
    wait_for(
        "revision 1 in the target",
        lambda: overlay_file.exists() and overlay_file.read_bytes() == contract.encode(first),
        timeout=SLOW_START,
    )

    second = revision(2, "c1", "c2")
    api.put(configmap(contract.encode(second)))
    wait_for("revision 2 from a MODIFIED event", lambda: overlay_file.read_bytes() == contract.encode(second))

    broken = revision(3, "c1", "c2")
    broken["overlay"]["candidates"][1]["cluster"] = "edited-after-sealing"
    api.put(configmap(contract.encode(broken)))
    wait_for(
        "a digest_mismatch rejection",
        lambda: count(base, "grid_overlay_sync_rejections_total", reason="digest_mismatch") == 1,
    )
    assert overlay_file.read_bytes() == contract.encode(second)

    # The watch expires and the first two re-lists fail: listed again (with backoff) until one succeeds.
    listed = len(lists(api))
    api.fail_next(500, 500, path=LIST_PATH)
    api.expire()
    wait_for("three more lists", lambda: len(lists(api)) >= listed + 3)
    third = revision(4, "c3")
    api.put(configmap(contract.encode(third)))
    wait_for("revision 3 after the re-list", lambda: overlay_file.read_bytes() == contract.encode(third))

    api.delete(configmap(b""))
    wait_for(
        "a read_error for the deleted ConfigMap",
        lambda: count(base, "grid_overlay_sync_syncs_total", outcome="read_error") >= 1,
    )
    assert overlay_file.read_bytes() == contract.encode(third)

    sync.proc.send_signal(signal.SIGTERM)
    assert sync.proc.wait(timeout=10) == 0, sync.stderr[-5:]
    assert count_accepted(sync) == 3
    requests = api.calls(watch=None)
    assert {(r.method, r.path) for r in requests} == {("GET", LIST_PATH)}, {(r.method, r.path) for r in requests}
    assert all(r.query.get("fieldSelector") == f"metadata.name={NAME}" for r in requests)
    watches = api.calls(watch=True)
    assert len(watches) >= 2 and all(r.query.get("resourceVersion") for r in watches)


def count_accepted(sync: SyncProcess) -> int:
    sync.stderr_pump.join(timeout=5)
    return sum(1 for line in sync.stderr if " sync outcome=accepted" in line)


def test_source_retries_and_reports_a_missing_configmap(api: FakeKubeApi, tmp_path: Path) -> None:
    client = api_client(api.kubeconfig(tmp_path / "kubeconfig"))
    api.fail_next(503, path=LIST_PATH)
    source = KubeConfigMapSource(client, NAMESPACE, NAME, backoff=(0.05, 0.1))

    async def scenario() -> list[str]:
        stop = asyncio.Event()
        seen: list[str] = []

        async def follow() -> None:
            async for _ in source.changes(stop):
                try:
                    seen.append(source.read().data.decode())
                except SourceError as exc:
                    seen.append(f"error: {exc}")

        task = asyncio.create_task(follow())
        deadline = time.monotonic() + 20
        while not seen and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.to_thread(api.put, configmap(b"{}"))
        while len(seen) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        stop.set()
        await asyncio.wait_for(task, 10)
        return seen

    seen = asyncio.run(scenario())
    client.close()
    assert seen[0] == f"error: configmap {NAMESPACE}/{NAME} not found", seen
    assert seen[-1] == "{}", seen
    first, second = lists(api)[:2]
    assert (first.path, second.path) == (LIST_PATH, LIST_PATH)  # the 503 was retried


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    target = str(tmp_path / "t")
    cases = [
        (["--configmap", "no-slash", "--target-dir", target], "--configmap: 'no-slash' is not NAMESPACE/NAME"),
        (["--configmap", "ns/Bad_Name", "--target-dir", target], "name 'Bad_Name' is not a valid"),
        (
            ["--configmap", "ns/a", "--configmap-file", str(tmp_path / "f"), "--target-dir", target],
            "not allowed with argument",
        ),
        (
            ["--configmap-file", str(tmp_path / "f"), "--kubeconfig", str(tmp_path / "k"), "--target-dir", target],
            "--kubeconfig: only meaningful with --configmap",
        ),
        (["--configmap", "ns/a", "--kubeconfig", str(tmp_path / "missing"), "--target-dir", target], "--kubeconfig: "),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 2, argv
        assert message in capsys.readouterr().err, argv
    assert cli.main(["--configmap", "ns/a", "--target-dir", target]) == 2
    assert "--configmap: in-cluster configuration" in capsys.readouterr().err
