"""`agn-operator run --kubernetes` against a recording Kubernetes API server on loopback.

Checks the exact API calls: the four CRDs listed then watched from the list's resourceVersion, the
overlay ConfigMap read then server-side applied (field manager, force) only when its revision changes,
GridNetwork status merge-patched through `/status`, invalid objects skipped, no Secret ever requested,
and reconciles on watch events, the periodic interval and the force-refresh annotation.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from reference.kube_client import api_client
from reference.operator.cli import main
from reference.operator.core import FixedClock
from reference.operator.core.configmap import ANNOTATION_REVISION, ENVELOPE_KEY
from reference.operator.core.render import render
from reference.operator.kube import (
    FIELD_MANAGER,
    GRID_RESOURCES,
    KubeSink,
    KubeSource,
    crd_resources,
)
from reference.operator.loop import Operator
from reference.operator.sinks import DirSink
from reference.operator.sources import Loaded
from reference.operator.triggers import FORCE_REFRESH, objects_fingerprint
from tests.kube_api_fake import APPLY, MERGE, FakeKubeApi, Request

GV = "grid.praxis.fast/v1alpha1"
CM_NAME = "grid-overlay-net-1-gw-1"
CM_PATH = f"/api/v1/namespaces/praxis/configmaps/{CM_NAME}"
NETWORK_PATH = f"/apis/{GV}/gridnetworks/net-1"
STATUS_PATH = f"{NETWORK_PATH}/status"
PLURALS = ("agenttoolproviders", "gridnetworks", "gridsites", "inferenceproviders")
DEADLINE = 15.0


def network(mode: str = "deterministic", **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": GV,
        "kind": "GridNetwork",
        "metadata": {"name": "net-1", **metadata},
        "spec": {
            "selectionPolicy": {"mode": mode},
            "gatewayRefs": [{"name": "gw-1", "namespace": "praxis", "localSiteName": "site-a"}],
        },
    }


def site() -> dict[str, Any]:
    return {
        "apiVersion": GV,
        "kind": "GridSite",
        "metadata": {"name": "site-a"},
        "spec": {"gridNetworkRef": "net-1", "region": "r1", "zone": "z1"},
    }


def provider(name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "gridNetworkRef": "net-1",
        "providerKind": "self_hosted",
        "backendKind": "local",
        "endpoint": f"http://{name}.example:8000",
        "clusterName": name,
        "site": "site-a",
        "models": [{"name": "m"}],
        "auth": {
            "strategy": "bearer_token",
            "secretRef": {"name": f"{name}-token", "namespace": "praxis", "key": "token"},
        },
    }
    body.update(spec)
    return {"apiVersion": GV, "kind": "InferenceProvider", "metadata": {"name": name}, "spec": body}


def seeded(api: FakeKubeApi) -> FakeKubeApi:
    for obj in (network(), site(), provider("p1"), provider("p2")):
        api.put(obj)
    return api


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        yield fake


def wait_for(what: str, check: Callable[[], Any], deadline: float = DEADLINE) -> Any:
    end = time.monotonic() + deadline
    seen: Any = None
    while time.monotonic() < end:
        seen = check()
        if seen:
            return seen
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}; last saw {seen!r}")


def summary(requests: list[Request]) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in requests]


def sink_calls(api: FakeKubeApi) -> list[Request]:
    """Every request except the CRD lists and watches (what the sink did)."""
    return [r for r in api.calls(watch=None) if not (r.method == "GET" and r.path.rsplit("/", 1)[-1] in PLURALS)]


def applies(api: FakeKubeApi) -> list[Request]:
    return [r for r in api.calls(method="PATCH") if r.path == CM_PATH]


def assert_no_secrets(api: FakeKubeApi) -> None:
    touched = [r.path for r in api.calls(watch=None) if "secret" in r.path]
    assert not touched, touched


def test_run_once_lists_applies_and_patches_status(
    api: FakeKubeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seeded(api)
    bad = provider("p-bad", capacityWeight=5000)
    api.put(bad)
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    code = main(["run", "--kubernetes", "--kubeconfig", str(kubeconfig), "--once", "--poll", "0.05"])
    assert code == 0, caplog.text
    assert not [t.name for t in threading.enumerate() if t.name.startswith("watch ")], "watch threads left running"
    assert "InferenceProvider/p-bad: InferenceProvider/p-bad rejected: spec.capacityWeight" in caplog.text

    lists = [r for r in api.calls() if r.method == "GET" and r.path.rsplit("/", 1)[-1] in PLURALS]
    assert sorted(r.path for r in lists) == [f"/apis/{GV}/{plural}" for plural in PLURALS]
    assert all("resourceVersion" not in r.query for r in lists)

    assert summary(sink_calls(api)) == [
        ("GET", NETWORK_PATH),  # the object carries its status; RBAC grants no get on /status
        ("GET", CM_PATH),
        ("PATCH", CM_PATH),
        ("PATCH", STATUS_PATH),
    ]
    _status, _read, apply, patch = sink_calls(api)
    assert apply.content_type == APPLY
    assert apply.query == {"fieldManager": FIELD_MANAGER, "force": "true"}
    assert apply.body["kind"] == "ConfigMap" and apply.body["metadata"]["namespace"] == "praxis"
    envelope = json.loads(apply.body["data"][ENVELOPE_KEY])
    assert sorted(c["cluster"] for c in envelope["overlay"]["candidates"]) == ["p1", "p2"]  # p-bad skipped
    assert patch.content_type == MERGE
    (entry,) = patch.body["status"]["overlayStatus"]
    assert entry["phase"] == "Distributed" and entry["distributedRevision"] == envelope["revision"]["value"]
    assert entry["configMapName"] == CM_NAME and patch.body["status"]["observedGeneration"] == 1
    stored = api.get("configmaps", CM_NAME, "praxis")
    assert stored is not None and stored["metadata"]["annotations"][ANNOTATION_REVISION] == entry["renderedRevision"]
    assert api.get("gridnetworks", "net-1")["status"]["overlayStatus"] == [entry]  # type: ignore[index]
    assert_no_secrets(api)
    assert "secret" not in json.dumps([r.body for r in sink_calls(api)]).replace("secretRef", "")


def test_same_entries_as_the_dir_sink(api: FakeKubeApi, tmp_path: Path) -> None:
    """Both sinks build overlayStatus with the shared code: identical entries for the same render."""
    seeded(api)
    client = api_client(api.kubeconfig(tmp_path / "kubeconfig"))
    source = KubeSource(client)
    source.start()
    try:
        wait_for("the initial lists", source.ready)
        loaded = source.load()
    finally:
        source.stop()
    wall = datetime(2026, 1, 1, tzinfo=UTC)
    rendered = render(loaded.resources, [], [], FixedClock())
    from_kube = KubeSink(client).publish(loaded.resources.networks, rendered, wall)
    from_dir = DirSink(tmp_path / "out").publish(loaded.resources.networks, rendered, wall)
    assert from_kube == from_dir and from_kube["net-1"][0]["phase"] == "Distributed"
    failed = KubeSink(client).publish(loaded.resources.networks, [], wall, "ValueError: boom")
    assert failed["net-1"][0]["distributedRevision"] == from_kube["net-1"][0]["distributedRevision"]
    assert (failed["net-1"][0]["phase"], failed["net-1"][0]["message"]) == ("Error", "ValueError: boom")
    client.close()


def test_apply_failure_is_reported_in_status(api: FakeKubeApi, tmp_path: Path) -> None:
    seeded(api)
    client = api_client(api.kubeconfig(tmp_path / "kubeconfig"))
    source = KubeSource(client)
    source.start()
    try:
        wait_for("the initial lists", source.ready)
        loaded = source.load()
    finally:
        source.stop()
    api.fail_next(500, path=CM_PATH)  # the ConfigMap read
    written = KubeSink(client).publish(
        loaded.resources.networks, render(loaded.resources, [], [], FixedClock()), datetime(2026, 1, 1, tzinfo=UTC)
    )
    (entry,) = written["net-1"]
    assert (entry["phase"], entry["reason"]) == ("Error", "WriteFailed")
    assert "HTTP 500" in entry["message"] and "injected failure" in entry["message"]
    assert "distributedRevision" not in entry
    assert api.get("gridnetworks", "net-1")["status"]["overlayStatus"] == [entry]  # type: ignore[index]
    client.close()


class Running:
    """The operator loop on a thread of its own, against the fake API."""

    def __init__(self, api: FakeKubeApi, kubeconfig: Path) -> None:
        self.clock = FixedClock()
        self.client = api_client(kubeconfig)
        self.source = KubeSource(self.client, watch_seconds=30, backoff=(0.05, 0.2))
        sink = KubeSink(self.client, network_namespace=self.source.network_namespace)
        self.operator = Operator(self.source, sink, self.clock, poll=0.02)
        self.reconciles: list[Loaded] = []
        original = self.operator.reconcile

        async def reconcile(loaded: Loaded) -> bool:
            result = await original(loaded)
            self.reconciles.append(loaded)
            return result

        self.operator.reconcile = reconcile  # type: ignore[method-assign]
        self.loop = asyncio.new_event_loop()
        self.stop_event = asyncio.Event()
        self.result: int | None = None

    def __enter__(self) -> Running:
        self.source.start()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.result = self.loop.run_until_complete(self.operator.run(self.stop_event))

    def __exit__(self, *_exc: object) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(10)
        self.source.stop()
        self.loop.close()
        self.client.close()


def test_watch_events_periodic_and_force_refresh_trigger_reconciles(api: FakeKubeApi, tmp_path: Path) -> None:
    seeded(api)
    with Running(api, api.kubeconfig(tmp_path / "kubeconfig")) as running:
        wait_for("the first status patch", lambda: [r for r in api.calls(method="PATCH") if r.path == STATUS_PATH])
        assert len(applies(api)) == 1
        first_revision = applies(api)[0].body["metadata"]["annotations"][ANNOTATION_REVISION]
        wait_for("a watch per CRD", lambda: len({r.path for r in api.calls(watch=True)}) == 4)
        watches = api.calls(watch=True)
        assert all(r.query.get("resourceVersion") and r.query.get("allowWatchBookmarks") == "true" for r in watches)

        # Periodic: identical state re-renders to the same revision, so the ConfigMap is read, not applied.
        wait_for(
            "the initial reconcile recorded",
            lambda: len(running.reconciles) == 1 and running.operator.triggers.last_run is not None,
        )
        reads_before = len([r for r in api.calls(method="GET") if r.path == CM_PATH])
        count = len(running.reconciles)
        running.clock.advance(301.0)
        wait_for("a periodic reconcile", lambda: len(running.reconciles) > count)
        wait_for(
            "the ConfigMap read again",
            lambda: len([r for r in api.calls(method="GET") if r.path == CM_PATH]) > reads_before,
        )
        assert len(applies(api)) == 1

        # Force refresh: the annotation alone triggers a reconcile; still nothing new to apply.
        count = len(running.reconciles)
        api.put(network(annotations={FORCE_REFRESH: "1"}))
        wait_for("a force-refresh reconcile", lambda: len(running.reconciles) > count)
        assert len(applies(api)) == 1

        # A MODIFIED event with a new spec: a new revision is applied, once.
        api.put(network(mode="roundRobin", annotations={FORCE_REFRESH: "1"}))
        wait_for("the new revision applied", lambda: len(applies(api)) == 2)
        second = applies(api)[1].body
        assert second["metadata"]["annotations"][ANNOTATION_REVISION] != first_revision
        assert json.loads(second["data"][ENVELOPE_KEY])["overlay"]["selection_policy"]["mode"] == "roundRobin"
        wait_for(
            "status for generation 2",
            lambda: (api.get("gridnetworks", "net-1") or {}).get("status", {}).get("observedGeneration") == 2,
        )

        # An ADDED provider arrives by watch; an expired watch (410) is answered by listing again.
        lists_before = len([r for r in api.calls() if r.path.endswith("/inferenceproviders")])
        api.expire()
        wait_for(
            "the providers listed again",
            lambda: len([r for r in api.calls() if r.path.endswith("/inferenceproviders")]) > lists_before,
        )
        api.put(provider("p3"))
        wait_for("p3 in the applied overlay", lambda: len(applies(api)) == 3)
        third = json.loads(applies(api)[2].body["data"][ENVELOPE_KEY])
        assert sorted(c["cluster"] for c in third["overlay"]["candidates"]) == ["p1", "p2", "p3"]

        # Our own status writes do not make the loop see a change: once the watch has delivered the
        # status patch, the fingerprint is the one the last reconcile ran with.
        revision = third["revision"]["value"]
        wait_for(
            "status for the p3 revision",
            lambda: [
                r
                for r in api.calls(method="PATCH")
                if r.path == STATUS_PATH and r.body["status"]["overlayStatus"][0].get("distributedRevision") == revision
            ],
        )
        watch = running.source.watches["GridNetwork"]
        wait_for(  # read the stored object each time: a later status write moves its version on
            "the status write seen by the watch",
            lambda: watch.resource_version == ((api.get("gridnetworks", "net-1") or {}).get("metadata") or {}).get(
                "resourceVersion"
            ),
        )
        wait_for(
            "the reconcile finished", lambda: running.operator.triggers.last_fingerprint == running.source.fingerprint()
        )
        # initial, periodic, force-refresh, new spec, new provider: none for status writes or the re-list
        assert len(running.reconciles) == 5
    assert running.result == 0
    assert all(r.method in ("GET", "PATCH") for r in api.calls(watch=None))
    assert_no_secrets(api)


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    cases = [
        (["run", "--kubernetes", "--manifests", str(tmp_path)], "--manifests: cannot be combined with --kubernetes"),
        (["run", "--kubernetes", "--out", str(tmp_path)], "--out: cannot be combined with --kubernetes"),
        (["run", "--out", str(tmp_path)], "--manifests: required (or --kubernetes"),
        (
            ["run", "--manifests", str(tmp_path), "--out", str(tmp_path), "--namespace", "x"],
            "--namespace: only meaningful with --kubernetes",
        ),
        (["run", "--kubernetes", "--namespace", "Bad_NS"], "--namespace: 'Bad_NS' is not a namespace name"),
        (["run", "--kubernetes", "--kubeconfig", str(tmp_path / "missing")], "--kubeconfig:"),
        (["run", "--kubernetes"], "--kubernetes: in-cluster configuration"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err, (argv, err)
    (tmp_path / "kc").write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    assert main(["run", "--kubernetes", "--kubeconfig", str(tmp_path / "kc"), "--context", "nope"]) == 2
    assert "--kubernetes: --kubeconfig" in capsys.readouterr().err


def test_fingerprint_ignores_own_status_and_server_bookkeeping() -> None:
    base = [network(), {**site(), "status": {"phase": "Active"}}]
    before = objects_fingerprint(base, frozenset({"GridNetwork"}))
    written = [
        {**network(resourceVersion="9", managedFields=[{"manager": FIELD_MANAGER}]), "status": {"overlayStatus": []}},
        base[1],
    ]
    assert objects_fingerprint(written, frozenset({"GridNetwork"})) == before
    degraded = [base[0], {**site(), "status": {"phase": "Degraded"}}]
    assert objects_fingerprint(degraded, frozenset({"GridNetwork"})) != before
    forced = [network(annotations={FORCE_REFRESH: "2"}), base[1]]
    assert objects_fingerprint(forced, frozenset({"GridNetwork"})) != before


def test_watched_kinds_match_the_crds() -> None:
    assert sorted(GRID_RESOURCES, key=lambda r: r.kind) == sorted(crd_resources(), key=lambda r: r.kind)


def test_dir_mode_unchanged_by_the_source_abstraction(tmp_path: Path) -> None:
    manifests = tmp_path / "m"
    manifests.mkdir()
    (manifests / "all.yaml").write_text(yaml.safe_dump_all([network(), site(), provider("p1")]))
    out = tmp_path / "out"
    assert main(["run", "--manifests", str(manifests), "--out", str(out), "--once"]) == 0
    status = yaml.safe_load((out / "net-1.status.yaml").read_text())
    assert status["status"]["overlayStatus"][0]["phase"] == "Distributed"
    assert (out / f"{CM_NAME}.configmap.yaml").exists()
