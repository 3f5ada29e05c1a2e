"""The whole core: candidates, envelope, ConfigMap, revision stability."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from operator_support import NETWORK, network, provider, queue_provider, render_one, rows, site

from reference.operator.core import FixedClock, MetricSample, RemoteProviderRecord, ResourceError, Resources, render
from reference.operator.core.configmap import (
    ANNOTATION_CONTENT_DIGEST,
    ANNOTATION_REVISION,
    ANNOTATION_SCHEMA_VERSION,
    ENVELOPE_KEY,
    LEGACY_KEY,
    configmap_name,
    needs_write,
)
from reference.operator.core.ids import fnv1a_hex8, stable_id
from reference.overlay import canonical_digest, parse_overlay

SECRET_VALUE = "sk-live-do-not-leak"


def test_envelope_validates_and_carries_scope_and_provenance() -> None:
    envelope = render_one([network(), provider("p1")])
    parsed = parse_overlay(json.dumps(envelope).encode(), expected_scope=envelope["scope"])
    assert parsed.revision == envelope["revision"]["value"] == canonical_digest(envelope["overlay"])
    assert envelope["scope"] == {
        "network": NETWORK,
        "gateway": "gw-1",
        "namespace": "praxis-system",
        "local_site": "site-a",
    }
    assert envelope["provenance"]["source_generation"] == 3
    assert envelope["provenance"]["rendered_at"] == "2026-01-01T00:00:00Z"
    assert rows(envelope, "name", "site", "cluster", "rank", "selection_group", "admission_state") == [
        ("m", "site-a", "p1", 0, 0, "new_and_existing")
    ]


def test_re_render_of_identical_state_keeps_the_revision() -> None:
    objects = [network(), provider("p1"), provider("p2")]
    first = render(Resources.from_objects(objects), clock=FixedClock())[0]
    later = FixedClock(seconds=500, wall_time=datetime(2027, 5, 5, tzinfo=UTC))
    second = render(Resources.from_objects(list(reversed(objects))), clock=later)[0]
    assert first.revision == second.revision
    assert first.envelope["provenance"]["rendered_at"] != second.envelope["provenance"]["rendered_at"]
    assert not needs_write(first.configmap, second.configmap)


def test_routing_changes_change_the_revision() -> None:
    base = render_one([network(), provider("p1")])["revision"]["value"]
    degraded = render_one([network(), provider("p1", status={"phase": "Degraded"})])["revision"]["value"]
    renamed = render_one([network(), provider("p1", routingClusterRef="other")])["revision"]["value"]
    assert len({base, degraded, renamed}) == 3


def test_queue_depth_reranks_when_metrics_change() -> None:
    objects = [
        network(routingPolicy="scoreFirst", scoringPolicy={"strategy": "queueDepth"}),
        queue_provider("p1"),
        queue_provider("p2"),
    ]
    calm_p1 = [MetricSample("p1", 1, queue_depth=1), MetricSample("p2", 1, queue_depth=5)]
    calm_p2 = [MetricSample("p1", 2, queue_depth=6), MetricSample("p2", 2, queue_depth=2)]
    first = render_one(objects, calm_p1)
    second = render_one(objects, calm_p2)
    assert rows(first, "cluster", "selection_group") == [("p1", 0), ("p2", 0)]
    assert rows(second, "cluster", "selection_group") == [("p2", 0), ("p1", 0)]
    assert first["revision"] != second["revision"]


def test_missing_metrics_score_neutral_between_measured_providers() -> None:
    objects = [
        network(routingPolicy="scoreFirst", scoringPolicy={"strategy": "queueDepth"}),
        queue_provider("busy"),
        queue_provider("blind"),
        queue_provider("calm"),
    ]
    samples = [
        MetricSample("busy", 1, queue_depth=8),
        MetricSample("calm", 1, queue_depth=2),
        MetricSample("blind", 1, queue_depth=float("nan")),
    ]
    assert [r[0] for r in rows(render_one(objects, samples), "cluster")] == ["calm", "blind", "busy"]


def test_unhealthy_sample_excludes_the_provider() -> None:
    objects = [network(), provider("p1"), provider("p2")]
    envelope = render_one(objects, [MetricSample("p1", 1, healthy=False)])
    assert rows(envelope, "cluster") == [("p2",)]


def test_weights_copied_only_for_static_weighted_placement() -> None:
    weighted = network(selectionPolicy={"mode": "weightedRandom"}, placementPolicy={"strategy": "static"})
    objects = [provider("p1", capacityWeight=50), provider("p2", capacityWeight=30), provider("p3")]
    envelope = render_one([weighted, *objects])
    assert envelope["overlay"]["selection_policy"] == {"mode": "weightedRandom"}
    assert sorted(rows(envelope, "cluster", "traffic_weight")) == [("p1", 50), ("p2", 30), ("p3", 1)]
    plain = render_one([network(selectionPolicy={"mode": "roundRobin"}), *objects])
    assert all("traffic_weight" not in c for c in plain["overlay"]["candidates"])
    assert "selection_policy" not in render_one([network(), *objects])["overlay"]


def test_dynamic_placement_weighs_capacity_by_the_pressure_left() -> None:
    """placementPolicy dynamic (experimental): traffic_weight = capacityWeight * (1 - normalised pressure) of the
    scoring strategy's signal, at least 1; no sample means no pressure, a sample at capacity leaves weight 1."""
    dynamic = network(routingPolicy="scoreFirst", scoringPolicy={"strategy": "queueDepth"},
                      selectionPolicy={"mode": "weightedRandom"}, placementPolicy={"strategy": "dynamic"})
    objects = [queue_provider(name, capacityWeight=weight)
               for name, weight in (("half", 100), ("idle", 100), ("quarter", 40), ("blind", 60), ("full", 80))]
    samples = [MetricSample("half", 1, queue_depth=5), MetricSample("idle", 1, queue_depth=0),
               MetricSample("quarter", 1, queue_depth=2.5), MetricSample("full", 1, queue_depth=10)]
    weights = dict(rows(render_one([dynamic, *objects], samples), "cluster", "traffic_weight"))
    assert weights == {"half": 50, "idle": 100, "quarter": 30, "blind": 60, "full": 1}
    static = network(routingPolicy="scoreFirst", scoringPolicy={"strategy": "queueDepth"},
                     selectionPolicy={"mode": "weightedRandom"}, placementPolicy={"strategy": "static"})
    copied = dict(rows(render_one([static, *objects], samples), "cluster", "traffic_weight"))
    assert copied == {"half": 100, "idle": 100, "quarter": 40, "blind": 60, "full": 80}, "static copies"


