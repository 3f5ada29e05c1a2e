"""The in-cluster control plane (KubeControlPlane) against recording stand-ins for docker, kind and kubectl.

The stand-ins are those of test_kind_backend; canned `kubectl get` answers play the cluster's side
(the operator Deployment, its pods, the ConfigMap and GridNetwork it writes). What the harness sends is
checked argv by argv, with the stdin of every `kubectl apply -f -`.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from harness import contract, resources
from harness.backends.kube.control import KubeControlPlane
from harness.backends.kube.handles import FollowedConfigMap, KubeOverlaySync
from harness.backends.kube.manifests import operator_container, operator_patch
from harness.backends.local import OperatorUnsupported
from harness.backends.runner import CommandFailed
from harness.control import FORCE_REFRESH, OperatorExited
from harness.grid import Grid
from harness.impl import OperatorCommand
from harness.impl_kube import REFERENCE_OPERATOR, KubeComponent, OperatorWorkload
from harness.topology import load_topology
from harness.waiting import WaitTimeout
from tests.test_kind_backend import Tools, make_kind, parts, ready_server, root, tools  # noqa: F401 - fixtures

NET = "net1"
CM = "grid-overlay-net1-edge-gateway"


def operator_deployment(*, available: int = 1, command: list[str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "agn-operator", "namespace": "agn-system"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "operator",
                 "command": command if command is not None else ["agn-operator", "run", "--kubernetes", "--namespace",
                                                                  "agn-system"]}]}}},
            "status": {"availableReplicas": available}}


def operator_pods(restarts: int = 0) -> dict[str, Any]:
    return {"items": [{"metadata": {"name": "agn-operator-1"}, "status": {"phase": "Running", "containerStatuses": [
        {"name": "operator", "ready": True, "restartCount": restarts}]}}]}


def envelope(local_site: str = "site-a") -> dict[str, Any]:
    scope = contract.ScopeSpec(NET, "edge-gateway", "agn-system", local_site)
    return contract.envelope([contract.candidate("m", local_site, "provider-a")], scope, generation=1)


def configmap(env: dict[str, Any], version: str, *, manager: str = "agn-operator") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CM, "namespace": "agn-system", "resourceVersion": version,
                         "annotations": {"grid.praxis.fast/revision": contract.revision_of(env)},
                         "managedFields": [{"manager": manager, "operation": "Apply"}]},
            "data": {"routing-overlay.json": contract.encode(env).decode()}}


def network_status(rendered_at: str, revision: str = "sha256:aa") -> dict[str, Any]:
    return {"apiVersion": "grid.praxis.fast/v1alpha1", "kind": "GridNetwork",
            "metadata": {"name": NET, "resourceVersion": "9"},
            "status": {"observedGeneration": 1, "overlayStatus": [
                {"gatewayName": "edge-gateway", "gatewayNamespace": "agn-system", "configMapName": CM,
                 "renderedRevision": revision, "distributedRevision": revision, "renderedAt": rendered_at,
                 "phase": "Distributed"}]}}


OPERATOR_RULES: tuple[dict[str, Any], ...] = (
    {"match": ["get", "deployment", "agn-operator"], "stdout": json.dumps(operator_deployment())},
    {"match": ["get", "pods", "app.kubernetes.io/name=agn-operator"], "stdout": json.dumps(operator_pods())},
)


@pytest.fixture
def kube(tools: Tools, root: Path, parts: SimpleNamespace) -> Iterator[SimpleNamespace]:  # noqa: F811
    """A started single-site kind backend and grid on the stand-ins, the operator answering as available."""
    parts.impl.operator = OperatorCommand(argv_template=())  # installed from the manifests, joining no mesh
    backend = make_kind(parts, root, "single-site", image="img:1")
    backend.start()
    grid = Grid(load_topology("single-site"), backend, frozenset())
    tools.answer(*OPERATOR_RULES)
    try:
        grid.start()
        kc = ["kubectl", "--kubeconfig", str(parts.workdir / "kube" / "site-a" / "kubeconfig")]
        yield SimpleNamespace(backend=backend, grid=grid, site=grid.site(), kc=kc, tools=tools)
    finally:
        grid.close()
        backend.close()


def calls_since(ns: SimpleNamespace, before: int) -> list[list[str]]:
    return [list(c) for c in ns.backend.runner.calls[before:]]


def control(ns: SimpleNamespace) -> KubeControlPlane:
    plane = ns.site.control_plane()
    assert isinstance(plane, KubeControlPlane)
    plane.check_interval = 0.0
    return plane


# ------------------------------------------------------------------------------------ the operator


def test_control_plane_checks_the_operator_and_waits_for_its_rollout_changing_nothing(kube: SimpleNamespace) -> None:
    """Outside a mesh the operator runs as its manifests say: the run's CA is the Secret metrics-ca applied with
    the site (where the suites' caSecretRef points), and nothing is added to the operator's command."""
    before = len(kube.backend.runner.calls)
    plane = kube.site.control_plane()
    assert isinstance(plane, KubeControlPlane) and kube.site.control_plane() is plane
    kc, ns = kube.kc, ["--namespace", "agn-system"]
    assert calls_since(kube, before) == [
        [*kc, *ns, "get", "deployment", "agn-operator", "--ignore-not-found", "-o", "json"],
        [*kc, *ns, "rollout", "status", "deployment/agn-operator", "--timeout=300s"],
        [*kc, *ns, "get", "pods", "-l", "app.kubernetes.io/name=agn-operator", "-o", "json"],
    ]
    site_docs = [d for d in yaml.safe_load_all((kube.backend._site_dir(kube.site) / "site.yaml").read_text()) if d]
    (secret,) = [d for d in site_docs if d["kind"] == "Secret" and d["metadata"]["name"] == "metrics-ca"]
    assert secret["metadata"]["namespace"] == "agn-system"
    assert base64.b64decode(secret["data"]["ca.crt"]) == kube.backend.pki.ca_path.read_bytes()


def test_an_operator_without_a_command_runs_on_its_image_entrypoint_unpatched(kube: SimpleNamespace) -> None:
    """A vendor's operator that relies on its image's entrypoint is installed as it is; only a mesh, which
    appends the descriptor's mesh_args, needs a command to append to."""
    deployment = operator_deployment(command=[])
    kube.tools.answer({"match": ["get", "deployment", "agn-operator"], "stdout": json.dumps(deployment)},
                      *OPERATOR_RULES[1:])
    before = len(kube.backend.runner.calls)
    kube.site.control_plane()
    assert not [c for c in calls_since(kube, before) if "patch" in c]


def test_mesh_args_missing_operator_section_or_deployment_are_unsupported(kube: SimpleNamespace) -> None:
    with pytest.raises(OperatorUnsupported, match="operator section has no mesh_args or mesh_env$"):
        kube.backend.control_plane(kube.site, {"site": "site-a"})
    kube.backend.impl.operator = None
    with pytest.raises(OperatorUnsupported, match="no operator section"):
        kube.backend.control_plane(kube.site)
    kube.backend.impl.operator = OperatorCommand(argv_template=())
    kube.tools.answer({"match": ["get", "deployment", "agn-operator"], "stdout": ""})
    with pytest.raises(OperatorUnsupported, match="no Deployment agn-system/agn-operator"):
        kube.backend.control_plane(kube.site)


def test_an_operator_without_an_available_replica_or_with_a_restart_has_exited(kube: SimpleNamespace) -> None:
    plane = control(kube)
    plane.check_running()  # available, no restart
    kube.tools.answer({"match": ["get", "deployment", "agn-operator"],
                       "stdout": json.dumps(operator_deployment(available=0))}, *OPERATOR_RULES[1:])
    with pytest.raises(OperatorExited, match="no available replica") as exited:
        plane.check_running()
    assert "a log line of deployment/agn-operator" in str(exited.value)
    assert [*kube.kc, "--namespace", "agn-system", "logs", "deployment/agn-operator", "--all-containers",
            "--tail=40", "--previous"] in calls_since(kube, 0)
    kube.tools.answer(OPERATOR_RULES[0], {"match": ["get", "pods", "app.kubernetes.io/name=agn-operator"],
                                          "stdout": json.dumps(operator_pods(restarts=1))})
    with pytest.raises(OperatorExited, match="restarted"):
        plane.check_running()
    plane.check_running()  # the restart is reported once


# ------------------------------------------------------------------------------------ inputs


def test_apply_sends_the_object_by_server_side_apply_and_its_status_through_the_subresource(
        kube: SimpleNamespace) -> None:
    plane = control(kube)
    metrics_url = kube.site.backend("provider-a").url
    provider = resources.inference_provider("p1", NET, site="site-a", cluster="provider-a", models=("m",),
                                            metrics=resources.metrics_config(metrics_url, "p1"))
    site = resources.grid_site("site-a", NET, phase="Draining")
    before = len(kube.backend.runner.calls)
    plane.apply(site, provider)  # the hosting site's GridSite first: the harness adds none
    kc = kube.kc
    assert calls_since(kube, before) == [
        [*kc, "apply", "--server-side", "--field-manager", "agn-conformance", "-f", "-"],
        [*kc, "patch", "gridsites.grid.praxis.fast", "site-a", "--subresource=status", "--type=json", "-p",
         json.dumps([{"op": "add", "path": "/status", "value": {"phase": "Draining"}}])],
        [*kc, "apply", "--server-side", "--field-manager", "agn-conformance", "-f", "-"],
    ]
    sent = [json.loads(e["stdin"]) for e in kube.tools.entries() if e["stdin"]][-2:]
    assert sent[1]["spec"]["metricsConfig"]["endpoint"] == "http://agn-fake-provider-a.agn-system.svc.cluster.local:8000"
    # the hosting site as the public operator reads it: a siteSelector of the GridSite's label, no spec.site
    assert "site" not in sent[1]["spec"] and sent[1]["spec"]["siteSelector"] == {
        "matchLabels": {"agn-conformance/site": "site-a"}}
    assert "status" not in sent[0] and sent[0]["spec"] == site["spec"]
    assert sent[0]["metadata"]["labels"]["agn-conformance/site"] == "site-a"
    assert plane.applied("InferenceProvider", "p1")["spec"]["metricsConfig"]["endpoint"] == metrics_url

    before = len(kube.backend.runner.calls)
    plane.apply(resources.grid_site("site-a", NET, phase="Active") | {"status": {}})
    assert calls_since(kube, before)[-1][-1] == json.dumps([{"op": "add", "path": "/status", "value": {}}])
    secret = resources.secret("creds", "agn-system", {"token": "t"})
    plane.apply(secret)
    before = len(kube.backend.runner.calls)
    plane.delete("InferenceProvider", "p1")
    plane.delete("Secret", "creds")
    assert calls_since(kube, before) == [
        [*kc, "delete", "inferenceproviders.grid.praxis.fast", "p1", "--ignore-not-found", "--wait=false"],
        [*kc, "--namespace", "agn-system", "delete", "secret", "creds", "--ignore-not-found", "--wait=false"],
    ]


def test_force_reconcile_patches_a_fresh_annotation_and_later_applies_keep_it(kube: SimpleNamespace) -> None:
    plane = control(kube)
    plane.apply(resources.grid_network(NET, [resources.gateway_ref("site-a")]))
    before = len(kube.backend.runner.calls)
    plane.force_reconcile(NET)
    plane.force_reconcile(NET)
    patches = calls_since(kube, before)
    assert [c[:-1] for c in patches] == [[*kube.kc, "patch", "gridnetworks.grid.praxis.fast", NET, "--type=merge",
                                          "-p"]] * 2
    values = [json.loads(c[-1])["metadata"]["annotations"][FORCE_REFRESH] for c in patches]
    assert len(set(values)) == 2
    assert plane.applied("GridNetwork", NET)["metadata"]["annotations"][FORCE_REFRESH] == values[1]
    with pytest.raises(KeyError):
        plane.force_reconcile("never-applied")


def test_a_resource_the_api_server_refuses_is_recorded_in_the_log(kube: SimpleNamespace) -> None:
    plane = control(kube)
    refusal = ('Error from server (Invalid): InferenceProvider.grid.praxis.fast "bad" is invalid: '
               "spec.capacityWeight: Invalid value: 0:\n spec.capacityWeight in body should be >= 1\n")
    kube.tools.answer({"match": ["apply", "--server-side"], "rc": 1, "stderr": refusal}, *OPERATOR_RULES)
    obj = resources.inference_provider("bad", NET, site="site-a", cluster="bad", models=("m",), capacityWeight=0)
    path = plane.apply_raw("inferenceprovider-bad.yaml", yaml.safe_dump(obj))
    assert path.read_text() == yaml.safe_dump(obj)
    log = plane.log_text()
    assert log.startswith("a log line of deployment/agn-operator")
    line = next(line for line in log.splitlines() if "bad" in line and "capacityWeight" in line)
    assert line.startswith("kube-apiserver refused inferenceprovider-bad.yaml:")
    kube.tools.answer({"match": ["apply", "--server-side"], "rc": 1, "stderr": "connection refused\n"})
    with pytest.raises(CommandFailed, match="connection refused"):
        plane.apply_raw("other.yaml", yaml.safe_dump(obj))
    kube.tools.answer(*OPERATOR_RULES)
    before = len(kube.backend.runner.calls)
    plane.delete_file(path)
    assert calls_since(kube, before) == [[*kube.kc, "delete", "inferenceproviders.grid.praxis.fast", "bad",
                                          "--ignore-not-found", "--wait=false"]]
    assert not path.exists()


# ------------------------------------------------------------------------------------ outputs


def test_configmap_envelope_and_snapshot_follow_the_object(kube: SimpleNamespace) -> None:
    plane = control(kube)
    assert plane.configmap(NET) is None and plane.envelope(NET) is None  # nothing rendered yet
    first, second = envelope(), envelope("site-b")
    kube.tools.answer({"match": ["get", "configmap", CM],
                       "stdouts": [json.dumps(configmap(first, "5")), json.dumps(configmap(first, "5")),
                                   json.dumps(configmap(second, "6"))]}, *OPERATOR_RULES)
    assert [*kube.kc, "--namespace", "agn-system", "get", "configmap", CM, "--ignore-not-found", "-o",
            "json"] in calls_since(kube, 0)
    path = plane.configmap_path(NET)
    identity = (path.stat().st_ino, path.stat().st_mtime_ns)
    assert plane.envelope(NET) == first  # same resourceVersion: the snapshot file is left alone
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == identity
    assert plane.envelope(NET) == second
    assert path.stat().st_ino != identity[0]
    assert yaml.safe_load(path.read_text())["metadata"]["resourceVersion"] == "6"


def test_status_entry_stamp_and_reconcile_read_the_gridnetwork(kube: SimpleNamespace) -> None:
    plane = control(kube)
    plane.apply(resources.grid_network(NET, [resources.gateway_ref("site-a")]))
    assert plane.status(NET) == {} and plane.status_stamp(NET) is None
    old, new = network_status("2026-01-01T00:00:00Z"), network_status("2026-01-01T00:00:02Z")
    kube.tools.answer({"match": ["get", "gridnetworks.grid.praxis.fast", NET],
                       "stdouts": [json.dumps(old)] * 4 + [json.dumps(new)]},
                      {"match": ["get", "configmap", CM], "stdout": json.dumps(configmap(envelope(), "5"))},
                      *OPERATOR_RULES)
    assert plane.status_entry(NET)["renderedRevision"] == "sha256:aa"
    assert plane.status_entry(NET, gateway="other") == {}
    stamp = plane.status_stamp(NET)
    before = len(kube.backend.runner.calls)
    assert plane.reconcile(NET, timeout=20) == envelope()
    assert plane.status_stamp(NET) != stamp
    calls = calls_since(kube, before)
    assert [*kube.kc, "get", "gridnetworks.grid.praxis.fast", NET, "--ignore-not-found", "-o", "json"] in calls
    patches = [c for c in calls if c[:5] == [*kube.kc, "patch", "gridnetworks.grid.praxis.fast"]]
    assert len(patches) == 1, "forced once: every force is a reconcile the suites would not count"


def test_a_reconcile_is_forced_in_the_second_after_the_last_render(kube: SimpleNamespace) -> None:
    """renderedAt has seconds resolution: a reconcile within the second of the last render writes the same
    status, which the API server does not even store. The force waits for the next second."""
    plane = control(kube)
    plane.apply(resources.grid_network(NET, [resources.gateway_ref("site-a")]))
    now = time.time()
    this_second = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    old, new = network_status(this_second), network_status("2999-01-01T00:00:00Z")
    kube.tools.answer({"match": ["get", "gridnetworks.grid.praxis.fast", NET],
                       "stdouts": [json.dumps(old)] * 3 + [json.dumps(new)]},
                      {"match": ["get", "configmap", CM], "stdout": json.dumps(configmap(envelope(), "5"))},
                      *OPERATOR_RULES)
    plane.reconcile(NET, timeout=20)
    next_second = int(now) + 1
    assert time.time() >= next_second, "forced before the second of the last render had ended"


def test_a_reconcile_that_leaves_the_status_as_it_was_is_seen_as_quiet(kube: SimpleNamespace) -> None:
    """An operator that answers every forced reconcile with the same status (a network it refuses to render)
    writes nothing an API server keeps: after half the deadline of re-forcing, that status is the answer.
    A network with no status yet gets no such pass: that wait fails, naming what it waited for."""
    plane = control(kube)
    plane.apply(resources.grid_network(NET, [resources.gateway_ref("site-a")]))
    refused = network_status("2026-01-01T00:00:00Z")
    kube.tools.answer({"match": ["get", "gridnetworks.grid.praxis.fast", NET], "stdout": json.dumps(refused)},
                      {"match": ["get", "configmap", CM], "stdout": ""}, *OPERATOR_RULES)
    before = len(kube.backend.runner.calls)
    started = time.monotonic()
    assert plane.reconcile(NET, timeout=4) is None
    assert time.monotonic() - started >= 2.0, "returned before half the deadline"
    patches = [c for c in calls_since(kube, before) if "patch" in c]
    assert len(patches) == 1, "forced once, however long the status stays the same"
    kube.tools.answer({"match": ["get", "gridnetworks.grid.praxis.fast", NET], "stdout": ""}, *OPERATOR_RULES)
    with pytest.raises(WaitTimeout, match=f"a forced reconcile of {NET} to be answered"):
        plane.reconcile(NET, timeout=3)


def test_outputs_are_what_a_field_manager_other_than_the_harness_wrote(kube: SimpleNamespace) -> None:
    plane = control(kube)
    ours = configmap(envelope(), "3", manager="kubectl-client-side-apply") | {
        "metadata": {"name": "agn-gateway-config", "namespace": "agn-system",
                     "managedFields": [{"manager": "kubectl-client-side-apply"}]}}
    root_ca = {"metadata": {"name": "kube-root-ca.crt", "namespace": "agn-system",
                            "managedFields": [{"manager": "kube-controller-manager"}]}}
    written = configmap(envelope(), "5")
    network = network_status("2026-01-01T00:00:00Z")
    network["metadata"]["managedFields"] = [{"manager": "agn-conformance", "operation": "Apply"},
                                            {"manager": "agn-operator", "operation": "Update",
                                             "subresource": "status"}]
    untouched = {"metadata": {"name": "quiet", "managedFields": [{"manager": "agn-conformance"}]}}
    kube.tools.answer(
        {"match": ["get", "configmaps", "--show-managed-fields"],
         "stdout": json.dumps({"items": [ours, root_ca, written]})},
        {"match": ["get", "gridnetworks.grid.praxis.fast", "--show-managed-fields"],
         "stdout": json.dumps({"items": [network, untouched]})}, *OPERATOR_RULES)
    assert plane.output_names() == [f"{CM}.configmap.yaml", f"{NET}.status.yaml"]
    assert plane.output_names("*.configmap.yaml") == [f"{CM}.configmap.yaml"]
    texts = plane.written_texts()
    assert sorted(texts) == ["agn-system/" + f"{CM}.configmap.yaml", "net1.status.yaml", "operator log"]
    assert "routing-overlay.json" in texts[f"agn-system/{CM}.configmap.yaml"]
    assert "managedFields" not in texts[f"agn-system/{CM}.configmap.yaml"]
    assert yaml.safe_load(texts["net1.status.yaml"])["status"]["overlayStatus"][0]["renderedAt"]
    assert texts["operator log"].startswith("a log line of deployment/agn-operator")


# ------------------------------------------------------------------------------------ the chain


def test_connect_deploys_a_gateway_whose_overlay_sync_follows_the_operators_configmap(
        kube: SimpleNamespace) -> None:
    plane = control(kube)
    env = envelope()
    revision = contract.revision_of(env)
    kube.tools.answer({"match": ["get", "configmap", CM], "stdout": json.dumps(configmap(env, "5"))},
                      *OPERATOR_RULES)
    kube.tools.pages({"/ready": {"ready": True, "revision": revision}})
    before = len(kube.backend.runner.calls)
    chain = plane.connect(NET)
    assert isinstance(chain.sync, KubeOverlaySync)
    assert chain.sync.delivered_revision() == revision
    chain.wait_accepted(revision)
    kname = chain.sync.pod
    calls = calls_since(kube, before)
    ns = ["--namespace", "agn-system"]
    assert [*kube.kc, *ns, "port-forward", "--address", "127.0.0.1", f"deployment/{kname}", ":8080", ":9901",
            ":9102"] in calls
    workdir = chain.gateway.proc.config_path.parent
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all((workdir / "kube.yaml").read_text())}
    assert f"{kname}-overlay" not in docs  # no mirror: overlay-sync reads the operator's ConfigMap itself
    pod = docs[kname]["spec"]["template"]["spec"]
    assert "initContainers" not in pod and pod["serviceAccountName"] == "agn-gateway"
    sync, gateway = pod["containers"]
    assert sync["command"] == ["agn-overlay-sync", "--configmap", f"agn-system/{CM}", "--target-dir",
                               "/var/run/agn/overlay", "--expected-scope",
                               "network=net1,gateway=edge-gateway,namespace=agn-system,local_site=site-a",
                               "--admin", "0.0.0.0:9102"]
    assert gateway["command"][:2] == ["sh", "-c"] and gateway["command"][-3:] == [
        "agn-gateway", "-c", "/etc/praxis/praxis.yaml"]
    assert {"name": "overlay", "mountPath": "/var/run/agn/overlay", "readOnly": True} in gateway["volumeMounts"]
    config = yaml.safe_load(docs[f"{kname}-config"]["data"]["praxis.yaml"])
    assert "/var/run/agn/overlay/routing-overlay.json" in json.dumps(config)

    assert plane.diagnostics().count("=== overlay-sync for net1") == 1
    before = len(kube.backend.runner.calls)
    plane.disconnect(chain)
    assert calls_since(kube, before)[-1] == [*kube.kc, *ns, "delete", "deployment,service,configmap,secret", "-l",
                                             f"agn.grid/gateway={kname}", "--ignore-not-found", "--wait=false"]
    assert not chain.gateway.proc.process.running() and plane.chains == []


