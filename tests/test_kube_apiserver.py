"""The manifests, CRDs, RBAC and Kubernetes adapters against a real kube-apiserver (no kubelet).

The recording API server (tests/kube_api_fake.py) checks which calls the adapters make; this module
checks that a real API server accepts them: CRDs become Established and apply their own schemas and CEL
rules to the examples, the kustomize overlay is accepted as a whole, RBAC grants each service account
what it needs and nothing it must not have, and the reference operator and overlay-sync do their work
with nothing but their service accounts' tokens. Skips where etcd and kube-apiserver are not installed
(see tests/kube_apiserver.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import producer_oracle, resources
from harness.control import ENVELOPE_KEY as OVERLAY_KEY
from harness.waiting import poll_until
from tests.kube_apiserver import KubeApiServer, find_binaries

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "agn-system"
OPERATOR = f"system:serviceaccount:{NAMESPACE}:agn-operator"
GATEWAY = f"system:serviceaccount:{NAMESPACE}:agn-gateway"
GROUP = "grid.praxis.fast"
VALID = sorted((ROOT / "manifests" / "examples" / "valid").rglob("*.yaml"))
INVALID = sorted((ROOT / "manifests" / "examples" / "invalid").glob("*.yaml"))
SLOW_START = 60.0  # a fresh process imports the kubernetes client first (seconds on a busy host)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiServer]:
    """A real API server with the CRDs established and the kind overlay of the components applied."""
    binaries = find_binaries()
    if isinstance(binaries, str):
        pytest.skip(binaries)
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH")
    with KubeApiServer.running(tmp_path_factory.mktemp("apiserver"), binaries) as server:
        server.kubectl("apply", "--server-side", "-f", str(ROOT / "manifests" / "crds"))
        server.kubectl("wait", "--for", "condition=established", "--timeout", "60s", "crd", "--all")
        server.kubectl("apply", "--server-side", "-k", str(ROOT / "manifests" / "overlays" / "kind"))
        yield server


# --- CRDs and manifests ----------------------------------------------------------------------------


def test_every_crd_is_established_and_served(api: KubeApiServer) -> None:
    crds = api.json("get", "crd")["items"]
    names = {c["metadata"]["name"] for c in crds}
    assert names == {f"{plural}.{GROUP}" for plural in
                     ("gridnetworks", "inferenceproviders", "gridsites", "agenttoolproviders")}
    for crd in crds:
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions.get("Established") == "True", crd["metadata"]["name"]
        assert conditions.get("NamesAccepted") == "True", crd["metadata"]["name"]


def test_the_kind_overlay_is_stored_as_rendered(api: KubeApiServer) -> None:
    deployments = {d["metadata"]["name"]: d for d in api.json("--namespace", NAMESPACE, "get", "deployments")["items"]}
    assert {"agn-operator", "agn-gateway", "agn-provider-gateway"} <= set(deployments)
    for deployment in deployments.values():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["image"] == "agn-conformance/reference:dev"
            assert container["imagePullPolicy"] == "IfNotPresent"


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_example_is_accepted(api: KubeApiServer, path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("apiVersion", "")
            .startswith(GROUP)]
    for doc in docs:
        done = api.kubectl("apply", "--dry-run=server", "--server-side", "-f", "-", input=json.dumps(doc),
                           check=False)
        assert done.returncode == 0, f"{path.name}: {done.stderr}"


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_example_is_refused_naming_its_field(api: KubeApiServer, path: Path) -> None:
    """The API server refuses each invalid example, naming the field the offline check names."""
    text = path.read_text()
    expected = text.splitlines()[0].removeprefix("# expect: ")
    field = expected.split(":", 1)[0].strip()
    if field.startswith("status."):
        done = _status_refusal(api, yaml.safe_load(text))
    else:
        done = api.kubectl("apply", "--dry-run=server", "--server-side", "-f", "-", input=text, check=False)
    assert done.returncode != 0, f"{path.name} was accepted by the API server"
    message = " ".join(done.stderr.split())
    # The server reports the first problem it meets: the field the offline check names, or (for a shape
    # with an undeclared field) a field beside it under the same parent.
    parent = field.rsplit(".", 1)[0]
    assert field in message or f"{parent}." in message, \
        f"{path.name}: expected the refusal to name {field} or a field of {parent}; got {message}"


def _status_refusal(api: KubeApiServer, doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Status lives in the status subresource: create the object, then try the status on it (dry run)."""
    resource = f"{doc['kind'].lower()}s.{GROUP}"
    name = doc["metadata"]["name"]
    body = {k: v for k, v in doc.items() if k != "status"}
    api.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(body))
    try:
        return api.kubectl("patch", resource, name, "--subresource=status", "--type=merge", "--dry-run=server",
                           "-p", json.dumps({"status": doc["status"]}), check=False)
    finally:
        api.kubectl("delete", resource, name, "--ignore-not-found")


