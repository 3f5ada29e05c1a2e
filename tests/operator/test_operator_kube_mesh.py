"""The mesh outputs in `agn-operator run --kubernetes` mode, against the recording Kubernetes API server.

`KubeSink` stores what the `dir` sink writes as files: the mesh status in the ConfigMap `agn-mesh-state`
(the same YAML), and one GridSite per discovered site, of which it owns only the name, two labels and
`spec.gridNetworkRef` (server-side apply, field manager `agn-operator`) plus the status (merge patch of
the status subresource). The tests check the exact requests: an admin's trust pins applied by another
field manager survive, nothing is rewritten unless it changed (the operator's own writes come back
through the watch), only auto-discovered GridSites are deleted, and no Secret is ever asked for.

The end-to-end test runs a real `--kubernetes` operator process meshing with a `dir`-mode operator over
loopback UDP, the cluster operator announcing an address in front of its bind (a forwarder standing for
the node port).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from harness.process import ManagedProcess, Supervisor
from harness.resources import gateway_ref, grid_network, grid_site, inference_provider
from harness.waiting import WaitTimeout, poll_until
from reference.kube_client import api_client
from reference.operator.core.configmap import ENVELOPE_KEY, configmap_name
from reference.operator.kube import AGE_REFRESH_SECONDS, FIELD_MANAGER, MESH_STATE_CONFIGMAP, KubeSink
from reference.operator.mesh.sites import API_VERSION, LABEL_DISCOVERED, LABEL_NETWORK, discovered_site_resource
from reference.operator.sinks import MESH_STATUS_FILE, DirSink
from tests.kube_api_fake import APPLY, MERGE, FakeKubeApi
from tests.operator.test_operator_mesh import free_udp_port, tls_listener, write_site
from tests.operator.udp_forwarder import UdpForwarder

ROOT = Path(__file__).resolve().parents[2]
NET = "mesh-net"
NAMESPACE = "agn-system"
GRIDSITES = "/apis/grid.praxis.fast/v1alpha1/gridsites"
MESH_STATE_PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{MESH_STATE_CONFIGMAP}"
SWIM = ["--swim-probe-interval", "0.5", "--swim-probe-timeout", "0.3", "--swim-suspicion-mult", "3"]
HOST_A, HOST_NAT, HOST_B = "127.0.0.61", "127.0.0.62", "127.0.0.63"
DEADLINE = 30.0
T = TypeVar("T")


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        yield fake


def discovered(site: str, phase: str, *, reason: str = "R", probed: str = "t1", network: str = NET) -> dict[str, Any]:
    """A discovered GridSite as the mesh runtime hands it to a sink (announced gateway in the spec)."""
    obj = discovered_site_resource(network, site, "127.0.0.9:8443")
    obj["status"] = {
        "phase": phase,
        "reason": reason,
        "message": f"{phase} because {reason}",
        "lastProbeTime": probed,
        "lastTransitionTime": "t0",
    }
    return obj


def owned(name: str, network: str = NET) -> dict[str, Any]:
    """Exactly what the operator applies for a discovered GridSite."""
    return {
        "apiVersion": API_VERSION,
        "kind": "GridSite",
        "metadata": {"name": name, "labels": {LABEL_NETWORK: network, LABEL_DISCOVERED: "true"}},
        "spec": {"gridNetworkRef": network},
    }


def site_calls(api: FakeKubeApi, since: int = 0) -> list[tuple[str, str, str | None]]:
    """(method, path under gridsites, content type) of the GridSite requests after the first `since`."""
    return [
        (r.method, r.path.removeprefix(GRIDSITES + "/"), r.content_type)
        for r in api.calls()[since:]
        if r.path.startswith(GRIDSITES + "/")
    ]


def assert_no_secrets(api: FakeKubeApi) -> None:
    touched = [r.path for r in api.calls(watch=None) if "secret" in r.path.lower()]
    assert not touched, touched


@pytest.fixture
def sink(api: FakeKubeApi, tmp_path: Path) -> Iterator[KubeSink]:
    client = api_client(api.kubeconfig(tmp_path / "kubeconfig"))
    yield KubeSink(client, mesh_namespace=NAMESPACE, gridsites=lambda: api.items("gridsites"))
    client.close()


# --- the sink, request by request ----------------------------------------------------------------


def test_gridsites_are_applied_and_status_patched_only_when_they_change(api: FakeKubeApi, sink: KubeSink) -> None:
    name = f"{NET}-site-b"
    assert sink.write_gridsites({name: discovered("site-b", "Connecting")}, [NET]) == [name]
    apply, status = api.calls()
    assert (apply.method, apply.path, apply.content_type) == ("PATCH", f"{GRIDSITES}/{name}", APPLY)
    assert apply.query == {"fieldManager": FIELD_MANAGER, "force": "true"}
    assert apply.body == owned(name), "only the owned fields: no announced gatewayEndpoint, no status"
    assert (status.method, status.path, status.content_type) == ("PATCH", f"{GRIDSITES}/{name}/status", MERGE)
    assert "fieldManager" not in status.query and "force" not in status.query
    assert status.body == {"status": discovered("site-b", "Connecting")["status"]}
    stored = api.get("gridsites", name)
    assert stored is not None and stored["spec"] == {"gridNetworkRef": NET}
    assert stored["status"]["phase"] == "Connecting"

    count = len(api.calls())
    assert sink.write_gridsites({name: discovered("site-b", "Connecting")}, [NET]) == []
    assert sink.write_gridsites({name: discovered("site-b", "Connecting", probed="t2")}, [NET]) == []
    assert len(api.calls()) == count, "unchanged, or only a new probe time: nothing written"

    # An admin pins the site with its own field manager: kept, and no reason for the operator to write.
    pins = {"canonicalFingerprints": ["ab" * 32]}
    api.apply({"apiVersion": API_VERSION, "kind": "GridSite", "metadata": {"name": name},
               "spec": {"gridNetworkRef": NET, "trust": pins}}, "admin")
    assert sink.write_gridsites({name: discovered("site-b", "Connecting", probed="t3")}, [NET]) == []
    assert len(api.calls()) == count

    # A new verdict: the status alone is patched; the admin's trust and the operator's labels stay.
    assert sink.write_gridsites({name: discovered("site-b", "Active", reason="Verified")}, [NET]) == [name]
    assert site_calls(api, count) == [("PATCH", f"{name}/status", MERGE)]
    stored = api.get("gridsites", name)
    assert stored is not None
    assert stored["spec"] == {"gridNetworkRef": NET, "trust": pins}
    assert stored["metadata"]["labels"] == owned(name)["metadata"]["labels"]
    assert [m["manager"] for m in stored["metadata"]["managedFields"]] == [FIELD_MANAGER, "admin"]
    assert (stored["status"]["phase"], stored["status"]["reason"]) == ("Active", "Verified")

    # Someone replaces the object without the operator's labels: applied again, the admin's spec kept.
    count = len(api.calls())
    api.put({"apiVersion": API_VERSION, "kind": "GridSite", "metadata": {"name": name},
             "spec": {"gridNetworkRef": NET, "trust": pins}, "status": stored["status"]})
    assert sink.write_gridsites({name: discovered("site-b", "Active", reason="Verified")}, [NET]) == [name]
    assert site_calls(api, count) == [("PATCH", name, APPLY)]
    stored = api.get("gridsites", name)
    assert stored is not None and stored["spec"]["trust"] == pins and stored["metadata"]["labels"][LABEL_DISCOVERED]

    # Deleted behind the operator's back: created again, status included.
    count = len(api.calls())
    api.delete(stored)
    assert sink.write_gridsites({name: discovered("site-b", "Active", reason="Verified")}, [NET]) == [name]
    assert site_calls(api, count) == [("PATCH", name, APPLY), ("PATCH", f"{name}/status", MERGE)]
    assert_no_secrets(api)


def test_a_gridsite_an_admin_pinned_is_kept_when_its_site_goes_away(api: FakeKubeApi, sink: KubeSink) -> None:
    """A site that leaves is no longer discovered, but the trust an admin configured on its GridSite must be
    there when it comes back (found by a real kind run: a restarted operator's site returned Connecting,
    TrustMaterialMissing, because its GridSite had been deleted with the pins). The twin: the same GridSite
    without pins is deleted."""
    pinned, bare = f"{NET}-site-b", f"{NET}-site-c"
    assert sink.write_gridsites({n: discovered(n[-6:], "Active") for n in (pinned, bare)}, [NET])
    stored = api.get("gridsites", pinned)
    assert stored is not None
    api.put({**stored, "spec": {**stored["spec"], "trust": {"canonicalFingerprints": ["ab" * 32]}}})
    count = len(api.calls())
    assert sink.write_gridsites({}, [NET]) == [bare]
    assert site_calls(api, count) == [("DELETE", bare, None)]
    kept = api.get("gridsites", pinned)
    assert kept is not None and kept["spec"]["trust"] == {"canonicalFingerprints": ["ab" * 32]}
    assert sink.write_gridsites({pinned: discovered("site-b", "Active")}, [NET]) == [], "back: nothing to write"
    assert (api.get("gridsites", pinned) or {})["spec"]["trust"] == {"canonicalFingerprints": ["ab" * 32]}
    assert sink.write_gridsites({}, []) == [pinned], "its network gone, the pinned GridSite goes too"


def test_only_auto_discovered_gridsites_that_went_away_are_deleted(api: FakeKubeApi, sink: KubeSink) -> None:
    gone, relabelled = f"{NET}-site-b", f"{NET}-site-c"
    assert sink.write_gridsites({n: discovered(n[-6:], "Connecting") for n in (gone, relabelled)}, [NET])
    # An admin took site-c over (replaced without the auto-discovered label): never the operator's to delete.
    api.put({"apiVersion": API_VERSION, "kind": "GridSite", "metadata": {"name": relabelled},
             "spec": {"gridNetworkRef": NET}})
    # Left over from an earlier run: one in a network that is gone (swept), one in a local network (its
    # site may come back, and an admin's pins on it with it: kept), and a declared site of this network.
    api.put({**owned("old-net-site-z", "old-net"), "status": {"phase": "Active"}})
    api.put({**owned(f"{NET}-site-q"), "status": {"phase": "Active"}})
    api.put(grid_site("site-a", NET))
    count = len(api.calls())
    assert sorted(sink.write_gridsites({}, [NET])) == [gone, "old-net-site-z"]
    assert site_calls(api, count) == [("DELETE", gone, None), ("DELETE", "old-net-site-z", None)]
    assert {o["metadata"]["name"] for o in api.items("gridsites")} == {relabelled, f"{NET}-site-q", "site-a"}
    count = len(api.calls())
    assert sink.write_gridsites({}, [NET]) == []
    assert len(api.calls()) == count, "nothing left to delete"
    # The network itself goes away: its remaining auto-discovered GridSite goes, the others stay.
    assert sink.write_gridsites({}, []) == [f"{NET}-site-q"]
    assert {o["metadata"]["name"] for o in api.items("gridsites")} == {relabelled, "site-a"}


def test_a_lagging_watch_causes_no_second_write(api: FakeKubeApi, tmp_path: Path) -> None:
    """Until the watch shows the operator's own write, the stale copy must not cause the same write again."""
    client = api_client(api.kubeconfig(tmp_path / "kubeconfig"))
    view: list[dict[str, Any]] = []
    sink = KubeSink(client, mesh_namespace=NAMESPACE, gridsites=lambda: view)
    name = f"{NET}-site-b"
    try:
        assert sink.write_gridsites({name: discovered("site-b", "Connecting")}, [NET]) == [name]
        count = len(api.calls())
        for probed in ("t2", "t3"):
            assert sink.write_gridsites({name: discovered("site-b", "Connecting", probed=probed)}, [NET]) == []
        assert len(api.calls()) == count
        # A new wish is written at once, even though the watch still shows nothing.
        assert sink.write_gridsites({name: discovered("site-b", "Active")}, [NET]) == [name]
        assert [call[0] for call in site_calls(api, count)] == ["PATCH", "PATCH"]
        # The watch catches up: the stored object is as wished, nothing more to do.
        view[:] = api.items("gridsites")
        count = len(api.calls())
        assert sink.write_gridsites({name: discovered("site-b", "Active", probed="t9")}, [NET]) == []
        # Gone while the watch still shows it: one DELETE, not one per pass.
        assert sink.write_gridsites({}, [NET]) == [name]
        assert sink.write_gridsites({}, [NET]) == []
        assert site_calls(api, count) == [("DELETE", name, None)]
    finally:
        client.close()


