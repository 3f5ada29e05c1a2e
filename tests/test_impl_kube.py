"""The `operator.kubernetes` block of a descriptor: parsed strictly, relative paths from the descriptor's
directory, defaults that are the reference's (the spec's names)."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from harness.impl import ImplError, load_impl, parse_impl, reference_document
from harness.impl_kube import (
    DEFAULT_OVERLAY_KEY,
    DEFAULT_STATUS_RESOURCE,
    REFERENCE_OPERATOR,
    KubeOutputs,
    OperatorWorkload,
)
from harness.producer_oracle import configmap_name


def vendor_doc(kubernetes: dict[str, Any], **operator: Any) -> dict[str, Any]:
    doc = reference_document()
    doc["operator"] = {"kubernetes": kubernetes, **operator}
    # features only an operator command says how to exercise
    doc["features"] = [f for f in doc["features"] if f not in ("dynamicWeights", "signalsRelay")]
    return doc


@pytest.fixture
def deploy(tmp_path: Path) -> Path:
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "kustomization.yaml").write_text("resources: []\n")
    (tmp_path / "extra.yaml").write_text("{}\n")
    return tmp_path


def test_an_operator_with_only_a_kubernetes_block_loads_with_paths_from_the_descriptor(deploy: Path) -> None:
    path = deploy / "vendor.yaml"
    path.write_text(yaml.safe_dump(vendor_doc({"image": "vendor/grid-operator:1.4", "manifests": ["deploy",
                                                                                                 "extra.yaml"]})))
    impl = load_impl(str(path))
    assert impl.operator is not None and impl.operator.argv_template == ()
    kube = impl.operator.kubernetes
    assert kube is not None and kube.image == "vendor/grid-operator:1.4"
    assert kube.manifests == (deploy / "deploy", deploy / "extra.yaml")
    assert kube.outputs == KubeOutputs()


def test_the_default_outputs_are_the_spec_names() -> None:
    outputs = KubeOutputs()
    long = "n" * 40
    assert outputs.overlay.locate("grid", "edge", "team-a") == ("team-a", "grid-overlay-grid-edge")
    assert outputs.overlay.locate(long, "edge", "ns") == ("ns", configmap_name(long, "edge"))
    assert outputs.overlay.key == DEFAULT_OVERLAY_KEY == "routing-overlay.json"
    assert outputs.status.locate("grid") == (DEFAULT_STATUS_RESOURCE, "grid", None)
    assert DEFAULT_STATUS_RESOURCE == "gridnetworks.grid.praxis.fast"
    assert outputs.status.read({"status": {"overlayStatus": []}}) == {"overlayStatus": []}
    assert outputs.status.read(None) == {}


def test_outputs_can_name_other_places(deploy: Path) -> None:
    doc = vendor_doc({"image": "v/op:1", "manifests": [str(deploy / "deploy")], "outputs": {
        "overlay": {"name": "overlay-{network}-{gateway}", "namespace": "grid-system", "key": "overlay.json"},
        "status": {"resource": "gridstatuses.vendor.example", "name": "{network}-status", "namespace": "ops",
                   "field": "status.grid"}}})
    impl = parse_impl(doc)
    assert impl.operator is not None and impl.operator.kubernetes is not None
    outputs = impl.operator.kubernetes.outputs
    assert outputs.overlay.locate("g", "e", "ns") == ("grid-system", "overlay-g-e")
    assert outputs.overlay.key == "overlay.json"
    assert outputs.status.locate("g") == ("gridstatuses.vendor.example", "g-status", "ops")
    assert outputs.status.read({"status": {"grid": {"a": 1}}}) == {"a": 1}
    assert outputs.status.read({"status": {"grid": "text"}}) == {}


@pytest.mark.parametrize(("kubernetes", "operator", "key", "problem"), [
    ({"image": "v/op:1", "manifests": ["deploy"], "replicas": 2}, {}, "operator.kubernetes.replicas", "unknown key"),
    ({"manifests": ["deploy"]}, {}, "operator.kubernetes.image", "missing required key"),
    ({"image": "v/op:1"}, {}, "operator.kubernetes.manifests", "missing required key"),
    ({"image": "v/op 1", "manifests": ["deploy"]}, {}, "operator.kubernetes.image", "without whitespace"),
    ({"image": 3, "manifests": ["deploy"]}, {}, "operator.kubernetes.image", "quote it"),
    ({"image": "v/op:1", "manifests": []}, {}, "operator.kubernetes.manifests", "non-empty list"),
    ({"image": "v/op:1", "manifests": ["missing"]}, {}, "operator.kubernetes.manifests[0]", "no such file"),
    ({"image": "v/op:1", "manifests": ["deploy", "deploy/"]}, {}, "operator.kubernetes.manifests[1]", "twice"),
    ({"image": "v/op:1", "manifests": ["deploy"], "outputs": {"overlay": {"nam": "x"}}}, {},
     "operator.kubernetes.outputs.overlay.nam", "unknown key"),
    ({"image": "v/op:1", "manifests": ["deploy"], "outputs": {"overlay": {"name": "o-{site}"}}}, {},
     "operator.kubernetes.outputs.overlay.name", "unknown placeholder {site}"),
    ({"image": "v/op:1", "manifests": ["deploy"], "outputs": {"status": {"name": "{gateway}"}}}, {},
     "operator.kubernetes.outputs.status.name", "unknown placeholder {gateway}"),
    ({"image": "v/op:1", "manifests": ["deploy"], "outputs": {"status": {"field": "status..x"}}}, {},
     "operator.kubernetes.outputs.status.field", "dotted field path"),
    ({"image": "v/op:1", "manifests": ["deploy"], "outputs": []}, {}, "operator.kubernetes.outputs", "mapping"),
    ({"image": "v/op:1", "manifests": ["deploy"]}, {"env": {"A": "1"}}, "operator.env", "operator.command"),
])
def test_a_bad_kubernetes_block_is_refused_naming_its_key(deploy: Path, monkeypatch: pytest.MonkeyPatch,
                                                          kubernetes: dict[str, Any], operator: dict[str, Any],
                                                          key: str, problem: str) -> None:
    monkeypatch.chdir(deploy)  # a descriptor given in memory takes relative paths from the cwd
    with pytest.raises(ImplError) as caught:
        parse_impl(vendor_doc(kubernetes, **operator))
    assert caught.value.key == key and problem in caught.value.problem, str(caught.value)


def test_an_operator_needs_a_command_or_a_kubernetes_block() -> None:
    doc = reference_document()
    del doc["operator"]["command"]
    with pytest.raises(ImplError, match=r"^operator.command: missing required key \(or give operator.kubernetes"):
        parse_impl(doc)


def test_a_command_and_a_kubernetes_block_may_stand_together(deploy: Path) -> None:
    doc = reference_document()
    doc["operator"]["kubernetes"] = {"image": "v/op:1", "manifests": [str(deploy / "deploy")]}
    impl = parse_impl(doc)
    assert impl.operator is not None and impl.operator.argv_template and impl.operator.kubernetes is not None


def test_the_reference_descriptor_has_no_kubernetes_block() -> None:
    impl = load_impl("reference")
    assert impl.operator is not None and impl.operator.kubernetes is None


# ------------------------------------------------------------------------------------ the operator's Deployment


def test_the_operator_deployment_defaults_to_the_reference_and_a_vendor_names_its_own(deploy: Path) -> None:
    """The public grid operator is Deployment grid-operator in grid-system; without the mapping the workload is
    the reference's, whose pods the harness has always selected by app.kubernetes.io/name=agn-operator."""
    impl = parse_impl(vendor_doc({"image": "v/op:1", "manifests": [str(deploy / "deploy")]}))
    assert impl.operator is not None and impl.operator.kubernetes is not None
    assert impl.operator.kubernetes.deployment == OperatorWorkload() == REFERENCE_OPERATOR
    assert OperatorWorkload("agn-operator", "agn-system", "app.kubernetes.io/name=agn-operator") == REFERENCE_OPERATOR
    assert REFERENCE_OPERATOR.container is None

    impl = parse_impl(vendor_doc({"image": "v/op:1", "manifests": [str(deploy / "deploy")], "deployment": {
        "name": "grid-operator", "namespace": "grid-system", "selector": "control-plane=grid-operator",
        "container": "manager"}}))
    assert impl.operator is not None and impl.operator.kubernetes is not None
    assert impl.operator.kubernetes.deployment == OperatorWorkload("grid-operator", "grid-system",
                                                                   "control-plane=grid-operator", "manager")
    named = parse_impl(vendor_doc({"image": "v/op:1", "manifests": [str(deploy / "deploy")],
                                   "deployment": {"name": "grid-operator.v2"}}))
    assert named.operator is not None and named.operator.kubernetes is not None
    assert named.operator.kubernetes.deployment == OperatorWorkload(
        "grid-operator.v2", "agn-system", "app.kubernetes.io/name=grid-operator.v2")
    empty = parse_impl(vendor_doc({"image": "v/op:1", "manifests": [str(deploy / "deploy")], "deployment": None}))
    assert empty.operator is not None and empty.operator.kubernetes is not None
    assert empty.operator.kubernetes.deployment == REFERENCE_OPERATOR


