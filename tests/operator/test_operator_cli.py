"""`agn-operator`: offline render (envelope JSON, ConfigMap YAML, metrics file, bad input exits 2) and the
`run` reconcile loop against the real fake EPP backend, as an in-process call and as a child process."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from operator_support import fake_backend

from reference.operator.cli import main

REPO = Path(__file__).resolve().parents[2]
QUEUE = "inference_pool_average_queue_size"
DEADLINE = 20.0

NETWORK = """\
apiVersion: grid.praxis.fast/v1alpha1
kind: GridNetwork
metadata:
  name: net-1
spec:
  routingPolicy: scoreFirst
  scoringPolicy:
    strategy: queueDepth
  selectionPolicy:
    mode: deterministic
  gatewayRefs:
    - name: gw-1
      namespace: praxis
      localSiteName: site-a
---
apiVersion: grid.praxis.fast/v1alpha1
kind: GridSite
metadata:
  name: site-a
spec:
  gridNetworkRef: net-1
  region: r1
  zone: z1
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
  endpoint: {endpoint}
  clusterName: {name}
  site: site-a
  models:
    - name: m
  metricsConfig:
    poolName: {name}
    timeout: 2s
    queueCapacity: 10
    signalNames:
      queueDepth: inference_pool_average_queue_size
