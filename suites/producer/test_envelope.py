"""The overlay an operator publishes: envelope contract, ConfigMap shape, revisions, status, credentials, weights.

Expected values come from the spec (routing-architecture-and-overlay-contract, routing-guide) and the suites'
own oracle; every test names the broken operator it catches.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from harness import producer_oracle as oracle
from harness import resources
from harness.contract import SCHEMA_VERSION, ScopeSpec
from harness.control import ENVELOPE_KEY, FORCE_REFRESH, LEGACY_KEY
from harness.producer_support import Scenario
from harness.timeouts import timeouts
from harness.waiting import poll_until

ARCH = "routing-architecture-and-overlay-contract"
GUIDE = "routing-guide"
GATEWAY = resources.DEFAULT_GATEWAY
NAMESPACE = resources.DEFAULT_NAMESPACE


def _scope(scenario: Scenario, gateway: str = GATEWAY, local: str | None = None) -> ScopeSpec:
    return ScopeSpec(scenario.net, gateway, NAMESPACE, local or scenario.local)


def _revision(envelope: dict[str, Any]) -> str:
    return str((envelope.get("revision") or {}).get("value"))


def _configmap(scenario: Scenario, gateway: str = GATEWAY) -> dict[str, Any]:
    """The overlay ConfigMap of (network, gateway), by the public name or by its facts (the envelope's scope);
    on absence, say which outputs exist instead."""
    configmap = scenario.control.configmap(scenario.net, gateway)
    if configmap is None:
        found = scenario.control.output_names("*.configmap.yaml")
        raise AssertionError(f"no ConfigMap holds the overlay of {scenario.net}/{gateway} (none named "
                             f"{oracle.configmap_name(scenario.net, gateway)}, none whose envelope has this scope); "
                             f"outputs: {found}")
    return configmap


def _contract_ok(scenario: Scenario, envelope: dict[str, Any], gateway: str = GATEWAY,
                 local: str | None = None) -> None:
    problems = oracle.envelope_problems(envelope, _scope(scenario, gateway, local))
    oracle.require(problems, f"the envelope for {gateway} breaks the contract")


def _clusters(envelope: dict[str, Any]) -> list[str]:
    return oracle.names(envelope)


def _has(clusters: list[str]) -> Callable[[dict[str, Any]], bool]:
    return lambda env: _clusters(env) == clusters


# ------------------------------------------------------------------------------------------- contract


@pytest.mark.conformance(id="PROD-ENV-CONTRACT", profile="producer", level="core", feature="envelope",
                         spec=f"{ARCH}#routing-overlay-format",
                         statements=["OC-FORMAT-SCHEMA-VERSION", "OC-FORMAT-REVISION-KIND",
                                     "OC-FORMAT-DIGEST-ALGORITHM", "OC-FORMAT-DIGEST-VALUE-HEX",
                                     "OC-FORMAT-SCOPE-FIELDS", "OC-FORMAT-PROVENANCE-FIELDS",
                                     "OC-FORMAT-NESTED-OVERLAY", "OC-REVISION-DIGEST-DEFINITION",
                                     "OC-REVISION-INCLUDES-SELECTION-POLICY", "OC-REVISION-EXCLUDES-METADATA",
                                     "OC-REVISION-VALUES-IDENTICAL", "OC-PROVENANCE-IDENTIFIES",
                                     "OC-RENDER-BUILD-ENVELOPE", "OC-FORMAT-CANDIDATE-FIELDS",
                                     "OC-REVISION-CONTENT-CHANGES", "RG-INTRO-AGN-ASYNC-PUBLISH"])
def test_envelope_meets_the_v1_contract(scenario: Scenario) -> None:
    """A rendered envelope is a valid v1 envelope for the gateway's scope, with a content-addressed revision.

    Fails if the digest covers other fields than network, local_site, candidates and selection_policy (e.g.
    provenance), if revision and content digest differ, or if scope/provenance are missing or wrong.
    """
    scenario.grid_site("a", region="r1", zone="z1")
    scenario.grid_site("b", region="r2", zone="z2")
    scenario.provider("p1")
    scenario.provider("p2", site="b")
    scenario.network(routing="geographyFirst", selection="roundRobin")
    envelope = scenario.envelope(_has(["p1", "p2"]), what="candidates p1, p2")
    _contract_ok(scenario, envelope)
    assert envelope["revision"]["kind"] == "content_addressed", envelope["revision"]
    assert envelope["revision"]["algorithm"] == envelope["content_digest"]["algorithm"] == "sha256"
    assert envelope["overlay"]["selection_policy"] == {"mode": "roundRobin"}
    provenance = envelope["provenance"]
    assert provenance.get("source_name") == scenario.net, provenance
    for field in ("producer", "producer_version", "source_uid"):
        assert isinstance(provenance.get(field), str) and provenance[field].strip(), f"provenance.{field} blank"
    oracle.require(oracle.group_problems(envelope), "selection groups and ranks")
    kinds = {c["kind"] for c in oracle.candidates(envelope, kind=None)}
    assert kinds == {"inference_model"}, kinds


@pytest.mark.conformance(id="PROD-ENV-CONFIGMAP-KEYS", profile="producer", level="core", feature="envelope",
                         spec=f"{ARCH}#scope-and-provenance",
                         statements=["IR-ENVELOPE-PRODUCER-PUBLISHES-BOTH", "OC-RENDER-KEYS-SAME-STATE",
                                     "OC-PROVENANCE-ANNOTATIONS"])
def test_configmap_keys_annotations_and_labels(scenario: Scenario) -> None:
    """Both data keys describe the same state; annotations repeat schema, revision and digest; labels scope it.

    Fails if the legacy key is missing or differs from the envelope's overlay, or if the annotations or
    labels are missing or describe another revision, network or gateway.
    """
    scenario.provider("p1")
    scenario.provider("p2")
    scenario.network(selection="deterministic")
    envelope = scenario.envelope(_has(["p1", "p2"]), what="candidates p1, p2")
    configmap = _configmap(scenario)
    data = configmap.get("data") or {}
    assert {ENVELOPE_KEY, LEGACY_KEY} <= set(data), f"data keys {sorted(data)}"
    assert json.loads(data[LEGACY_KEY]) == envelope["overlay"], "routing-config.json is not the envelope's overlay"
    metadata = configmap.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    assert annotations.get(oracle.ANNOTATIONS["schema"]) == SCHEMA_VERSION == envelope["schema_version"], annotations
    assert annotations.get(oracle.ANNOTATIONS["revision"]) == _revision(envelope), annotations
    assert annotations.get(oracle.ANNOTATIONS["digest"]) == envelope["content_digest"]["value"], annotations
    labels = metadata.get("labels") or {}
    assert labels.get("app.kubernetes.io/managed-by"), f"no app.kubernetes.io/managed-by label: {labels}"
    assert labels.get("grid.praxis.fast/network") == scenario.net, labels
    assert labels.get("grid.praxis.fast/gateway") == GATEWAY, labels
    assert configmap.get("kind") == "ConfigMap" and configmap.get("apiVersion") == "v1", configmap.get("kind")


@pytest.mark.conformance(id="PROD-ENV-EXT-CONFIGMAP-NAME", profile="producer", level="extended",
                         feature="configMapNaming", spec=f"{ARCH}#control-plane-rendering-path",
                         statements=[])
def test_configmap_name(scenario: Scenario) -> None:
    """The ConfigMap is `grid-overlay-{network}-{gateway}`, and status names the same object.

    Fails if the operator names ConfigMaps after the network only (two gateways would collide) or any
    other scheme that overlay-sync deployments cannot predict.
    """
    scenario.provider("p1")
    scenario.network()
    scenario.envelope(_has(["p1"]), what="candidate p1")
    expected = f"grid-overlay-{scenario.net}-{GATEWAY}"
    assert oracle.configmap_name(scenario.net, GATEWAY) == expected
    configmap = _configmap(scenario)
    assert configmap["metadata"].get("name") == expected, configmap["metadata"]
    assert configmap["metadata"].get("namespace") == NAMESPACE, configmap["metadata"]
    entry = scenario.control.wait_status(scenario.net, lambda e: bool(e.get("configMapName")), what="configMapName")
    assert entry["configMapName"] == expected, entry


@pytest.mark.conformance(id="PROD-ENV-EXT-CONFIGMAP-NAME-LONG", profile="producer", level="extended",
                         feature="configMapNaming", spec=f"{ARCH}#control-plane-rendering-path",
                         statements=[])
def test_long_configmap_name_is_truncated_with_a_hash(scenario: Scenario) -> None:
    """Over 63 characters the name becomes `grid-overlay-{net[:20]}-{gw[:20]}-{fnv1a32(net/gw)}`.

    Fails if the operator writes an over-long (invalid) Kubernetes name, truncates without the hash (two
    long gateways would collide), or hashes something other than `network/gateway`.
    """
    scenario.net = scenario.name("network-with-a-long-name")
    gateway = "inference-edge-gateway-for-the-eu-west-production-tier"
    scenario.provider("p1")
    scenario.network(gateways=(gateway,))
    envelope = scenario.envelope(_has(["p1"]), what="candidate p1", gateway=gateway)
    _contract_ok(scenario, envelope, gateway)
    plain = f"grid-overlay-{scenario.net}-{gateway}"
    assert len(plain) > oracle.MAX_NAME
    expected = oracle.configmap_name(scenario.net, gateway)
    assert expected == (f"grid-overlay-{scenario.net[:20]}-{gateway[:20]}-"
                        f"{oracle.fnv1a32(scenario.net + '/' + gateway)}")
    configmap = _configmap(scenario, gateway)
    name = configmap["metadata"].get("name")
    assert name == expected, f"metadata.name {name!r} != {expected!r}"
    assert len(name) <= oracle.MAX_NAME
    entry = scenario.control.wait_status(scenario.net, lambda e: bool(e.get("configMapName")), what="configMapName",
                                         gateway=gateway)
    assert entry["configMapName"] == expected, entry


# ------------------------------------------------------------------------------------------ revisions


@pytest.mark.conformance(id="PROD-ENV-REVISION-STABLE", profile="producer", level="core", feature="envelope",
                         spec=f"{ARCH}#revision-semantics",
                         statements=["OC-REVISION-IDEMPOTENT"])
def test_identical_state_keeps_revision_and_configmap(scenario: Scenario) -> None:
    """Reconciles of identical state keep the revision and leave the ConfigMap file untouched.

    Whether the status is rewritten is the operator's choice (the spec says only that it records the
    revisions); each forced reconcile is awaited either way (harness.reconcile_watch). Fails if the digest
    covers a timestamp, a generation or scrape time, or if an unchanged revision still rewrites the ConfigMap.
    """
    scenario.set_metrics("p1", queueDepth=2, kvCacheUtilization=0.3, healthy=1)
    scenario.set_metrics("p2", queueDepth=5, kvCacheUtilization=0.5, healthy=1)
    scenario.provider("p1", metrics=True, capacity_weight=4)
    scenario.provider("p2", metrics=True, capacity_weight=6)
    scenario.network(routing="scoreFirst", scoring="queueDepth", selection="weightedRandom", static_placement=True)
    first = scenario.envelope(_has(["p1", "p2"]), what="p1 before p2")
    path = scenario.control.configmap_path(scenario.net)
    before = os.stat(path)
    text = path.read_bytes()
    for _ in range(3):
        envelope = scenario.reconcile()
        assert _revision(envelope) == _revision(first), "identical state changed the revision"
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), (
        "the ConfigMap file was rewritten although the revision did not change")
    assert path.read_bytes() == text
    assert scenario.control.status_entry(scenario.net).get("distributedRevision") == _revision(first)


@dataclass(frozen=True)
class Change:
    """One routing-relevant change to the base scenario and how the new overlay must show it."""

    name: str
    apply: Callable[[Scenario], object]
    shows: Callable[[dict[str, Any]], bool]


P1: dict[str, Any] = {"site": "b", "metrics": True, "capacity_weight": 3}
P2: dict[str, Any] = {"site": "c", "metrics": True, "capacity_weight": 7}
NETWORK: dict[str, Any] = {"routing": "geographyFirst", "scoring": "queueDepth", "selection": "weightedRandom",
                           "static_placement": True}


def _cred(scenario: Scenario, key: str = "token") -> dict[str, str]:
    return {"name": scenario.name("creds"), "namespace": NAMESPACE, "key": key}


def _base(scenario: Scenario) -> None:
    """p1 same-region with a long queue, p2 cross-region with a short one and a credential."""
    scenario.grid_site("a", region="r1", zone="z1")
    scenario.grid_site("b", region="r1", zone="z2")
    scenario.grid_site("c", region="r2", zone="z3")
    scenario.set_metrics("p1", queueDepth=8, kvCacheUtilization=0.2, healthy=1)
    scenario.set_metrics("p2", queueDepth=1, kvCacheUtilization=0.2, healthy=1)
    scenario.provider("p1", **P1)
    scenario.provider("p2", **P2, credential=_cred(scenario))
    scenario.network(**NETWORK)


def _candidate(env: dict[str, Any], cluster: str) -> dict[str, Any]:
    return oracle.by_cluster(env).get(cluster, {})


CHANGES = [
    Change("add-provider", lambda s: s.provider("p3"), _has(["p3", "p1", "p2"])),
    Change("remove-provider", lambda s: s.delete("InferenceProvider", "p2"), _has(["p1"])),
    Change("capacity-weight", lambda s: s.provider("p1", **{**P1, "capacity_weight": 9}),
           lambda env: _candidate(env, "p1").get("traffic_weight") == 9),
    Change("routing-policy", lambda s: s.network(**{**NETWORK, "routing": "scoreFirst"}), _has(["p2", "p1"])),
    Change("selection-mode", lambda s: s.network(**{**NETWORK, "selection": "roundRobin"}),
           lambda env: env["overlay"].get("selection_policy") == {"mode": "roundRobin"}),
    Change("site-region", lambda s: s.grid_site("c", region="r1", zone="z3"),
           lambda env: _has(["p2", "p1"])(env)  # now both same region: one group, ordered by score
           and _candidate(env, "p1").get("selection_group") == _candidate(env, "p2").get("selection_group")),
    Change("credential-key", lambda s: s.provider("p2", **P2, credential=_cred(s, "api-key")),
           lambda env: ((_candidate(env, "p2").get("credential") or {}).get("secretRef") or {}).get("key")
           == "api-key"),
    Change("provider-degraded", lambda s: s.provider("p1", **P1, phase="Degraded"),
           lambda env: _candidate(env, "p1").get("fresh") is False),
]


@pytest.mark.conformance(id="PROD-ENV-REVISION-CHANGES", profile="producer", level="core", feature="envelope",
                         spec=f"{ARCH}#revision-semantics",
                         statements=["OC-REVISION-INCLUDES-SELECTION-POLICY", "OC-RENDER-KEYS-SAME-STATE",
                                     "OC-REVISION-CONTENT-CHANGES", "OC-REGEN-ON-RECONCILE",
                                     "OC-REGEN-CURRENT-STATE", "RG-RELOAD-AGN-PUBLISHES"])
@pytest.mark.parametrize("change", CHANGES, ids=[c.name for c in CHANGES])
def test_routing_relevant_change_changes_revision(scenario: Scenario, change: Change) -> None:
    """Membership, weight, order, selection mode, locality, credential reference and freshness are all revisioned.

    Fails if the operator digests only part of the candidate (e.g. names and order), or does not re-render
    the change at all, or updates one ConfigMap key or annotation but not the others.
    """
    _base(scenario)
    base = scenario.envelope(_has(["p1", "p2"]), what="p1 (same region) before p2 (cross region)")
    _contract_ok(scenario, base)
    assert not change.shows(base), f"the base overlay already shows {change.name}"
    change.apply(scenario)
    envelope = scenario.envelope(change.shows, what=f"the overlay after {change.name}", force=True)
    _contract_ok(scenario, envelope)
    assert _revision(envelope) != _revision(base), f"{change.name} kept revision {_revision(base)}"
    configmap = _configmap(scenario)
    assert json.loads(configmap["data"][LEGACY_KEY]) == envelope["overlay"], "routing-config.json is stale"
    annotation = (configmap["metadata"].get("annotations") or {}).get(oracle.ANNOTATIONS["revision"])
    assert annotation == _revision(envelope), f"revision annotation {annotation} is stale"


@pytest.mark.conformance(id="PROD-ENV-PROVENANCE-GENERATION", profile="producer", level="core", feature="envelope",
                         spec=f"{ARCH}#scope-and-provenance",
                         statements=["IR-ENVELOPE-SOURCE-GENERATION-POSITIVE", "OC-REVISION-INCLUDES-SELECTION-POLICY",
                                     "OC-REVISION-IDEMPOTENT"])
def test_provenance_follows_generation_outside_the_revision(scenario: Scenario) -> None:
    """provenance.source_generation is the GridNetwork's metadata.generation; it is not part of the revision.

    Fails if the operator reports a counter of its own instead of the source generation, or if a
    generation-only change (no routing change) produces a new revision.
    """
    scenario.provider("p1")
    refs = [resources.gateway_ref(scenario.local)]
    network = resources.grid_network(scenario.net, refs, selection="deterministic")
    # a source that keeps what the client wrote (the operator's manifest directory) carries 3, not a
    # counter's 1; an API server assigns its own generation whatever the client sends
    network["metadata"]["generation"] = 3
    scenario.apply(network)
    first = scenario.envelope(_has(["p1"]), what="candidate p1")
    first_generation = scenario.control.generation("GridNetwork", scenario.net)
    assert first["provenance"].get("source_generation") == first_generation, (first["provenance"], first_generation)
    assert first["provenance"].get("source_name") == scenario.net, first["provenance"]

    network = resources.grid_network(scenario.net, refs, selection="roundRobin")
    network["metadata"]["generation"] = 4
    scenario.apply(network)
    second = scenario.envelope(lambda env: env["overlay"].get("selection_policy") == {"mode": "roundRobin"},
                               what="selection roundRobin")
    second_generation = scenario.control.generation("GridNetwork", scenario.net)
    assert second_generation is not None and first_generation is not None and second_generation > first_generation
    assert second["provenance"].get("source_generation") == second_generation, (second["provenance"],
                                                                               second_generation)
    assert _revision(second) != _revision(first)

    # a spec change outside the revision (the metrics refresh interval): a new generation, the same revision
    network = resources.grid_network(scenario.net, refs, selection="roundRobin", refresh="299s")
    network["metadata"]["generation"] = 5
    scenario.apply(network)
    third = scenario.reconcile()
    third_generation = scenario.control.generation("GridNetwork", scenario.net)
    assert _revision(third) == _revision(second), "a generation-only change produced a new revision"
    assert third["provenance"].get("source_generation") in (second_generation, third_generation), third["provenance"]


@pytest.mark.conformance(id="PROD-ENV-SELECTION-POLICY", profile="producer", level="core", feature="envelope",
                         spec=f"{GUIDE}#start-with-the-routing-need",
                         statements=["RG-NEED-NOMETRICS-NOT-SHARING", "RG-NOTMEAN-NOMETRICS-STILL-APPLY"])
@pytest.mark.parametrize("mode", ["deterministic", "roundRobin", "random", "weightedRandom", None],
                         ids=["deterministic", "roundRobin", "random", "weightedRandom", "omitted"])
def test_selection_policy_is_published(scenario: Scenario, mode: str | None) -> None:
    """selectionPolicy.mode reaches overlay.selection_policy unchanged; omitted means deterministic.

    Fails if the operator drops or renames the mode (the consumer rejects unknown modes), or invents a
    non-deterministic mode when the network sets none.
    """
    scenario.provider("p1", capacity_weight=2)
    scenario.provider("p2", capacity_weight=3)
    scenario.network(selection=mode, static_placement=True)
    envelope = scenario.envelope(_has(["p1", "p2"]), what="candidates p1, p2")
    _contract_ok(scenario, envelope)
    policy = envelope["overlay"].get("selection_policy")
    if mode is None:
        assert policy in (None, {"mode": "deterministic"}), f"no selectionPolicy, yet selection_policy {policy}"
    else:
        assert policy == {"mode": mode}, f"selectionPolicy {mode} rendered as {policy}"


@pytest.mark.conformance(id="PROD-ENV-MULTI-GATEWAY", profile="producer", level="core", feature="envelope",
                         spec=f"{ARCH}#what-happens-during-re-ranking",
                         statements=["OC-RERANKING-PER-GATEWAY-OVERLAY"])
def test_each_gateway_gets_its_own_configmap(scenario: Scenario) -> None:
    """Two gateway references get two ConfigMaps, each scoped to its gateway, with the same candidates.

    Fails if the operator renders only the first gateway reference, or writes one scope into both.
    """
    gateways = (GATEWAY, "batch-gateway")
    scenario.provider("p1")
    scenario.provider("p2")
    scenario.network(gateways=gateways)
    envelopes = {gw: scenario.envelope(_has(["p1", "p2"]), what="candidates p1, p2", gateway=gw) for gw in gateways}
    names = {gw: _configmap(scenario, gw)["metadata"].get("name") for gw in gateways}
    assert len(set(names.values())) == 2, f"both gateway references' overlays in one ConfigMap: {names}"
    for gw, envelope in envelopes.items():
        _contract_ok(scenario, envelope, gw)
        assert envelope["scope"]["gateway"] == gw
        labels = _configmap(scenario, gw)["metadata"].get("labels") or {}
        assert labels.get("grid.praxis.fast/gateway") == gw, labels
    first, second = envelopes[gateways[0]], envelopes[gateways[1]]
    assert first["overlay"] == second["overlay"]
    assert _revision(first) == _revision(second), "same routing state, different revisions"


@pytest.mark.conformance(id="PROD-ENV-MULTI-GATEWAY-PERSPECTIVE", profile="producer", level="core",
                         feature="envelope", spec=f"{ARCH}#what-happens-during-re-ranking",
                         statements=["OC-RERANKING-PER-GATEWAY-RANKING", "OC-EDGE-PER-GATEWAY-OVERLAY",
                                     "OC-RERANKING-PER-GATEWAY-OVERLAY", "RG-NOTMEAN-NOMETRICS-STILL-APPLY"])
def test_each_gateway_ranks_from_its_local_site(scenario: Scenario) -> None:
    """Gateways with different local sites get different rankings and revisions for the same providers.

    Fails if the operator renders one ranking for the network (from the first gateway's site) and copies it.
    """
    scenario.grid_site("a", region="r1", zone="z1")
    west = scenario.grid_site("w", region="r2", zone="z2")
    scenario.provider("p1")
    scenario.provider("p2", site="w")
    refs = [resources.gateway_ref(scenario.local, name=GATEWAY), resources.gateway_ref(west, name="west-gateway")]
    scenario.apply(resources.grid_network(scenario.net, refs, routing="geographyFirst"))
    east_env = scenario.envelope(_has(["p1", "p2"]), what="p1 (local) before p2")
    west_env = scenario.envelope(_has(["p2", "p1"]), what="p2 (local to west) before p1", gateway="west-gateway")
    _contract_ok(scenario, east_env)
    _contract_ok(scenario, west_env, "west-gateway", local=west)
    assert _revision(east_env) != _revision(west_env)
    groups = {c: _candidate(west_env, c).get("selection_group") for c in ("p1", "p2")}
    assert isinstance(groups["p2"], int) and isinstance(groups["p1"], int) and groups["p2"] < groups["p1"], \
        f"for west-gateway p2 is local and p1 in another region, so p2's group comes first: {groups}"


# -------------------------------------------------------------------------------------------- status


@pytest.mark.conformance(id="PROD-STATUS-DISTRIBUTED", profile="producer", level="core", feature="status",
                         spec=f"{ARCH}#revision-lifecycle",
                         statements=["OC-LIFECYCLE-SUCCESS-MATCH", "OC-RENDER-REPORT-REVISIONS",
                                     "OC-RERANKING-APPLY-RECORD-STATUS", "IR-ENVELOPE-LIFECYCLE-RENDERED",
                                     "IR-ENVELOPE-LIFECYCLE-DISTRIBUTED", "OC-REGEN-DISTRIBUTED-NOT-ACCEPTED"])
def test_status_reports_rendered_and_distributed_revision(scenario: Scenario) -> None:
    """After a successful apply the status entry names the ConfigMap and matching rendered/distributed revisions.

    Fails if status lags the ConfigMap (reports the previous revision), omits the distributed revision, or
    describes another gateway.
    """
    scenario.provider("p1")
    scenario.network()
    first = scenario.envelope(_has(["p1"]), what="candidate p1")
    _check_status(scenario, first)
    scenario.provider("p2")
    second = scenario.envelope(_has(["p1", "p2"]), what="candidates p1, p2", force=True)
    assert _revision(second) != _revision(first)
    _check_status(scenario, second)


def _check_status(scenario: Scenario, envelope: dict[str, Any]) -> None:
    """The gateway's entry records the envelope's revision as rendered and distributed. The spec gives no other
    status field (digest, schema version, ConfigMap name, phase, timestamps are the reference's), so none is
    judged; the entry is found in any known status shape (harness.status_shapes)."""
    revision = _revision(envelope)
    entry = scenario.control.wait_status(scenario.net, lambda e: e.get("distributedRevision") == revision,
                                         what=f"distributed revision {revision[:12]}")
    assert entry.get("renderedRevision") == revision, entry
    assert entry.get("gatewayName") == GATEWAY and entry.get("gatewayNamespace") == NAMESPACE, entry


@pytest.mark.conformance(id="PROD-STATUS-CANDIDATE-COUNT", profile="producer", level="core", feature="status",
                         spec=f"{ARCH}#revision-lifecycle",
                         statements=["OC-MULTI-ONE-CANDIDATE-PER-PAIR", "OC-MULTI-MODELS-DECLARED",
                                     "OC-LOCALITY-UNAVAILABLE-EXCLUDED"])
def test_status_counts_rendered_candidates(scenario: Scenario) -> None:
    """candidateCount is the number of candidates in the overlay: one per served model, excluded ones not counted.

    Fails if the operator counts providers instead of candidates, or counts Unavailable providers it excluded.
    """
    second_model = f"{scenario.model}-2"
    scenario.provider("p1", models=(scenario.model, second_model))
    scenario.provider("p2")
    scenario.provider("p3", phase="Unavailable")
    scenario.network()
    envelope = scenario.envelope(lambda env: len(oracle.candidates(env)) == 3, what="three candidates")
    assert sorted(_clusters(envelope)) == ["p1", "p1", "p2"], _clusters(envelope)
    revision = _revision(envelope)
    entry = scenario.control.wait_status(scenario.net, lambda e: e.get("renderedRevision") == revision,
                                         what=f"rendered revision {revision[:12]}")
    assert entry.get("candidateCount") == 3, entry
    scenario.delete("InferenceProvider", "p2")
    envelope = scenario.envelope(lambda env: len(oracle.candidates(env)) == 2, what="two candidates", force=True)
    revision = _revision(envelope)
    entry = scenario.control.wait_status(scenario.net, lambda e: e.get("renderedRevision") == revision,
                                         what=f"rendered revision {revision[:12]}")
    assert entry.get("candidateCount") == 2, entry


# ------------------------------------------------------------------------------------------ resources


@dataclass(frozen=True)
class Invalid:
    """A provider that breaks its CRD schema in `field`, and its twin: the minimally different valid provider."""

    field: str
    breaks: Callable[[dict[str, Any]], object]
    twin: dict[str, Any]


#: capacityWeight "accepts integers from 1 through 1000": each weight outside is paired with the nearest end.
INVALID = {
    "capacity-weight-zero": Invalid("capacityWeight", lambda spec: spec.update(capacityWeight=0),
                                    {"capacity_weight": 1}),
    "capacity-weight-1001": Invalid("capacityWeight", lambda spec: spec.update(capacityWeight=1001),
                                    {"capacity_weight": 1000}),
    "capacity-weight-too-large": Invalid("capacityWeight", lambda spec: spec.update(capacityWeight=5000),
                                         {"capacity_weight": 1000}),
    "missing-endpoint": Invalid("endpoint", lambda spec: spec.pop("endpoint"), {}),
}
INVALID_SPEC = (f"{ARCH}#what-causes-a-reconcile; {GUIDE}#5-weighted-random-selection: \"capacityWeight accepts "
                "integers from 1 through 1000\"")


def _rejection_line(log: str, resource: str, field: str) -> str | None:
    return next((line for line in log.splitlines() if resource in line and field in line), None)


@pytest.mark.conformance(id="PROD-RES-INVALID-REJECTED", profile="producer", level="core", feature="resources",
                         spec=INVALID_SPEC,
                         statements=["RG-WEIGHTED-CAPACITY-RANGE"])
@pytest.mark.parametrize("violation", sorted(INVALID))
def test_invalid_provider_is_rejected_and_the_rest_keep_working(scenario: Scenario, violation: str) -> None:
    """A provider that breaks its CRD schema is left out with a logged reason; valid providers still render.

    Then the same provider is corrected to its twin (a weight at the nearest end of 1..1000, the endpoint
    restored), which must render. Fails if the operator renders the invalid provider (e.g. clamps the weight,
    or bounds it one too high), stops rendering the network because of it, rejects it silently, or refuses
    the valid twin (e.g. bounds the weight one too low).
    """
    case = INVALID[violation]
    field = case.field
    bad = scenario.name("bad")
    obj = resources.inference_provider(bad, scenario.net, site=scenario.local, cluster="bad", models=(scenario.model,))
    case.breaks(obj["spec"])
    path = scenario.control.apply_raw(f"inferenceprovider-{bad}.yaml", yaml.safe_dump(obj, sort_keys=False))
    try:
        scenario.provider("p1")
        scenario.provider("p2")
        scenario.network(selection="deterministic")
        envelope = scenario.envelope(_has(["p1", "p2"]), what="the valid providers p1, p2")
        _contract_ok(scenario, envelope)

        def probe() -> str | None:
            line = _rejection_line(scenario.control.log_text(), bad, field)
            if line is None:
                scenario.control.force_reconcile(scenario.net)
            return line

        poll_until(probe, lambda line: line is not None, timeout=timeouts().report, interval=0.2, max_interval=1.0,
                   what=f"an operator log line naming {bad} and {field}")
        envelope = scenario.reconcile()
        assert _clusters(envelope) == ["p1", "p2"], f"after the rejection: {_clusters(envelope)}"
        scenario.provider("bad", **case.twin)
        fixed = scenario.envelope(_has(["bad", "p1", "p2"]), what=f"the valid twin {case.twin or 'with an endpoint'}",
                                  force=True)
        _contract_ok(scenario, fixed)
    finally:
        scenario.control.delete_file(path)


MALFORMED_INTERVAL = (f"{ARCH}#what-causes-a-reconcile: \"The controller also fails reconciliation if malformed data "
                      "reaches it outside the Kubernetes admission path.\"; what happens during re-ranking: \"If "
                      "rendering or applying a new overlay fails, AGN retains the previously distributed revision "
                      "rather than publishing a partial routing state.\"")


@pytest.mark.conformance(id="PROD-RECONCILE-MALFORMED-INTERVAL", profile="producer", level="core",
                         feature="resources", spec=MALFORMED_INTERVAL,
                         statements=["OC-RECONCILE-INTERVAL-CONTROLLER-FAILS",
                                     "OC-RERANKING-FAILURE-RETAINS-DISTRIBUTED"])
@pytest.mark.parametrize("interval", ["0s", "500ms"])
def test_malformed_refresh_interval_fails_and_keeps_the_distributed_revision(
        scenario: Scenario, request: pytest.FixtureRequest, interval: str) -> None:
    """Revision A (deterministic) is distributed; then the GridNetwork arrives, written past the schema,
    with metricsRefreshInterval below one second and a routing change (roundRobin). Once the operator has
    said why it fails (its log names the network and metricsRefreshInterval, or its status the field), the
    ConfigMap still holds A byte for byte and the status still names A distributed. The twin, the same
    change with 1s, is published.

    Fails if the controller falls back to a default interval (or reconciles continuously) and publishes
    the change, or publishes anything other than A meanwhile.
    """
    if request.config.getoption("--grid-backend") != "local":
        pytest.skip("only the local backend delivers a resource outside the Kubernetes admission path")
    scenario.provider("p1")
    scenario.provider("p2")
    scenario.network(selection="deterministic")
    first = scenario.settled(scenario.envelope(_has(["p1", "p2"]), what="revision A"))
    path = scenario.control.configmap_path(scenario.net)
    served = path.read_bytes()
    local = scenario.local
    malformed = resources.grid_network(scenario.net, [resources.gateway_ref(local)], selection="roundRobin",
                                       refresh=interval)

    def write_malformed() -> tuple[bool, bool]:
        """(the operator said why it failed, in its log or the status; the ConfigMap changed)"""
        malformed["metadata"].setdefault("annotations", {})[FORCE_REFRESH] = secrets.token_hex(8)
        scenario.control.apply_raw(f"gridnetwork-{scenario.net}.yaml", yaml.safe_dump(malformed, sort_keys=False))
        said = (_rejection_line(scenario.control.log_text(), scenario.net, "metricsRefreshInterval") is not None
                or "metricsRefreshInterval" in json.dumps(scenario.control.status(scenario.net)))
        return said, path.read_bytes() != served

    poll_until(write_malformed, any, timeout=timeouts().report, interval=0.3, max_interval=1.0,
               what=f"the operator to name metricsRefreshInterval {interval!r} (log line with {scenario.net}, or "
                    "its status) or to rewrite the ConfigMap")
    scenario.control.check_running()
    assert path.read_bytes() == served, (
        f"the ConfigMap changed although metricsRefreshInterval {interval!r} must fail the reconciliation")
    entry = scenario.control.status_entry(scenario.net)
    assert entry.get("distributedRevision") == _revision(first), f"the distributed revision must stay A: {entry}"
    scenario.network(selection="roundRobin", refresh="1s")
    fixed = scenario.envelope(lambda env: env["overlay"].get("selection_policy") == {"mode": "roundRobin"},
                              what="the same change with metricsRefreshInterval 1s", force=True)
    _contract_ok(scenario, fixed)


APPLY_FAILURE = (f"{ARCH}#revision-lifecycle: \"If AGN renders revision B but cannot apply it, status can report "
                 "rendered B while retaining distributed A and its resourceVersion.\"")


@pytest.mark.conformance(id="PROD-STATUS-APPLY-FAILURE", profile="producer", level="core", feature="status",
                         spec=APPLY_FAILURE, statements=["OC-LIFECYCLE-APPLY-FAILURE-RETAINS"])
def test_failed_apply_keeps_the_distributed_revision(scenario: Scenario, request: pytest.FixtureRequest) -> None:
    """Revision A is distributed; a non-empty directory then stands where the ConfigMap is written, and a
    second provider makes revision B. After two forced reconciles the status still names A distributed
    (rendered may be A or B). The twin: with the obstacle gone, B is distributed and the ConfigMap holds it.
    Fails if the status reports a revision distributed before (or whether or not) it was applied.
    """
    if request.config.getoption("--grid-backend") != "local":
        pytest.skip("the obstacle is a directory in the local backend's output directory")
    scenario.provider("p1")
    scenario.network()
    first = scenario.settled(scenario.envelope(_has(["p1"]), what="revision A"))
    path = scenario.control.configmap_path(scenario.net)
    path.unlink()
    path.mkdir()
    (path / "obstacle").write_text("the ConfigMap cannot be written here\n")
    try:
        scenario.provider("p2")
        for _ in range(2):
            scenario.control.reconcile(scenario.net)
            entry = scenario.control.status_entry(scenario.net)
            assert entry.get("distributedRevision") == _revision(first), (
                f"the ConfigMap could not be written, so A must stay the distributed revision: {entry}")
        assert entry.get("renderedRevision") is not None, entry
    finally:
        shutil.rmtree(path)
    fixed = scenario.envelope(_has(["p1", "p2"]), what="revision B once the ConfigMap can be written", force=True)
    revision = _revision(fixed)
    scenario.control.wait_status(scenario.net, lambda e: e.get("distributedRevision") == revision,
                                 what=f"distributed revision {revision[:12]}")


# ---------------------------------------------------------------------------------------- credentials


@pytest.mark.conformance(id="PROD-CRED-REFERENCE", profile="producer", level="core", feature="credentials",
                         spec=f"{ARCH}#credential-field-security-contract",
                         statements=["OC-CREDENTIAL-FIELD-ONLY", "OC-CREDENTIAL-STRATEGY-BEARER",
                                     "OC-CREDENTIAL-SECRETREF-FIELDS", "OC-INJECT-REFERENCE-NOT-TOKEN"])
def test_candidate_carries_only_the_secret_reference(scenario: Scenario) -> None:
    """A provider's auth becomes {strategy, secretRef{name, namespace, key}} on its candidate and nothing else.

    Fails if the operator drops the credential, adds fields (such as the value), or puts one on providers
    without auth.
    """
    secret = scenario.name("creds")
    scenario.apply(resources.secret(secret, NAMESPACE, {"token": "ref-only-" + secrets.token_hex(8)}))
    scenario.provider("p1", credential={"name": secret, "namespace": NAMESPACE, "key": "token"})
    scenario.provider("p2")
    scenario.network()
    envelope = scenario.envelope(_has(["p1", "p2"]), what="candidates p1, p2")
    _contract_ok(scenario, envelope)
    assert _candidate(envelope, "p1").get("credential") == {
        "strategy": "bearer_token", "secretRef": {"name": secret, "namespace": NAMESPACE, "key": "token"}}
    assert "credential" not in _candidate(envelope, "p2"), _candidate(envelope, "p2")


API_FALLBACK = (f"{ARCH}#api-provider-fallback: \"API-provider fallback uses the same overlay mechanism as "
                "self-hosted routing\"; \"An InferenceProvider declares backendKind: api_provider.\"; \"The "
                "operator includes the API provider as a candidate when it is available.\"")


@pytest.mark.conformance(id="PROD-API-PROVIDER-CANDIDATE", profile="producer", level="core", feature="credentials",
                         spec=API_FALLBACK,
                         statements=["OC-API-SAME-MECHANISM", "OC-API-BACKEND-KIND", "OC-API-INCLUDED-WHEN-AVAILABLE"])
def test_api_provider_is_a_candidate_while_available(scenario: Scenario) -> None:
    """A backendKind: api_provider provider with a bearer token, beside a self-hosted one for the same model:
    while Available both are candidates of one contract-valid envelope, the API one carrying its credential
    reference; Unavailable, only the self-hosted one is; Available again, the API provider is back.

    The order of the two is not asserted (the spec says scoring "normally" puts self-hosted first). Fails
    if the operator refuses or ignores the backend kind, renders API providers somewhere else than the
    overlay, or keeps an unavailable API provider as a candidate.
    """
    secret = scenario.name("api-creds")
    scenario.apply(resources.secret(secret, NAMESPACE, {"token": "api-" + secrets.token_hex(8)}))
    reference = {"name": secret, "namespace": NAMESPACE, "key": "token"}

    def api_provider(phase: str) -> None:
        scenario.provider("api", backendKind="api_provider", providerKind="open_ai",
                          endpoint="https://api-provider.invalid", credential=reference, phase=phase)

    scenario.provider("p1", phase="Available")
    api_provider("Available")
    scenario.network()
    both = scenario.envelope(lambda env: sorted(_clusters(env)) == ["api", "p1"], what="candidates api and p1")
    _contract_ok(scenario, both)
    api = _candidate(both, "api")
    assert api.get("kind") == "inference_model" and api.get("name") == scenario.model, api
    assert api.get("credential") == {"strategy": "bearer_token", "secretRef": reference}, api
    api_provider("Unavailable")
    scenario.envelope(_has(["p1"]), what="p1 only, once the API provider is Unavailable", force=True)
    api_provider("Available")
    scenario.envelope(lambda env: sorted(_clusters(env)) == ["api", "p1"],
                      what="the API provider back once it is Available again", force=True)


def _written_texts(scenario: Scenario) -> dict[str, str]:
    """Everything the operator has written: every output (ConfigMaps, status), and its log."""
    return scenario.control.written_texts()


@pytest.mark.conformance(id="PROD-CRED-NO-TOKEN", profile="producer", level="core", feature="credentials",
                         spec=f"{ARCH}#credential-field-security-contract",
                         statements=["OC-CREDENTIAL-TOKEN-NEVER-IN-CONFIGMAP", "OC-TOKEN-NOT-IN-OVERLAY",
                                     "IR-SCOPE-NO-CREDENTIAL-VALUES", "OC-INJECT-REFERENCE-NOT-TOKEN"])
def test_token_value_is_never_written(scenario: Scenario) -> None:
    """The token in the referenced Secret appears nowhere the operator writes, while the reference does.

    Fails if the operator resolves the Secret into the overlay, status or its log (e.g. logging the
    resolved auth block).
    """
    token = "tok-" + secrets.token_urlsafe(24)
    secret = scenario.name("creds")
    scenario.apply(resources.secret(secret, NAMESPACE, {"token": token}))
    scenario.provider("p1", credential={"name": secret, "namespace": NAMESPACE, "key": "token"})
    scenario.network()
    envelope = scenario.envelope(_has(["p1"]), what="candidate p1")
    scenario.reconcile()
    reference = (_candidate(envelope, "p1").get("credential") or {}).get("secretRef")
    assert reference == {"name": secret, "namespace": NAMESPACE, "key": "token"}, reference
    configmap_text = scenario.control.configmap_path(scenario.net).read_text(encoding="utf-8")
    assert secret in configmap_text
    texts = _written_texts(scenario)
    assert any(name.endswith(".status.yaml") for name in texts), sorted(texts)
    leaks = oracle.token_leaks(token, {"ConfigMap": configmap_text, **texts})
    assert not leaks, f"the token value leaked into: {leaks}"


@pytest.mark.conformance(id="PROD-CRED-ROTATION-KEEPS-REVISION", profile="producer", level="core",
                         feature="credentials", spec=f"{ARCH}#revision-semantics",
                         statements=["OC-REVISION-IDEMPOTENT"])
def test_rotating_the_token_keeps_the_revision(scenario: Scenario) -> None:
    """The revision covers the reference, not the value: rotating the Secret's token leaves it unchanged.

    Fails if the operator folds the resolved token (or a hash of it) into the candidate or its digest.
    """
    secret = scenario.name("creds")
    scenario.apply(resources.secret(secret, NAMESPACE, {"token": "old-" + secrets.token_hex(12)}))
    scenario.provider("p1", credential={"name": secret, "namespace": NAMESPACE, "key": "token"})
    scenario.network()
    first = scenario.envelope(_has(["p1"]), what="candidate p1")
    scenario.apply(resources.secret(secret, NAMESPACE, {"token": "new-" + secrets.token_hex(12)}))
    for _ in range(2):
        envelope = scenario.reconcile()
        assert _revision(envelope) == _revision(first), "rotating the token value changed the revision"
        assert envelope["overlay"] == first["overlay"]


# -------------------------------------------------------------------------------------------- weights


@pytest.mark.conformance(id="PROD-WEIGHT-STATIC", profile="producer", level="core", feature="weights",
                         spec=f"{GUIDE}#5-weighted-random-selection",
                         statements=["RG-WEIGHTED-CAPACITY-DEFAULT", "RG-WEIGHTED-COPIED-UNNORMALIZED",
                                     "RG-WEIGHTED-NOT-FROM-SCORE", "OC-FORMAT-TRAFFIC-WEIGHT-FROM-CAPACITY",
                                     "OC-FORMAT-CANDIDATE-FIELDS", "RG-SCORES-NOT-WEIGHTS"])
def test_static_weights_are_copied(scenario: Scenario) -> None:
    """Static placement + weightedRandom copies capacityWeight to traffic_weight as is; omitted means 1.

    Fails if the operator normalizes weights (percentages), derives them from scores, or omits the default.
    """
    scenario.set_metrics("pa", queueDepth=8, healthy=1)
    scenario.set_metrics("pb", queueDepth=0, healthy=1)
    scenario.provider("pa", capacity_weight=50, metrics=True)
    scenario.provider("pb", capacity_weight=30, metrics=True)
    scenario.provider("pc")
    scenario.network(routing="scoreFirst", scoring="queueDepth", selection="weightedRandom", static_placement=True)
    envelope = scenario.envelope(lambda env: len(oracle.candidates(env)) == 3, what="three candidates")
    _contract_ok(scenario, envelope)
    weights = {cluster: c.get("traffic_weight") for cluster, c in oracle.by_cluster(envelope).items()}
    assert weights == {"pa": 50, "pb": 30, "pc": 1}, weights
    assert envelope["overlay"].get("selection_policy") == {"mode": "weightedRandom"}


@pytest.mark.conformance(id="PROD-WEIGHT-ABSENT-WITHOUT-STATIC", profile="producer", level="core", feature="weights",
                         spec=f"{ARCH}#routing-overlay-format",
                         statements=[])
@pytest.mark.parametrize(("selection", "static"), [("roundRobin", False), ("roundRobin", True), ("deterministic", True),
                                                  (None, True)],
                         ids=["roundRobin-dynamic", "roundRobin-static", "deterministic-static", "omitted-static"])
def test_no_weights_outside_weighted_random(scenario: Scenario, selection: str | None, static: bool) -> None:
    """traffic_weight comes only from static placement + weightedRandom; consumers reject it under other modes.

    Fails if the operator emits traffic_weight whenever placement is static or a capacityWeight is set.
    """
    scenario.provider("p1", capacity_weight=50)
    scenario.provider("p2", capacity_weight=30)
    scenario.network(selection=selection, static_placement=static)
    envelope = scenario.envelope(_has(["p1", "p2"]), what="candidates p1, p2")
    _contract_ok(scenario, envelope)
    weighted = [c["cluster"] for c in oracle.candidates(envelope) if "traffic_weight" in c]
    assert not weighted, f"traffic_weight without static weightedRandom on {weighted}"


WEIGHTED_NEEDS_STATIC = (f"{GUIDE}#11-common-routing-profiles: \"Weighted mode requires static placement and "
                         "provider capacityWeight\"; {ARCH}#routing-overlay-format: \"AGN emits it from configured "
                         "provider capacity when static weighted placement is enabled.\"")


@pytest.mark.conformance(id="PROD-WEIGHT-WEIGHTED-NEEDS-STATIC", profile="producer", level="core", feature="weights",
                         spec=WEIGHTED_NEEDS_STATIC, statements=["RG-PROFILES-WEIGHTED-REQUIRES-STATIC"])
def test_weighted_random_without_static_placement_publishes_no_weights(scenario: Scenario) -> None:
    """weightedRandom without static placement, providers with capacityWeight 50 and 30: after three forced
    reconciles, whatever the operator published for the network (it may publish nothing, refusing the
    combination) is contract-valid and carries no traffic_weight. The twin, the same network with static
    placement, publishes 50 and 30.

    The spec does not say how the operator answers the combination, so neither a refusal nor an overlay
    without weights is required. Fails if the operator copies capacityWeight to traffic_weight under
    dynamic placement, or publishes a weightedRandom list without weights, which every consumer rejects.
    """
    scenario.provider("p1", capacity_weight=50)
    scenario.provider("p2", capacity_weight=30)
    scenario.network(selection="weightedRandom", static_placement=False)
    published = None
    for _ in range(3):
        published = scenario.control.reconcile(scenario.net) or published
    if published is not None:
        _contract_ok(scenario, published)
        weighted = {c["cluster"]: c["traffic_weight"] for c in oracle.candidates(published) if "traffic_weight" in c}
        assert not weighted, f"traffic_weight without static placement: {weighted}"
    scenario.network(selection="weightedRandom", static_placement=True)
    envelope = scenario.envelope(lambda env: {c["cluster"]: c.get("traffic_weight") for c in oracle.candidates(env)}
                                 == {"p1": 50, "p2": 30}, what="weights 50 and 30 once placement is static",
                                 force=True)
    _contract_ok(scenario, envelope)


@pytest.mark.conformance(id="PROD-WEIGHT-RANGE-ENDS", profile="producer", level="core", feature="weights",
                         spec=f"{GUIDE}#5-weighted-random-selection: \"capacityWeight accepts integers from 1 through "
                              "1000 and defaults to 1 when omitted. AGN copies it directly to the overlay's relative "
                              "traffic_weight; it does not normalize the value or convert it to a percentage.\"",
                         statements=["RG-WEIGHTED-COPIED-UNNORMALIZED", "OC-FORMAT-TRAFFIC-WEIGHT-FROM-CAPACITY"])
def test_weights_at_both_ends_of_the_range_are_copied(scenario: Scenario) -> None:
    """capacityWeight 1 and 1000, the ends of the accepted range, are published verbatim as traffic_weight.

    (1001 is refused: PROD-RES-INVALID-REJECTED[capacity-weight-1001], with 1000 as its twin.) Fails if the
    operator refuses either end (a bound off by one), clamps or normalizes them (1000 out of a total of 1001
    is not a percentage), or publishes a default instead.
    """
    scenario.provider("lo", capacity_weight=1)
    scenario.provider("hi", capacity_weight=1000)
    scenario.network(routing="scoreFirst", selection="weightedRandom", static_placement=True)
    envelope = scenario.envelope(lambda env: len(oracle.candidates(env)) == 2, what="both providers")
    _contract_ok(scenario, envelope)
    weights = {cluster: c.get("traffic_weight") for cluster, c in oracle.by_cluster(envelope).items()}
    assert weights == {"lo": 1, "hi": 1000}, weights
    assert all(type(weight) is int for weight in weights.values()), weights