#: (key, refused value, problem, accepted twin) of operator.kubernetes.deployment.
DEPLOYMENT_CASES = [
    ("replicas", 1, "unknown key (allowed here: name, namespace, selector, container)", None),
    ("name", "Grid-Operator", "must be a Deployment name (DNS-1123 subdomain", "grid-operator"),
    ("name", "grid_operator", "must be a Deployment name", "grid-operator"),
    ("name", "grid-operator-", "must be a Deployment name", "grid-operator-1"),
    ("name", "g" * 254, "at most 253 characters", "g" * 253),
    ("name", 7, "must be a string", "seven"),
    ("name", " ", "must not be empty", "g"),
    ("namespace", "grid.system", "must be a namespace name (DNS-1123 label", "grid-system"),
    ("namespace", "n" * 64, "at most 63 characters", "n" * 63),
    ("namespace", ["grid-system"], "must be a string, got a list", "grid-system"),
    ("selector", "", "must not be empty", "app=grid"),
    ("selector", {"app": "grid"}, "must be a string, got a mapping", "app=grid"),
    ("container", "Manager", "must be a container name (DNS-1123 label", "manager"),
    ("container", None, "must be a string, got nothing", "manager"),
]


@pytest.mark.parametrize(("key", "value", "problem", "twin"), DEPLOYMENT_CASES,
                         ids=[f"{key}={str(value)[:12]}" for key, value, _, _ in DEPLOYMENT_CASES])