def test_failed_writes_raise_and_are_retried(api: FakeKubeApi, sink: KubeSink) -> None:
    name = f"{NET}-site-b"
    api.fail_next(500, path=f"{GRIDSITES}/{name}/status")
    with pytest.raises(OSError, match=f"patching GridSite {name} status: HTTP 500"):
        sink.write_gridsites({name: discovered("site-b", "Connecting")}, [NET])
    count = len(api.calls())
    assert sink.write_gridsites({name: discovered("site-b", "Connecting")}, [NET]) == [name]
    assert site_calls(api, count) == [("PATCH", f"{name}/status", MERGE)], "the apply had succeeded"
    api.fail_next(503, path=f"{GRIDSITES}/{name}")
    with pytest.raises(OSError, match=f"deleting GridSite {name}: HTTP 503"):
        sink.write_gridsites({}, [NET])
    assert sink.write_gridsites({}, [NET]) == [name]
    assert api.get("gridsites", name) is None


def test_mesh_state_configmap_holds_the_dir_sink_yaml(api: FakeKubeApi, sink: KubeSink, tmp_path: Path) -> None:
    document = {
        "site": "site-a",
        "address": "127.0.0.62:30946",
        "members": [{"name": "site-b", "address": "127.0.0.63:7946", "status": "alive", "incarnation": 0,
                     "ageSecs": 0}],
        "records": [],
    }
    assert sink.write_mesh_status(document)
    (apply,) = api.calls()
    assert (apply.method, apply.path, apply.content_type) == ("PATCH", MESH_STATE_PATH, APPLY)
    assert apply.query == {"fieldManager": FIELD_MANAGER, "force": "true"}
    dir_sink = DirSink(tmp_path / "out")
    dir_sink.write_mesh_status(document)
    assert apply.body == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": MESH_STATE_CONFIGMAP,
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER},
        },
        "data": {MESH_STATUS_FILE: dir_sink.mesh_status_path().read_text()},
    }
    assert not sink.write_mesh_status(dict(document))
    assert len(api.calls()) == 1, "unchanged: not applied again"
    assert sink.write_mesh_status({**document, "members": []})
    stored = api.get("configmaps", MESH_STATE_CONFIGMAP, NAMESPACE)
    assert stored is not None and yaml.safe_load(stored["data"][MESH_STATUS_FILE])["members"] == []
    api.fail_next(500, path=MESH_STATE_PATH)
    with pytest.raises(OSError, match=f"{NAMESPACE}/{MESH_STATE_CONFIGMAP}: HTTP 500"):
        sink.write_mesh_status(document)
    assert sink.write_mesh_status(document), "a failed write is tried again"


