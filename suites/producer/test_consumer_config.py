"""The consumer Praxis config the operator generates beside the overlay (extended: generatedConsumerConfig).

The spec says the operator generates the consumer Praxis config, including the credential_inject section
for direct API-provider routes, that it is model-oriented (projects only inference_model candidates), that
its static candidates drop the overlay-only fields, that no token is in it, and that it is removed when no
inference candidate is left. Where it lives (a ConfigMap named by `consumerConfig.configMapName`, key
`praxis.yaml`) and the cluster endpoints it needs come from the public grid operator, hence the feature.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
import yaml

from harness import producer_oracle as oracle
from harness import resources
from harness.producer_support import Scenario
from harness.timeouts import timeouts
from harness.waiting import poll_until

ARCH = "routing-architecture-and-overlay-contract"
GUIDE = "routing-guide"
SOURCE = "public grid operator, crates/operator/src/resources/consumer_config.rs (ConfigMap name and praxis.yaml key)"
GENERATES = (f"{ARCH}, Deployment ownership: \"The operator generates the consumer Praxis config including the "
             "credential_inject section for direct API-provider routes.\"; Overlay-level fields: \"The generated "
             "Praxis static intelligent_route configuration intentionally strips stable_id, admission_state, "
             "selection_tier, rank, and generated_at\"; File-backed token source: the token does not appear in "
             "\"The intelligent_route filter candidates YAML\" nor \"The consumer Praxis ConfigMap\"")
MODEL_ORIENTED = (f"{GUIDE}, Data-plane boundary: \"The operator-generated consumer Praxis config is model-oriented: "
                  "it parses a model field and configures inference clusters. It therefore projects only "
                  "inference_model candidates.\"")
LIFECYCLE = (f"{GUIDE}, Data-plane boundary: \"A tool-only overlay cannot produce that consumer config.\"; \"If no "
             "inference candidates remain, the operator removes a previously generated static consumer config\"")
STRIPPED = ("stable_id", "admission_state", "selection_tier", "rank", "generated_at")
NAMESPACE = resources.DEFAULT_NAMESPACE
MOUNT_BASE = "/run/secrets/grid-credentials"


def _consumer_config(scenario: Scenario, clusters: list[str]) -> dict[str, Any]:
    """consumerConfig for the test's gateway reference: its own ConfigMap name, a plaintext endpoint per cluster."""
    return {"enabled": True, "configMapName": scenario.name("consumer"), "credentialMountBase": MOUNT_BASE,
            "clusterEndpoints": [{"cluster": c, "address": f"{c}.invalid:8000", "transport": {"mode": "plaintext"}}
                                 for c in clusters]}


def _generated(scenario: Scenario) -> dict[str, Any] | None:
    """The generated config (parsed praxis.yaml), None while there is no ConfigMap."""
    configmap = scenario.control.configmap_named(scenario.name("consumer"))
    if configmap is None:
        return None
    text = (configmap.get("data") or {}).get("praxis.yaml")
    keys = sorted(configmap.get("data") or {})
    assert isinstance(text, str), f"the consumer ConfigMap has no praxis.yaml key: {keys}"
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict), f"praxis.yaml is not a mapping: {text[:200]}"
    return doc


def _filters(config: dict[str, Any]) -> list[dict[str, Any]]:
    chains = config.get("filter_chains") or []
    return [f for chain in chains for f in chain.get("filters") or []]


