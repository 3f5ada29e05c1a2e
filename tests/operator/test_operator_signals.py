"""`agn-operator run --signals-*`: the operator's GET /v1/site/signals over mutual TLS, relaying the EPP series
of the real fake backends its InferenceProviders scrape, and the signals flags' validation."""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from operator_support import fake_backend
from prometheus_client.parser import text_string_to_metric_families

from harness.pki import GridPKI, client_context
from harness.process import ManagedProcess, Supervisor
from harness.waiting import poll_until
from reference.operator.cli import _signals_settings as signals_settings
from reference.operator.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
RUNNING = "llm_d_epp_average_running_requests"
WAITING = "llm_d_epp_average_queue_size"
READY = "llm_d_epp_ready_endpoints"
HELD = "llm_d_epp_flow_control_queue_size"
LEGACY_WAITING = "inference_pool_average_queue_size"
LEGACY_READY = "inference_pool_ready_pods"
SERVED = re.compile(r"signals: site (\S+) served on https://(\S+)/v1/site/signals")

NETWORK = """\
apiVersion: grid.praxis.fast/v1alpha1
kind: GridNetwork
metadata: {name: net-1}
spec:
  routingPolicy: scoreFirst
  selectionPolicy: {mode: deterministic}
  gatewayRefs: [{name: gw-1, namespace: praxis, localSiteName: site-a}]
"""
PROVIDER = """\
apiVersion: grid.praxis.fast/v1alpha1
kind: InferenceProvider
metadata: {{name: {name}}}
spec:
  gridNetworkRef: net-1
  providerKind: self_hosted
  backendKind: local
  endpoint: {endpoint}
  clusterName: {cluster}
  site: site-a
  models: [{{name: m}}]
"""
METRICS = """\
  metricsConfig:
    poolName: {pool}
    timeout: 2s
    signalNames: {{queueDepth: inference_pool_average_queue_size}}
"""


@dataclass
class Operator:
    pki: GridPKI
    manifests: Path
    backends: dict[str, str]
    address: str
    process: ManagedProcess

    def fetch(self, with_certificate: bool = True) -> httpx.Response:
        client = self.pki.client(f"reader-{os.urandom(4).hex()}") if with_certificate else None
        with httpx.Client(verify=client_context(self.pki.ca_path, client), timeout=10.0, trust_env=False) as http:
            return http.get(f"https://{self.address}/v1/site/signals")


def write_provider(manifests: Path, name: str, endpoint: str, cluster: str, pool: str | None) -> None:
    text = PROVIDER.format(name=name, endpoint=endpoint, cluster=cluster)
    if pool is not None:
        text += METRICS.format(pool=pool)
    (manifests / f"{name}.yaml").write_text(text)


def configure(base: str, body: dict[str, Any]) -> None:
    response = httpx.post(f"{base}/admin/config", json=body, trust_env=False)
    assert response.status_code == 200, response.text


def rows(text: str) -> dict[tuple[str, str], float]:
    """(series, grid_provider) -> value; every line carries the site, the cluster and a timestamp."""
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert set(sample.labels) == {"grid_site", "grid_provider"} and sample.labels["grid_site"] == "site-a"
            assert sample.timestamp is not None, sample
            found[(sample.name, sample.labels["grid_provider"])] = sample.value
    return found


def of(found: dict[tuple[str, str], float], cluster: str) -> dict[str, float]:
    return {name: value for (name, provider), value in found.items() if provider == cluster}


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    workdir = tmp_path_factory.mktemp("signals")
    pki = GridPKI(workdir / "pki")
    server = pki.server("operator-signals", "127.0.0.1", "site-a.signals")
    manifests = workdir / "manifests"
    manifests.mkdir()
    (manifests / "network.yaml").write_text(NETWORK)
    supervisor = Supervisor(workdir / "logs")
    with fake_backend("p1") as b1, fake_backend("p2") as b2:
        write_provider(manifests, "p1", b1, "pool-one", "p1")
        write_provider(manifests, "p2", b2, "pool-two", "p2")
        write_provider(manifests, "p3", b2, "pool-unscraped", None)  # no metricsConfig: nothing to relay
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        process = supervisor.start("operator", [
            sys.executable, "-m", "reference.operator", "run", "--manifests", str(manifests),
            "--out", str(workdir / "out"), "--poll", "0.1", "--signals-address", "127.0.0.1:0",
            "--signals-cert", str(server.cert), "--signals-key", str(server.key),
            "--signals-client-ca", str(pki.ca_path), "--signals-site", "site-a"], env=env)
        try:
            def served() -> str | None:
                assert process.running(), process.log_tail()
                match = SERVED.search(process.log_text())
                return match.group(2) if match else None

            address = poll_until(served, lambda seen: seen is not None, what="the signals endpoint", timeout=20)
            assert address is not None
            yield Operator(pki, manifests, {"p1": b1, "p2": b2}, address, process)
        finally:
            supervisor.stop_all()


