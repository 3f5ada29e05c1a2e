"""`python -m reference.operator render` on a directory laid out like a public AGN deployment.

Users point the operator at manifests written for the public AGN operator: grid resources with SWIM, TLS,
consumer-config, health-check and site-selector fields, in multi-document files next to a Namespace, a
Secret, a Deployment and a kustomization.yaml. Those must render; a misspelt field must still be refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from reference.overlay import parse_overlay

REPO = Path(__file__).resolve().parents[2]
VALID = REPO / "manifests" / "examples" / "valid" / "public-shape"
PUBLIC_SHAPED = (
    "gridnetwork-federated-edge.yaml",
    "gridsite-local-south.yaml",
    "gridsite-pinned-gateway.yaml",
    "inferenceprovider-health-checked.yaml",
    "agenttoolprovider-probe-tls.yaml",
)
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
SECRET_VALUE = "sk-live-public-shape-do-not-leak"
RENDERED_AT = "2026-03-01T12:00:00Z"

CLUSTER_OBJECTS = f"""\
apiVersion: v1
kind: Namespace
metadata:
  name: ai-edge
---
apiVersion: v1
kind: Secret
metadata:
  name: south-qwen-token
  namespace: ai-serving
type: Opaque
stringData:
  token: {SECRET_VALUE}
"""
SECOND_PROVIDER = """\
apiVersion: grid.praxis.fast/v1alpha1
kind: InferenceProvider
metadata:
  name: south-qwen
spec:
  gridNetworkRef: federated-edge
  providerKind: vllm-vcr
  backendKind: local
  endpoint: http://qwen.site-south.svc:8000
  models:
    - name: meta-llama/Llama-3.1-8B-Instruct
      capabilities: ["text_generation"]
      contextWindow: 32768
  siteSelector:
    matchLabels:
      grid.praxis.fast/provider-site: site-south
  accessPolicy:
    siteSelector:
      matchLabels: {}
  auth:
    strategy: bearer_token
    secretRef:
      name: south-qwen-token
      namespace: ai-serving
      key: token
  healthCheck:
    path: /health
    interval: "30s"
    timeout: "5s"
  metricsConfig:
    path: /metrics
    signalNames:
      queueDepth: vllm_num_requests_waiting_ratio
"""
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: edge-consumer-praxis
  namespace: ai-edge
spec:
  replicas: 2
  selector:
    matchLabels: {app: edge-consumer}
  template:
    metadata:
      labels: {app: edge-consumer}
    spec:
      containers:
        - name: praxis
          image: ghcr.io/praxis-proxy/praxis:latest
          ports: [{containerPort: 8088}]
"""
KUSTOMIZATION = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: ai-edge
resources:
  - bundle.yaml
  - tools/agenttoolprovider-probe-tls.yaml
labels:
  - pairs:
      app.kubernetes.io/part-of: grid
