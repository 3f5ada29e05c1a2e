"""A vendor operator installed from a descriptor's `operator.kubernetes` block, without a cluster: which image
is loaded, which manifests are applied in place of the reference's operator, where its outputs are read,
and that the local backend refuses an operator it cannot start."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from harness.addresses import AddressPlan
from harness.backends.kube.handles import BackendUnavailable, FollowedConfigMap
from harness.backends.kube.install_plan import (
    InstallPlan,
    install_plan,
    kube_outputs,
    manifest_sources,
    merge_overlay,
    render_component,
)
from harness.backends.kube.manifests import GatewayPod, gateway_docs
from harness.backends.local import LocalBackend, OperatorUnsupported
from harness.contract import ScopeSpec
from harness.impl import OperatorCommand, load_impl, parse_impl, reference_document
from harness.impl_kube import KubeComponent, KubeOutputs, OverlayOutput, StatusOutput
from harness.process import Supervisor
from tests.test_kind_backend import (  # noqa: F401 - fixtures
    Tools,
    make_kind,
    parts,
    ready_server,
    root,
    site_sequence,
    tools,
)
from tests.test_kind_control import NET, OPERATOR_RULES, control, envelope, network_status

REPO = Path(__file__).resolve().parents[1]
VENDOR_IMAGE = "vendor.example/grid-operator:1.4.0"


def operator_yaml(image: str = VENDOR_IMAGE, name: str = "agn-operator") -> str:
    """A small operator install: its ServiceAccount and Deployment (and a grid CRD the harness leaves out)."""
    labels = {"app.kubernetes.io/name": name}
    return yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": "agn-system",
                                                                    "labels": labels}},
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
         "metadata": {"name": "gridnetworks.grid.praxis.fast"}, "spec": {"group": "grid.praxis.fast"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "agn-system",
                                                                     "labels": labels},
         "spec": {"template": {"spec": {"containers": [{"name": "operator", "image": image,
                                                        "command": ["grid-operator"]}]}}}},
    ])


def vendor_descriptor(directory: Path, manifests: list[str], **kubernetes: Any) -> Path:
    doc = reference_document()
    doc["implementation"]["project"] = "vendor-grid-operator"
    doc["operator"] = {"kubernetes": {"image": VENDOR_IMAGE, "manifests": manifests, **kubernetes},
                       "mesh_args": doc["operator"]["mesh_args"]}
    # features only an operator command says how to exercise
    doc["features"] = [f for f in doc["features"] if f not in ("dynamicWeights", "signalsRelay")]
    path = directory / "vendor.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def component(tmp_path: Path, *manifests: Path, image: str = VENDOR_IMAGE) -> Any:
    kube = KubeComponent(image=image, manifests=manifests)
    return install_plan(SimpleNamespace(operator=SimpleNamespace(kubernetes=kube))).components[0]


def no_kustomize(path: Path) -> str:
    raise AssertionError(f"kustomize was not expected for {path}")


# ------------------------------------------------------------------------------------------- the plan


def test_the_reference_installs_its_own_overlay_and_a_vendor_operator_replaces_the_reference_one(
        tmp_path: Path) -> None:
    assert install_plan(load_impl("reference")) == InstallPlan()
    assert install_plan(SimpleNamespace(gateway=SimpleNamespace())) == InstallPlan()
    (tmp_path / "operator.yaml").write_text(operator_yaml())
    impl = load_impl(str(vendor_descriptor(tmp_path, ["operator.yaml"])))
    plan = install_plan(impl)
    assert plan.images == (VENDOR_IMAGE,)
    assert plan.replaced == frozenset({"agn-operator"})
    assert [c.kubernetes.manifests for c in plan.components] == [(tmp_path / "operator.yaml",)]
    assert kube_outputs(impl) == KubeOutputs() == kube_outputs(load_impl("reference"))


def test_plain_files_and_directories_are_read_in_order_and_grid_crds_left_out(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "b.yaml").write_text(operator_yaml())
    (tmp_path / "dir" / "a.yml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                                            "metadata": {"name": "first"}}))
    (tmp_path / "dir" / "notes.txt").write_text("not a manifest")
    (tmp_path / "extra.json").write_text(json.dumps({"apiVersion": "v1", "kind": "Service",
                                                     "metadata": {"name": "last"}}))
    part = component(tmp_path, tmp_path / "dir", tmp_path / "extra.json")
    assert manifest_sources(part) == [(tmp_path / "dir" / "a.yml", "file"), (tmp_path / "dir" / "b.yaml", "file"),
                                      (tmp_path / "extra.json", "file")]
    docs = render_component(part, no_kustomize)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ConfigMap", "first"), ("ServiceAccount", "agn-operator"), ("Deployment", "agn-operator"),
        ("Service", "last")]


@pytest.mark.parametrize(("text", "problem"), [
    (operator_yaml(image="someone/else:1"), f"operator.kubernetes.image: no container of operator.kubernetes."
                                            f"manifests runs {VENDOR_IMAGE} (their images: someone/else:1)"),
    ("- a list\n", "is not a Kubernetes object"),
    ("kind: ConfigMap\nmetadata: {name: x}\n", "is not a Kubernetes object"),
    ("a: [unclosed\n", "cannot read"),
])
def test_manifests_that_would_judge_something_else_are_refused(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "op.yaml").write_text(text)
    with pytest.raises(BackendUnavailable, match="^operator.kubernetes") as caught:
        render_component(component(tmp_path, tmp_path / "op.yaml"), no_kustomize)
    assert problem in str(caught.value)


def test_a_directory_without_manifests_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(BackendUnavailable, match="holds no kustomization"):
        render_component(component(tmp_path, tmp_path / "empty"), no_kustomize)


KUBECTL = shutil.which("kubectl")


def kubectl_kustomize(path: Path) -> str:
    assert KUBECTL is not None
    return subprocess.run([KUBECTL, "kustomize", str(path)], check=True, capture_output=True, text=True).stdout


def write_vendor_overlay(directory: Path, image: str = VENDOR_IMAGE) -> Path:
    """A vendor's install as a kustomize overlay: `base/` a copy of the reference operator's manifests,
    `vendor/` the overlay that installs it from `image`; returns the overlay."""
    (directory / "base").mkdir()
    shutil.copy(REPO / "manifests" / "base" / "operator.yaml", directory / "base" / "operator.yaml")
    (directory / "base" / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["operator.yaml"]}))
    name, _, tag = image.rpartition(":")
    (directory / "vendor").mkdir()
    (directory / "vendor" / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": "agn-system",
        "resources": ["../base"],
        "images": [{"name": "agn-conformance/reference", "newName": name, "newTag": tag}],
        "patches": [{"target": {"kind": "Deployment"}, "patch": yaml.safe_dump([
            {"op": "add", "path": "/spec/template/spec/containers/0/imagePullPolicy", "value": "Never"}])}]}))
    return directory / "vendor"


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (it renders kustomize directories)")
def test_a_kustomize_overlay_of_the_reference_manifests_replaces_the_reference_operator(tmp_path: Path) -> None:
    """As a vendor would ship a retagged build: a kustomize overlay of a copy of manifests/base that keeps only
    the operator and changes its image; the merged overlay keeps every other reference component."""
    write_vendor_overlay(tmp_path)
    part = component(tmp_path, tmp_path / "vendor")
    assert manifest_sources(part) == [(tmp_path / "vendor", "kustomize")]
    vendor = render_component(part, kubectl_kustomize)
    deployment = next(d for d in vendor if d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == VENDOR_IMAGE

    reference = kubectl_kustomize(REPO / "manifests" / "overlays" / "kind")
    merged = list(yaml.safe_load_all(merge_overlay(reference, InstallPlan((part,)), vendor)))
    images = {d["metadata"]["name"]: [c["image"] for c in d["spec"]["template"]["spec"]["containers"]]
              for d in merged if d["kind"] == "Deployment"}
    assert images["agn-operator"] == [VENDOR_IMAGE]
    assert images["agn-gateway"] and all(i.startswith("agn-conformance/reference:") for i in images["agn-gateway"])
    before = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(reference)]
    after = [(d["kind"], d["metadata"]["name"]) for d in merged]
    assert sorted(before) == sorted(after), "the same objects, the operator's from the vendor"
    assert sum(1 for d in merged if d["metadata"]["name"] == "agn-operator" and d["kind"] == "Deployment") == 1


# ------------------------------------------------------------------------------------ the kind backend


REFERENCE_OVERLAY = yaml.safe_dump_all([
    {"apiVersion": "apps/v1", "kind": "Deployment",
     "metadata": {"name": "agn-operator", "namespace": "agn-system", "labels": {"app.kubernetes.io/name":
                                                                                "agn-operator"}},
     "spec": {"template": {"spec": {"containers": [{"name": "operator", "image": "agn-conformance/reference:dev"}]}}}},
    {"apiVersion": "apps/v1", "kind": "Deployment",
     "metadata": {"name": "agn-gateway", "namespace": "agn-system", "labels": {"app.kubernetes.io/name":
                                                                               "agn-gateway"}},
     "spec": {"template": {"spec": {"containers": [{"name": "gateway", "image": "agn-conformance/reference:dev"}]}}}},
])


def test_kind_loads_the_vendor_image_and_applies_its_manifests_instead_of_the_reference_operator(
        tools: Tools, root: Path, parts: SimpleNamespace, tmp_path: Path) -> None:  # noqa: F811
    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "kustomization.yaml").write_text("resources: []\n")
    parts.impl.operator = OperatorCommand(argv_template=(),
                                          kubernetes=KubeComponent(VENDOR_IMAGE, (tmp_path / "vendor",)))
    overlay = str(root / "manifests" / "overlays" / "kind")
    tools.answer({"match": ["kustomize", overlay], "stdout": REFERENCE_OVERLAY},
                 {"match": ["kustomize", str(tmp_path / "vendor")], "stdout": operator_yaml()})
    backend = make_kind(parts, root, "single-site", image="agn-conformance/reference:pr-7")
    backend.start()
    kc = ["--kubeconfig", str(parts.workdir / "kube" / "site-a" / "kubeconfig")]
    expected = site_sequence(root, parts.workdir, "site-a", "agn-conformance/reference:pr-7")
    load = expected.index(["kind", "load", "docker-image", "agn-conformance/reference:pr-7", "--name", "agn-t1-site-a"])
    expected.insert(load + 1, ["kind", "load", "docker-image", VENDOR_IMAGE, "--name", "agn-t1-site-a"])
    kustomize = expected.index(["kubectl", *kc, "kustomize", overlay])
    expected.insert(kustomize + 1, ["kubectl", *kc, "kustomize", str(tmp_path / "vendor")])
    # the run's image goes to the reference's Deployments by name, never to the vendor's
    set_image = next(i for i, c in enumerate(expected) if "set" in c)
    fakes = [f"deployment/agn-fake-{p}" for p in ("provider-a", "provider-b", "provider-c", "provider-d", "mgmt")]
    expected[set_image] = ["kubectl", *kc, "--namespace", "agn-system", "set", "image", *fakes,
                           "deployment/agn-gateway", "*=agn-conformance/reference:pr-7"]
    assert tools.calls() == [["kind", "get", "clusters"], *expected]
    applied = list(yaml.safe_load_all((parts.workdir / "kube" / "site-a" / "site.yaml").read_text()))
    operators = [d for d in applied if d["metadata"]["name"] == "agn-operator"]
    assert [(d["kind"], d["spec"]["template"]["spec"]["containers"][0]["image"]) for d in operators
            if d["kind"] == "Deployment"] == [("Deployment", VENDOR_IMAGE)]
    assert ("ServiceAccount", "agn-operator") in {(d["kind"], d["metadata"]["name"]) for d in applied}
    assert not [d for d in applied if d["kind"] == "CustomResourceDefinition"]
    backend.close()


def test_kind_refuses_a_vendor_image_the_engine_does_not_have(
        tools: Tools, root: Path, parts: SimpleNamespace,  # noqa: F811
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts.impl.operator = OperatorCommand(argv_template=(), kubernetes=KubeComponent(VENDOR_IMAGE, (tmp_path,)))
    monkeypatch.setenv("AGN_FAKE_DOCKER_IMAGES", "agn-conformance/kind-node:v1.31.0,agn-conformance/reference:dev")
    backend = make_kind(parts, root, "single-site", image="agn-conformance/reference:dev")
    with pytest.raises(BackendUnavailable, match=f"^operator.kubernetes.image {VENDOR_IMAGE} is not on this Docker "
                                                 "engine .*pulls nothing"):
        backend.prepare()
    assert not [c for c in tools.calls() if c[:1] == ["kind"]]


# ------------------------------------------------------------------------------------ the outputs


def test_the_control_plane_reads_overlay_and_status_where_the_outputs_say(
        tools: Tools, root: Path, parts: SimpleNamespace, tmp_path: Path) -> None:  # noqa: F811
    outputs = KubeOutputs(OverlayOutput(name="overlay-{network}-{gateway}", namespace="grid-system",
                                        key="overlay.json"),
                          StatusOutput(resource="gridstatuses.vendor.example", name="{network}-status",
                                       namespace="ops", field="status.grid"))
    (tmp_path / "operator.yaml").write_text(operator_yaml())
    parts.impl.operator = OperatorCommand(argv_template=(), kubernetes=KubeComponent(
        VENDOR_IMAGE, (tmp_path / "operator.yaml",), outputs))
    backend = make_kind(parts, root, "single-site", image="img:1")
    backend.start()
    tools.answer(*OPERATOR_RULES)
    try:
        from harness.grid import Grid
        from harness.topology import load_topology

        grid = Grid(load_topology("single-site"), backend, frozenset())
        grid.start()
        ns = SimpleNamespace(backend=backend, site=grid.site())
        plane = control(ns)
        env = envelope()
        status = network_status("2026-01-01T00:00:00Z")
        tools.answer({"match": ["get", "configmap", "overlay-net1-edge-gateway"], "stdout": json.dumps(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "overlay-net1-edge-gateway",
                                                                   "resourceVersion": "3"},
             "data": {"overlay.json": json.dumps(env)}})},
            {"match": ["get", "gridstatuses.vendor.example", "net1-status"],
             "stdout": json.dumps({"status": {"grid": status["status"]}})}, *OPERATOR_RULES)
        assert plane.envelope(NET) == env
        assert plane.status(NET) == status["status"]
        calls = [list(c) for c in backend.runner.calls]
        kc = ["kubectl", "--kubeconfig", str(parts.workdir / "kube" / "site-a" / "kubeconfig")]
        assert [*kc, "--namespace", "grid-system", "get", "configmap", "overlay-net1-edge-gateway",
                "--ignore-not-found", "-o", "json"] in calls
        assert [*kc, "--namespace", "ops", "get", "gridstatuses.vendor.example", "net1-status",
                "--ignore-not-found", "-o", "json"] in calls
        grid.close()
    finally:
        backend.close()


def test_a_gateway_pod_follows_another_data_key_with_the_key_flag() -> None:
    scope = ScopeSpec("n", "g", "ns", "site-a")
    for key, flag in (("routing-overlay.json", []), ("overlay.json", ["--key", "overlay.json"])):
        pod = GatewayPod("agn-gw-1", "follow", FollowedConfigMap("grid-system", "cm", scope, key), 8080, 9901, False)
        docs = gateway_docs(pod, "img:1", {}, "{}", None, {}, {})
        deployment = next(d for d in docs if d["kind"] == "Deployment")
        sync = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "overlay-sync")
        assert sync["command"][:3 + len(flag)] == ["agn-overlay-sync", "--configmap", "grid-system/cm", *flag]


# ------------------------------------------------------------------------------------ the local backend


def test_the_local_backend_refuses_an_operator_it_cannot_start(tmp_path: Path) -> None:
    (tmp_path / "operator.yaml").write_text(operator_yaml())
    impl = parse_impl(yaml.safe_load(vendor_descriptor(tmp_path, ["operator.yaml"]).read_text()),
                      source=str(tmp_path / "vendor.yaml"))
    plan = AddressPlan()
    backend = LocalBackend(tmp_path / "work", Supervisor(tmp_path / "logs"), plan, impl)
    try:
        with pytest.raises(OperatorUnsupported, match="only a kubernetes block .* use --backend kind or existing"):
            backend.start_operator(0, "operator-site-a")
    finally:
        plan.close()
