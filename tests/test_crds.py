"""The grid CRDs: well-formed v1 CRDs, examples judged as the API server would, and each admission rule."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import crds

ROOT = Path(__file__).resolve().parent.parent
CRD_FILES = sorted((ROOT / "manifests" / "crds").glob("*.yaml"))
# valid/public-shape/ is one coherent grid in the public AGN operator's manifest shape.
VALID = sorted((ROOT / "manifests" / "examples" / "valid").rglob("*.yaml"))
INVALID = sorted((ROOT / "manifests" / "examples" / "invalid").glob("*.yaml"))
KINDS = {"GridNetwork", "InferenceProvider", "GridSite", "AgentToolProvider"}
HAS_KV = importlib.util.find_spec("kubernetes_validate") is not None
API = "grid.praxis.fast/v1alpha1"
FP = "ab" * 32


@pytest.fixture(scope="module")
def loaded() -> dict[str, crds.Crd]:
    return crds.load_crds()


def _network(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "GridNetwork", "metadata": {"name": "net"}, "spec": spec}


def _provider(**extra: Any) -> dict[str, Any]:
    spec = {
        "gridNetworkRef": "net",
        "providerKind": "self_hosted",
        "backendKind": "local",
        "endpoint": "http://p.example.svc:8080",
        "models": [{"name": "m"}],
    }
    spec.update(extra)
    return {"apiVersion": API, "kind": "InferenceProvider", "metadata": {"name": "p"}, "spec": spec}


def _site(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "GridSite", "metadata": {"name": "s"}, "spec": {"gridNetworkRef": "net", **spec}}


PRESSURE = {
    "enterThreshold": 0.85,
    "exitThreshold": 0.7,
    "failureThreshold": 2,
    "successThreshold": 3,
    "minimumStateDuration": "10s",
    "recoveryHoldDown": "30s",
}


def _joined(resource: dict[str, Any], loaded: dict[str, crds.Crd]) -> str:
    return "\n".join(crds.resource_errors(resource, loaded))


# --- the CRD files themselves ------------------------------------------------------------------------


def test_one_crd_per_kind(loaded: dict[str, crds.Crd]) -> None:
    assert set(loaded) == KINDS
    assert len(CRD_FILES) == len(KINDS)


@pytest.mark.parametrize("path", CRD_FILES, ids=lambda p: p.name)
def test_crd_shape(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
    assert doc["kind"] == "CustomResourceDefinition"
    spec = doc["spec"]
    assert spec["group"] == "grid.praxis.fast"
    assert doc["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["type"] == "object"
    assert {"spec", "status"} <= set(schema["properties"])


@pytest.mark.skipif(not HAS_KV, reason="kubernetes-validate is not installed; offline CRD validation skipped")
@pytest.mark.parametrize("path", CRD_FILES, ids=lambda p: p.name)
def test_crd_passes_kubernetes_validate(path: Path) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(yaml.safe_load(path.read_text()), kubernetes_validate.latest_version(), strict=True)


@pytest.mark.skipif(not HAS_KV, reason="kubernetes-validate is not installed; offline CRD validation skipped")
def test_kubernetes_validate_rejects_a_broken_crd() -> None:
    import kubernetes_validate

    doc = yaml.safe_load(CRD_FILES[0].read_text())
    doc["spec"]["scope"] = 7
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


# --- examples ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_example(path: Path, loaded: dict[str, crds.Crd]) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        assert crds.resource_errors(doc, loaded) == []


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_example(path: Path, loaded: dict[str, crds.Crd]) -> None:
    text = path.read_text()
    first = text.splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} lacks its '# expect:' line"
    expected = first.removeprefix("# expect: ")
    errors = _joined(yaml.safe_load(text), loaded)
    assert expected in errors, f"expected {expected!r} in:\n{errors}"


def test_examples_exist_for_every_kind() -> None:
    kinds = {yaml.safe_load(p.read_text())["kind"] for p in VALID}
    assert kinds == KINDS
    assert len(INVALID) >= 8


# --- admission rules --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1s", "10s", "300s", "1000ms", "1500ms", "60000ms"])
def test_refresh_interval_accepted(value: str, loaded: dict[str, crds.Crd]) -> None:
    assert crds.resource_errors(_network(metricsRefreshInterval=value), loaded) == []


@pytest.mark.parametrize("value", ["0s", "0ms", "999ms", "500ms", "1m", "10", "1.5s", "01s", "", "10 s", "PT10S"])
def test_refresh_interval_rejected(value: str, loaded: dict[str, crds.Crd]) -> None:
    assert "spec.metricsRefreshInterval:" in _joined(_network(metricsRefreshInterval=value), loaded)


@pytest.mark.parametrize(
    ("weight", "ok"),
    [(1, True), (1000, True), (500, True), (0, False), (1001, False), (-1, False), (2.5, False), ("5", False)],
)
def test_capacity_weight_bounds(weight: Any, ok: bool, loaded: dict[str, crds.Crd]) -> None:
    errors = _joined(_provider(capacityWeight=weight), loaded)
    assert (errors == "") is ok, errors
    if not ok:
        assert "spec.capacityWeight:" in errors


def test_capacity_weight_defaults_to_one(loaded: dict[str, crds.Crd]) -> None:
    defaulted = crds.apply_defaults(_provider(), loaded["InferenceProvider"])
    assert defaulted["spec"]["capacityWeight"] == 1
    assert crds.apply_defaults(_provider(capacityWeight=7), loaded["InferenceProvider"])["spec"]["capacityWeight"] == 7


@pytest.mark.parametrize("strategy", ["noMetrics", "queueDepth", "kvCachePressure"])
def test_scoring_strategies(strategy: str, loaded: dict[str, crds.Crd]) -> None:
    assert crds.resource_errors(_network(scoringPolicy={"strategy": strategy}), loaded) == []


def test_scoring_strategy_required_and_closed(loaded: dict[str, crds.Crd]) -> None:
    assert "spec.scoringPolicy.strategy: required" in _joined(_network(scoringPolicy={}), loaded)
    assert "spec.scoringPolicy.strategy: 'prefixAware'" in _joined(
        _network(scoringPolicy={"strategy": "prefixAware"}), loaded
    )
    assert crds.resource_errors(_network(), loaded) == []


def test_routing_policy(loaded: dict[str, crds.Crd]) -> None:
    for policy in ("geographyFirst", "scoreFirst"):
        assert crds.resource_errors(_network(routingPolicy=policy), loaded) == []
    assert "spec.routingPolicy:" in _joined(_network(routingPolicy="random"), loaded)
    assert crds.apply_defaults(_network(), loaded["GridNetwork"])["spec"]["routingPolicy"] == "geographyFirst"


@pytest.mark.parametrize("mode", ["deterministic", "roundRobin", "random", "weightedRandom"])
def test_selection_modes(mode: str, loaded: dict[str, crds.Crd]) -> None:
    assert crds.resource_errors(_network(selectionPolicy={"mode": mode}), loaded) == []


def test_selection_mode_rejected(loaded: dict[str, crds.Crd]) -> None:
    assert "spec.selectionPolicy.mode:" in _joined(_network(selectionPolicy={"mode": "loadAware"}), loaded)
    assert "spec.selectionPolicy.mode: required" in _joined(_network(selectionPolicy={}), loaded)


def test_placement_policy(loaded: dict[str, crds.Crd]) -> None:
    assert crds.resource_errors(_network(placementPolicy={"strategy": "static"}), loaded) == []
    assert crds.resource_errors(_network(placementPolicy={"strategy": "dynamic"}), loaded) == [], "experimental"
    assert "spec.placementPolicy.strategy:" in _joined(_network(placementPolicy={"strategy": "adaptive"}), loaded)


@pytest.mark.parametrize("mode", ["instantaneous", "stabilized"])
@pytest.mark.parametrize("missing", ["existingOnly", "excluded"])
def test_admission_policy_accepted(mode: str, missing: str, loaded: dict[str, crds.Crd]) -> None:
    policy = {"mode": mode, "missingMetrics": missing, "pressure": PRESSURE}
    assert crds.resource_errors(_network(admissionPolicy=policy), loaded) == []
    assert crds.resource_errors(_network(admissionPolicy={"mode": mode}), loaded) == []


def test_admission_policy_enums(loaded: dict[str, crds.Crd]) -> None:
    assert "spec.admissionPolicy.mode:" in _joined(_network(admissionPolicy={"mode": "eager"}), loaded)
    bad_missing = _network(admissionPolicy={"mode": "stabilized", "missingMetrics": "none"})
    assert "spec.admissionPolicy.missingMetrics:" in _joined(bad_missing, loaded)


@pytest.mark.parametrize("field", sorted(PRESSURE))
def test_pressure_requires_all_six(field: str, loaded: dict[str, crds.Crd]) -> None:
    pressure = {k: v for k, v in PRESSURE.items() if k != field}
    errors = _joined(_network(admissionPolicy={"mode": "stabilized", "pressure": pressure}), loaded)
    assert f"spec.admissionPolicy.pressure.{field}: required field missing" in errors


@pytest.mark.parametrize("field", ["minimumStateDuration", "recoveryHoldDown"])
@pytest.mark.parametrize("value", ["0s", "1.5s", "500ms", "1m", "10", "-5s"])
def test_pressure_durations_whole_seconds(field: str, value: str, loaded: dict[str, crds.Crd]) -> None:
    pressure = {**PRESSURE, field: value}
    errors = _joined(_network(admissionPolicy={"mode": "stabilized", "pressure": pressure}), loaded)
    assert f"spec.admissionPolicy.pressure.{field}:" in errors


@pytest.mark.parametrize(
    ("field", "value"),
    [("enterThreshold", 1.5), ("exitThreshold", -0.1), ("failureThreshold", 0), ("successThreshold", 0.5)],
)
def test_pressure_value_bounds(field: str, value: Any, loaded: dict[str, crds.Crd]) -> None:
    pressure = {**PRESSURE, field: value}
    assert f"spec.admissionPolicy.pressure.{field}:" in _joined(
        _network(admissionPolicy={"mode": "stabilized", "pressure": pressure}), loaded
    )


@pytest.mark.parametrize(("value", "ok"), [(1, True), (3600, True), (0, False), (-1, False), ("60", False)])
def test_stale_candidate_ttl(value: Any, ok: bool, loaded: dict[str, crds.Crd]) -> None:
    errors = _joined(_network(staleCandidateTtlSeconds=value), loaded)
    assert (errors == "") is ok, errors


def test_metrics_config_fields(loaded: dict[str, crds.Crd]) -> None:
    config = {
        "endpoint": "http://m.example.svc:9090",
        "path": "/metrics",
        "timeout": "2s",
        "poolName": "pool",
        "queueCapacity": 64,
        "staleMetricsSeconds": 30,
        "signalNames": {"queueDepth": "q", "kvCacheUtilization": "kv", "healthy": "h"},
        "tls": {
            "caSecretRef": {"name": "ca", "namespace": "ns"},
            "clientCertificateSecretRef": {"name": "c", "namespace": "ns"},
        },
    }
    assert crds.resource_errors(_provider(metricsConfig=config), loaded) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("queueCapacity", 0),
        ("staleMetricsSeconds", 0),
        ("timeout", "2m"),
        ("timeout", "0s"),
        ("path", "metrics"),
        ("endpoint", "m:9090"),
        ("signalNames", {"throughput": "t"}),
        ("poolName", ""),
    ],
)
def test_metrics_config_rejected(field: str, value: Any, loaded: dict[str, crds.Crd]) -> None:
    assert "spec.metricsConfig" in _joined(_provider(metricsConfig={field: value}), loaded)


def test_auth_bearer_token_with_secret_ref(loaded: dict[str, crds.Crd]) -> None:
    ref = {"name": "tok", "namespace": "ns", "key": "token"}
    assert crds.resource_errors(_provider(auth={"strategy": "bearer_token", "secretRef": ref}), loaded) == []
    assert "spec.auth.strategy:" in _joined(_provider(auth={"strategy": "basic", "secretRef": ref}), loaded)
    assert "spec.auth.secretRef: required" in _joined(_provider(auth={"strategy": "bearer_token"}), loaded)
    for field in ("name", "namespace", "key"):
        partial = {k: v for k, v in ref.items() if k != field}
        errors = _joined(_provider(auth={"strategy": "bearer_token", "secretRef": partial}), loaded)
        assert f"spec.auth.secretRef.{field}: required" in errors
    inline = _provider(auth={"strategy": "bearer_token", "secretRef": ref, "token": "sk-live"})
    assert "spec.auth: Additional properties are not allowed ('token'" in _joined(inline, loaded)


@pytest.mark.parametrize("field", ["gridNetworkRef", "providerKind", "backendKind", "endpoint"])
def test_provider_required_fields(field: str, loaded: dict[str, crds.Crd]) -> None:
    resource = _provider()
    del resource["spec"][field]
    assert f"spec.{field}: required field missing" in _joined(resource, loaded)


def test_provider_models_and_access_policy(loaded: dict[str, crds.Crd]) -> None:
    good = _provider(clusterName="c", site="s", accessPolicy={"siteSelector": {"matchLabels": {"tier": "gold"}}})
    assert crds.resource_errors(good, loaded) == []
    assert "spec.models[0].name: required" in _joined(_provider(models=[{}]), loaded)
    bad_label = _provider(accessPolicy={"siteSelector": {"matchLabels": {"tier": 1}}})
    assert "spec.accessPolicy.siteSelector.matchLabels.tier:" in _joined(bad_label, loaded)


def test_gridsite_fingerprints(loaded: dict[str, crds.Crd]) -> None:
    assert crds.resource_errors(_site(region="r", zone="z", trust={"canonicalFingerprints": [FP]}), loaded) == []
    assert crds.resource_errors(_site(trust={"canonicalFingerprints": [FP, "cd" * 32]}), loaded) == []
    too_many = _site(trust={"canonicalFingerprints": [FP, "cd" * 32, "ef" * 32]})
    assert "spec.trust.canonicalFingerprints: " in _joined(too_many, loaded)
    assert "spec.trust.canonicalFingerprints: [] should be non-empty" in _joined(
        _site(trust={"canonicalFingerprints": []}), loaded
    )
    for bad in (FP[:-1], FP + "a", FP.upper(), "ab:" * 31 + "ab", "g" * 64):
        assert "spec.trust.canonicalFingerprints[0]:" in _joined(_site(trust={"canonicalFingerprints": [bad]}), loaded)
    no_ref = _site()
    del no_ref["spec"]["gridNetworkRef"]
    assert "spec.gridNetworkRef: required" in _joined(no_ref, loaded)


@pytest.mark.parametrize("phase", ["Pending", "Discovered", "Connecting", "Active", "Unreachable", "Left"])
def test_gridsite_phases(phase: str, loaded: dict[str, crds.Crd]) -> None:
    assert crds.resource_errors({**_site(), "status": {"phase": phase}}, loaded) == []


def test_gridnetwork_gateway_refs_and_status(loaded: dict[str, crds.Crd]) -> None:
    ref = {"name": "gw", "namespace": "ns", "localSiteName": "a", "configMapName": "overlay"}
    assert crds.resource_errors(_network(gatewayRefs=[ref]), loaded) == []
    assert "spec.gatewayRefs[0].namespace: required" in _joined(_network(gatewayRefs=[{"name": "gw"}]), loaded)
    status: dict[str, Any] = {
        "overlayStatus": [
            {
                "gatewayName": "gw",
                "gatewayNamespace": "ns",
                "renderedRevision": "r",
                "candidateCount": 2,
                "phase": "Error",
                "reason": "ApplyFailed",
            }
        ]
    }
    assert crds.resource_errors({**_network(), "status": status}, loaded) == []
    bad = copy.deepcopy(status)
    bad["overlayStatus"][0]["candidateCount"] = -1
    assert "status.overlayStatus[0].candidateCount:" in _joined({**_network(), "status": bad}, loaded)


def test_agent_tool_provider(loaded: dict[str, crds.Crd]) -> None:
    tool: dict[str, Any] = {
        "apiVersion": API,
        "kind": "AgentToolProvider",
        "metadata": {"name": "t"},
        "spec": {"gridNetworkRef": "net", "endpoint": "http://mcp:3000", "tools": [{"name": "search"}]},
        "status": {"discoveredTools": ["search", "other"]},
    }
    assert crds.resource_errors(tool, loaded) == []
    tool["status"]["discoveredTools"] = [{"name": "search"}]
    assert "status.discoveredTools[0]:" in _joined(tool, loaded)


# --- fields of the public AGN CRDs ------------------------------------------------------------------

SECRET_REF = {"name": "s", "namespace": "grid-system"}
TRANSPORT = {"mode": "mutual_tls", "sni": "p.grid.example"}
CONSUMER = {
    "enabled": True,
    "configMapName": "praxis-consumer-config",
    "listenerPort": 8080,
    "credentialMountBase": "/run/secrets/grid-credentials",
    "tlsCertMountPath": "/etc/praxis/tls",
    "enableProjectedCredentials": False,
    "supportsProjectedCredentials": False,
    "clusterEndpoints": [
        {"cluster": "a", "address": "10.0.0.1:8443", "transport": TRANSPORT},
        {"cluster": "b", "address": "b:8080", "transport": {"mode": "plaintext"}},
        {"cluster": "c", "address": "c:8443", "transport": {"mode": "tls", "sni": "c", "caSecretRef": {"name": "ca"}}},
    ],
    "deriveTopology": {"fromProviders": ["p1"], "transport": {"mode": "tls", "sni": "p1", "caSecretRef": None}},
    "mountReconciliation": {"enabled": True, "deploymentName": "gw", "containerName": "praxis"},
    "telemetry": {"otlpEndpoint": "", "samplingRate": 0.5, "batchIntervalSecs": 5, "batchSize": 512},
}


def _with_consumer(**changes: Any) -> dict[str, Any]:
    ref = {"name": "gw", "namespace": "ns", "consumerConfig": {**CONSUMER, **changes}}
    return _network(gatewayRefs=[ref])


def test_gridnetwork_public_fields_accepted(loaded: dict[str, crds.Crd]) -> None:
    network = _network(
        gridId="",
        seeds=["10.0.0.1:7946", "[fd00::1]:7946", "swim.example:7946"],
        swim={"probeInterval": "5s", "suspicionTimeout": "1m30s", "gossipNodes": 0},
        tls={"caSecretRef": SECRET_REF, "siteSecretRef": {**SECRET_REF, "key": "tls.crt"}, "swimKeyRef": None},
        peerTrust={"mode": "spiffe"},
        signalTransport={"mode": "poll"},
        budgetPolicy={"tenants": [{"tenantId": "t", "capUsd": 0}, {"tenantId": "u", "capUsd": 12.5}]},
        region=None,
        scoringPolicy=None,
    )
    assert crds.resource_errors(network, loaded) == []
    assert crds.resource_errors(_with_consumer(), loaded) == []
    hop = {"name": "gw", "namespace": "ns", "providerHopEndpoints": [{"cluster": "a", "transport": TRANSPORT}]}
    assert crds.resource_errors(_network(gatewayRefs=[hop]), loaded) == []


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"swim": {"gossipNodes": -1}}, "spec.swim.gossipNodes:"),
        ({"swim": {"probeInterval": "fast"}}, "spec.swim.probeInterval:"),
        ({"swim": {"probeInterval": "5s", "fanout": 3}}, "spec.swim: Additional properties"),
        ({"tls": {"caSecretRef": {"name": "ca"}}}, "spec.tls.caSecretRef.namespace: required"),
        ({"tls": {"swimKeyRef": {**SECRET_REF, "key": ""}}}, "spec.tls.swimKeyRef.key:"),
        ({"peerTrust": {"mode": "tofu"}}, "spec.peerTrust.mode:"),
        ({"signalTransport": {}}, "spec.signalTransport.mode: required"),
        ({"budgetPolicy": {"tenants": [{"tenantId": "t", "capUsd": -1}]}}, "spec.budgetPolicy.tenants[0].capUsd:"),
        ({"budgetPolicy": {"tenants": [{"capUsd": 1}]}}, "spec.budgetPolicy.tenants[0].tenantId: required"),
        ({"routingPolicy": None}, "spec.routingPolicy:"),
    ],
)
def test_gridnetwork_public_fields_rejected(spec: dict[str, Any], field: str, loaded: dict[str, crds.Crd]) -> None:
    assert field in _joined(_network(**spec), loaded)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"listenerPort": 65536}, "consumerConfig.listenerPort:"),
        ({"clusterEndpoints": [{"cluster": "a", "transport": TRANSPORT}]}, "clusterEndpoints[0].address: required"),
        ({"clusterEndpoints": [{"cluster": "a", "address": "a:1", "transport": {"mode": "insecure"}}]}, "mode:"),
        ({"clusterEndpoints": [{"cluster": "a", "address": "a:1", "transport": {"sni": "a"}}]}, "mode: required"),
        ({"deriveTopology": {"fromProviders": [f"p{i}" for i in range(65)]}}, "deriveTopology.fromProviders:"),
        ({"deriveTopology": {"fromProviders": ["p", "p"]}}, "deriveTopology.fromProviders:"),
        ({"telemetry": {"samplingRate": 1.5}}, "telemetry.samplingRate:"),
        ({"telemetry": {"batchIntervalSecs": 0}}, "telemetry.batchIntervalSecs:"),
        ({"telemetry": {"otlpEndpoint": "collector:4317"}}, "telemetry.otlpEndpoint:"),
        ({"telemetry": {"serviceName": "  "}}, "telemetry.serviceName:"),
        ({"enabled": "yes"}, "consumerConfig.enabled:"),
    ],
)
def test_consumer_config_rejected(change: dict[str, Any], field: str, loaded: dict[str, crds.Crd]) -> None:
    errors = _joined(_with_consumer(**change), loaded)
    assert "spec.gatewayRefs[0].consumerConfig" in errors and field in errors, errors


def test_provider_hop_endpoint_needs_a_transport(loaded: dict[str, crds.Crd]) -> None:
    hop = {"name": "gw", "namespace": "ns", "providerHopEndpoints": [{"cluster": "a"}]}
    assert "spec.gatewayRefs[0].providerHopEndpoints[0].transport: required" in _joined(
        _network(gatewayRefs=[hop]), loaded
    )


def test_pressure_counts_bounded_like_the_operator(loaded: dict[str, crds.Crd]) -> None:
    for field in ("failureThreshold", "successThreshold"):
        ok = _network(admissionPolicy={"mode": "stabilized", "pressure": {**PRESSURE, field: 100}})
        assert crds.resource_errors(ok, loaded) == []
        bad = _network(admissionPolicy={"mode": "stabilized", "pressure": {**PRESSURE, field: 101}})
        assert f"spec.admissionPolicy.pressure.{field}: 101 is greater than the maximum of 100" in _joined(bad, loaded)


def test_provider_public_fields_accepted(loaded: dict[str, crds.Crd]) -> None:
    tls = {
        "caSecretRef": {"name": "ca", "namespace": "ns", "key": None},
        "clientCertificateSecretRef": {"name": "c", "namespace": "ns"},
    }
    provider = _provider(
        providerKind="vllm-vcr",
        models=[{"name": "m", "capabilities": ["text_generation"], "contextWindow": 4096}, {"name": "n"}],
        siteSelector={"matchLabels": {"grid.praxis.fast/provider-site": "east"}},
        healthCheck={"path": "/health", "interval": "30s", "timeout": "5s", "endpoint": "https://h:8443", "tls": tls},
        cost={"perMillionInputTokens": 0.5, "perMillionOutputTokens": 1.5},
        trafficPolicy={"drain": True},
        modelDiscovery={
            "openAiModels": {"path": "/v1/models", "tls": {"caConfigMapRef": {"name": "c", "namespace": "n"}}}
        },
        routingClusterRef="east",
        gatewayRef="east-gw",
        capacityWeight=None,
        auth={"strategy": "bearer_token", "manual": True, "secretRef": {"name": "t", "namespace": "n", "key": "k"}},
        tls={"caConfigMapRef": {"name": "openshift-service-ca.crt", "namespace": "n", "key": "service-ca.crt"}},
        metricsConfig={
            "auth": {"type": "serviceAccountToken", "allowPlaintext": False},
            "poolName": None,
            "signalNames": {"errorRate": "e", "latencyP99Ms": "l", "prefixCacheHitRatio": "p", "queueDepth": "q"},
        },
    )
    assert crds.resource_errors(provider, loaded) == []
    assert crds.resource_errors(_provider(healthCheck=None, metricsConfig=None, auth=None), loaded) == []


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"models": [{"name": "m", "contextWindow": -1}]}, "spec.models[0].contextWindow:"),
        ({"models": [{"name": "m", "capabilities": "chat"}]}, "spec.models[0].capabilities:"),
        ({"siteSelector": {"matchLabels": {"a": 1}}}, "spec.siteSelector.matchLabels.a:"),
        ({"healthCheck": {"interval": "soon"}}, "spec.healthCheck.interval:"),
        ({"healthCheck": {"path": "health"}}, "spec.healthCheck.path:"),
        ({"healthCheck": {"tls": {"caSecretRef": {"name": "ca"}}}}, "spec.healthCheck.tls.caSecretRef.namespace"),
        ({"cost": {"perMillionInputTokens": -1}}, "spec.cost.perMillionInputTokens:"),
        ({"trafficPolicy": {"drain": "yes"}}, "spec.trafficPolicy.drain:"),
        ({"modelDiscovery": {}}, "spec.modelDiscovery:"),
        ({"gatewayRef": ""}, "spec.gatewayRef:"),
        ({"metricsConfig": {"auth": {"type": "basic"}}}, "spec.metricsConfig.auth.type:"),
        (
            {"auth": {"strategy": "api_key", "secretRef": {"name": "t", "namespace": "n", "key": "k"}}},
            "spec.auth.strategy:",
        ),
        ({"auth": {"strategy": "bearer_token", "manual": True}}, "spec.auth.secretRef: required"),
    ],
)
def test_provider_public_fields_rejected(spec: dict[str, Any], field: str, loaded: dict[str, crds.Crd]) -> None:
    assert field in _joined(_provider(**spec), loaded)


def test_gridsite_public_fields(loaded: dict[str, crds.Crd]) -> None:
    legacy = ":".join(["ab"] * 32)
    endpoint = {"address": "gw:8443", "tls": {"mode": "Mutual", "serverName": "gw.grid.example"}}
    good = _site(sovereigntyZone="eu", gatewayEndpoint=endpoint, trust={"certFingerprint": legacy})
    assert crds.resource_errors(good, loaded) == []
    nulls = _site(region="r", sovereigntyZone=None, gatewayEndpoint=None, trust=None)
    assert crds.resource_errors(nulls, loaded) == []
    plain = _site(gatewayEndpoint={"address": "gw:8080", "tls": {"mode": "Plaintext"}})
    assert crds.resource_errors(plain, loaded) == []
    assert "spec.gatewayEndpoint.tls.mode:" in _joined(
        _site(gatewayEndpoint={"address": "a", "tls": {"mode": "TLS"}}), loaded
    )
    assert "spec.trust.certFingerprint:" in _joined(_site(trust={"certFingerprint": legacy.upper()}), loaded)
    assert "spec.trust: {} is not valid" in _joined(_site(trust={}), loaded)
    status = {"phase": "Active", "publicCertPem": "-----BEGIN CERTIFICATE-----", "capabilities": {"inference": True}}
    assert crds.resource_errors({**_site(), "status": status}, loaded) == []


def test_agent_tool_provider_public_fields(loaded: dict[str, crds.Crd]) -> None:
    spec: dict[str, Any] = {
        "gridNetworkRef": "net",
        "endpoint": "https://mcp:3443",
        "siteSelector": {"matchLabels": {"site": "east"}},
        "tls": {"caSecretRef": {"name": "ca", "namespace": "ns"}, "clientCertificateSecretRef": None},
        "tools": [{"name": "search", "description": None}],
    }
    tool = {"apiVersion": API, "kind": "AgentToolProvider", "metadata": {"name": "t"}, "spec": spec}
    assert crds.resource_errors(tool, loaded) == []
    spec["tls"] = {"clientCertificateSecretRef": {"name": "c", "namespace": "ns"}}
    assert "spec.tls.caSecretRef: required" in _joined(tool, loaded)


# --- the translation and error reporting -------------------------------------------------------------


def test_wrong_kind_version_and_name(loaded: dict[str, crds.Crd]) -> None:
    assert "kind: unknown kind 'Gateway'" in _joined({**_network(), "kind": "Gateway"}, loaded)
    assert "apiVersion: expected" in _joined({**_network(), "apiVersion": "grid.praxis.fast/v1"}, loaded)
    assert "metadata.name:" in _joined({**_network(), "metadata": {"name": "Bad_Name"}}, loaded)
    assert "metadata.name: required" in _joined({**_network(), "metadata": {}}, loaded)
    assert "spec: required" in _joined({k: v for k, v in _network().items() if k != "spec"}, loaded)


def test_check_resource_raises_with_paths(loaded: dict[str, crds.Crd]) -> None:
    with pytest.raises(crds.ResourceInvalid) as info:
        crds.check_resource(_network(routingPolicy="x", staleCandidateTtlSeconds=0), loaded)
    assert info.value.kind == "GridNetwork" and info.value.name == "net"
    assert len(info.value.errors) == 2
    assert "GridNetwork/net is invalid" in str(info.value)
    crds.check_resource(_network(), loaded)


def test_translation_of_kubernetes_extensions() -> None:
    openapi = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "port": {"x-kubernetes-int-or-string": True},
                    "opt": {"type": "string", "nullable": True},
                    "free": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                        "properties": {"a": {"type": "string"}},
                    },
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                    "gt": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
                    "rule": {
                        "type": "object",
                        "x-kubernetes-validations": [{"rule": "self.a > 0", "message": "positive"}],
                    },
                },
            }
        },
    }
    schema, notes = crds.to_json_schema(openapi)
    crd = crds.Crd("X", "g", "v1", "xs", "Cluster", openapi, schema, tuple(notes))
    base = {"apiVersion": "g/v1", "kind": "X", "metadata": {"name": "x"}}

    def errors(spec: dict[str, Any]) -> list[str]:
        return crds.resource_errors({**base, "spec": spec}, {"X": crd})

    assert errors({"port": 80, "opt": None, "free": {"a": "b", "extra": 1}, "tags": ["a", "b"], "gt": 0.1}) == []
    assert errors({"port": "http"}) == []
    assert errors({"port": 1.5}) and errors({"tags": ["a", "a"]}) and errors({"gt": 0}) and errors({"unknown": 1})
    assert any("CEL rule not checked offline: self.a > 0" in note for note in notes)
    assert not any(key.startswith("x-kubernetes") for key in str(schema).split("'"))


def test_bad_crd_documents_are_reported(tmp_path: Path) -> None:
    with pytest.raises(crds.CrdError, match="not a CustomResourceDefinition"):
        crds.crd_from_document({"kind": "ConfigMap"})
    with pytest.raises(crds.CrdError, match="CRD directory not found"):
        crds.load_crds(tmp_path / "missing")
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "spec: {versions: [{name: v1, storage: true}]}\n"
    )
    with pytest.raises(crds.CrdError, match="openAPIV3Schema: missing"):
        crds.load_crds(tmp_path)
