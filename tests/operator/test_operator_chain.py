"""The whole producer chain with real processes: operator -> ConfigMap -> overlay-sync -> gateway -> backend.

A metric change at the fake EPP moves traffic to the less pressured provider under scoreFirst +
queueDepth + deterministic, as the spec's re-ranking path describes.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx
import yaml

from harness import contract
from harness.gateway_config import VARIANTS, render_gateway_config
from harness.process import ManagedProcess, Supervisor
from harness.waiting import poll_until

ROOT = Path(__file__).resolve().parents[2]
NETWORK, GATEWAY, NAMESPACE, SITE = "chain-net", "edge", "agn-system", "site-a"
MODEL = "chain-model"
QUEUE_METRIC = "inference_pool_average_queue_size"


def _line(proc: ManagedProcess, prefix: str) -> str:
    text = poll_until(proc.log_text, lambda t: any(line.startswith(prefix) for line in t.splitlines()),
                      what=f"{prefix!r} from {proc.name}", timeout=20)
    return next(line for line in text.splitlines() if line.startswith(prefix)).split()[-1]


def _manifests(directory: Path, backends: dict[str, str]) -> None:
    docs: list[dict] = [{
        "apiVersion": "grid.praxis.fast/v1alpha1", "kind": "GridNetwork", "metadata": {"name": NETWORK},
        "spec": {"routingPolicy": "scoreFirst", "scoringPolicy": {"strategy": "queueDepth"},
                 "selectionPolicy": {"mode": "deterministic"}, "metricsRefreshInterval": "1s",
                 "gatewayRefs": [{"name": GATEWAY, "namespace": NAMESPACE, "localSiteName": SITE}]},
    }]
    for name, address in backends.items():
        docs.append({
            "apiVersion": "grid.praxis.fast/v1alpha1", "kind": "InferenceProvider", "metadata": {"name": name},
            "spec": {"gridNetworkRef": NETWORK, "providerKind": "self_hosted", "backendKind": "local",
                     "endpoint": f"http://{address}", "clusterName": name, "site": SITE,
                     "models": [{"name": MODEL}],
                     "metricsConfig": {"endpoint": f"http://{address}", "path": "/metrics", "timeout": "1s",
                                       "poolName": name, "queueCapacity": 10,
                                       "signalNames": {"queueDepth": QUEUE_METRIC}}},
        })
    (directory / "grid.yaml").write_text(yaml.safe_dump_all(docs))


def _set_queue(address: str, pool: str, value: float) -> None:
    body = {"metrics": [{"name": QUEUE_METRIC, "labels": {"name": pool}, "value": value}]}
    httpx.post(f"http://{address}/admin/config", json=body, timeout=5).raise_for_status()


def test_metric_change_moves_traffic_through_the_whole_chain(tmp_path: Path) -> None:
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    supervisor = Supervisor(tmp_path / "logs")
    try:
        backends: dict[str, str] = {}
        for name in ("pool-east", "pool-west"):
            proc = supervisor.start(name, [sys.executable, "-m", "harness.fakes.cli", "--name", name, "--site", SITE,
                                           "--listen", "127.0.0.1:0"], env=env)
            backends[name] = _line(proc, "LISTENING")
        _set_queue(backends["pool-east"], "pool-east", 9)
        _set_queue(backends["pool-west"], "pool-west", 1)
        manifests, out, overlay_dir = tmp_path / "manifests", tmp_path / "out", tmp_path / "overlay"
        manifests.mkdir()
        _manifests(manifests, backends)
        supervisor.start("operator", [sys.executable, "-m", "reference.operator", "run", "--manifests",
                                      str(manifests), "--out", str(out), "--poll", "0.2"], env=env)
        configmaps = poll_until(lambda: sorted(out.glob("*.configmap.yaml")), bool,
                                what="the operator to write a ConfigMap", timeout=20)
        scope = contract.ScopeSpec(NETWORK, GATEWAY, NAMESPACE, SITE)
        sync = supervisor.start("overlay-sync", [
            sys.executable, "-m", "reference.overlay_sync", "--configmap-file", str(configmaps[0]),
            "--target-dir", str(overlay_dir), "--admin", "127.0.0.1:0",
            "--expected-scope", ",".join(f"{k}={v}" for k, v in scope.as_dict().items())], env=env)
        _line(sync, "ADMIN")
        poll_until(lambda: (overlay_dir / "routing-overlay.json").exists(), bool,
                   what="overlay-sync to deliver the first revision", timeout=20)
        config = render_gateway_config(
            VARIANTS["core"], listen="127.0.0.1:0", admin="127.0.0.1:0",
            overlay_file=str(overlay_dir / "routing-overlay.json"), scope=scope, clusters=backends,
            hop_clusters=list(backends), management_cluster=None)
        (tmp_path / "praxis.yaml").write_text(config)
        gateway = supervisor.start("gateway", [sys.executable, "-m", "reference.gateway.cli", "-c",
                                               str(tmp_path / "praxis.yaml")], env=env)
        url = "http://" + _line(gateway, "LISTENING")

        def served() -> str | None:
            resp = httpx.post(url + "/v1/chat/completions", json={"model": MODEL}, timeout=5)
            return resp.headers.get("x-agn-backend") if resp.status_code == 200 else f"status {resp.status_code}"

        poll_until(served, lambda b: b == "pool-west", what="the less pressured pool-west to serve", timeout=20)
        _set_queue(backends["pool-west"], "pool-west", 9)
        _set_queue(backends["pool-east"], "pool-east", 1)
        changed = time.monotonic()
        poll_until(served, lambda b: b == "pool-east", what="traffic to move to pool-east", timeout=20)
        print(f"route change through operator, overlay-sync and gateway: {time.monotonic() - changed:.2f}s")
    finally:
        supervisor.stop_all()