def test_a_followed_configmap_is_handed_to_exactly_one_gateway(kube: SimpleNamespace) -> None:
    scope = contract.ScopeSpec(NET, "edge-gateway", "agn-system", "site-a")
    overlay_dir = kube.backend.follow_configmap("agn-system", CM, scope)
    assert kube.backend._follows[overlay_dir] == FollowedConfigMap("agn-system", CM, scope)
    gateway = kube.site.start_gateway("core", None, overlay_dir=overlay_dir, scope=scope)
    assert overlay_dir not in kube.backend._follows
    assert kube.backend.overlay_sync(overlay_dir).pod == f"agn-gw-{kube.backend._gateway_count}"
    kube.site.stop_gateway(gateway)
    with pytest.raises(KeyError):
        kube.backend.overlay_sync(overlay_dir)


# ------------------------------------------------------------------------------------ a vendor's operator workload


#: The public grid operator as its manifests make it: Deployment grid-operator in grid-system, pods selected by
#: its own label, the operator in container manager beside a sidecar, run on its image's entrypoint.
VENDOR_IMAGE = "vendor.example/grid-operator:1.4.0"
VENDOR_WORKLOAD = OperatorWorkload("grid-operator", "grid-system", "control-plane=grid-operator", "manager")


def workload_deployment(workload: OperatorWorkload, *, available: int = 1) -> dict[str, Any]:
    """The workload's Deployment: the reference's as operator_deployment() gives it, or the vendor's."""
    if workload == REFERENCE_OPERATOR:
        return operator_deployment(available=available)
    containers = [{"name": "kube-rbac-proxy", "image": "proxy:1", "args": ["--upstream=http://127.0.0.1:8080/"]},
                  {"name": "manager", "image": VENDOR_IMAGE}]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": workload.name, "namespace": workload.namespace},
            "spec": {"replicas": 1, "template": {"spec": {"containers": containers}}},
            "status": {"availableReplicas": available}}