# --- RBAC -------------------------------------------------------------------------------------------


def _can(api: KubeApiServer, who: str, verb: str, resource: str, namespace: str | None = NAMESPACE) -> bool:
    where = ["--namespace", namespace] if namespace else ["--all-namespaces"]
    resource, _, subresource = resource.partition("/")
    extra = [f"--subresource={subresource}"] if subresource else []
    done = api.kubectl("auth", "can-i", verb, resource, *extra, "--as", who, *where, check=False)
    answer = done.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl auth can-i answered {answer!r}: {done.stderr}"
    return answer == "yes"


@pytest.mark.parametrize(("verb", "resource"), [
    *[(verb, f"{plural}.{GROUP}") for plural in ("gridnetworks", "inferenceproviders", "gridsites",
                                                  "agenttoolproviders") for verb in ("get", "list", "watch")],
    ("patch", f"gridnetworks.{GROUP}/status"),
    ("patch", f"gridsites.{GROUP}/status"),
    ("create", "configmaps"), ("patch", "configmaps"), ("watch", "configmaps"),
    ("create", "events"),
])
def test_the_operator_may(api: KubeApiServer, verb: str, resource: str) -> None:
    assert _can(api, OPERATOR, verb, resource)


@pytest.mark.parametrize(("verb", "resource", "namespace"), [
    ("get", "secrets", NAMESPACE), ("list", "secrets", None), ("watch", "secrets", NAMESPACE),
    ("create", "configmaps", "default"), ("delete", "configmaps", "default"),
    ("delete", f"gridnetworks.{GROUP}", None), ("patch", f"gridnetworks.{GROUP}", None),
    ("create", "pods", NAMESPACE), ("create", "deployments", NAMESPACE),
])
def test_the_operator_may_not(api: KubeApiServer, verb: str, resource: str, namespace: str | None) -> None:
    assert not _can(api, OPERATOR, verb, resource, namespace)


@pytest.mark.parametrize(("verb", "resource", "allowed"), [
    ("get", "configmaps", True), ("list", "configmaps", True), ("watch", "configmaps", True),
    ("patch", "configmaps", False), ("create", "configmaps", False), ("get", "secrets", False),
    ("list", f"gridnetworks.{GROUP}", False),
])
def test_the_gateway_pod_reads_configmaps_only(api: KubeApiServer, verb: str, resource: str, allowed: bool) -> None:
    assert _can(api, GATEWAY, verb, resource) is allowed


# --- the adapters with their service accounts' tokens ---------------------------------------------------


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _apply(api: KubeApiServer, *objects: dict[str, Any]) -> None:
    for obj in objects:
        body = {k: v for k, v in obj.items() if k != "status"}
        api.kubectl("apply", "--server-side", "--field-manager", "agn-conformance", "-f", "-", input=json.dumps(body))


def _configmap(api: KubeApiServer, name: str) -> dict[str, Any] | None:
    done = api.kubectl("--namespace", NAMESPACE, "get", "configmap", name, "-o", "json", "--ignore-not-found")
    return json.loads(done.stdout) if done.stdout.strip() else None


