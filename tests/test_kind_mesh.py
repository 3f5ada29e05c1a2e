"""The mesh profile on the kind and existing backends, against the recording stand-ins of test_kind_backend.

A whole three-cluster mesh is started on the stand-ins: canned `kubectl get` answers play the operator
Deployment, its pods and the mesh status it writes, canned `docker exec` answers play crictl in the node
containers. What the harness sends is checked argv by argv: the operator patch with the mesh arguments
and the addresses pods of other clusters reach, the client certificate Secret and its mount, the crash
(SIGSTOP from the node), the graceful stop (scale to zero), the iptables rules of a partition and exactly
their removal, the reads of the mesh outputs, and the existing backend's restoring of what it patched.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from harness import mesh_oracle
from harness.addresses import AddressPlan
from harness.backends import OperationUnsupported
from harness.backends.kube.backend import KubeBackend
from harness.backends.kube.control import KubeControlPlane
from harness.backends.kube.existing import ExistingBackend
from harness.backends.kube.handles import BackendUnavailable
from harness.backends.kube.kind import KindBackend
from harness.backends.runner import Runner
from harness.control import OperatorExited
from harness.grid_factory import GridFactory
from harness.impl import parse_impl
from harness.impl_kube import REFERENCE_OPERATOR, OperatorWorkload
from harness.mesh import Mesh, MeshSite, start_site_provider_gateway
from harness.process import Supervisor
from harness.topology import Topology, load_topology
from tests.test_kind_backend import Tools, make_kind, parts, ready_server, root, tools  # noqa: F401 - fixtures
from tests.test_kind_control import (  # noqa: F401 - fixture
    VENDOR_IMAGE,
    VENDOR_WORKLOAD,
    kube,
    workload_deployment,
    workload_rules,
)

SITES = ("site-a", "site-b", "site-c")
NODE_IPS = {"site-a": "172.18.0.2", "site-b": "172.18.0.3", "site-c": "172.18.0.4"}
GATEWAY_NODEPORT = 31234  # what the stand-in's `kubectl get service` gives every provider gateway
BASE_COMMAND = ["agn-operator", "run", "--kubernetes", "--namespace", "agn-system"]
MESH_ARGS = ["--mesh-site", "{site}", "--mesh-bind", "{mesh_bind}", "--mesh-advertise", "{mesh_advertise}",
             "--mesh-seeds", "{mesh_seeds}", "--mesh-gateway", "{gateway_address}", "--mesh-routing-cluster",
             "{routing_cluster}", "--mesh-client-cert", "{client_cert}", "--mesh-client-key", "{client_key}",
             "--swim-probe-interval", "{probe_interval}", "--swim-probe-timeout", "{probe_timeout}",
             "--swim-suspicion-mult", "{suspicion_mult}", "--scratch", "{workdir}"]
IMPL = parse_impl({
    "implementation": {"organization": "o", "project": "p", "version": "1", "contact": ["c"]},
    "gateway": {"command": ["gw", "{config}"], "startup_timeout_s": 10},
    "operator": {"command": ["{python}", "-m", "op", "--manifests", "{manifests}", "--out", "{out}"],
                 "mesh_args": MESH_ARGS},
})


def operator_deployment(*, available: int = 1) -> dict[str, Any]:
    """The operator Deployment as the kustomize overlay installs it (a scratch emptyDir, no mesh flags)."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "agn-operator", "namespace": "agn-system"},
            "spec": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "operator", "image": "img:1", "command": BASE_COMMAND,
                                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
                "volumes": [{"name": "tmp", "emptyDir": {}}]}}},
            "status": {"availableReplicas": available}}


def operator_pods(site: str = "site-a") -> dict[str, Any]:
    return {"items": [{"metadata": {"name": f"agn-operator-{site}"},
                       "spec": {"nodeName": f"agn-t1-{site}-control-plane",
                                "containers": [{"name": "operator", "command": BASE_COMMAND}]},
                       "status": {"phase": "Running", "containerStatuses": [
                           {"name": "operator", "ready": True, "restartCount": 0}]}}]}