def test_member_ages_alone_refresh_the_mesh_state_at_most_every_ten_seconds(api: FakeKubeApi, tmp_path: Path) -> None:
    """A dead member's age ticks every second: not a ConfigMap write every second."""
    client = api_client(api.kubeconfig(tmp_path / "kubeconfig"))
    clock = [100.0]
    sink = KubeSink(client, mesh_namespace=NAMESPACE, now=lambda: clock[0])

    def document(age: int, status: str = "dead") -> dict[str, Any]:
        dead = {"name": "site-c", "address": "127.0.0.64:7946", "status": status, "incarnation": 1, "ageSecs": age}
        return {"site": "site-a", "address": "127.0.0.62:30946", "members": [dead], "records": []}

    try:
        assert sink.write_mesh_status(document(1))
        clock[0] += 1.0
        assert not sink.write_mesh_status(document(2)), "only the age moved"
        clock[0] += 1.0
        assert sink.write_mesh_status(document(3, status="left")), "a status change is written at once"
        clock[0] += AGE_REFRESH_SECONDS - 0.5
        assert not sink.write_mesh_status(document(12, status="left"))
        clock[0] += 0.5
        assert sink.write_mesh_status(document(13, status="left")), "ages refreshed after the interval"
        stored = api.get("configmaps", MESH_STATE_CONFIGMAP, NAMESPACE)
        assert stored is not None and yaml.safe_load(stored["data"][MESH_STATUS_FILE])["members"][0]["ageSecs"] == 13
        assert len([r for r in api.calls() if r.path == MESH_STATE_PATH]) == 3
    finally:
        client.close()


