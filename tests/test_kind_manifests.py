"""The reference image and the Kubernetes manifests, checked offline.

Every object is validated against the Kubernetes schemas with kubernetes-validate (strict), the kind overlay
is rendered with `kubectl kustomize` and validated as a whole, and the rules the components rely on are
checked: least-privilege RBAC, no subPath mounts, the gateway pod's shared overlay directory, probes,
security contexts, Service ports, the operator's mesh port, Service and node address, and that the default
gateway configs load in the reference gateway.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from reference.gateway.config import load_config
from reference.operator.core.configmap import configmap_name
from reference.overlay_sync.cli import parse_scope

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "manifests" / "base"
KIND_OVERLAY = ROOT / "manifests" / "overlays" / "kind"
DOCKERFILE = ROOT / "reference" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
BASE_FILES = sorted(p for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml")
IMAGE = "agn-conformance/reference:dev"
UID = 10001
NAMESPACE = "agn-system"
OVERLAY_DIR = "/var/run/agn/overlay"
CONTRACT_SCRIPTS = {"agn-operator", "agn-overlay-sync", "agn-gateway", "agn-fake-backend"}
GRID_RESOURCES = {"gridnetworks", "inferenceproviders", "gridsites", "agenttoolproviders"}
#: The only deletions any role may do: the operator removing the GridSites of sites that left the mesh, and
#: (in its own namespace) a generated consumer config once no inference candidate is left.
ALLOWED_DELETES = {("ClusterRole", "agn-operator", "grid.praxis.fast", "gridsites"),
                   ("Role", "agn-operator", "", "configmaps")}
MESH_PORT = 7946
MESH_NODE_PORT = 30946
EXPECTED_OBJECTS = {
    ("Namespace", "agn-system"),
    ("ServiceAccount", "agn-operator"),
    ("ClusterRole", "agn-operator"),
    ("ClusterRoleBinding", "agn-operator"),
    ("Role", "agn-operator"),
    ("RoleBinding", "agn-operator"),
    ("Deployment", "agn-operator"),
    ("Service", "agn-operator-mesh"),
    ("ServiceAccount", "agn-gateway"),
    ("Role", "agn-gateway"),
    ("RoleBinding", "agn-gateway"),
    ("Deployment", "agn-gateway"),
    ("Service", "agn-gateway"),
    ("ConfigMap", "agn-gateway-config"),
    ("ConfigMap", "agn-gateway-scope"),
    ("Deployment", "agn-provider-gateway"),
    ("Service", "agn-provider-gateway"),
    ("ConfigMap", "agn-provider-gateway-config"),
    ("Deployment", "agn-fake-backend"),
    ("Service", "agn-fake-backend"),
}
HAS_KV = importlib.util.find_spec("kubernetes_validate") is not None
KUBECTL = shutil.which("kubectl")
needs_kv = pytest.mark.skipif(not HAS_KV, reason="kubernetes-validate is not installed; offline validation skipped")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH; kustomize rendering skipped")

Obj = dict[str, Any]


# --- helpers -----------------------------------------------------------------------------------------


def _docs(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _base_objects() -> list[Obj]:
    return [d for p in BASE_FILES for d in _docs(p)]


def _kustomize(directory: Path) -> list[Obj]:
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"kubectl kustomize {directory} failed:\n{done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d is not None]


def _validate(doc: Obj) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def _find(objects: list[Obj], kind: str, name: str) -> Obj:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def _pod_specs(objects: list[Obj]) -> Iterator[tuple[str, Obj]]:
    for obj in objects:
        if obj["kind"] == "Deployment":
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]


def _containers(objects: list[Obj]) -> Iterator[tuple[str, Obj]]:
    for name, pod in _pod_specs(objects):
        for container in pod.get("initContainers", []) + pod["containers"]:
            yield f"{name}/{container['name']}", container


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _port(container: Obj, port: int | str) -> int:
    """A probe or Service target port resolved to the container port number."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    assert port in named, f"port {port!r} is not declared by container {container['name']}"
    return int(named[port])


def _quantity(text: str | int) -> float:
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(m|Ki|Mi|Gi)?", str(text))
    assert match is not None, f"unexpected quantity {text!r}"
    return float(match.group(1)) * units.get(match.group(2) or "", 1)


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    if KUBECTL is None:
        pytest.skip("kubectl is not on PATH; kustomize rendering skipped")
    return _kustomize(KIND_OVERLAY)


# --- schema validation -------------------------------------------------------------------------------


@needs_kv
@pytest.mark.parametrize("path", BASE_FILES, ids=lambda p: p.name)
def test_base_file_validates(path: Path) -> None:
    docs = _docs(path)
    assert docs, f"{path.name} holds no objects"
    for doc in docs:
        _validate(doc)


@needs_kv
@needs_kubectl
def test_rendered_kind_overlay_validates(rendered: list[Obj]) -> None:
    failures = []
    for doc in rendered:
        try:
            _validate(doc)
        except Exception as exc:  # collect every failure, not just the first
            failures.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc}")
    assert not failures, "\n".join(failures)