def test_operator_and_overlay_sync_run_on_their_service_account_tokens(api: KubeApiServer, tmp_path: Path) -> None:
    """The operator renders into the overlay ConfigMap and GridNetwork status; overlay-sync delivers it."""
    operator_config = api.kubeconfig("operator", api.service_account_token(NAMESPACE, "agn-operator"))
    gateway_config = api.kubeconfig("gateway", api.service_account_token(NAMESPACE, "agn-gateway"))
    network = "envtest-net"
    gateway_ref = resources.gateway_ref("site-a", name="agn-gateway", namespace=NAMESPACE)
    _apply(api, resources.grid_network(network, [gateway_ref]),
           resources.inference_provider("envtest-llm", network, site="site-a", cluster="backend-a",
                                        models=["envtest-model"]))
    operator_log, sync_log = tmp_path / "operator.log", tmp_path / "overlay-sync.log"
    operator = _start([sys.executable, "-m", "reference.operator", "run", "--kubernetes", "--kubeconfig",
                       str(operator_config), "--namespace", NAMESPACE, "--poll", "0.2"], operator_log)
    configmap = producer_oracle.configmap_name(network, "agn-gateway")
    target = tmp_path / "overlay"
    scope = f"network={network},gateway=agn-gateway,namespace={NAMESPACE},local_site=site-a"
    sync = _start([sys.executable, "-m", "reference.overlay_sync", "--configmap", f"{NAMESPACE}/{configmap}",
                   "--kubeconfig", str(gateway_config), "--target-dir", str(target), "--expected-scope", scope],
                  sync_log)
    try:
        def logs() -> str:
            return f"--- operator ---\n{operator_log.read_text()}\n--- overlay-sync ---\n{sync_log.read_text()}"

        doc = poll_until(lambda: _configmap(api, configmap), lambda d: d is not None, timeout=SLOW_START,
                         what=f"the operator to create ConfigMap {NAMESPACE}/{configmap}",
                         describe=lambda _d: logs())
        assert doc is not None
        envelope = json.loads(doc["data"][OVERLAY_KEY])
        assert envelope["scope"]["network"] == network
        assert [c.get("name") for c in producer_oracle.candidates(envelope)] == ["envtest-model"], envelope
        status = poll_until(lambda: api.json("get", f"gridnetworks.{GROUP}", network).get("status"), bool,
                            timeout=30, what=f"GridNetwork {network} status", describe=lambda _s: logs())
        assert status
        delivered = target / OVERLAY_KEY
        poll_until(lambda: delivered.read_bytes() if delivered.exists() else None, lambda b: b is not None,
                   timeout=SLOW_START, what=f"overlay-sync to deliver {delivered}", describe=lambda _b: logs())
        assert json.loads(delivered.read_bytes())["revision"] == envelope["revision"]
        assert "403" not in logs() and "Forbidden" not in logs(), logs()
    finally:
        _stop(sync)
        _stop(operator)
        api.kubectl("delete", f"gridnetworks.{GROUP}", network, "--ignore-not-found")
        api.kubectl("delete", f"inferenceproviders.{GROUP}", "envtest-llm", "--ignore-not-found")