def test_a_bad_deployment_key_is_refused_naming_it_and_its_twin_is_accepted(
        deploy: Path, key: str, value: Any, problem: str, twin: Any) -> None:
    def doc(deployment: Any) -> dict[str, Any]:
        return vendor_doc({"image": "v/op:1", "manifests": [str(deploy / "deploy")], "deployment": deployment})

    with pytest.raises(ImplError) as caught:
        parse_impl(doc({key: value}))
    assert caught.value.key == f"operator.kubernetes.deployment.{key}" and problem in caught.value.problem, (
        str(caught.value))
    accepted = parse_impl(doc({key: twin} if twin is not None else {}))
    assert accepted.operator is not None and accepted.operator.kubernetes is not None
    if twin is not None:
        assert dataclasses.asdict(accepted.operator.kubernetes.deployment)[key] == twin


@pytest.mark.parametrize(("key", "value", "problem", "twin"), DEPLOYMENT_CASES,
                         ids=[f"{key}={str(value)[:12]}" for key, value, _, _ in DEPLOYMENT_CASES])
def test_the_schema_refuses_each_bad_deployment_key_and_accepts_its_twin(
        key: str, value: Any, problem: str, twin: Any) -> None:
    """Editors flag exactly what the parser refuses (harness/schemas/descriptor.schema.json)."""
    schema = json.loads((resources.files("harness") / "schemas" / "descriptor.schema.json").read_text("utf-8"))
    validator = jsonschema.Draft202012Validator(schema)

    def doc(deployment: Any) -> dict[str, Any]:
        return vendor_doc({"image": "v/op:1", "manifests": ["deploy"], "deployment": deployment})

    assert not validator.is_valid(doc({key: value}))
    assert validator.is_valid(doc({key: twin} if twin is not None else {}))
    assert validator.is_valid(doc({"name": "grid-operator", "namespace": "grid-system",
                                   "selector": "control-plane=grid-operator", "container": "manager"}))


def test_a_deployment_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(ImplError) as caught:
        parse_impl(vendor_doc({"image": "v/op:1", "manifests": [str(Path.cwd())], "deployment": "grid-operator"}))
    assert caught.value.key == "operator.kubernetes.deployment" and "must be a mapping" in caught.value.problem