"""


@pytest.fixture()
def manifests(tmp_path: Path) -> Path:
    """One multi-document bundle (cluster objects around the grid resources), a subdirectory, a kustomization."""
    root = tmp_path / "deploy"
    (root / "tools").mkdir(parents=True)
    grid = [(VALID / name).read_text() for name in PUBLIC_SHAPED if not name.startswith("agenttool")]
    bundle = "---\n".join([CLUSTER_OBJECTS, *grid, SECOND_PROVIDER, DEPLOYMENT])
    (root / "bundle.yaml").write_text(bundle)
    shutil.copy(VALID / "agenttoolprovider-probe-tls.yaml", root / "tools")
    (root / "kustomization.yaml").write_text(KUSTOMIZATION)
    return root


def operator(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "reference.operator", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def render(manifests: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return operator("render", "--manifests", str(manifests), "--rendered-at", RENDERED_AT, *extra)


def llama_clusters(envelope: dict[str, Any]) -> list[str]:
    rows = [c for c in envelope["overlay"]["candidates"] if c["name"] == LLAMA]
    return [c["cluster"] for c in sorted(rows, key=lambda c: c["rank"])]


def test_public_shape_examples_are_the_ones_rendered() -> None:
    kinds = {yaml.safe_load((VALID / name).read_text())["kind"] for name in PUBLIC_SHAPED}
    assert kinds == {"GridNetwork", "GridSite", "InferenceProvider", "AgentToolProvider"}


def test_render_accepts_public_shapes_and_prints_a_valid_envelope(manifests: Path) -> None:
    done = render(manifests)
    assert done.returncode == 0, done.stderr
    envelope = json.loads(done.stdout)
    scope = {
        "network": "federated-edge",
        "gateway": "edge-consumer",
        "namespace": "ai-edge",
        "local_site": "site-south",
    }
    assert envelope["scope"] == scope
    parsed = parse_overlay(done.stdout.encode(), expected_scope=scope)
    assert parsed.revision == envelope["revision"]["value"]
    assert envelope["provenance"]["rendered_at"] == RENDERED_AT
    names = sorted((c["name"], c["cluster"]) for c in envelope["overlay"]["candidates"])
    assert names == [("BAAI/bge-m3", "south-llama"), (LLAMA, "south-llama"), (LLAMA, "south-qwen")]
    assert {c["site"] for c in envelope["overlay"]["candidates"]} == {"site-south"}
    assert SECRET_VALUE not in done.stdout


def test_configmap_output_for_the_public_shape_set(manifests: Path) -> None:
    done = render(manifests, "--configmap")
    assert done.returncode == 0, done.stderr
    (configmap,) = list(yaml.safe_load_all(done.stdout))
    assert configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["name"] == "grid-overlay-federated-edge-edge-consumer"
    assert configmap["metadata"]["namespace"] == "ai-edge"
    envelope = json.loads(configmap["data"]["routing-overlay.json"])
    parse_overlay(configmap["data"]["routing-overlay.json"].encode(), expected_scope=envelope["scope"])
    assert len(envelope["overlay"]["candidates"]) == 3
    assert SECRET_VALUE not in done.stdout


def test_metrics_file_reorders_the_public_shape_providers(manifests: Path, tmp_path: Path) -> None:
    # south-llama reports a raw queue size that its queueCapacity (32) normalises; south-qwen reports 0..1.
    busy = {"south-llama": 30, "south-qwen": 0.95}
    idle = {"south-llama": 1, "south-qwen": 0.05}
    orders = []
    for loaded, calm in (("south-llama", "south-qwen"), ("south-qwen", "south-llama")):
        metrics = tmp_path / f"metrics-{loaded}.yaml"
        samples = {loaded: {"queueDepth": busy[loaded], "healthy": True}, calm: {"queueDepth": idle[calm]}}
        metrics.write_text(yaml.safe_dump(samples))
        done = render(manifests, "--metrics", str(metrics))
        assert done.returncode == 0, done.stderr
        orders.append(llama_clusters(json.loads(done.stdout)))
    assert orders == [["south-qwen", "south-llama"], ["south-llama", "south-qwen"]]


def test_metrics_for_an_unknown_provider_exit_2(manifests: Path, tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.yaml"
    metrics.write_text("north-granite:\n  queueDepth: 0.5\n")
    done = render(manifests, "--metrics", str(metrics))
    assert done.returncode == 2
    assert "north-granite" in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("    probeInterval: 2s\n", "    probeIntervall: 2s\n", "spec.swim"),
        ("              mode: plaintext\n", "              mode: insecure\n", "transport.mode"),
        ("    gossipNodes: 4\n", "    gossipNodes: -1\n", "spec.swim.gossipNodes"),
        ("      contextWindow: 32768\n", "      contextWindow: lots\n", "spec.models[0].contextWindow"),
    ],
)
def test_a_broken_public_field_is_still_refused(manifests: Path, old: str, new: str, field: str) -> None:
    bundle = manifests / "bundle.yaml"
    text = bundle.read_text()
    assert text.count(old) == 1, old
    bundle.write_text(text.replace(old, new))
    done = render(manifests)
    assert done.returncode == 2, done.stdout
    assert "invalid resources" in done.stderr and field in done.stderr
    assert done.stdout == ""