@needs_kv
def test_strict_validation_rejects_a_misspelled_field() -> None:
    import kubernetes_validate

    deployment = _find(_base_objects(), "Deployment", "agn-gateway")
    deployment["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(deployment)


@needs_kubectl
def test_rendered_objects_are_the_expected_set(rendered: list[Obj]) -> None:
    found = [(o["kind"], o["metadata"]["name"]) for o in rendered]
    assert len(found) == len(set(found)), f"duplicates in {found}"
    assert set(found) == EXPECTED_OBJECTS
    for obj in rendered:
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]


def test_base_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(p.name for p in BASE_FILES)
    for generator in kustomization["configMapGenerator"]:
        for entry in generator.get("files", []):
            assert (BASE / entry.partition("=")[2]).is_file(), entry


# --- kind overlay and vendor changes -------------------------------------------------------------------


@needs_kubectl
def test_kind_overlay_uses_the_loaded_image(rendered: list[Obj]) -> None:
    containers = dict(_containers(rendered))
    assert len(containers) == 5
    for name, container in containers.items():
        assert container["image"] == IMAGE, name
        assert container["imagePullPolicy"] == "IfNotPresent", name


@needs_kubectl
def test_vendor_overlay_swaps_the_image_and_drops_a_component(tmp_path: Path) -> None:
    overlay = tmp_path / "vendor"
    overlay.mkdir()
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(BASE, overlay)],
        "images": [{"name": "agn-conformance/reference", "newName": "registry.example/vendor/gateway",
                    "newTag": "1.2.3"}],
        "patches": [{"patch": yaml.safe_dump({
            "$patch": "delete", "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "agn-fake-backend", "namespace": NAMESPACE},
        })}],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    objects = _kustomize(overlay)
    images = {c["image"] for _, c in _containers(objects)}
    assert images == {"registry.example/vendor/gateway:1.2.3"}
    assert not [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "agn-fake-backend"]
    assert {n for n, _ in _pod_specs(objects)} == {"agn-operator", "agn-gateway", "agn-provider-gateway"}


