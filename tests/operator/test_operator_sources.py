"""The `dir` source: multi-document YAML, CRD schema validation, defaults, invalid resources skipped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from reference.operator.sources import DirSource, crd_dir, load_kinds, schema_errors

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "manifests" / "examples"

NETWORK = """\
apiVersion: grid.praxis.fast/v1alpha1
kind: GridNetwork
metadata:
  name: net-1
spec:
  gatewayRefs:
    - name: gw-1
      namespace: praxis
      localSiteName: site-a
"""
PROVIDER = """\
apiVersion: grid.praxis.fast/v1alpha1
kind: InferenceProvider
metadata:
  name: {name}
spec:
  gridNetworkRef: net-1
  providerKind: self_hosted
  backendKind: local
  endpoint: http://127.0.0.1:9
  clusterName: {name}
  site: site-a
  models:
    - name: m
"""


def test_crd_dir_is_found_and_has_every_kind() -> None:
    assert crd_dir().is_dir()
    assert set(load_kinds()) == {"GridNetwork", "InferenceProvider", "GridSite", "AgentToolProvider"}


def test_loads_multi_document_files_and_applies_defaults(tmp_path: Path) -> None:
    (tmp_path / "grid.yaml").write_text(NETWORK + "---\n" + PROVIDER.format(name="p1") + "---\n")
    loaded = DirSource(tmp_path).load()
    assert loaded.issues == ()
    assert [n.name for n in loaded.resources.networks] == ["net-1"]
    (provider,) = loaded.resources.providers
    assert provider.capacity_weight == 1  # CRD default filled in
    assert [o["kind"] for o in loaded.objects] == ["GridNetwork", "InferenceProvider"]


def test_every_valid_example_loads(tmp_path: Path) -> None:
    for path in (EXAMPLES / "valid").glob("*.yaml"):
        shutil.copy(path, tmp_path / path.name)
    loaded = DirSource(tmp_path).load()
    assert loaded.issues == ()
    assert len(loaded.objects) == len(list((EXAMPLES / "valid").glob("*.yaml")))


@pytest.mark.parametrize("path", sorted((EXAMPLES / "invalid").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_invalid_example_is_reported_and_skipped(tmp_path: Path, path: Path) -> None:
    shutil.copy(path, tmp_path / path.name)
    (tmp_path / "good.yaml").write_text(NETWORK)
    loaded = DirSource(tmp_path).load()
    assert [n.name for n in loaded.resources.networks if n.name == "net-1"] == ["net-1"]
    (issue,) = loaded.issues
    assert issue.file.endswith(path.name) and "rejected" in issue.reason


def test_reason_names_file_and_field(tmp_path: Path) -> None:
    bad = PROVIDER.format(name="heavy").replace("  site: site-a\n", "  site: site-a\n  capacityWeight: 5000\n")
    (tmp_path / "bad.yaml").write_text(NETWORK + "---\n" + bad)
    loaded = DirSource(tmp_path).load()
    (issue,) = loaded.issues
    assert issue.document == 1 and "bad.yaml" in str(issue)
    assert "InferenceProvider/heavy" in issue.reason and "spec.capacityWeight" in issue.reason
    assert [p.name for p in loaded.resources.providers] == []


def test_missing_required_field_is_named_by_path(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(PROVIDER.format(name="p1").replace("  endpoint: http://127.0.0.1:9\n", ""))
    (issue,) = DirSource(tmp_path).load().issues
    assert "spec.endpoint" in issue.reason


def test_unknown_fields_and_kinds_are_rejected(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(NETWORK.replace("spec:\n", "spec:\n  typo: 1\n"))
    (tmp_path / "b.yaml").write_text("apiVersion: grid.praxis.fast/v1alpha1\nkind: GridPod\nmetadata: {name: x}\n")
    reasons = sorted(i.reason for i in DirSource(tmp_path).load().issues)
    assert "typo" in reasons[0] and "unknown kind 'GridPod'" in reasons[1]


def test_objects_of_other_api_groups_are_left_alone(tmp_path: Path) -> None:
    """Secrets kept beside the grid resources are neither read nor reported."""
    (tmp_path / "a.yaml").write_text(NETWORK)
    (tmp_path / "s.yaml").write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: t}\nstringData: {token: x}\n")
    loaded = DirSource(tmp_path).load()
    assert loaded.issues == () and [o["kind"] for o in loaded.objects] == ["GridNetwork"]


def test_broken_yaml_and_duplicates_are_reported(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(NETWORK)
    (tmp_path / "b.yaml").write_text(NETWORK)
    (tmp_path / "c.yaml").write_text("key: [unclosed\n")
    loaded = DirSource(tmp_path).load()
    assert len(loaded.resources.networks) == 1
    reasons = {Path(i.file).name: i.reason for i in loaded.issues}
    assert "duplicate" in reasons["b.yaml"] and "a.yaml" in reasons["b.yaml"]
    assert "not readable YAML" in reasons["c.yaml"]


def test_hidden_files_and_other_suffixes_are_ignored(tmp_path: Path) -> None:
    (tmp_path / ".swap.yaml").write_text("garbage: [\n")
    (tmp_path / "notes.txt").write_text("garbage: [\n")
    (tmp_path / "net.yml").write_text(NETWORK)
    loaded = DirSource(tmp_path).load()
    assert loaded.issues == () and len(loaded.objects) == 1


def test_schema_errors_on_non_mapping_and_wrong_api_version() -> None:
    kinds = load_kinds()
    assert schema_errors([1], kinds)[0].startswith("<root>")
    doc = yaml.safe_load(NETWORK)
    doc["apiVersion"] = "grid.praxis.fast/v1"
    assert schema_errors(doc, kinds)[0].startswith("apiVersion:")
    assert schema_errors(yaml.safe_load(NETWORK), kinds) == []


def test_missing_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        DirSource(tmp_path / "nope").load()


def test_preserve_unknown_fields_keeps_extra_fields_at_that_level_only(tmp_path: Path) -> None:
    """x-kubernetes-preserve-unknown-fields lets a free-form object keep any field; declared ones still apply."""
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {
            "group": "grid.praxis.fast",
            "names": {"kind": "Free", "plural": "frees"},
            "versions": [
                {
                    "name": "v1alpha1",
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                        "typed": {
                                            "type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True,
                                            "properties": {
                                                "n": {"type": "integer"},
                                                "inner": {"type": "object", "properties": {"a": {"type": "string"}}},
                                            },
                                        },
                                    },
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    (tmp_path / "free.yaml").write_text(yaml.safe_dump(crd))
    kinds = load_kinds(tmp_path)
    base = {"apiVersion": "grid.praxis.fast/v1alpha1", "kind": "Free", "metadata": {"name": "f"}}

    def errors(spec: dict[str, object]) -> list[str]:
        return schema_errors({**base, "spec": spec}, kinds)

    assert errors({"open": {"any": {"nested": [1, "x"]}}, "typed": {"n": 1, "extra": True}}) == []
    assert errors({"typed": {"n": "one"}})[0].startswith("spec.typed.n:")
    assert "'b' was unexpected" in errors({"typed": {"inner": {"a": "x", "b": 1}}})[0]
    assert "'other' was unexpected" in errors({"other": 1})[0]


def test_project_crds_preserve_only_the_free_form_status_entries() -> None:
    kinds = load_kinds()
    doc = yaml.safe_load(NETWORK)
    entry = {"gatewayName": "gw-1", "namespace": "praxis", "phase": "Ready", "appliedRevision": "abc"}
    assert schema_errors({**doc, "status": {"mountReconciliationStatus": [entry]}}, kinds) == []
    errors = schema_errors({**doc, "status": {"consumerConfigStatus": [entry]}}, kinds)
    assert errors and "appliedRevision" in errors[0]


def test_kustomization_files_and_the_former_group_are_understood(tmp_path: Path) -> None:
    """kustomize files are not resources; manifests written with the former group read as the same kinds."""
    (tmp_path / "kustomization.yaml").write_text("resources:\n  - a.yaml\n")
    (tmp_path / "a.yaml").write_text(NETWORK.replace("grid.praxis.fast/v1alpha1", "grid.praxis-proxy.io/v1alpha1"))
    loaded = DirSource(tmp_path).load()
    assert loaded.issues == ()
    assert [(o["kind"], o["apiVersion"]) for o in loaded.objects] == [("GridNetwork", "grid.praxis.fast/v1alpha1")]