def workload_pods(workload: OperatorWorkload, restarts: int = 0) -> dict[str, Any]:
    """Its one running pod, on the site's node, with the containers of its Deployment."""
    spec = workload_deployment(workload)["spec"]["template"]["spec"]
    return {"items": [{"metadata": {"name": f"{workload.name}-7d9f"},
                       "spec": {"nodeName": "agn-t1-site-a-control-plane", "containers": spec["containers"]},
                       "status": {"phase": "Running", "containerStatuses": [
                           {"name": c["name"], "ready": True, "restartCount": restarts}
                           for c in spec["containers"]]}}]}


def workload_rules(workload: OperatorWorkload, *, available: int = 1, restarts: int = 0) -> list[dict[str, Any]]:
    return [{"match": ["get", "deployment", workload.name],
             "stdout": json.dumps(workload_deployment(workload, available=available))},
            {"match": ["get", "pods", workload.selector], "stdout": json.dumps(workload_pods(workload, restarts))}]


def vendor_operator(directory: Path) -> OperatorCommand:
    """An operator installed from its manifests only, its Deployment declared in the descriptor."""
    deployment = workload_deployment(VENDOR_WORKLOAD)
    deployment["metadata"]["labels"] = {"app.kubernetes.io/name": "grid-operator"}
    (directory / "grid-operator.yaml").write_text(yaml.safe_dump(deployment))
    return OperatorCommand(argv_template=(), kubernetes=KubeComponent(
        VENDOR_IMAGE, (directory / "grid-operator.yaml",), deployment=VENDOR_WORKLOAD))