def test_credentials_are_references_only() -> None:
    auth = {
        "strategy": "bearer_token",
        "secretRef": {"name": "tok", "namespace": "grid-system", "key": "token"},
        "token": SECRET_VALUE,
    }
    out = render(Resources.from_objects([network(), provider("p1", auth=auth)]), clock=FixedClock())[0]
    credential = out.envelope["overlay"]["candidates"][0]["credential"]
    assert credential == {
        "strategy": "bearer_token",
        "secretRef": {"name": "tok", "namespace": "grid-system", "key": "token"},
    }
    assert SECRET_VALUE not in json.dumps(out.configmap)


def test_stable_id_is_identity_derived() -> None:
    envelope = render_one([network(), provider("p1")])
    candidate = envelope["overlay"]["candidates"][0]
    assert candidate["stable_id"] == stable_id("inference_model", "m", "site-a", "p1")
    assert fnv1a_hex8("") == "811c9dc5" and fnv1a_hex8("a") == "e40c292c"


def tool(name: str, tools: list[str], discovered: list[str], **spec: object) -> dict[str, object]:
    return {
        "kind": "AgentToolProvider",
        "metadata": {"name": name},
        "spec": {"gridNetworkRef": NETWORK, "tools": tools, **spec},
        "status": {"discoveredTools": [{"name": t} for t in discovered]},
    }


def test_tool_candidates_follow_the_allowlist() -> None:
    allow = render_one([network(), tool("t1", ["search", "absent"], ["search", "delete"])])
    assert rows(allow, "kind", "name", "cluster") == [("mcp_tool", "search", "t1")]
    everything = render_one([network(), tool("t1", [], ["delete", "search"])])
    assert sorted(r[0] for r in rows(everything, "name")) == ["delete", "search"]
    assert rows(render_one([network(), tool("t1", ["search"], [])]), "name") == []


def test_access_policy_fails_closed_when_the_consumer_site_is_unknown() -> None:
    gated = {"siteSelector": {"matchLabels": {"tier": "gold"}}}
    objects = [
        network(),
        provider("open"),
        provider("gated", accessPolicy=gated),
        tool("t1", [], ["search"], accessPolicy=gated),
    ]
    assert rows(render_one(objects), "cluster") == [("open",)]
    known = render_one([*objects, site("site-a", labels={"tier": "gold"})])
    assert sorted(rows(known, "cluster")) == [("gated",), ("open",), ("t1",)]
    wrong = render_one([*objects, site("site-a", labels={"tier": "silver"})])
    assert rows(wrong, "cluster") == [("open",)]