@needs_kubectl
def test_a_component_is_replaced_by_leaving_it_out_of_resources(tmp_path: Path) -> None:
    copy = tmp_path / "base"
    shutil.copytree(BASE, copy)
    kustomization = yaml.safe_load((copy / "kustomization.yaml").read_text())
    kustomization["resources"].remove("provider-gateway.yaml")
    kustomization["configMapGenerator"] = [
        g for g in kustomization["configMapGenerator"] if g["name"] != "agn-provider-gateway-config"
    ]
    (copy / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    names = {(o["kind"], o["metadata"]["name"]) for o in _kustomize(copy)}
    gone = {n for n in EXPECTED_OBJECTS if n[1].startswith("agn-provider-gateway")}
    assert len(gone) == 3
    assert names == EXPECTED_OBJECTS - gone


# --- RBAC ------------------------------------------------------------------------------------------------


def _rules(objects: list[Obj], kind: str, name: str) -> list[Obj]:
    return list(_find(objects, kind, name)["rules"])


def _grants(rules: list[Obj]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for r in rules for group in r["apiGroups"] for resource in r["resources"]
            for verb in r["verbs"]}


def test_no_role_grants_secrets_or_wildcards() -> None:
    roles = [o for o in _base_objects() if o["kind"] in ("Role", "ClusterRole")]
    assert len(roles) == 3
    for role in roles:
        for rule in role["rules"]:
            where = f"{role['kind']}/{role['metadata']['name']}: {rule}"
            assert "secrets" not in rule["resources"], where
            for field in ("apiGroups", "resources", "verbs"):
                assert not any("*" in value for value in rule[field]), where
            assert not rule.get("nonResourceURLs"), where
            assert not rule.get("resourceNames"), where
            assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"]), where
            if "delete" in rule["verbs"]:
                grants = {(role["kind"], role["metadata"]["name"], g, r) for g in rule["apiGroups"]
                          for r in rule["resources"]}
                assert grants <= ALLOWED_DELETES, where


def test_operator_cluster_role_is_least_privilege() -> None:
    grants = _grants(_rules(_base_objects(), "ClusterRole", "agn-operator"))
    group = "grid.praxis.fast"
    expected = {(group, r, v) for r in GRID_RESOURCES for v in ("get", "list", "watch")}
    expected |= {(group, f"{r}/status", v) for r in GRID_RESOURCES for v in ("patch", "update")}
    expected |= {(group, "gridsites", v) for v in ("create", "patch", "delete")}  # discovered sites
    expected |= {("", "events", "create"), ("events.k8s.io", "events", "create")}
    assert grants == expected
    assert (group, "gridnetworks/status", "patch") in grants
    writes = {(r, v) for g, r, v in grants if r in GRID_RESOURCES and v not in ("get", "list", "watch")}
    assert writes == {("gridsites", "create"), ("gridsites", "patch"), ("gridsites", "delete")}


def test_operator_writes_configmaps_only_in_its_namespace() -> None:
    objects = _base_objects()
    role = _find(objects, "Role", "agn-operator")
    assert role["metadata"]["namespace"] == NAMESPACE
    writes = ("get", "list", "watch", "create", "patch", "update", "delete")  # delete: stale consumer configs
    assert _grants(role["rules"]) == {("", "configmaps", v) for v in writes}
    cluster = _grants(_rules(objects, "ClusterRole", "agn-operator"))
    assert not [g for g in cluster if g[1] == "configmaps"]


def test_gateway_reads_configmaps_only() -> None:
    role = _find(_base_objects(), "Role", "agn-gateway")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert _grants(role["rules"]) == {("", "configmaps", v) for v in ("get", "list", "watch")}


def test_bindings_tie_each_role_to_its_own_service_account() -> None:
    objects = _base_objects()
    for kind, binding_kind in (("Role", "RoleBinding"), ("ClusterRole", "ClusterRoleBinding")):
        for role in (o for o in objects if o["kind"] == kind):
            name = role["metadata"]["name"]
            binding = _find(objects, binding_kind, name)
            assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
            assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
            _find(objects, "ServiceAccount", name)
    pods = dict(_pod_specs(objects))
    assert pods["agn-operator"]["serviceAccountName"] == "agn-operator"
    assert pods["agn-gateway"]["serviceAccountName"] == "agn-gateway"
    for name in ("agn-provider-gateway", "agn-fake-backend"):
        assert pods[name].get("automountServiceAccountToken") is False, f"{name} needs no API access"
        assert "serviceAccountName" not in pods[name]


# --- pods ------------------------------------------------------------------------------------------------


def test_no_subpath_anywhere() -> None:
    for path in [*BASE_FILES, *KIND_OVERLAY.glob("*.yaml")]:
        assert "subPath" not in path.read_text(), path.name
    for key, _ in _walk(_base_objects()):
        assert key not in ("subPath", "subPathExpr")


@needs_kubectl
def test_no_subpath_in_the_rendered_overlay(rendered: list[Obj]) -> None:
    assert not [k for k, _ in _walk(rendered) if k in ("subPath", "subPathExpr")]


def test_gateway_pod_shares_the_overlay_directory() -> None:
    pod = dict(_pod_specs(_base_objects()))["agn-gateway"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"overlay-sync", "gateway"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["overlay"]
    for name, container in containers.items():
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["overlay"]["mountPath"] == OVERLAY_DIR, name
    assert not containers["overlay-sync"]["volumeMounts"][0].get("readOnly", False)
    assert {m["name"]: m.get("readOnly", False) for m in containers["gateway"]["volumeMounts"]}["overlay"]
    assert volumes["config"] == {"name": "config", "configMap": {"name": "agn-gateway-config"}}
    config_mount = next(m for m in containers["gateway"]["volumeMounts"] if m["name"] == "config")
    assert config_mount["mountPath"] == "/etc/praxis"


def test_gateway_mounts_its_hop_client_certificate_from_an_optional_secret() -> None:
    from harness.backends.kube.names import GATEWAY_HOP_TLS_DIR, GATEWAY_HOP_TLS_SECRET

    pod = dict(_pod_specs(_base_objects()))["agn-gateway"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["hop-tls"] == {"name": "hop-tls", "secret": {"secretName": GATEWAY_HOP_TLS_SECRET,
                                                                "optional": True}}
    gateway = next(c for c in pod["containers"] if c["name"] == "gateway")
    mount = next(m for m in gateway["volumeMounts"] if m["name"] == "hop-tls")
    assert mount == {"name": "hop-tls", "mountPath": GATEWAY_HOP_TLS_DIR, "readOnly": True}


def _rendered_site(tmp_path: Path, overlay: str = "") -> tuple[Any, list[Obj]]:
    """What the kind backend applies to site-a of the single-site topology (no cluster needed)."""
    from types import SimpleNamespace

    from harness.backends.kube.handles import SiteCluster
    from harness.backends.kube.kind import KindBackend
    from harness.backends.runner import Runner
    from harness.topology import load_topology

    topology = load_topology("single-site")
    backend = KindBackend(tmp_path / "work", topology, SimpleNamespace(), runner=Runner(), root=ROOT, run_id="t1")
    path = backend.render_site(SiteCluster(0, topology.sites[0], "agn-t1-site-a", []), overlay)
    return backend, _docs(path)


@needs_kv
def test_rendered_site_with_mtls_fakes_validates(tmp_path: Path) -> None:
    backend, docs = _rendered_site(tmp_path)
    try:
        for doc in docs:
            _validate(doc)
        names = {(d["kind"], d["metadata"]["name"]) for d in docs}
        assert ("Secret", "agn-gateway-hop-tls") in names
        assert {("Secret", f"agn-fake-provider-{x}-mtls") for x in "abcd"} <= names
        assert ("Secret", "agn-fake-mgmt-mtls") not in names
    finally:
        backend.supervisor.stop_all()
        backend.plan.close()


def test_rendered_site_gateway_config_loads_from_the_mounted_hop_secret(tmp_path: Path) -> None:
    """The standing gateway's site config loads in the reference gateway with the hop Secret where the
    Deployment mounts it; its hop clusters use mTLS, the management cluster does not."""
    import base64

    from harness.backends.kube.names import GATEWAY_HOP_TLS_DIR

    backend, docs = _rendered_site(tmp_path)
    try:
        secret = _find(docs, "Secret", "agn-gateway-hop-tls")
        hop = tmp_path / "hop-tls"
        hop.mkdir()
        for key, value in secret["data"].items():
            (hop / key).write_bytes(base64.b64decode(value))
        text = _find(docs, "ConfigMap", "agn-gateway-config")["data"]["praxis.yaml"]
        assert f"{GATEWAY_HOP_TLS_DIR}/" in text
        (tmp_path / "praxis.yaml").write_text(text.replace(f"{GATEWAY_HOP_TLS_DIR}/", f"{hop}/"))
        config = load_config(tmp_path / "praxis.yaml")
        balancer = next(s.options for c in config.chains.values() for s in c.filters if s.type == "load_balancer")
        tls = {cluster.name: cluster.tls for cluster in balancer.clusters}
        assert {name for name, value in tls.items() if value is not None} == {f"provider-{x}" for x in "abcd"}
        assert tls["provider-a"] is not None and tls["provider-a"].cert_path == str(hop / "tls.crt")
        assert tls["mgmt"] is None
    finally:
        backend.supervisor.stop_all()
        backend.plan.close()


def test_gateway_commands_follow_the_contract() -> None:
    pod = dict(_pod_specs(_base_objects()))["agn-gateway"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert containers["overlay-sync"]["command"] == [
        "agn-overlay-sync", "--configmap", "agn-system/$(OVERLAY_CONFIGMAP)", "--target-dir", OVERLAY_DIR,
        "--expected-scope", "$(EXPECTED_SCOPE)", "--admin", "0.0.0.0:9102",
    ]
    assert containers["gateway"]["command"] == ["agn-gateway", "-c", "/etc/praxis/praxis.yaml"]
    operator = dict(_containers(_base_objects()))["agn-operator/operator"]
    assert operator["command"] == ["agn-operator", "run", "--kubernetes", "--namespace", NAMESPACE]


def test_every_referenced_variable_is_defined() -> None:
    for name, container in _containers(_base_objects()):
        defined = {e["name"] for e in container.get("env", [])}
        used = set(re.findall(r"\$\(([A-Z_][A-Z0-9_]*)\)", " ".join(container["command"] + container.get("args", []))))
        assert used <= defined, f"{name}: {sorted(used - defined)} undefined"


def _expanded(container: Obj, pod_labels: dict[str, str], literals: dict[str, str]) -> list[str]:
    """The container command as the kubelet expands it, from env values, ConfigMap literals and labels."""
    values: dict[str, str] = {}
    for env in container.get("env", []):
        source = env.get("valueFrom", {})
        if "value" in env:
            values[env["name"]] = env["value"]
        elif "configMapKeyRef" in source:
            values[env["name"]] = literals[source["configMapKeyRef"]["key"]]
        elif source.get("fieldRef", {}).get("fieldPath") == "status.hostIP":
            values[env["name"]] = "172.18.0.2"  # what the kubelet gives: the node's address
        else:
            label = re.fullmatch(r"metadata\.labels\['([^']+)'\]", source["fieldRef"]["fieldPath"])
            assert label is not None, env
            values[env["name"]] = pod_labels[label.group(1)]
    return [re.sub(r"\$\(([A-Z_][A-Z0-9_]*)\)", lambda m: values[m.group(1)], arg) for arg in container["command"]]


def test_commands_are_accepted_by_their_programs() -> None:
    from harness.fakes import cli as fake_cli
    from reference.gateway import cli as gateway_cli
    from reference.operator import cli as operator_cli
    from reference.overlay_sync import cli as sync_cli

    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    literals = dict(item.split("=", 1) for g in kustomization["configMapGenerator"] for item in g.get("literals", []))
    parsers = {
        "agn-operator": lambda argv: operator_cli.build_parser().parse_args(argv),
        "agn-overlay-sync": sync_cli.parse_args,
        "agn-gateway": gateway_cli.parse_args,
        "agn-fake-backend": lambda argv: fake_cli.build_parser().parse_args(argv),
    }
    for obj in (o for o in _base_objects() if o["kind"] == "Deployment"):
        labels = obj["spec"]["template"]["metadata"]["labels"]
        for container in obj["spec"]["template"]["spec"]["containers"]:
            argv = _expanded(container, labels, literals)
            assert not [a for a in argv if "$(" in a], argv
            try:
                parsers[argv[0]](argv[1:])
            except SystemExit as exc:
                pytest.fail(f"{obj['metadata']['name']}/{container['name']}: {argv} rejected (exit {exc.code})")


def test_scope_configmap_is_consistent() -> None:
    objects = _base_objects()
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    generator = next(g for g in kustomization["configMapGenerator"] if g["name"] == "agn-gateway-scope")
    data = dict(literal.split("=", 1) for literal in generator["literals"])
    scope = parse_scope(data["EXPECTED_SCOPE"])
    assert set(scope) == {"network", "gateway", "namespace", "local_site"}
    assert scope["namespace"] == NAMESPACE
    assert data["OVERLAY_CONFIGMAP"] == configmap_name(scope["network"], scope["gateway"])
    config = yaml.safe_load((BASE / "config" / "gateway.yaml").read_text())
    route = next(f for f in config["filter_chains"][0]["filters"] if f["filter"] == "intelligent_route")
    assert route["expected_overlay_scope"] == scope
    keys = {e["valueFrom"]["configMapKeyRef"]["key"] for _, c in _containers(objects) for e in c.get("env", [])
            if "configMapKeyRef" in e.get("valueFrom", {})}
    assert keys == set(data)


def test_probes() -> None:
    containers = dict(_containers(_base_objects()))
    expected = {
        "agn-gateway/gateway": ("/ready", 9901),
        "agn-gateway/overlay-sync": ("/ready", 9102),
        "agn-provider-gateway/gateway": ("/ready", 9901),
        "agn-fake-backend/backend": ("/admin/stats", 8000),
    }
    for name, (path, port) in expected.items():
        probe = containers[name]["readinessProbe"]["httpGet"]
        assert (probe["path"], _port(containers[name], probe["port"])) == (path, port), name
    for name, container in containers.items():
        for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert "exec" not in container.get(kind, {}), f"{name} {kind} runs a command"


def test_security_contexts_and_resources() -> None:
    for name, pod in _pod_specs(_base_objects()):
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True, name
        assert context["runAsUser"] == UID and context["runAsGroup"] == UID, name
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not pod.get("hostNetwork") and not pod.get("hostPID"), name
        assert not [v for v in pod.get("volumes", []) if "hostPath" in v], name
    for name, container in _containers(_base_objects()):
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, name
        assert context["readOnlyRootFilesystem"] is True, name
        assert context["capabilities"] == {"drop": ["ALL"]}, name
        assert not context.get("privileged"), name
        resources = container["resources"]
        for resource in ("cpu", "memory"):
            request = _quantity(resources["requests"][resource])
            limit = _quantity(resources["limits"][resource])
            assert 0 < request <= limit, f"{name} {resource}"
        assert _quantity(resources["limits"]["memory"]) <= 1 * 2**30, f"{name}: keep limits modest"
        assert _quantity(resources["limits"]["cpu"]) <= 1, f"{name}: keep limits modest"


def test_services_reach_their_pods() -> None:
    objects = _base_objects()
    pods = {o["metadata"]["name"]: o["spec"]["template"] for o in objects if o["kind"] == "Deployment"}
    expected = {
        "agn-gateway": {(8080, 8080, 30080, "TCP"), (9901, 9901, 30901, "TCP")},
        "agn-provider-gateway": {(8443, 8443, 30443, "TCP")},
        "agn-fake-backend": {(8000, 8000, None, "TCP")},
        "agn-operator-mesh": {(MESH_PORT, MESH_PORT, MESH_NODE_PORT, "UDP")},
    }
    for service in (o for o in objects if o["kind"] == "Service"):
        name = service["metadata"]["name"]
        selector = service["spec"]["selector"]
        selected = [t for t in pods.values() if selector.items() <= t["metadata"]["labels"].items()]
        assert len(selected) == 1, f"{name} selects {len(selected)} pod templates"
        template = selected[0]
        ports_of = {p["name"]: (c, p) for c in template["spec"]["containers"] for p in c.get("ports", [])}
        found = set()
        for port in service["spec"]["ports"]:
            container, declared = ports_of[port["targetPort"]]
            protocol = port.get("protocol", "TCP")
            assert declared.get("protocol", "TCP") == protocol, f"{name} {port}: the container port is not {protocol}"
            found.add((port["port"], _port(container, port["targetPort"]), port.get("nodePort"), protocol))
        assert found == expected.pop(name), name
    assert not expected, f"missing Services: {sorted(expected)}"


def test_operator_mesh_port_service_and_node_address() -> None:
    objects = _base_objects()
    operator = dict(_containers(objects))["agn-operator/operator"]
    assert {(p["name"], p["containerPort"], p["protocol"]) for p in operator["ports"]} == {("swim", MESH_PORT, "UDP")}
    env = {e["name"]: e for e in operator["env"]}
    assert env["NODE_IP"] == {"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}
    service = _find(objects, "Service", "agn-operator-mesh")
    assert service["metadata"]["namespace"] == NAMESPACE
    spec = service["spec"]
    assert spec["type"] == "NodePort"
    assert spec["externalTrafficPolicy"] == "Local", "the peer's source address must survive the node port"
    (port,) = spec["ports"]
    assert (port["protocol"], port["port"], _port(operator, port["targetPort"]), port["nodePort"]) == (
        "UDP", MESH_PORT, MESH_PORT, MESH_NODE_PORT)
    assert not [a for a in operator["command"] if a.startswith("--mesh") or a.startswith("--swim")], \
        "the default command has no mesh flags (they are appended where a mesh is wanted)"


def test_operator_accepts_the_mesh_flags_a_cluster_needs() -> None:
    """Bound to every address of the pod, the operator must be told the node address to announce."""
    from reference.operator import cli as operator_cli

    operator = dict(_containers(_base_objects()))["agn-operator/operator"]
    base = _expanded(operator, {}, {})
    mesh = ["--mesh-site", "site-a", "--mesh-bind", f"0.0.0.0:{MESH_PORT}", "--mesh-seeds", ""]
    advertise = ["--mesh-advertise", _expanded({**operator, "command": [f"$(NODE_IP):{MESH_NODE_PORT}"]}, {}, {})[0]]
    settings = operator_cli._mesh_settings(operator_cli.build_parser().parse_args([*base[1:], *mesh, *advertise]))
    assert settings is not None
    assert (settings.bind, settings.advertise) == (("0.0.0.0", MESH_PORT), ("172.18.0.2", MESH_NODE_PORT))
    with pytest.raises(operator_cli.InputError, match="--mesh-advertise: required"):
        operator_cli._mesh_settings(operator_cli.build_parser().parse_args([*base[1:], *mesh]))


def test_provider_gateway_projects_config_and_tls_into_one_directory() -> None:
    pod = dict(_pod_specs(_base_objects()))["agn-provider-gateway"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    sources = volumes["config"]["projected"]["sources"]
    assert sources[0] == {"configMap": {"name": "agn-provider-gateway-config"}}
    secret = sources[1]["secret"]
    assert secret["name"] == "agn-provider-gateway-tls"
    assert {i["key"]: i["path"] for i in secret["items"]} == {
        "tls.crt": "tls/tls.crt", "tls.key": "tls/tls.key", "ca.crt": "tls/ca.crt"}
    assert volumes["credentials"]["secret"]["secretName"] == "agn-provider-credentials"
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["config"] == "/etc/praxis"
    assert mounts["credentials"] == "/run/secrets/provider-credentials"


# --- the default gateway configs ------------------------------------------------------------------------


def test_default_gateway_config_loads_and_matches_the_pod() -> None:
    config = load_config(BASE / "config" / "gateway.yaml")
    containers = dict(_containers(_base_objects()))
    gateway = containers["agn-gateway/gateway"]
    ports = {p["containerPort"] for p in gateway["ports"]}
    assert {listener.port for listener in config.listeners} | {config.admin[1] if config.admin else 0} == ports
    route = next(s.options for c in config.chains.values() for s in c.filters if s.type == "intelligent_route")
    assert str(route.overlay_file.parent) == OVERLAY_DIR


def test_default_provider_config_loads_from_the_projected_layout(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme", reason="trustme is needed to stand in for the TLS Secret")
    ca = trustme.CA(organization_name="ai-grid")
    server = ca.issue_cert("agn-provider-gateway.agn-system.svc")
    tls = tmp_path / "tls"
    tls.mkdir()
    server.cert_chain_pems[0].write_to_path(str(tls / "tls.crt"))
    server.private_key_pem.write_to_path(str(tls / "tls.key"))
    ca.cert_pem.write_to_path(str(tls / "ca.crt"))
    text = (BASE / "config" / "provider-gateway.yaml").read_text()
    assert "/etc/praxis/tls/" in text
    (tmp_path / "praxis.yaml").write_text(text.replace("/etc/praxis/", f"{tmp_path}/"))
    config = load_config(tmp_path / "praxis.yaml")
    assert [(listener.port, listener.tls is not None) for listener in config.listeners] == [(8443, True)]


# --- the image ------------------------------------------------------------------------------------------


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        keyword, _, rest = full.partition(" ")
        out.append((keyword.upper(), " ".join(rest.split())))
    assert not pending, "Dockerfile ends in a continuation"
    return out


def _stages(text: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(base image, stage name, instructions) for each FROM; a FROM's `${ARG}` takes the default of a
    global ARG (one before the first FROM), as `docker build` without --build-arg does."""
    stages: list[tuple[str, str, list[tuple[str, str]]]] = []
    global_args: dict[str, str] = {}
    for keyword, rest in _instructions(text):
        if keyword == "FROM":
            parts = rest.split()
            assert not parts[0].startswith("--"), "FROM with options is not expected"
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else ""
            base = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m.group(1)], parts[0])
            stages.append((base, name, []))
        elif keyword == "ARG" and not stages:
            arg, _, default = rest.partition("=")
            global_args[arg] = default
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1][2].append((keyword, rest))
    return stages


def _scripts() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


def test_dockerfile_is_multi_stage_on_slim() -> None:
    stages = _stages(DOCKERFILE.read_text())
    assert len(stages) >= 2
    assert {base for base, _, _ in stages} == {"python:3.11-slim-bookworm"}
    builder = stages[0]
    copies = [rest for kw, rest in builder[2] if kw == "COPY"]
    assert any(rest.split()[0] == "." for rest in copies), "the builder copies the build context"
    runs = " ".join(rest for kw, rest in builder[2] if kw == "RUN")
    assert re.search(r"python3? -m venv /opt/venv", runs)
    assert re.search(r"/opt/venv/bin/pip install --constraint /src/reference/constraints.txt /src\b", runs), \
        "the project is installed from the context, its dependencies pinned"
    wheelhouse = r"--no-index --find-links \"/src/\$WHEELHOUSE\" +--constraint /src/reference/constraints.txt"
    assert re.search(wheelhouse, runs), \
        "with a wheelhouse (hosts without registry access) pip reads only it, the same pins applied"


def test_final_stage_runs_as_a_numeric_non_root_user_without_build_tools() -> None:
    _, _, final = _stages(DOCKERFILE.read_text())[-1]
    users = [rest for kw, rest in final if kw == "USER"]
    assert users, "the final stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) == UID
    assert not gid or (gid.isdigit() and int(gid) != 0)
    runs = " ".join(rest for kw, rest in final if kw == "RUN")
    assert f"--uid {UID}" in runs
    for tool in ("gcc", "g++", "build-essential", "make", "apt-get install", "pip install", "cc "):
        assert tool not in runs, f"final stage runs {tool!r}"
    assert ("COPY", "--from=builder /opt/venv /opt/venv") in final
    assert not [rest for kw, rest in final if kw in ("COPY", "ADD") and "--from" not in rest]
    env = " ".join(rest for kw, rest in final if kw == "ENV")
    assert "PATH=/opt/venv/bin:$PATH" in env
    assert not [kw for kw, _ in final if kw == "ENTRYPOINT"], "the container command chooses the program"


def test_console_scripts_used_by_the_manifests_exist() -> None:
    used = {c["command"][0] for _, c in _containers(_base_objects())}
    assert used == CONTRACT_SCRIPTS
    assert _scripts() >= CONTRACT_SCRIPTS, f"missing from [project.scripts]: {sorted(CONTRACT_SCRIPTS - _scripts())}"
    _, _, final = _stages(DOCKERFILE.read_text())[-1]
    cmd = next(rest for kw, rest in final if kw == "CMD")
    assert yaml.safe_load(cmd)[0] in _scripts()


def test_dockerignore_keeps_what_the_install_needs() -> None:
    patterns = [p.strip() for p in DOCKERIGNORE.read_text().splitlines() if p.strip() and not p.startswith("#")]
    assert not [p for p in patterns if p.startswith("!")], "negations are not expected"
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    needed = {"pyproject.toml", "README.md"}
    needed |= {pkg.split(".")[0] for pkg in setuptools["packages"]}
    needed |= set(setuptools.get("package-dir", {}).values())

    def ignored(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        return any(fnmatch.fnmatch(p, pattern.removeprefix("**/")) or fnmatch.fnmatch(p, pattern)
                   for pattern in patterns for p in prefixes)

    for path in sorted(needed):
        assert (ROOT / path).exists(), path
        assert not ignored(path), f".dockerignore drops {path}, which the install needs"
    for path in (".git", "build", "tests", "harness/__pycache__"):
        assert ignored(path), f".dockerignore keeps {path}"


def _restricted_violations(pod: Obj) -> list[str]:
    """What the Pod Security "restricted" level (enforced on agn-system) refuses in a pod spec."""
    found: list[str] = []
    pod_context = pod.get("securityContext") or {}
    for container in pod.get("initContainers", []) + pod["containers"]:
        name = container["name"]
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        if "ALL" not in ((context.get("capabilities") or {}).get("drop") or []):
            found.append(f"{name}: capabilities.drop lacks ALL")
        if set((context.get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: adds capabilities")
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            found.append(f"{name}: runAsNonRoot is not true")
        seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile is {seccomp}")
    found += [f"volume {v['name']}: hostPath" for v in pod.get("volumes", []) if "hostPath" in v]
    return found


def test_every_pod_the_harness_makes_meets_the_restricted_level(tmp_path: Path) -> None:
    """agn-system enforces Pod Security "restricted": a Deployment the harness renders (fakes, gateways of
    every overlay mode, the TLS metrics endpoint) that breaks it gets no pod at all on a real cluster."""
    from harness.backends.kube.handles import FollowedConfigMap
    from harness.backends.kube.manifests import GatewayPod, gateway_docs, tls_metrics_docs
    from harness.contract import ScopeSpec

    namespace = _find(_base_objects(), "Namespace", "agn-system")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    backend, docs = _rendered_site(tmp_path)
    try:
        follow = FollowedConfigMap("agn-system", "grid-overlay", ScopeSpec("grid", "gw", "agn-system", "site-a"))
        for mode, followed in (("mirror", None), ("follow", follow), ("none", None)):
            docs += gateway_docs(GatewayPod("agn-gw-1", mode, followed, 8080, 9901, nodeport=False),
                                 "agn-conformance/reference:dev", {}, "listeners: []\n", b"{}", {}, {})
        docs += tls_metrics_docs("agn-tls-metrics", "agn-conformance/reference:dev", {}, "metrics", "site-a")
        pods = list(_pod_specs(docs)) + list(_pod_specs(_base_objects()))
        assert len(pods) >= 8
        assert {name: _restricted_violations(pod) for name, pod in pods if _restricted_violations(pod)} == {}
        unsafe = {"containers": [{"name": "c"}], "securityContext": {"runAsNonRoot": True}}
        assert len(_restricted_violations(unsafe)) == 3  # the check itself finds what a real cluster refuses
    finally:
        backend.supervisor.stop_all()
        backend.plan.close()


@needs_kubectl
def test_standing_gateways_of_a_rendered_site_have_what_they_need_to_start(tmp_path: Path) -> None:
    """The site file replaces the overlay's default ConfigMaps and keeps the rest, Deployments last (their
    pods read the ConfigMaps when they start). Before any grid exists the consumer gateway's overlay-sync
    follows a harness-written overlay that its scope accepts, and the provider gateway has a route: with
    an empty route list the reference gateway exits ("routes must contain 1-1024 entries")."""
    import base64

    from harness.backends.kube.names import OVERLAY_KEY, STANDING_OVERLAY_CONFIGMAP
    from reference.overlay.validate import parse_overlay

    assert KUBECTL is not None
    overlay = subprocess.run([KUBECTL, "kustomize", str(ROOT / "manifests" / "overlays" / "kind")],
                                                 capture_output=True, text=True, check=True, timeout=60).stdout
    backend, docs = _rendered_site(tmp_path, overlay)
    try:
        keys = [(d["kind"], d["metadata"]["name"]) for d in docs]
        assert len(keys) == len(set(keys)), "one object per kind and name"
        assert set(keys) >= {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(overlay) if d}
        kinds = [k for k, _ in keys]
        assert max(i for i, k in enumerate(kinds) if k == "ConfigMap") < kinds.index("Deployment")
        scope_data = _find(docs, "ConfigMap", "agn-gateway-scope")["data"]
        assert scope_data["OVERLAY_CONFIGMAP"] == STANDING_OVERLAY_CONFIGMAP
        scope = parse_scope(scope_data["EXPECTED_SCOPE"])
        gateway = yaml.safe_load(_find(docs, "ConfigMap", "agn-gateway-config")["data"]["praxis.yaml"])
        route = next(f for c in gateway["filter_chains"] for f in c["filters"] if f["filter"] == "intelligent_route")
        assert route["expected_overlay_scope"] == scope
        standing = _find(docs, "ConfigMap", STANDING_OVERLAY_CONFIGMAP)["data"][OVERLAY_KEY].encode()
        assert len(parse_overlay(standing, expected_scope=scope).candidates) == 1
        tls = tmp_path / "tls"
        tls.mkdir()
        for key, value in _find(docs, "Secret", "agn-provider-gateway-tls")["data"].items():
            (tls / key).write_bytes(base64.b64decode(value))
        text = _find(docs, "ConfigMap", "agn-provider-gateway-config")["data"]["praxis.yaml"]
        (tmp_path / "provider.yaml").write_text(text.replace("/etc/praxis/tls/", f"{tls}/"))
        load_config(tmp_path / "provider.yaml")  # exits the gateway on a real cluster when it raises
    finally:
        backend.supervisor.stop_all()
        backend.plan.close()


def test_a_seed_larger_than_a_configmap_reaches_the_pod_byte_for_byte(tmp_path: Path) -> None:
    """The API server refuses a ConfigMap over 1 MiB; the oversize overlay cases seed 2 MiB and more. The
    seed is split over ConfigMaps each under the limit, and the init container's script joins the parts
    (as the projected volume lays them out) into exactly the bytes the suite wrote."""
    import base64
    import os

    from harness.backends.kube.manifests import SEED_OVERLAY_SCRIPT, GatewayPod, gateway_docs, seed_configmaps

    seed = os.urandom(2 * 1024 * 1024 + 5)
    docs = seed_configmaps("agn-gw-9", seed, {})
    assert len(docs) == 3
    sizes = [sum(len(base64.b64decode(v)) for v in d["binaryData"].values()) for d in docs]
    assert max(sizes) <= 1024 * 1024 and sum(sizes) == len(seed)
    seed_dir, overlay_dir = tmp_path / "seed", tmp_path / "overlay"
    seed_dir.mkdir()
    overlay_dir.mkdir()
    for doc in reversed(docs):  # the order files appear in does not matter, their names do
        for key, value in doc["binaryData"].items():
            (seed_dir / key).write_bytes(base64.b64decode(value))
    subprocess.run([sys.executable, "-c", SEED_OVERLAY_SCRIPT, str(overlay_dir), "routing-overlay.json",
                    str(seed_dir)], check=True, timeout=60, cwd=ROOT)
    assert (overlay_dir / "routing-overlay.json").read_bytes() == seed
    # the Deployment mounts every part; a small seed is one ConfigMap, no seed one empty ConfigMap
    pod = GatewayPod("agn-gw-9", "mirror", None, 8080, 9901, nodeport=False)
    rendered = gateway_docs(pod, "img", {}, "listeners: []\n", seed, {}, {})
    volume = next(v for _, p in _pod_specs(rendered) for v in p["volumes"] if v["name"] == "seed")
    names = [source["configMap"]["name"] for source in volume["projected"]["sources"]]
    assert names == [f"agn-gw-9-overlay-{i}" for i in range(3)]
    assert len(seed_configmaps("agn-gw-9", b"{}", {})) == 1
    assert [d.get("binaryData") for d in seed_configmaps("agn-gw-9", None, {})] == [None]