@pytest.fixture(params=[REFERENCE_OPERATOR, VENDOR_WORKLOAD], ids=["reference", "grid-operator"])
def workload_kube(request: pytest.FixtureRequest, tools: Tools, root: Path, parts: SimpleNamespace,  # noqa: F811
                  tmp_path: Path) -> Iterator[SimpleNamespace]:
    """A started single-site kind grid whose operator is the reference's (no kubernetes block) or the vendor's."""
    workload: OperatorWorkload = request.param
    parts.impl.operator = (OperatorCommand(argv_template=()) if workload == REFERENCE_OPERATOR
                           else vendor_operator(tmp_path))
    backend = make_kind(parts, root, "single-site", image="img:1")
    backend.start()
    grid = Grid(load_topology("single-site"), backend, frozenset())
    tools.answer(*workload_rules(workload))
    try:
        grid.start()
        kc = ["kubectl", "--kubeconfig", str(parts.workdir / "kube" / "site-a" / "kubeconfig")]
        yield SimpleNamespace(backend=backend, grid=grid, site=grid.site(), kc=kc, tools=tools, workload=workload)
    finally:
        grid.close()
        backend.close()


def test_the_operator_is_found_checked_and_read_by_its_declared_name_namespace_and_selector(
        workload_kube: SimpleNamespace) -> None:
    """The vendor's grid-system/grid-operator gets every command the reference's agn-system/agn-operator gets,
    with its own name, namespace and selector; the reference's twin gets exactly the commands it always got."""
    ns, w = workload_kube, workload_kube.workload
    if w == REFERENCE_OPERATOR:  # spelled out: the twin must not follow a change of the defaults
        name, where, selector = "agn-operator", ["--namespace", "agn-system"], "app.kubernetes.io/name=agn-operator"
    else:
        name, where, selector = "grid-operator", ["--namespace", "grid-system"], "control-plane=grid-operator"
    get_deployment = [*ns.kc, *where, "get", "deployment", name, "--ignore-not-found", "-o", "json"]
    get_pods = [*ns.kc, *where, "get", "pods", "-l", selector, "-o", "json"]
    waits = [c for c in calls_since(ns, 0) if "--for=condition=Available" in c]
    assert waits[0] == [*ns.kc, "--namespace", "agn-system", "wait", "--for=condition=Available", "deployment",
                        "--all", "--timeout=300s"]
    # installed as ready as the reference's, which the namespace's wait covers
    assert waits[1:] == ([] if w == REFERENCE_OPERATOR else [[*ns.kc, *where, "wait", "--for=condition=Available",
                                                              f"deployment/{name}", "--timeout=300s"]])
    before = len(ns.backend.runner.calls)
    plane = control(ns)
    assert calls_since(ns, before) == [
        get_deployment, [*ns.kc, *where, "rollout", "status", f"deployment/{name}", "--timeout=300s"], get_pods]
    assert not [c for c in calls_since(ns, 0) if "patch" in c], "installed as its manifests made it"
    assert plane.process.name == f"deployment/{name} in {ns.backend.sites[0].name}"

    before = len(ns.backend.runner.calls)
    plane.check_running()
    assert plane.process.running()
    assert calls_since(ns, before) == [get_deployment, get_pods, get_deployment]

    ns.tools.answer(*workload_rules(w, available=0))
    with pytest.raises(OperatorExited, match=f"the operator Deployment {where[1]}/{name} has no available replica"):
        plane.check_running()
    assert [*ns.kc, *where, "logs", f"deployment/{name}", "--all-containers", "--tail=40", "--previous"] in \
        calls_since(ns, before)
    ns.tools.answer(*workload_rules(w, restarts=1))
    with pytest.raises(OperatorExited, match="restarted"):
        plane.check_running()

    before = len(ns.backend.runner.calls)
    assert plane.log_text().startswith(f"a log line of deployment/{name}")
    assert plane.process.log_tail(5).startswith(f"a log line of deployment/{name}")
    assert f"=== operator deployment/{name} in " in plane.diagnostics()
    calls = calls_since(ns, before)
    assert calls[:2] == [[*ns.kc, *where, "logs", f"deployment/{name}", "--tail=-1"],
                         [*ns.kc, *where, "logs", f"deployment/{name}", "--all-containers", "--tail=5"]]

    before = len(ns.backend.runner.calls)
    plane.restart()
    assert calls_since(ns, before)[:2] == [[*ns.kc, *where, "rollout", "restart", f"deployment/{name}"],
                                           [*ns.kc, *where, "rollout", "status", f"deployment/{name}",
                                            "--timeout=300s"]]