def remote(site_name: str, **kw: object) -> RemoteProviderRecord:
    fields: dict[str, object] = {
        "network": NETWORK,
        "site": site_name,
        "name": "r",
        "cluster": f"gw-{site_name}",
        "models": ("m",),
    }
    fields.update(kw)
    return RemoteProviderRecord(**fields)  # type: ignore[arg-type]


def test_remote_records_gated_by_network_site_phase_and_ttl() -> None:
    objects = [
        network(staleCandidateTtlSeconds=60),
        provider("local"),
        site("site-a", "us", "z1"),
        site("west", "eu"),
        site("pending", "eu", phase="Pending"),
        site("old", "eu"),
    ]
    records = [
        remote("west"),
        remote("pending"),
        remote("west", network="other", cluster="x"),
        remote("site-a", cluster="echo"),
        remote("old", phase="Degraded", age_secs=61),
        remote("west", cluster="gw-west-2", phase="Degraded", age_secs=0),
        remote("west", cluster="gw-west-3", phase="Unavailable"),
    ]
    envelope = render_one(objects, records=records)
    assert rows(envelope, "cluster", "fresh", "selection_tier", "selection_group") == [
        ("local", True, "same_site", 0),
        ("gw-west", True, "cross_region", 1),
        ("gw-west-2", False, "cross_region", 2),
    ]


@pytest.mark.parametrize("policy", ["geographyFirst", "scoreFirst"])
def test_healthy_remote_beats_overloaded_local_region_end_to_end(policy: str) -> None:
    objects = [
        network(routingPolicy=policy, scoringPolicy={"strategy": "queueDepth"}),
        queue_provider("near", siteSelector={"matchLabels": {"role": "near"}}),
        site("site-a", "us", "z1"),
        site("near-site", "us", "z2", labels={"role": "near"}),
        site("far", "eu"),
    ]
    envelope = render_one(objects, [MetricSample("near", 1, queue_depth=9.5)], records=[remote("far", queue_depth=0.1)])
    assert rows(envelope, "site", "admission_state", "selection_tier") == [
        ("far", "new_and_existing", "cross_region"),
        ("near-site", "existing_only", "same_region"),
    ]


def test_configmap_object() -> None:
    out = render(Resources.from_objects([network(), provider("p1")]), clock=FixedClock())[0]
    configmap = out.configmap
    assert configmap["metadata"]["name"] == f"grid-overlay-{NETWORK}-gw-1"
    assert configmap["metadata"]["namespace"] == "praxis-system"
    assert configmap["metadata"]["annotations"] == {
        ANNOTATION_SCHEMA_VERSION: "1.0.0",
        ANNOTATION_REVISION: out.revision,
        ANNOTATION_CONTENT_DIGEST: out.revision,
    }
    assert configmap["metadata"]["labels"]["grid.praxis.fast/gateway"] == "gw-1"
    assert parse_overlay(configmap["data"][ENVELOPE_KEY].encode()).revision == out.revision
    legacy = parse_overlay(configmap["data"][LEGACY_KEY].encode())
    assert legacy.format == "legacy" and len(legacy.candidates) == 1


def test_configmap_name_rule_over_63_characters() -> None:
    assert configmap_name("net", "gw") == "grid-overlay-net-gw"
    exact = "n" * (63 - len("grid-overlay--gw"))
    assert configmap_name(exact, "gw") == f"grid-overlay-{exact}-gw"
    long_net, long_gw = "network-" * 6, "gateway-" * 6
    name = configmap_name(long_net, long_gw)
    assert name == f"grid-overlay-{long_net[:20]}-{long_gw[:20]}-{fnv1a_hex8(f'{long_net}/{long_gw}')}"
    assert len(name) <= 63
    assert configmap_name(long_net, long_gw + "x") != name


def test_bad_resources_name_the_key() -> None:
    with pytest.raises(ResourceError, match="spec.routingPolicy"):
        Resources.from_objects([network(routingPolicy="nearest")])
    with pytest.raises(ResourceError, match="spec.capacityWeight"):
        Resources.from_objects([provider("p", capacityWeight=0)])
    with pytest.raises(ResourceError, match="spec.scoringPolicy.strategy"):
        Resources.from_objects([network(scoringPolicy={})])