def _named(filters: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [f for f in filters if f.get("filter") == name]


@pytest.mark.conformance(id="PROD-CONSUMER-CONFIG-GENERATED", profile="producer", level="extended",
                         feature="generatedConsumerConfig", spec=f"{GENERATES}; {MODEL_ORIENTED}; {SOURCE}",
                         statements=["OC-OWNERSHIP-OPERATOR-GENERATES-INJECT", "OC-FIELDS-STATIC-CONFIG-STRIPS",
                                     "OC-TOKEN-NOT-IN-CANDIDATES-YAML", "OC-TOKEN-NOT-IN-CONSUMER-CONFIGMAP",
                                     "RG-TOOLS-CONSUMER-CONFIG-MODEL", "RG-TOOLS-ONLY-INFERENCE-PROJECTED"])
def test_generated_consumer_config_routes_inference_and_injects_api_tokens(scenario: Scenario) -> None:
    """A self-hosted provider p1, an API provider api with a bearer token and a tool provider t1. The
    generated config parses the model field (json_body_field model) ahead of intelligent_route, whose
    static candidates are the overlay's inference candidates in overlay order without the stripped
    fields; credential_inject follows it with a file entry under the mount base for api's reference, then
    load_balancer has a cluster for p1 and api and none for the tool. No mcp_tool candidate is projected;
    the overlay still lists it. The token is nowhere in the ConfigMap or anything else the operator wrote.
    """
    token = "tok-" + secrets.token_urlsafe(24)
    secret = scenario.name("api-creds")
    scenario.apply(resources.secret(secret, NAMESPACE, {"token": token}))
    reference = {"name": secret, "namespace": NAMESPACE, "key": "token"}
    scenario.provider("p1")
    scenario.provider("api", backendKind="api_provider", providerKind="open_ai", credential=reference)
    scenario.tool_provider("t1", discovered=["search"])
    scenario.network(consumer_config=_consumer_config(scenario, ["p1", "api"]))
    envelope = scenario.envelope(lambda env: {"p1", "api"} <= set(oracle.names(env, scenario.model))
                                 and bool(oracle.candidates(env, kind="mcp_tool")),
                                 what="inference candidates p1, api and the mcp_tool candidate")
    config = poll_until(lambda: _generated(scenario), lambda c: c is not None, timeout=timeouts().report,
                        what=f"the generated consumer ConfigMap {scenario.name('consumer')}")
    assert config is not None
    filters = _filters(config)
    order = [f.get("filter") for f in filters]
    for name in ("json_body_field", "intelligent_route", "credential_inject", "load_balancer"):
        assert name in order, f"the generated chain lacks {name}: {order}"
    assert order.index("json_body_field") < order.index("intelligent_route") < order.index("credential_inject") \
        < order.index("load_balancer"), f"chain order: {order}"
    body_field = _named(filters, "json_body_field")[0]
    assert body_field.get("field") == "model", body_field
    route = _named(filters, "intelligent_route")[0]
    inference = oracle.candidates(envelope, kind="inference_model")
    static = route.get("candidates") or []
    assert [(c.get("kind"), c.get("name"), c.get("site"), c.get("cluster")) for c in static] == \
        [(c["kind"], c["name"], c["site"], c["cluster"]) for c in inference], (
        f"static candidates must be the overlay's inference candidates in order: {static}")
    kept = {c.get("cluster"): sorted(set(c) & set(STRIPPED)) for c in static if set(c) & set(STRIPPED)}
    assert not kept, f"the static candidates keep overlay-only fields: {kept}"
    assert next(c for c in static if c.get("cluster") == "api").get("credential") == {
        "strategy": "bearer_token", "secretRef": reference}, static
    entries = _named(filters, "credential_inject")[0].get("credentials") or []
    assert [(e.get("name"), e.get("namespace"), e.get("key")) for e in entries] == [(secret, NAMESPACE, "token")], \
        entries
    assert str(entries[0].get("file", "")).startswith(MOUNT_BASE + "/") and "value" not in entries[0], entries[0]
    clusters = sorted(c.get("name") for c in _named(filters, "load_balancer")[0].get("clusters") or [])
    assert clusters == ["api", "p1"], f"load_balancer clusters must be the inference clusters only: {clusters}"
    leaks = oracle.token_leaks(token, scenario.control.written_texts())
    assert not leaks, f"the token value leaked into: {leaks}"


@pytest.mark.conformance(id="PROD-CONSUMER-CONFIG-INFERENCE-ONLY", profile="producer", level="extended",
                         feature="generatedConsumerConfig", spec=f"{LIFECYCLE}; {SOURCE}",
                         statements=["RG-TOOLS-TOOL-ONLY-NO-CONFIG", "RG-TOOLS-REMOVES-STALE-CONFIG"])
def test_consumer_config_exists_only_while_inference_candidates_do(scenario: Scenario) -> None:
    """A tool-only network with consumerConfig enabled: after its overlay and two forced reconciles there
    is no consumer config that routes (none, or one without an intelligent_route). Adding an inference
    provider brings the config; deleting it removes the config while the overlay keeps the tool candidate.
    Fails if a tool-only overlay produces a config, or a config outlives its last inference candidate.
    """
    scenario.tool_provider("t1", discovered=["search"])
    scenario.network(consumer_config=_consumer_config(scenario, ["p1"]))
    scenario.settled(scenario.envelope(lambda env: bool(oracle.candidates(env, kind="mcp_tool")),
                                       what="the mcp_tool candidate"))

    def routes(config: dict[str, Any] | None) -> bool:
        return config is not None and bool(_named(_filters(config), "intelligent_route"))

    for _ in range(2):
        scenario.reconcile()
        config = _generated(scenario)
        assert not routes(config), f"a tool-only overlay produced a consumer config: {config}"
    scenario.provider("p1")
    poll_until(lambda: _generated(scenario), routes, timeout=timeouts().report,
               what="the consumer config once an inference provider exists")
    scenario.delete("InferenceProvider", "p1")
    envelope = scenario.envelope(lambda env: not oracle.candidates(env, kind="inference_model"), force=True,
                                 what="the overlay without inference candidates")
    assert oracle.candidates(envelope, kind="mcp_tool"), "the overlay keeps the tool candidate"
    poll_until(lambda: _generated(scenario), lambda c: not routes(c), timeout=timeouts().report,
               what="the consumer config to be removed once no inference candidate is left",
               describe=lambda c: f"praxis.yaml still routes: {c}")