def test_the_operator_is_crashed_stopped_and_restored_by_its_declared_name_and_namespace(
        workload_kube: SimpleNamespace) -> None:
    ns, w = workload_kube, workload_kube.workload
    if w == REFERENCE_OPERATOR:
        name, where, selector, container = ("agn-operator", ["--namespace", "agn-system"],
                                            "app.kubernetes.io/name=agn-operator", "operator")
    else:
        name, where, selector, container = ("grid-operator", ["--namespace", "grid-system"],
                                            "control-plane=grid-operator", "manager")
    plane = control(ns)
    node = "agn-t1-site-a-control-plane"
    ns.tools.answer({"match": ["exec", node, "crictl", "ps"], "stdout": "c0ffee\n"},
                    {"match": ["exec", node, "crictl", "inspect"], "stdout": json.dumps({"info": {"pid": 4242}})},
                    *workload_rules(w))
    before = len(ns.backend.runner.calls)
    plane.process.kill()
    pod = f"{w.name}-7d9f"
    assert calls_since(ns, before) == [
        [*ns.kc, *where, "get", "pods", "-l", selector, "-o", "json"],
        ["docker", "exec", node, "crictl", "ps", "-q", "--label", f"io.kubernetes.pod.namespace={where[1]}",
         "--label", f"io.kubernetes.pod.name={pod}", "--label", f"io.kubernetes.container.name={container}"],
        ["docker", "exec", node, "crictl", "inspect", "-o", "json", "c0ffee"],
        ["docker", "exec", node, "sh", "-c", "kill -STOP 4242"],
    ]

    pods = json.dumps(workload_pods(w))
    ns.tools.answer({"match": ["get", "pods", selector], "stdouts": [pods, json.dumps({"items": []})]},
                    *workload_rules(w)[:1])
    before = len(ns.backend.runner.calls)
    ns.backend.stop_operator(ns.backend.sites[0], timeout=10)
    pods_call = [*ns.kc, *where, "get", "pods", "-l", selector, "-o", "json"]
    assert calls_since(ns, before) == [[*ns.kc, *where, "scale", f"deployment/{name}", "--replicas=0"],
                                       pods_call, pods_call]
    before = len(ns.backend.runner.calls)
    ns.backend.restore_operators()
    (restore,) = calls_since(ns, before)
    assert restore[:-1] == [*ns.kc, *where, "patch", "deployment", name, "--type", "merge", "-p"]
    spec = workload_deployment(w)["spec"]
    assert json.loads(restore[-1]) == {"spec": {"replicas": spec.get("replicas", 1), "template": {"spec": {
        "containers": spec["template"]["spec"]["containers"], "volumes": None, "nodeSelector": None}}}}