# --- a real operator process in --kubernetes mode, meshing with a dir-mode one --------------------------------


def mesh_state(api: FakeKubeApi) -> dict[str, Any]:
    stored = api.get("configmaps", MESH_STATE_CONFIGMAP, NAMESPACE)
    return yaml.safe_load(stored["data"][MESH_STATUS_FILE]) if stored else {}


def member(document: dict[str, Any], name: str) -> dict[str, Any]:
    return next((m for m in document.get("members") or [] if m["name"] == name), {})


def overlay_candidates(api: FakeKubeApi) -> list[tuple[str, str]]:
    stored = api.get("configmaps", configmap_name(NET, "edge-gateway"), NAMESPACE)
    if stored is None:
        return []
    candidates = yaml.safe_load(stored["data"][ENVELOPE_KEY])["overlay"]["candidates"]
    return sorted((c["site"], c["cluster"]) for c in candidates)


def test_kubernetes_mode_operator_publishes_mesh_outputs(api: FakeKubeApi, tmp_path: Path) -> None:
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    supervisor = Supervisor(tmp_path / "logs")
    procs: dict[str, ManagedProcess] = {}
    name = f"{NET}-site-b"

    def wait(probe: Callable[[], T], done: Callable[[T], bool], what: str) -> T:
        try:
            return poll_until(probe, done, what=what, timeout=DEADLINE)
        except WaitTimeout as exc:
            logs = "\n".join(f"--- {n}\n{p.log_tail(30)}" for n, p in procs.items())
            raise AssertionError(f"{exc}\n{logs}") from None

    network = grid_network(NET, [gateway_ref("site-a")], staleCandidateTtlSeconds=5)
    for obj in (network, grid_site("site-a", NET),
                inference_provider("prov-a", NET, site="site-a", cluster="local-a", models=["model-a"])):
        api.put(obj)
    port_a, port_b = free_udp_port(HOST_A), free_udp_port(HOST_B)
    try:
        with tls_listener(HOST_B) as (gateway, pin), UdpForwarder(HOST_NAT, target=(HOST_A, port_a)) as nat:
            advertised = f"{HOST_NAT}:{nat.address[1]}"
            write_site(tmp_path / "b" / "manifests", "site-b")
            procs["site-b"] = supervisor.start("site-b", [
                sys.executable, "-m", "reference.operator", "run", "--poll", "0.2",
                "--manifests", str(tmp_path / "b" / "manifests"), "--out", str(tmp_path / "b" / "out"),
                "--mesh-site", "site-b", "--mesh-bind", f"{HOST_B}:{port_b}", "--mesh-seeds", advertised,
                "--mesh-gateway", gateway, "--mesh-routing-cluster", "b-route", *SWIM,
            ], env=env)
            procs["site-a"] = supervisor.start("site-a", [
                sys.executable, "-m", "reference.operator", "run", "--poll", "0.2",
                "--kubernetes", "--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")), "--namespace", NAMESPACE,
                "--mesh-site", "site-a", "--mesh-bind", f"{HOST_A}:{port_a}", "--mesh-advertise", advertised,
                "--mesh-seeds", f"{HOST_B}:{port_b}", *SWIM,
            ], env=env)

            # The mesh status, in the ConfigMap: site-b alive with its record, site-a by its advertised address.
            state = wait(lambda: mesh_state(api), lambda doc: member(doc, "site-b").get("status") == "alive"
                         and any(r["site"] == "site-b" for r in doc.get("records") or []), "site-b in agn-mesh-state")
            assert (state["site"], state["address"]) == ("site-a", advertised)
            record = next(r for r in state["records"] if r["site"] == "site-b")
            assert (record["provider"], record["cluster"], record["models"]) == ("prov-b", "local-b", ["model-b"]), \
                "the record names the provider's own clusterName"
            stored = api.get("configmaps", MESH_STATE_CONFIGMAP, NAMESPACE)
            assert stored is not None
            assert stored["metadata"]["labels"] == {"app.kubernetes.io/managed-by": FIELD_MANAGER}
            b_state = tmp_path / "b" / "out" / "mesh.state.yaml"
            wait(lambda: member(yaml.safe_load(b_state.read_text()) if b_state.exists() else {}, "site-a"),
                 lambda m: (m.get("status"), m.get("address")) == ("alive", advertised), "site-b to see site-a")

            # The discovered GridSite: owned fields and a status saying why it is not Active yet.
            site = wait(lambda: api.get("gridsites", name) or {},
                        lambda g: (g.get("status") or {}).get("reason") == "TrustMaterialMissing", "site-b unpinned")
            assert site["spec"] == {"gridNetworkRef": NET} and site["status"]["phase"] == "Connecting"
            assert site["metadata"]["labels"] == owned(name)["metadata"]["labels"]
            assert overlay_candidates(api) == [("site-a", "local-a")], "no remote candidate before the pin"

            # An admin pins site-b's gateway with another field manager: kept, used, and the site turns Active.
            api.apply({"apiVersion": API_VERSION, "kind": "GridSite", "metadata": {"name": name},
                       "spec": {"gridNetworkRef": NET, "trust": {"canonicalFingerprints": [pin]}}}, "admin")
            wait(lambda: (api.get("gridsites", name) or {}).get("status") or {},
                 lambda s: s.get("phase") == "Active", "site-b Active")
            wait(lambda: overlay_candidates(api), lambda c: ("site-b", "local-b") in c, "site-b's provider rendered")
            pinned = api.get("gridsites", name)
            assert pinned is not None and pinned["spec"]["trust"] == {"canonicalFingerprints": [pin]}
            assert pinned["metadata"]["labels"] == owned(name)["metadata"]["labels"]

            # The network goes away: so does the discovered GridSite; the admin's own-site object stays.
            api.delete(network)
            wait(lambda: api.get("gridsites", name), lambda g: g is None, "the discovered GridSite deleted")
            assert procs["site-a"].running()
            assert supervisor.stop(procs.pop("site-a"), grace=10) == 0, "SIGTERM exits 0"
    finally:
        supervisor.stop_all()

    assert api.get("gridsites", "site-a") is not None
    calls = site_calls(api)
    assert calls[0] == ("PATCH", name, APPLY), calls
    assert calls.count(("PATCH", name, APPLY)) == 1, f"applied once (the admin's apply kept its fields): {calls}"
    assert calls[-1] == ("DELETE", name, None) and calls.count(("DELETE", name, None)) == 1, calls
    assert set(calls) == {("PATCH", name, APPLY), ("PATCH", f"{name}/status", MERGE), ("DELETE", name, None)}
    requests = api.calls()
    for request in requests:
        if request.method == "PATCH" and request.content_type == APPLY:
            assert request.query == {"fieldManager": FIELD_MANAGER, "force": "true"}, request
    applies = [r for r in requests if r.path == f"{GRIDSITES}/{name}" and r.method == "PATCH"]
    assert [r.body for r in applies] == [owned(name)]
    statuses = [r.body for r in requests if r.path == f"{GRIDSITES}/{name}/status"]
    assert all(set(body) == {"status"} and len(body["status"]) == 5 for body in statuses), statuses
    verdicts = [(s["status"]["phase"], s["status"]["reason"], s["status"]["message"]) for s in statuses]
    assert all(a != b for a, b in zip(verdicts, verdicts[1:], strict=False)), f"rewritten unchanged: {verdicts}"
    assert ("Active", "TlsVerified") in [v[:2] for v in verdicts], verdicts
    texts = [r.body["data"][MESH_STATUS_FILE] for r in requests if r.path == MESH_STATE_PATH]
    assert texts and all(a != b for a, b in zip(texts, texts[1:], strict=False)), "mesh state applied unchanged"
    assert {r.method for r in requests} <= {"GET", "PATCH", "DELETE"}
    assert_no_secrets(api)