def test_relays_each_providers_pool_raw_with_site_and_cluster(operator: Operator) -> None:
    configure(operator.backends["p1"], {"epp": {"endpoints": 3, "set": {"running": 2, "waiting": 0.5}}})
    configure(operator.backends["p2"], {"epp": None})

    def relayed() -> dict[tuple[str, str], float]:
        response = operator.fetch()
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        return rows(response.text)

    found = poll_until(relayed, lambda seen: of(seen, "pool-one").get(READY) == 3, what="p1's pool relayed",
                       timeout=20)
    assert of(found, "pool-one") == {RUNNING: 2, WAITING: 0.5, READY: 3, HELD: 0, LEGACY_WAITING: 0,
                                     LEGACY_READY: 1}
    # p2's backend publishes only the older names; p3 has no metricsConfig and is not relayed
    assert of(found, "pool-two") == {LEGACY_WAITING: 0, LEGACY_READY: 1}
    assert {provider for _, provider in found} == {"pool-one", "pool-two"}
    # a change on the EPP is relayed at the next request: the operator scrapes on each GET
    configure(operator.backends["p1"], {"epp": {"endpoints": 1, "set": {"held": 7}}})
    assert of(relayed(), "pool-one") == {RUNNING: 0, WAITING: 0, READY: 1, HELD: 7, LEGACY_WAITING: 0,
                                         LEGACY_READY: 1}


def test_follows_the_providers_the_loop_reads(operator: Operator) -> None:
    write_provider(operator.manifests, "p4", operator.backends["p1"], "pool-four", "p1")
    try:
        poll_until(lambda: rows(operator.fetch().text), lambda seen: bool(of(seen, "pool-four")),
                   what="a new provider relayed", timeout=20)
    finally:
        (operator.manifests / "p4.yaml").unlink()
    poll_until(lambda: rows(operator.fetch().text), lambda seen: not of(seen, "pool-four"),
               what="a deleted provider no longer relayed", timeout=20)


def test_a_client_without_a_certificate_is_refused_and_with_one_answered(operator: Operator) -> None:
    with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError)):
        operator.fetch(with_certificate=False)
    assert operator.fetch().status_code == 200
    assert operator.process.running()


# --- flag validation ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    pki = GridPKI(tmp_path_factory.mktemp("flags"))
    files = pki.server("signals", "127.0.0.1")
    return {"cert": str(files.cert), "key": str(files.key), "ca": str(pki.ca_path)}


def _flags(tls: dict[str, str], **change: str | None) -> list[str]:
    flags: dict[str, str | None] = {"--signals-address": "127.0.0.1:0", "--signals-cert": tls["cert"],
                                    "--signals-key": tls["key"], "--signals-client-ca": tls["ca"],
                                    "--signals-site": "site-a"}
    flags.update({f"--signals-{key.replace('_', '-')}": value for key, value in change.items()})
    return [item for flag, value in flags.items() if value is not None for item in (flag, value)]


@pytest.mark.parametrize(("change", "named"), [
    ({"address": None}, "--signals-cert: needs --signals-address"),
    ({"address": None, "cert": None, "key": None, "client_ca": None}, "--signals-site: needs --signals-address"),
    ({"address": "no-port"}, "--signals-address"),
    ({"address": "127.0.0.1:70000"}, "--signals-address"),
    ({"cert": None}, "--signals-cert: required"),
    ({"key": None}, "--signals-key: required"),
    ({"client_ca": None}, "--signals-client-ca: required"),
    ({"site": None}, "--signals-site: required"),
    ({"site": "a b"}, "--signals-site"),
    ({"cert": "/nonexistent.pem"}, "--signals-cert"),
    ({"client_ca": "/nonexistent.pem"}, "--signals-client-ca"),
])
def test_bad_signals_flags_exit_2_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 tls: dict[str, str], change: dict[str, str | None],
                                                 named: str) -> None:
    argv = ["run", "--manifests", str(tmp_path), "--out", str(tmp_path / "out"), "--once"]
    assert main([*argv, *_flags(tls, **change)]) == 2
    err = capsys.readouterr().err
    assert named in err, err


def test_good_signals_flags_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], tls: dict[str, str]) -> None:
    """The twin of the refusals: the same flags, complete, serve and reconcile once (exit 0)."""
    argv = ["run", "--manifests", str(tmp_path), "--out", str(tmp_path / "out"), "--once"]
    assert main([*argv, *_flags(tls)]) == 0, capsys.readouterr().err


def test_the_mesh_site_is_the_signals_site(tls: dict[str, str]) -> None:
    mesh = ["--mesh-site", "site-m", "--mesh-bind", "127.0.0.1:0"]
    base = ["run", "--manifests", "m", "--out", "o", *mesh]
    settings = signals_settings(build_parser().parse_args([*base, *_flags(tls, site=None)]))
    assert settings is not None and settings.site == "site-m"
    settings = signals_settings(build_parser().parse_args([*base, *_flags(tls, site="site-m")]))
    assert settings is not None and settings.site == "site-m"
    with pytest.raises(ValueError, match="--signals-site: 'site-a' is not the mesh site 'site-m'"):
        signals_settings(build_parser().parse_args([*base, *_flags(tls)]))


def test_busy_signals_port_exits_2_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  tls: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        argv = ["run", "--manifests", str(tmp_path), "--out", str(tmp_path / "out"), "--once"]
        code = main([*argv, *_flags(tls, address=f"127.0.0.1:{port}")])
    err = capsys.readouterr().err
    assert code == 2 and "--signals-address" in err and "cannot bind" in err, err