def test_a_declared_container_the_pod_does_not_have_is_named_in_the_refusal() -> None:
    pod = workload_deployment(VENDOR_WORKLOAD)["spec"]["template"]["spec"]
    assert operator_container(pod, VENDOR_WORKLOAD)["name"] == "manager"
    assert operator_container(pod)["name"] == "kube-rbac-proxy", "without a name: the first"
    other = OperatorWorkload("grid-operator", "grid-system", container="operator")
    with pytest.raises(OperatorUnsupported, match="^Deployment grid-operator has no container operator "
                                                  r"\(its containers: kube-rbac-proxy, manager\)$"):
        operator_container(pod, other)
    with pytest.raises(OperatorUnsupported, match="^Deployment grid-operator: container manager sets no command"):
        operator_patch(workload_deployment(VENDOR_WORKLOAD), ["--mesh-site", "a"], workload=VENDOR_WORKLOAD)


def test_the_vendor_operator_logs_are_collected_with_the_namespace_ones(workload_kube: SimpleNamespace) -> None:
    ns = workload_kube
    before = len(ns.backend.runner.calls)
    text = ns.backend.collect_logs(ns.backend.sites[0])
    calls = calls_since(ns, before)
    gateway = "a log line of deployment/agn-gateway"
    if ns.workload == REFERENCE_OPERATOR:  # the namespace's Deployments hold the operator's
        assert len(calls) == 2 and gateway in text
    else:
        assert calls[-1] == [*ns.kc, "--namespace", "grid-system", "logs", "deployment/grid-operator",
                             "--all-containers", "--tail=200"]
        assert gateway in text
        assert "=== site-a grid-system/grid-operator\na log line of deployment/grid-operator" in text