def test_mesh_outputs_are_written_with_the_operator_service_account(api: KubeApiServer, tmp_path: Path) -> None:
    """In a mesh the operator writes `agn-mesh-state` and discovered GridSites the API server accepts.

    The real server is what decides field ownership (an admin's pins applied by another field manager
    survive the operator's applies), validates the status the operator writes against the CRD schema and
    authorises every call by the operator's ClusterRole.
    """
    from tests.operator.test_operator_mesh import NET, free_udp_port, tls_listener, write_site

    token = api.service_account_token(NAMESPACE, "agn-operator")
    config = api.kubeconfig("mesh-operator", token)
    name = f"{NET}-site-b"
    _apply(api, resources.grid_network(NET, [resources.gateway_ref("site-a")], staleCandidateTtlSeconds=5),
           resources.inference_provider("prov-a", NET, site="site-a", cluster="local-a", models=["model-a"]))
    host_a, host_b = "127.0.0.71", "127.0.0.72"
    port_a, port_b = free_udp_port(host_a), free_udp_port(host_b)
    swim = ["--swim-probe-interval", "0.5", "--swim-probe-timeout", "0.3", "--swim-suspicion-mult", "3"]
    write_site(tmp_path / "b" / "manifests", "site-b")
    logs = {"site-a": tmp_path / "site-a.log", "site-b": tmp_path / "site-b.log"}

    def all_logs() -> str:
        return "\n".join(f"--- {site} ---\n{path.read_text()}" for site, path in logs.items())

    procs: list[subprocess.Popen[bytes]] = []
    try:
        with tls_listener(host_b) as (gateway, pin):
            procs.append(_start([sys.executable, "-m", "reference.operator", "run", "--poll", "0.2",
                                 "--manifests", str(tmp_path / "b" / "manifests"), "--out", str(tmp_path / "b" / "out"),
                                 "--mesh-site", "site-b", "--mesh-bind", f"{host_b}:{port_b}", "--mesh-seeds",
                                 f"{host_a}:{port_a}", "--mesh-gateway", gateway, "--mesh-routing-cluster", "b-route",
                                 *swim], logs["site-b"]))
            procs.append(_start([sys.executable, "-m", "reference.operator", "run", "--poll", "0.2", "--kubernetes",
                                 "--kubeconfig", str(config), "--namespace", NAMESPACE, "--mesh-site", "site-a",
                                 "--mesh-bind", f"{host_a}:{port_a}", "--mesh-seeds", f"{host_b}:{port_b}", *swim],
                                logs["site-a"]))

            def mesh_state() -> dict[str, Any]:
                doc = _configmap(api, "agn-mesh-state") or {}
                return yaml.safe_load((doc.get("data") or {}).get("mesh.state.yaml") or "{}") or {}

            poll_until(mesh_state, lambda s: any(m.get("name") == "site-b" and m.get("status") == "alive"
                                                 for m in s.get("members") or []),
                       timeout=SLOW_START, what="site-b alive in ConfigMap agn-mesh-state",
                       describe=lambda _s: all_logs())

            def gridsite() -> dict[str, Any]:
                done = api.kubectl("get", f"gridsites.{GROUP}", name, "-o", "json", "--ignore-not-found")
                return json.loads(done.stdout) if done.stdout.strip() else {}

            site = poll_until(gridsite, lambda g: (g.get("status") or {}).get("reason") == "TrustMaterialMissing",
                              timeout=30, what=f"GridSite {name} waiting for trust material",
                              describe=lambda g: f"{g.get('status')}\n{all_logs()}")
            assert site["spec"] == {"gridNetworkRef": NET}
            assert site["metadata"]["labels"]["grid.praxis.fast/auto-discovered"] == "true"

            pins = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "GridSite", "metadata": {"name": name},
                    "spec": {"gridNetworkRef": NET, "trust": {"canonicalFingerprints": [pin]}}}
            api.kubectl("apply", "--server-side", "--field-manager", "site-admin", "-f", "-", input=json.dumps(pins))
            active = poll_until(gridsite, lambda g: (g.get("status") or {}).get("phase") == "Active", timeout=30,
                                what=f"GridSite {name} Active once pinned",
                                describe=lambda g: f"{g.get('status')}\n{all_logs()}")
            assert active["spec"]["trust"] == {"canonicalFingerprints": [pin]}, "the admin's pins were kept"

            def remote_clusters() -> list[str]:
                doc = _configmap(api, producer_oracle.configmap_name(NET, resources.DEFAULT_GATEWAY)) or {}
                text = (doc.get("data") or {}).get(OVERLAY_KEY)
                return sorted(c["cluster"] for c in producer_oracle.candidates(json.loads(text))) if text else []

            poll_until(remote_clusters, lambda c: c == ["local-a", "local-b"], timeout=30,
                       what="site-b's provider in site-a's overlay", describe=lambda c: f"{c}\n{all_logs()}")

            api.kubectl("delete", f"gridnetworks.{GROUP}", NET)
            poll_until(gridsite, lambda g: not g, timeout=30, what=f"GridSite {name} deleted with its network",
                       describe=lambda g: f"{g.get('status')}\n{all_logs()}")
        assert "403" not in logs["site-a"].read_text() and "Forbidden" not in logs["site-a"].read_text(), all_logs()
        assert "failed" not in logs["site-a"].read_text(), all_logs()
    finally:
        for proc in procs:
            _stop(proc)
        api.kubectl("delete", f"gridnetworks.{GROUP}", NET, "--ignore-not-found")
        api.kubectl("delete", f"inferenceproviders.{GROUP}", "prov-a", "--ignore-not-found")


# --- the harness's control plane (its kubectl calls) against the real server ---------------------------


