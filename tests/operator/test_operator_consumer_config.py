"""The consumer Praxis config the reference operator generates: its shape, and the reference gateway runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from operator_support import network, provider

from reference.gateway.build import build
from reference.gateway.config import parse_config_text
from reference.gateway.metrics import GatewayMetrics
from reference.operator.core import FixedClock, Resources, render
from reference.operator.core.consumer_config import DATA_KEY


def _network(mount: Path, clusters: list[str]) -> dict[str, Any]:
    consumer = {"enabled": True, "configMapName": "consumer-cfg", "credentialMountBase": str(mount),
                "clusterEndpoints": [{"cluster": c, "address": f"127.0.0.1:{9000 + i}",
                                      "transport": {"mode": "plaintext"}} for i, c in enumerate(clusters)]}
    return network(gatewayRefs=[{"name": "gw-1", "namespace": "praxis-system", "localSiteName": "site-a",
                                 "consumerConfig": consumer}])


def _api(name: str) -> dict[str, Any]:
    secret_ref = {"name": "api-token", "namespace": "ns", "key": "token"}
    return provider(name, site="site-a", clusterName=name, backendKind="api_provider",
                    auth={"strategy": "bearer_token", "secretRef": secret_ref})


def test_generated_config_starts_the_reference_gateway(tmp_path: Path) -> None:
    (tmp_path / "api-token").mkdir()
    (tmp_path / "api-token" / "token").write_text("tok-123\n")
    res = Resources.from_objects([_network(tmp_path, ["p1", "api"]),
                                  provider("p1", site="site-a", clusterName="p1"), _api("api")])
    (rendered,) = render(res, [], [], FixedClock())
    output = rendered.consumer_config
    assert output is not None and output.configmap is not None and output.name == "consumer-cfg"
    text = output.configmap["data"][DATA_KEY]
    assert "tok-123" not in text
    filters = yaml.safe_load(text)["filter_chains"][0]["filters"]
    assert [f["filter"] for f in filters] == ["json_body_field", "intelligent_route", "credential_inject",
                                              "load_balancer"]
    static = {"kind", "name", "site", "cluster", "fresh"}
    assert {c["cluster"]: set(c) for c in filters[1]["candidates"]} == {"p1": static, "api": static | {"credential"}}
    built = build(parse_config_text(text), GatewayMetrics())
    for route in built.routes:
        route.close()


def test_a_missing_cluster_endpoint_generates_nothing_and_says_which(tmp_path: Path) -> None:
    res = Resources.from_objects([_network(tmp_path, ["p1"]), provider("p1", site="site-a", clusterName="p1"),
                                  provider("p2", site="site-a", clusterName="p2")])
    (rendered,) = render(res, [], [], FixedClock())
    output = rendered.consumer_config
    assert output is not None and output.configmap is None
    assert output.problem is not None and "p2" in output.problem


def test_no_inference_candidate_means_no_config(tmp_path: Path) -> None:
    (rendered,) = render(Resources.from_objects([_network(tmp_path, ["p1"])]), [], [], FixedClock())
    output = rendered.consumer_config
    assert output is not None and output.configmap is None and output.problem is None


def test_disabled_consumer_config_is_not_rendered(tmp_path: Path) -> None:
    res = Resources.from_objects([network(), provider("p1", site="site-a", clusterName="p1")])
    (rendered,) = render(res, [], [], FixedClock())
    assert rendered.consumer_config is None