def mesh_state(site: str) -> dict[str, Any]:
    return {"site": site, "address": f"{NODE_IPS[site]}:30946",
            "members": [{"name": s, "address": f"{NODE_IPS[s]}:30946", "status": "alive", "incarnation": 1,
                         "ageSecs": 0} for s in SITES],
            "records": [{"network": "n", "site": "site-c", "provider": "p", "cluster": "site-c-pg",
                         "models": ["m"], "phase": "Available", "revision": 1, "writer": "site-c"}]}


def mesh_state_configmap(doc: Any) -> dict[str, Any]:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "agn-mesh-state", "namespace": "agn-system"},
            "data": {"mesh.state.yaml": text}}


def kubeconfig(work: Path, site: str) -> str:
    return str(work / "kube" / site / "kubeconfig")


def cluster_rules(work: Path, *extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The operator of every site installed, available and reporting all three sites alive."""
    rules = list(extra)
    for site in SITES:
        kc = kubeconfig(work, site)
        rules += [{"match": [kc, "get", "pods", "app.kubernetes.io/name=agn-operator"],
                   "stdout": json.dumps(operator_pods(site))},
                  {"match": [kc, "get", "configmap", "agn-mesh-state"],
                   "stdout": json.dumps(mesh_state_configmap(mesh_state(site)))}]
    rules.append({"match": ["get", "deployment", "agn-operator"], "stdout": json.dumps(operator_deployment())})
    return rules


def start_mesh(tools: Tools, root: Path, work: Path) -> Mesh:  # noqa: F811
    work.mkdir(exist_ok=True)
    tools.answer(*cluster_rules(work))

    def factory(workdir: Path, topology: Topology, supervisor: Supervisor, plan: AddressPlan) -> KindBackend:
        return KindBackend(workdir, topology, IMPL, runner=Runner(), root=root, run_id="t1", supervisor=supervisor,
                           plan=plan, image="img:1")

    return Mesh.start(IMPL, work, cluster=factory)


def calls_since(backend: Any, before: int) -> list[list[str]]:
    return [list(c) for c in backend.runner.calls[before:]]


def stdin_docs(tools: Tools, kubeconfig_path: str) -> list[dict[str, Any]]:  # noqa: F811
    """Every object sent to one cluster by `kubectl apply -f -`, Lists unpacked."""
    sent = [json.loads(e["stdin"]) for e in tools.entries()
            if e["stdin"] and e["argv"][-2:] == ["-f", "-"] and kubeconfig_path in e["argv"]]
    return [doc for body in sent for doc in body.get("items", [body])]


# ------------------------------------------------------------------------------------ a mesh of three clusters


def test_a_mesh_on_kind_patches_each_operator_with_its_mesh_arguments_addresses_and_client_secret(
        tools: Tools, root: Path, tmp_path: Path) -> None:  # noqa: F811
    work = tmp_path / "mesh"
    mesh = start_mesh(tools, root, work)
    try:
        backend = mesh.grid.backend
        assert isinstance(backend, KindBackend) and mesh.cluster_backend is backend
        assert [s.name for s in backend.sites] == [f"agn-t1-{s}" for s in SITES]
        ns = ["--namespace", "agn-system"]
        calls = tools.calls()
        for site in SITES:
            kc = ["kubectl", "--kubeconfig", kubeconfig(work, site)]
            patches = [c for c in calls if c[:len(kc)] == kc and "patch" in c]
            assert [c[:-1] for c in patches] == [[*kc, *ns, "patch", "deployment", "agn-operator", "--type",
                                                  "strategic", "-p"]]
            mine = [c for c in calls if c[:len(kc)] == kc]  # the sites install at once: their calls interleave
            after = mine[mine.index(patches[0]) + 1]
            assert after == [*kc, *ns, "rollout", "status", "deployment/agn-operator", "--timeout=300s"]
            pod = json.loads(patches[0][-1])["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            command = container["command"]
            ip = NODE_IPS[site]
            seeds = {"site-a": "", "site-b": "172.18.0.2:30946", "site-c": "172.18.0.3:30946"}[site]
            assert command == [*BASE_COMMAND, "--mesh-site", site, "--mesh-bind", "0.0.0.0:7946",
                               "--mesh-advertise", f"{ip}:30946",
                               "--mesh-seeds", seeds, "--mesh-gateway", f"{ip}:{GATEWAY_NODEPORT}",
                               "--mesh-routing-cluster", mesh.site(site).routing_cluster,
                               "--mesh-client-cert", "/etc/agn/mesh-client/tls.crt",
                               "--mesh-client-key", "/etc/agn/mesh-client/tls.key",
                               "--swim-probe-interval", "1", "--swim-probe-timeout", "0.4", "--swim-suspicion-mult",
                               "3", "--scratch", "/tmp"]
            assert container["name"] == "operator"
            assert {"name": "mesh-client", "mountPath": "/etc/agn/mesh-client", "readOnly": True} in \
                container["volumeMounts"]
            assert {"name": "mesh-client", "secret": {"secretName": "agn-operator-mesh-client"}} in pod["volumes"]
            assert str(tmp_path) not in patches[0][-1]  # no host path reaches the pod
            # pinned to the node whose address it advertises
            assert pod["nodeSelector"] == {"kubernetes.io/hostname": f"agn-t1-{site}-control-plane"}
            assert mesh.site(site).mesh_address == f"{ip}:30946"
            assert mesh.site(site).gateway_address == f"{ip}:{GATEWAY_NODEPORT}"
        for site in SITES:
            (secret,) = [d for d in stdin_docs(tools, kubeconfig(work, site))
                         if d["metadata"]["name"] == "agn-operator-mesh-client"]
            assert sorted(secret["data"]) == ["tls.crt", "tls.key"]
            assert secret["metadata"]["labels"] == {"agn.grid/run": "t1"}
            cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
            assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"operator-{site}"
            assert base64.b64decode(secret["data"]["tls.key"]).startswith(b"-----BEGIN")

        # a second provider gateway of site-c (as a hop chain starts one): its own pod, NodePort and address
        second = start_site_provider_gateway(mesh.site("site-c").site, "cand-2", "m2")
        assert second.proc.listen != mesh.site("site-c").gateway.proc.listen
        assert backend.peer_address(second.proc.listen) == f"{NODE_IPS['site-c']}:{GATEWAY_NODEPORT}"
        assert backend._peer_addresses(backend.sites[0], f"to {second.proc.listen}") == (
            f"to {NODE_IPS['site-c']}:{GATEWAY_NODEPORT}")  # what site-a's consumer gateway dials
        mesh.site("site-c").site.stop_gateway(second)
        assert backend.peer_address(second.proc.listen) == second.proc.listen  # forgotten with its pod

        status = mesh.site("site-a").mesh_status()
        assert mesh_oracle.member_status(status, "site-c") == "alive"
        assert [*["kubectl", "--kubeconfig", kubeconfig(work, "site-a")], *ns, "get", "configmap", "agn-mesh-state",
                "--ignore-not-found", "-o", "json"] in tools.calls()
        assert "=== site-b mesh status" in mesh.diagnostics()
    finally:
        mesh.close()
    deletes = sorted(c for c in tools.calls() if c[:2] == ["kind", "delete"])
    assert deletes == [["kind", "delete", "cluster", "--name", f"agn-t1-{s}"] for s in SITES]


def test_kill_freezes_the_operator_on_its_node_and_partition_heal_add_and_remove_exact_rules(
        tools: Tools, root: Path, tmp_path: Path) -> None:  # noqa: F811
    work = tmp_path / "mesh"
    mesh = start_mesh(tools, root, work)
    try:
        backend = mesh.grid.backend
        assert isinstance(backend, KindBackend)
        node_c = "agn-t1-site-c-control-plane"
        tools.answer({"match": ["exec", node_c, "crictl", "ps"], "stdout": "c0ffee\n"},
                     {"match": ["exec", node_c, "crictl", "inspect"], "stdout": json.dumps({"info": {"pid": 4242}})},
                     *cluster_rules(work))
        before = len(backend.runner.calls)
        mesh.kill("site-c")
        kc_c = ["kubectl", "--kubeconfig", kubeconfig(work, "site-c")]
        assert calls_since(backend, before) == [
            [*kc_c, "--namespace", "agn-system", "get", "pods", "-l", "app.kubernetes.io/name=agn-operator", "-o",
             "json"],
            ["docker", "exec", node_c, "crictl", "ps", "-q", "--label", "io.kubernetes.pod.namespace=agn-system",
             "--label", "io.kubernetes.pod.name=agn-operator-site-c",
             "--label", "io.kubernetes.container.name=operator"],
            ["docker", "exec", node_c, "crictl", "inspect", "-o", "json", "c0ffee"],
            ["docker", "exec", node_c, "sh", "-c", "kill -STOP 4242"],
        ]
        control = mesh.site("site-c").control
        assert not control.process.running() and [s.name for s in mesh.live()] == ["site-a", "site-b"]
        with pytest.raises(OperatorExited, match="killed by the harness"):
            control.check_running()
        assert not [c for c in calls_since(backend, before) if "scale" in c or "delete" in c]  # no restart, no goodbye

        before = len(backend.runner.calls)
        mesh.partition(["site-c"], ["site-a", "site-b"])
        cut = calls_since(backend, before)
        drop = ["iptables", "-t", "raw", "-I", "PREROUTING", "-s"]
        assert cut == [
            ["docker", "exec", node_c, *drop, NODE_IPS["site-a"], "-j", "DROP"],
            ["docker", "exec", "agn-t1-site-a-control-plane", *drop, NODE_IPS["site-c"], "-j", "DROP"],
            ["docker", "exec", node_c, *drop, NODE_IPS["site-b"], "-j", "DROP"],
            ["docker", "exec", "agn-t1-site-b-control-plane", *drop, NODE_IPS["site-c"], "-j", "DROP"],
        ]
        before = len(backend.runner.calls)
        mesh.heal()
        healed = calls_since(backend, before)
        assert healed == [[*c[:6], "-D", *c[7:]] for c in reversed(cut)]
        before = len(backend.runner.calls)
        mesh.heal()  # nothing left to delete
        assert calls_since(backend, before) == []
    finally:
        mesh.close()


def test_a_mesh_whose_operator_never_rolls_out_deletes_every_cluster_it_made(
        tools: Tools, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("AGN_FAKE_FAIL", "rollout status deployment/agn-operator")
    with pytest.raises(BackendUnavailable, match="the operator did not roll out"):
        start_mesh(tools, root, tmp_path / "mesh")
    deletes = sorted(c for c in tools.calls() if c[:2] == ["kind", "delete"])
    assert deletes == [["kind", "delete", "cluster", "--name", f"agn-t1-{s}"] for s in SITES]


# ------------------------------------------------------------------------------------ one site's operator


def test_stop_scales_the_operator_to_zero_and_waits_until_its_pod_is_gone(kube: SimpleNamespace) -> None:  # noqa: F811
    plane = kube.site.control_plane()
    assert isinstance(plane, KubeControlPlane)
    assert plane.process.running()
    pods = json.dumps(operator_pods())
    kube.tools.answer({"match": ["get", "pods", "app.kubernetes.io/name=agn-operator"],
                       "stdouts": [pods, pods, json.dumps({"items": []})]},
                      {"match": ["get", "deployment", "agn-operator"], "stdout": json.dumps(operator_deployment())})
    before = len(kube.backend.runner.calls)
    assert plane.process.stop() == 0
    ns = ["--namespace", "agn-system"]
    pods_call = [*kube.kc, *ns, "get", "pods", "-l", "app.kubernetes.io/name=agn-operator", "-o", "json"]
    assert calls_since(kube.backend, before) == [
        [*kube.kc, *ns, "scale", "deployment/agn-operator", "--replicas=0"], pods_call, pods_call, pods_call]
    assert not plane.process.running()
    plane.check_interval = 0.0
    with pytest.raises(OperatorExited, match="stopped by the harness"):
        plane.check_running()


def test_kill_fails_with_the_reason_when_crictl_does_not_find_exactly_one_container(
        kube: SimpleNamespace) -> None:  # noqa: F811
    plane = kube.site.control_plane()
    kube.tools.answer({"match": ["exec", "crictl", "ps"], "stdout": ""},
                      {"match": ["get", "pods", "app.kubernetes.io/name=agn-operator"],
                       "stdout": json.dumps(operator_pods())},
                      {"match": ["get", "deployment", "agn-operator"], "stdout": json.dumps(operator_deployment())})
    with pytest.raises(BackendUnavailable, match="lists 0 running containers operator of pod agn-operator-site-a"):
        plane.process.kill()
    assert plane.process.ended is None and not [c for c in kube.tools.calls() if "kill -STOP" in " ".join(c)]


def test_mesh_outputs_are_read_from_the_mesh_state_configmap_and_the_gridsite_objects(
        kube: SimpleNamespace) -> None:  # noqa: F811
    plane = kube.site.control_plane()
    ns = ["--namespace", "agn-system"]
    state_call = [*kube.kc, *ns, "get", "configmap", "agn-mesh-state", "--ignore-not-found", "-o", "json"]
    name = mesh_oracle.discovered_site_name("net1", "site-c")
    site_call = [*kube.kc, "get", "gridsites.grid.praxis.fast", name, "--ignore-not-found", "-o", "json"]
    before = len(kube.backend.runner.calls)
    assert plane.mesh_state() is None and plane.gridsite(name) is None  # neither written yet
    assert calls_since(kube.backend, before) == [state_call, site_call]

    gridsite = {"apiVersion": "grid.praxis.fast/v1alpha1", "kind": "GridSite",
                "metadata": {"name": name, "labels": {"grid.praxis.fast/auto-discovered": "true"}},
                "spec": {"gridNetworkRef": "net1"}, "status": {"phase": "Connecting", "reason": "Probing"}}
    state = mesh_state("site-a")
    kube.tools.answer({"match": ["get", "configmap", "agn-mesh-state"], "stdout": json.dumps(mesh_state_configmap(
                          "site: site-a\nmembers: []\n"))},
                      {"match": ["get", "gridsites.grid.praxis.fast", name], "stdout": json.dumps(gridsite)})
    assert plane.mesh_state() == {"site": "site-a", "members": []}  # the YAML the dir sink writes
    assert plane.gridsite(name) == gridsite
    meshed = MeshSite(kube.site, plane, None, "", "")  # type: ignore[arg-type]
    assert meshed.gridsite("net1", "site-c") == gridsite
    for unreadable in ("members: [unclosed", "- a list\n", ""):
        kube.tools.answer({"match": ["get", "configmap", "agn-mesh-state"],
                           "stdout": json.dumps(mesh_state_configmap(unreadable))})
        assert plane.mesh_state() is None, unreadable
    kube.tools.answer({"match": ["get", "configmap", "agn-mesh-state"],
                       "stdout": json.dumps(mesh_state_configmap(state) | {"data": {}})})
    assert plane.mesh_state() is None


# ------------------------------------------------------------------------------------ the existing backend


def existing(root: Path, parts: SimpleNamespace, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
             impl: Any = IMPL) -> ExistingBackend:
    monkeypatch.setenv("AGN_FAKE_CONTEXTS", "ctx-a,ctx-b")
    parts.workdir.mkdir(exist_ok=True)
    backend = ExistingBackend(parts.workdir, load_topology("two-site"), impl, contexts={"site-a": "ctx-a",
                                                                                       "site-b": "ctx-b"},
                              runner=Runner(), root=root, run_id="t1", supervisor=parts.supervisor, plan=parts.plan,
                              image="reg/img:1")
    backend.start()
    return backend


def mesh_values(backend: KubeBackend, tag: str) -> dict[str, str]:
    client = backend.pki.client(f"operator-site-a-{tag}")
    return {"site": "site-a", "mesh_bind": "0.0.0.0:7946", "mesh_advertise": "10.0.0.1:30946", "mesh_seeds": "",
            "gateway_address": "10.0.0.1:31234", "routing_cluster": "site-a-pg", "client_cert": str(client.cert),
            "client_key": str(client.key), "probe_interval": "1", "probe_timeout": "0.4", "suspicion_mult": "3"}


def test_existing_backend_gives_each_operator_it_patched_back_its_spec_on_close(
        tools: Tools, root: Path, parts: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    backend = existing(root, parts, monkeypatch)
    original = operator_deployment()
    tools.answer({"match": ["get", "deployment", "agn-operator"], "stdout": json.dumps(original)},
                 {"match": ["get", "pods", "app.kubernetes.io/name=agn-operator"], "stdout": '{"items": []}'})
    site_a, site_b = backend.sites
    backend.ensure_operator(site_a, mesh_values(backend, "1"))
    backend.ensure_operator(site_b)  # patched too: the CA; no mesh
    backend.stop_operator(site_b, timeout=10)  # scaled to zero as well ("get pods" answers no operator pod)
    before = len(backend.runner.calls)
    backend.close()
    calls = calls_since(backend, before)
    ns = ["--namespace", "agn-system"]
    restores = [c for c in calls if "patch" in c]
    assert [c[:-1] for c in restores] == [["kubectl", "--context", ctx, *ns, "patch", "deployment", "agn-operator",
                                           "--type", "merge", "-p"] for ctx in ("ctx-a", "ctx-b")]
    spec = original["spec"]
    for restore in restores:
        assert json.loads(restore[-1]) == {"spec": {"replicas": 1, "template": {"spec": {
            "containers": spec["template"]["spec"]["containers"], "volumes": spec["template"]["spec"]["volumes"],
            "nodeSelector": None}}}}  # merge patch: the pin to the advertised node is removed
    for ctx in ("ctx-a", "ctx-b"):
        mine = [c for c in calls if c[1:3] == ["--context", ctx]]
        assert "patch" in mine[0] and mine[-1][5:7] == ["delete", "deployment,service,configmap,secret"]
    before = len(backend.runner.calls)
    backend.restore_operators()  # restored once
    assert calls_since(backend, before) == []


def test_existing_backend_restores_nothing_it_did_not_patch_and_an_absent_volume_list_is_removed(
        tools: Tools, root: Path, parts: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    backend = existing(root, parts, monkeypatch)
    patched = operator_deployment()
    patched["spec"]["template"]["spec"]["containers"][0]["command"] = [*BASE_COMMAND, "--metrics-ca", "/x"]
    del patched["spec"]["template"]["spec"]["volumes"]
    tools.answer({"match": ["--context", "ctx-a", "get", "deployment", "agn-operator"], "stdout": json.dumps(patched)},
                 {"match": ["get", "deployment", "agn-operator"], "stdout": json.dumps(operator_deployment())})
    site_a, site_b = backend.sites
    backend.ensure_operator(site_a)  # already has the CA: no patch
    before = len(backend.runner.calls)
    backend.restore_operators()
    assert calls_since(backend, before) == []
    backend.ensure_operator(site_a, mesh_values(backend, "1"))
    backend.restore_operators()
    (restore,) = [c for c in calls_since(backend, before) if "patch" in c and "merge" in c]
    assert json.loads(restore[-1])["spec"]["template"]["spec"]["volumes"] is None  # merge patch: removed
    backend.close()


def test_existing_backend_cannot_crash_an_operator_or_cut_links(
        tools: Tools, root: Path, parts: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    backend = existing(root, parts, monkeypatch)
    site_a = backend.sites[0]
    with pytest.raises(OperationUnsupported, match="needs access to its cluster's nodes"):
        backend.suspend_operator(site_a)
    with pytest.raises(OperationUnsupported, match="existing backend does not have"):
        backend.partition([0], [1])
    with pytest.raises(OperationUnsupported):
        backend.heal()
    backend.close()
    assert not [c for c in tools.calls() if c[0] == "docker"]


# ------------------------------------------------------------------------------------ the suite's fixtures


def test_a_mesh_the_backend_cannot_give_is_a_skip_with_its_reason(
        tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from harness import plugin

    conformance = SimpleNamespace(get_closest_marker=lambda name: object(), stash=pytest.Stash())
    hook = plugin.pytest_runtest_call(conformance)  # type: ignore[arg-type]
    next(hook)
    with pytest.raises(pytest.skip.Exception, match="not on this backend: cannot reach the nodes"):
        hook.throw(OperationUnsupported("cannot reach the nodes"))

    monkeypatch.setenv("AGN_FAKE_CONTEXTS", "ca,cb,cc")
    options = {"--grid-backend": "existing", "--grid-kube-contexts": "site-a=ca,site-b=cb,site-c=cc",
               "--grid-seed": None, "--grid-keep": False, "--grid-image": None}
    config = SimpleNamespace(getoption=options.__getitem__, stash={}, add_cleanup=lambda _f: None)
    mktemp = SimpleNamespace(mktemp=lambda name: tmp_path / name)

    def factory(impl: Any) -> GridFactory:
        return GridFactory(config, mktemp, impl, SimpleNamespace(testsfailed=0))  # type: ignore[arg-type]

    for purpose, reason in (("own", "needs a mesh of the test's own"), ("cut", "access to the clusters' nodes")):
        with pytest.raises(pytest.skip.Exception, match=reason), factory(IMPL).mesh(purpose=purpose):
            pass
    options["--grid-kube-contexts"] = "site-a=ca,site-b=cb"
    with pytest.raises(pytest.skip.Exception, match="context for site"), factory(IMPL).mesh():
        pass
    no_mesh = parse_impl({"implementation": {"organization": "o", "project": "p", "version": "1", "contact": ["c"]},
                          "gateway": {"command": ["gw", "{config}"]}})
    with pytest.raises(pytest.skip.Exception, match="unsupported feature: mesh profile"), factory(no_mesh).mesh():
        pass


def test_mesh_settings_from_the_environment_are_patched_as_env_leaving_the_command() -> None:
    """An operator given operator.mesh_env keeps its command (or image entrypoint): the patch sets env only,
    mounts the client Secret and pins the node; the twin with mesh_args appends them to the command."""
    from harness.backends.kube.manifests import operator_patch

    deployment = operator_deployment()
    patch = operator_patch(deployment, None, mesh_env={"SWIM_SITE": "site-a", "SWIM_SEEDS": ""}, mesh_client=True,
                           node="node-1")
    assert patch is not None
    pod = patch["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "command" not in container
    assert container["env"] == [{"name": "SWIM_SITE", "value": "site-a"}, {"name": "SWIM_SEEDS", "value": ""}]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "node-1"} and pod["volumes"][0]["name"] == "mesh-client"
    entrypoint = operator_deployment()
    del entrypoint["spec"]["template"]["spec"]["containers"][0]["command"]
    assert operator_patch(entrypoint, None, mesh_env={"SWIM_SITE": "site-a"}) is not None
    with_args = operator_patch(deployment, ["--mesh-site", "site-a"])
    assert with_args is not None
    assert with_args["spec"]["template"]["spec"]["containers"][0]["command"] == [*BASE_COMMAND, "--mesh-site", "site-a"]


# ------------------------------------------------------------------------------------ a vendor's operator workload


#: What a mesh patch of the vendor's operator sets: it runs on its image's entrypoint, so its mesh settings come
#: from the environment (a mesh_args list would have no command to be appended to).
VENDOR_MESH_ENV = {"GRID_MESH_SITE": "{site}", "GRID_MESH_BIND": "{mesh_bind}", "GRID_MESH_SEEDS": "{mesh_seeds}",
                   "GRID_MESH_CLIENT_CERT": "{client_cert}"}


def vendor_impl(directory: Path) -> Any:
    """The public grid operator's descriptor: installed from its manifests as Deployment grid-operator in
    grid-system (operator container manager, beside a sidecar), joining a mesh through its environment."""
    deployment = workload_deployment(VENDOR_WORKLOAD)
    (directory / "grid-operator.yaml").write_text(json.dumps(deployment))
    return parse_impl({
        "implementation": {"organization": "vendor.example", "project": "grid-operator", "version": "1.4.0",
                           "contact": ["c"]},
        "gateway": {"command": ["gw", "{config}"], "startup_timeout_s": 10},
        "operator": {"kubernetes": {"image": VENDOR_IMAGE, "manifests": [str(directory / "grid-operator.yaml")],
                                    "deployment": {"name": "grid-operator", "namespace": "grid-system",
                                                   "selector": "control-plane=grid-operator",
                                                   "container": "manager"}},
                     "mesh_env": VENDOR_MESH_ENV},
    })


def workload_case(name: str, tmp_path: Path) -> tuple[Any, OperatorWorkload, list[str]]:
    """(descriptor, workload, `--namespace` args) of the reference's operator or the vendor's."""
    if name == "reference":  # spelled out: the twin must not follow a change of the defaults
        return IMPL, REFERENCE_OPERATOR, ["--namespace", "agn-system"]
    return vendor_impl(tmp_path), VENDOR_WORKLOAD, ["--namespace", "grid-system"]


@pytest.mark.parametrize("case", ["reference", "grid-operator"])
def test_the_operator_is_patched_for_a_mesh_and_restored_where_its_descriptor_says_it_runs(
        tools: Tools, root: Path, parts: SimpleNamespace, tmp_path: Path, case: str) -> None:  # noqa: F811
    impl, workload, where = workload_case(case, tmp_path)
    parts.impl = impl
    backend = make_kind(parts, root, "single-site", image="img:1")
    backend.start()
    try:
        tools.answer(*workload_rules(workload))
        site = backend.sites[0]
        kc = ["kubectl", "--kubeconfig", kubeconfig(parts.workdir, "site-a")]
        before = len(backend.runner.calls)
        backend.ensure_operator(site, mesh_values(backend, "1"))
        name = "agn-operator" if case == "reference" else "grid-operator"
        calls = calls_since(backend, before)
        assert [*calls[:3], calls[3][:-1], calls[4]] == [
            [*kc, *where, "get", "deployment", name, "--ignore-not-found", "-o", "json"],
            [*kc, "apply", "--server-side", "--field-manager", "agn-conformance", "-f", "-"],
            [*kc, "get", "nodes", "-o", "json"],
            [*kc, *where, "patch", "deployment", name, "--type", "strategic", "-p"],
            [*kc, *where, "rollout", "status", f"deployment/{name}", "--timeout=300s"]]
        (secret,) = [d for d in stdin_docs(tools, kubeconfig(parts.workdir, "site-a"))
                     if d["metadata"]["name"] == "agn-operator-mesh-client"]
        assert secret["metadata"]["namespace"] == where[1], "made where the operator's pod can mount it"
        patch = json.loads(calls[3][-1])["spec"]["template"]["spec"]
        (container,) = patch["containers"]
        assert patch["nodeSelector"] == {"kubernetes.io/hostname": "agn-t1-site-a-control-plane"}
        assert {"name": "mesh-client", "secret": {"secretName": "agn-operator-mesh-client"}} in patch["volumes"]
        if case == "reference":
            assert container["name"] == "operator" and container["command"][:len(BASE_COMMAND)] == BASE_COMMAND
            assert "--mesh-site" in container["command"]
        else:
            assert container["name"] == "manager" and "command" not in container, "its entrypoint is kept"
            assert {"name": "GRID_MESH_SITE", "value": "site-a"} in container["env"]
            assert {"name": "GRID_MESH_CLIENT_CERT", "value": "/etc/agn/mesh-client/tls.crt"} in container["env"]

        before = len(backend.runner.calls)
        backend.restore_operators()
        (restore,) = calls_since(backend, before)
        assert restore[:-1] == [*kc, *where, "patch", "deployment", name, "--type", "merge", "-p"]
        spec = workload_deployment(workload)["spec"]["template"]["spec"]
        assert json.loads(restore[-1])["spec"]["template"]["spec"]["containers"] == spec["containers"]
    finally:
        backend.close()


@pytest.mark.parametrize("case", ["reference", "grid-operator"])
def test_existing_backend_restores_the_operator_and_removes_its_secret_where_it_runs(
        tools: Tools, root: Path, parts: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        case: str) -> None:
    impl, workload, where = workload_case(case, tmp_path)
    backend = existing(root, parts, monkeypatch, impl)
    no_pods = {"match": ["get", "pods", workload.selector], "stdout": '{"items": []}'}
    tools.answer(*workload_rules(workload)[:1], no_pods)
    site_a, site_b = backend.sites
    backend.ensure_operator(site_a, mesh_values(backend, "1"))
    backend.stop_operator(site_b, timeout=10)
    before = len(backend.runner.calls)
    backend.close()
    calls = calls_since(backend, before)
    name = "agn-operator" if case == "reference" else "grid-operator"
    assert [c[:-1] for c in calls if "patch" in c] == [
        ["kubectl", "--context", ctx, *where, "patch", "deployment", name, "--type", "merge", "-p"]
        for ctx in ("ctx-a", "ctx-b")]
    label = ["-l", "agn.grid/run=t1", "--ignore-not-found", "--wait=false"]
    for ctx in ("ctx-a", "ctx-b"):
        deletes = [c for c in calls if c[1:3] == ["--context", ctx] and "delete" in c]
        expected = [["kubectl", "--context", ctx, "--namespace", "agn-system", "delete",
                     "deployment,service,configmap,secret", *label]]
        if case != "reference":  # the mesh client Secret went to the operator's namespace
            expected.append(["kubectl", "--context", ctx, *where, "delete", "secret", *label])
        assert deletes == expected