@pytest.fixture
def plane(api: KubeApiServer, tmp_path: Path) -> Any:
    """The kind backend's control plane driving this API server through the real kubectl.

    There is no kubelet, so the operator runs as a process here (with its service account's token) and
    the Deployment checks are out of reach: `check_interval` puts them beyond the test's life.
    """
    from harness.backends.kube.backend import KubeBackend
    from harness.backends.kube.control import KubeControlPlane
    from harness.backends.kube.handles import SiteCluster
    from harness.topology import load_topology

    topology = load_topology("single-site")
    backend = KubeBackend(tmp_path / "work", topology, impl=None)
    cluster = SiteCluster(0, topology.sites[0], "envtest", ["--kubeconfig", str(api.kubeconfig("admin"))])
    backend.sites = [cluster]
    return KubeControlPlane(None, backend, cluster, check_interval=1e9)  # type: ignore[arg-type]


def test_the_control_plane_drives_and_reads_a_real_api_server(api: KubeApiServer, plane: Any, tmp_path: Path) -> None:
    """Server-side apply with the status subresource, API refusals, managed-field detection of the
    operator's outputs, forced reconciles and deletes, all as the producer suites use them on kind."""
    network = "plane-net"
    plane.apply(resources.grid_site("site-a", network, phase="Active"))
    stored = api.json("get", f"gridsites.{GROUP}", "site-a")
    assert stored["status"]["phase"] == "Active", "the status went through the status subresource"
    plane.apply(resources.grid_network(network, [resources.gateway_ref("site-a")]),
                resources.inference_provider("plane-p1", network, site="site-a", cluster="p1", models=["m"]))
    refused = resources.inference_provider("plane-bad", network, site="site-a", cluster="bad", models=["m"])
    refused["spec"]["capacityWeight"] = 5000
    path = plane.apply_raw("inferenceprovider-plane-bad.yaml", yaml.safe_dump(refused))
    assert len(plane.refusals) == 1 and "plane-bad" in plane.refusals[0] and "capacityWeight" in plane.refusals[0]
    assert api.kubectl("get", f"inferenceproviders.{GROUP}", "plane-bad", "--ignore-not-found").stdout == ""

    token = api.service_account_token(NAMESPACE, "agn-operator")
    log = tmp_path / "operator.log"
    operator = _start([sys.executable, "-m", "reference.operator", "run", "--kubernetes", "--kubeconfig",
                       str(api.kubeconfig("plane-operator", token)), "--namespace", NAMESPACE, "--poll", "0.2"], log)
    try:
        envelope = plane.wait_envelope(network, lambda e: len(producer_oracle.candidates(e)) == 1,
                                       what="the operator's first overlay", timeout=SLOW_START)
        assert [c["cluster"] for c in producer_oracle.candidates(envelope)] == ["p1"], log.read_text()
        configmap = producer_oracle.configmap_name(network, resources.DEFAULT_GATEWAY)
        names = plane.output_names()  # other tests' outputs share this server: look at this network's
        assert {f"{configmap}.configmap.yaml", f"{network}.status.yaml"} <= set(names), names
        assert "site-a.gridsite.yaml" not in names, "the harness's own GridSite is not an operator output"
        assert plane.status(network).get("overlayStatus"), plane.status(network)
        before = plane.status_stamp(network)
        assert plane.reconcile(network) is not None
        assert plane.status_stamp(network) != before, "a forced reconcile rewrote the status"
        plane.apply(resources.inference_provider("plane-p2", network, site="site-a", cluster="p2", models=["m"]))
        plane.wait_envelope(network, lambda e: len(producer_oracle.candidates(e)) == 2, what="p2 rendered")
        plane.delete("InferenceProvider", "plane-p1")
        envelope = plane.wait_envelope(network, lambda e: [c["cluster"] for c in producer_oracle.candidates(e)]
                                       == ["p2"], what="p1 gone after its delete")
        plane.delete_file(path)
        assert not path.exists()
        texts = plane.written_texts()
        assert "operator log" in texts and any(configmap in name for name in texts)
        assert "Forbidden" not in log.read_text(), log.read_text()
    finally:
        _stop(operator)
        for kind, name in (("InferenceProvider", "plane-p2"), ("GridNetwork", network), ("GridSite", "site-a")):
            plane.delete(kind, name)