"""


def write_manifests(directory: Path, endpoints: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "network.yaml").write_text(NETWORK)
    for name, endpoint in endpoints.items():
        (directory / f"{name}.yaml").write_text(PROVIDER.format(name=name, endpoint=endpoint))
    return directory


def order(envelope: dict[str, Any]) -> list[str]:
    return [c["cluster"] for c in sorted(envelope["overlay"]["candidates"], key=lambda c: c["rank"])]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def set_queue(base: str, pool: str, value: float) -> None:
    body = {"metrics": [{"name": QUEUE, "labels": {"name": pool}, "value": value}]}
    response = httpx.post(f"{base}/admin/config", json=body, trust_env=False)
    assert response.status_code == 200, response.text


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + DEADLINE
    seen: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
            seen = check()
            if seen:
                return seen
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last saw {seen!r}")


# --- render ---------------------------------------------------------------------------------------------


def test_render_valid_examples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for path in (REPO / "manifests" / "examples" / "valid").glob("*.yaml"):
        shutil.copy(path, tmp_path / path.name)
    code, out, err = run_cli(["render", "--manifests", str(tmp_path), "--rendered-at", "2026-01-01T00:00:00Z"], capsys)
    assert code == 0, err
    envelope = json.loads(out)
    assert envelope["scope"]["gateway"] == "consumer-gateway"
    assert envelope["provenance"]["rendered_at"] == "2026-01-01T00:00:00Z"
    assert envelope["revision"]["value"] == envelope["content_digest"]["value"]
    code, again, _ = run_cli(["render", "--manifests", str(tmp_path), "--rendered-at", "2026-01-01T00:00:00Z"], capsys)
    assert again == out


def test_render_metrics_file_reorders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifests = write_manifests(tmp_path / "m", {"p1": "http://127.0.0.1:9", "p2": "http://127.0.0.1:9"})
    metrics = tmp_path / "metrics.yaml"
    metrics.write_text("p1: {queueDepth: 9}\np2: {queueDepth: 1}\n")
    code, out, err = run_cli(["render", "--manifests", str(manifests), "--metrics", str(metrics)], capsys)
    assert code == 0, err
    assert order(json.loads(out)) == ["p2", "p1"]
    metrics.write_text(json.dumps({"p1": {"queueDepth": 1}, "p2": {"queueDepth": 9, "healthy": True}}))
    code, out, err = run_cli(["render", "--manifests", str(manifests), "--metrics", str(metrics)], capsys)
    assert code == 0, err
    assert order(json.loads(out)) == ["p1", "p2"]


def test_render_configmap_and_gateway_filter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifests = write_manifests(tmp_path, {"p1": "http://127.0.0.1:9"})
    code, out, err = run_cli(["render", "--manifests", str(manifests), "--configmap", "--gateway", "gw-1"], capsys)
    assert code == 0, err
    (configmap,) = list(yaml.safe_load_all(out))
    assert configmap["kind"] == "ConfigMap" and configmap["metadata"]["name"] == "grid-overlay-net-1-gw-1"
    code, _, err = run_cli(["render", "--manifests", str(manifests), "--gateway", "nope"], capsys)
    assert code == 2 and "--gateway" in err and "gw-1" in err


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("p1: {queueDepth: lots}\n", "p1.queueDepth"),
        ("p1: {pressure: 1}\n", "p1.pressure"),
        ("ghost: {queueDepth: 1}\n", "ghost"),
        ("p1: {healthy: 1}\n", "p1.healthy"),
        ("p1: {queueDepth: .nan}\n", "p1.queueDepth"),
        ("[1, 2]\n", "expected a map"),
        ("p1: [unclosed\n", "cannot read"),
    ],
)
def test_render_bad_metrics_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, needle: str
) -> None:
    manifests = write_manifests(tmp_path / "m", {"p1": "http://127.0.0.1:9"})
    metrics = tmp_path / "metrics.yaml"
    metrics.write_text(content)
    code, out, err = run_cli(["render", "--manifests", str(manifests), "--metrics", str(metrics)], capsys)
    assert code == 2 and out == ""
    assert "metrics.yaml" in err and needle in err, err


def test_render_invalid_resource_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifests = write_manifests(tmp_path, {"p1": "http://127.0.0.1:9"})
    shutil.copy(REPO / "manifests" / "examples" / "invalid" / "inferenceprovider-weight-too-large.yaml", manifests)
    code, out, err = run_cli(["render", "--manifests", str(manifests)], capsys)
    assert code == 2 and out == ""
    assert "inferenceprovider-weight-too-large.yaml" in err and "spec.capacityWeight" in err


def test_render_missing_dir_and_bad_timestamp_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["render", "--manifests", str(tmp_path / "none")], capsys)
    assert code == 2 and "not found" in err
    manifests = write_manifests(tmp_path / "m", {"p1": "http://127.0.0.1:9"})
    code, _, err = run_cli(["render", "--manifests", str(manifests), "--rendered-at", "yesterday"], capsys)
    assert code == 2 and "--rendered-at" in err


# --- run -----------------------------------------------------------------------------------------------


def read_overlay(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "grid-overlay-net-1-gw-1" / "routing-overlay.json").read_text()))


def test_run_once_scrapes_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    with fake_backend("p1") as b1, fake_backend("p2") as b2:
        set_queue(b1, "p1", 8)
        set_queue(b2, "p2", 2)
        manifests = write_manifests(tmp_path / "m", {"p1": b1, "p2": b2})
        (manifests / "bad.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")
        code, _, _ = run_cli(["run", "--manifests", str(manifests), "--out", str(out), "--once"], capsys)
        assert code == 0
        assert order(read_overlay(out)) == ["p2", "p1"]
        set_queue(b1, "p1", 0)
        code, _, _ = run_cli(["run", "--manifests", str(manifests), "--out", str(out), "--once"], capsys)
        assert code == 0
        assert order(read_overlay(out)) == ["p1", "p2"]
    status = yaml.safe_load((out / "net-1.status.yaml").read_text())
    (entry,) = status["status"]["overlayStatus"]
    assert entry["distributedRevision"] == read_overlay(out)["revision"]["value"]
    assert entry["phase"] == "Distributed"


def test_run_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["run", "--manifests", str(tmp_path / "nope"), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "--manifests" in err
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    argv = ["run", "--manifests", str(tmp_path), "--out", str(tmp_path / "o"), "--metrics-ca", str(tmp_path / "ca.pem")]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "--metrics-ca" in err


def test_run_loop_follows_changes_and_stops_on_sigterm(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with fake_backend("p1") as b1, fake_backend("p2") as b2:
        set_queue(b1, "p1", 8)
        set_queue(b2, "p2", 2)
        manifests = write_manifests(tmp_path / "m", {"p1": b1, "p2": b2})
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reference.operator",
                "run",
                "--manifests",
                str(manifests),
                "--out",
                str(out),
                "--poll",
                "0.05",
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for("p2 preferred", lambda: order(read_overlay(out)) == ["p2", "p1"])
            # A metric change alone waits for the periodic refresh; the force-refresh annotation forces it.
            set_queue(b1, "p1", 0)
            network = (manifests / "network.yaml").read_text()
            annotated = network.replace(
                "  name: net-1\n", "  name: net-1\n  annotations:\n    grid.praxis.fast/force-refresh: '1'\n", 1
            )
            (manifests / "network.yaml").write_text(annotated)
            wait_for("p1 preferred after force refresh", lambda: order(read_overlay(out)) == ["p1", "p2"])
            # A resource change: a third provider appears.
            (manifests / "p3.yaml").write_text(PROVIDER.format(name="p3", endpoint=b2))
            wait_for("p3 rendered", lambda: "p3" in order(read_overlay(out)))
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=DEADLINE) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
