"""Provider-hop headers: client copies never survive; hop clusters get values from the serving snapshot,
over mTLS with the gateway's client certificate."""

from __future__ import annotations

import uuid

import pytest

from harness.gateway_config import SESSION_HEADER
from harness.grid import CANDIDATE_HEADER, REQUEST_ID_HEADER, REVISION_HEADER, Gateway, Site

SPEC = "intelligent-route-filter: provider_hop_clusters; overlay contract: provider hop revision"
MTLS_SPEC = ("intelligent-route-filter: Metadata; These AI-owned, non-reserved headers are sent only to an "
             "mTLS-authenticated provider gateway")
SPOOFED = {
    "x-ai-routing-candidate": "spoofed-candidate",
    "x-ai-routing-request-id": "spoofed-request-id",
    "x-ai-routing-revision": "f" * 64,
}


@pytest.mark.conformance(id="CONS-HOP-SET-FROM-SNAPSHOT", profile="consumer", level="core", feature="hopHeaders",
                         spec=SPEC,
                         statements=["IR-METADATA-HOP-HEADERS-REPLACED", "OC-LIFECYCLE-HOP-REVISION-SET",
                                     "OC-FORWARD-EDGE-RECONSTRUCTS"])
def test_hop_headers_replaced_from_serving_snapshot(gw: Gateway, site: Site, model: str) -> None:
    revision = gw.publish(site.envelope([site.candidate("provider-a", model, stable_id="cand-a-0001")]), model)
    reply = gw.request(model, headers=SPOOFED)
    seen = reply.forwarded_headers
    assert reply.status == 200, reply.describe()
    assert seen.get("x-ai-routing-candidate") == "cand-a-0001", seen
    assert seen.get("x-ai-routing-revision") == revision, seen
    request_id = seen.get("x-ai-routing-request-id", "")
    assert request_id and request_id != SPOOFED["x-ai-routing-request-id"], seen


@pytest.mark.conformance(id="CONS-HOP-MTLS", profile="consumer", level="core", feature="hopHeaders",
                         spec=MTLS_SPEC,
                         statements=["IR-METADATA-HOP-HEADERS-MTLS-ONLY", "OC-MULTI-REMOTE-MTLS",
                                     "IR-SCOPE-RELOAD-NO-CLUSTER-CHANGES", "PS-BOUNDARY-PRAXIS-DURING-REQUEST"])
def test_hop_clusters_are_reached_over_mtls_with_the_client_certificate(gw: Gateway, site: Site, model: str) -> None:
    client = gw.hop_client
    assert client is not None, "the harness gave the gateway no client certificate for its hop clusters"
    models = {p.name: f"{model}-{i}" for i, p in enumerate(site.spec.model_providers)}
    probe = model + "-probe"  # served by the plain management cluster: tells when the overlay serves
    doc = site.envelope([site.candidate(name, m) for name, m in models.items()] + [site.candidate("mgmt", probe)])
    gw.write_overlay(doc)
    gw.wait_status(probe, 200)
    revision = doc["revision"]["value"]
    for name, hop_model in models.items():
        reply = gw.request(hop_model)
        assert reply.status == 200 and reply.backend == name, (
            f"hop cluster {name} listens for mTLS only and needs the gateway's client certificate: "
            f"{reply.describe()}")
        peer = reply.peer
        assert peer is not None, f"{name} saw no verified client certificate: the hop did not use mTLS"
        assert peer.get("cert_digest") == client.digest, (
            f"{name} saw client certificate {peer.get('cert_digest')}, not the configured {client.digest}")
        assert peer.get("organization") == client.organization, peer
        seen = reply.forwarded_headers
        assert seen.get("x-ai-routing-revision") == revision, seen


@pytest.mark.conformance(id="CONS-HOP-DEFAULT-STABLE-ID", profile="consumer", level="core", feature="hopHeaders",
                         spec=SPEC + "; a candidate without stable_id is named kind/name/site/cluster",
                         statements=["IR-METADATA-HOP-HEADERS-REPLACED"])
def test_hop_candidate_defaults_to_identity(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-b", model)]), model)
    seen = gw.request(model).forwarded_headers
    assert seen.get("x-ai-routing-candidate") == f"inference_model/{model}/site-a/provider-b", seen


@pytest.mark.conformance(id="CONS-HOP-REQUEST-ID-FRESH", profile="consumer", level="core", feature="hopHeaders",
                         spec=SPEC + "; a generated provider-hop request id per request",
                         statements=["IR-METADATA-HOP-HEADERS-REPLACED", "OC-FORWARD-EDGE-RECONSTRUCTS"])
def test_hop_request_ids_are_fresh(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    ids = [gw.request(model, headers=SPOOFED).forwarded_headers.get("x-ai-routing-request-id") for _ in range(30)]
    assert None not in ids and len(set(ids)) == len(ids), f"request ids must be unique: {ids}"


@pytest.mark.conformance(id="CONS-HOP-STRIPPED-NON-HOP", profile="consumer", level="core", feature="hopHeaders",
                         spec=SPEC + "; client-supplied routing context never survives",
                         statements=["IR-METADATA-HOP-HEADERS-MTLS-ONLY", "OC-FORWARD-EDGE-RECONSTRUCTS"])
def test_non_hop_cluster_gets_no_routing_headers(gw: Gateway, site: Site, model: str) -> None:
    probe = model + "-probe"
    gw.publish(site.envelope([site.candidate("mgmt", model), site.candidate("provider-a", probe)]), probe)
    reply = gw.request(model, headers=SPOOFED)
    assert reply.status == 200 and reply.backend == "mgmt", reply.describe()
    leaked = {k: v for k, v in reply.forwarded_headers.items() if k.startswith("x-ai-routing-")}
    assert not leaked, f"a non-hop cluster must receive no x-ai-routing-* headers; got {leaked}"


@pytest.mark.conformance(id="CONS-HOP-NO-CREDENTIAL", profile="consumer", level="core", feature="hopHeaders",
                         spec=SPEC + "; no credential reference or value is forwarded",
                         statements=["IR-METADATA-NO-CREDENTIAL-FORWARDED", "OC-CREDENTIAL-ROUTE-NO-K8S-NO-INJECT",
                                     "OC-CREDENTIAL-REQUIRES-INJECT-FILTER"])
def test_credential_reference_is_not_forwarded(gw: Gateway, site: Site, model: str) -> None:
    credential = {"strategy": "bearer_token",
                  "secretRef": {"name": "west-api-token-xyz", "namespace": "grid-secrets", "key": "token"}}
    gw.publish(site.envelope([site.candidate("provider-c", model, credential=credential)]), model)
    reply = gw.request(model)
    assert reply.status == 200, reply.describe()
    flat = " ".join(f"{k}: {v}" for k, v in reply.forwarded_headers.items())
    for secret_part in ("west-api-token-xyz", "grid-secrets"):
        assert secret_part not in flat, f"credential reference leaked upstream: {flat}"
    assert "authorization" not in reply.forwarded_headers


@pytest.mark.conformance(id="CONS-HOP-CONSISTENT-SNAPSHOT", profile="consumer", level="core", feature="hotReload",
                         spec=SPEC + "; the hop revision comes from the same snapshot that selected",
                         statements=["IR-ENVELOPE-HOP-REVISION-SAME-SNAPSHOT", "OC-LIFECYCLE-HOP-REVISION-SET",
                                     "OC-OVERVIEW-SERVES-EXACT-SNAPSHOT", "OC-EDGE-ONE-SNAPSHOT-PER-REQUEST",
                                     "OC-DELIVERY-PRAXIS-VALIDATES-SWAPS", "RG-RELOAD-PRAXIS-SWAPS",
                                     "OC-EDGE-ATOMIC-SWAP", "RG-NEED-HOT-RELOAD"])
def test_revision_and_selection_agree_across_swaps(gw: Gateway, site: Site, model: str) -> None:
    first = site.envelope([site.candidate("provider-a", model)])
    second = site.envelope([site.candidate("provider-b", model)])
    expected = {"provider-a": gw.publish(first, model)}
    gw.write_overlay(second)
    expected["provider-b"] = second["revision"]["value"]
    mismatched = []
    for _ in range(200):
        reply = gw.request(model)
        revision = reply.forwarded_headers.get("x-ai-routing-revision")
        if reply.backend not in expected or revision != expected[reply.backend]:
            mismatched.append((reply.backend, revision))
        if reply.backend == "provider-b" and len(mismatched) == 0 and _ > 20:
            break
    assert not mismatched, f"selection and revision came from different snapshots: {mismatched[:5]}"


REPLACED = ("intelligent-route-filter, Metadata: \"When the selected cluster is present in provider_hop_clusters, "
            "client-supplied x-ai-routing-candidate, x-ai-routing-request-id, and x-ai-routing-revision values are "
            "removed and replaced with the selected stable ID, a generated provider-hop request ID, and the serving "
            "overlay revision (envelope mode only).\"")
SENT_ONLY = ("intelligent-route-filter, Metadata: \"These AI-owned, non-reserved headers are sent only to an "
             "mTLS-authenticated provider gateway\"")
CASE_INSENSITIVE = "RFC 9110 5.1: \"Field names are case-insensitive\""
#: Client copies under other letter cases; httpx (h11) sends header names with the case given here.
MIXED_CASE = {
    "X-AI-Routing-Candidate": "spoofed-candidate-mixed",
    "X-Ai-Routing-Request-Id": "spoofed-request-id-mixed",
    "X-AI-ROUTING-REVISION": "e" * 64,
}


@pytest.mark.conformance(id="CONS-HOP-MIXED-CASE-SPOOF", profile="consumer", level="core", feature="hopHeaders",
                         spec=f"{REPLACED}; {SENT_ONLY}; {CASE_INSENSITIVE}",
                         statements=["IR-METADATA-HOP-HEADERS-REPLACED", "IR-METADATA-HOP-HEADERS-MTLS-ONLY",
                                     "OC-FORWARD-EDGE-RECONSTRUCTS", "OC-LIFECYCLE-HOP-REVISION-SET"])
def test_mixed_case_client_copies_are_replaced(gw: Gateway, site: Site, model: str) -> None:
    plain = model + "-mgmt"
    revision = gw.publish(site.envelope([site.candidate("provider-a", model, stable_id="cand-a-mixed"),
                                         site.candidate("mgmt", plain)]), model)
    spoofed_values = set(SPOOFED.values()) | set(MIXED_CASE.values())
    request_ids: list[str] = []
    for label, spoof in (("mixed case", MIXED_CASE), ("lowercase and mixed case", {**SPOOFED, **MIXED_CASE})):
        hop = gw.request(model, headers=spoof)
        assert hop.status == 200 and hop.backend == "provider-a", f"{label}: {hop.describe()}"
        seen = hop.forwarded_headers
        # The backend joins repeated headers with ", ": a surviving client copy shows as a joined value.
        assert seen.get(CANDIDATE_HEADER) == "cand-a-mixed", f"{label}: the hop cluster got {seen}"
        assert seen.get(REVISION_HEADER) == revision, f"{label}: the hop cluster got {seen}"
        request_id = seen.get(REQUEST_ID_HEADER, "")
        assert request_id and "," not in request_id and request_id not in spoofed_values, (
            f"{label}: the hop cluster must get one generated request id; got {seen}")
        assert request_id not in request_ids, f"{label}: request id {request_id} was sent before"
        request_ids.append(request_id)
        other = gw.request(plain, headers=spoof)
        assert other.status == 200 and other.backend == "mgmt", f"{label}: {other.describe()}"
        leaked = {k: v for k, v in other.forwarded_headers.items() if k.startswith("x-ai-routing-")}
        assert not leaked, f"{label}: a non-hop cluster must receive no x-ai-routing-* headers; got {leaked}"


@pytest.mark.conformance(id="CONS-HOP-REQUEST-ID-FRESH-BOUND", profile="consumer", level="core", feature="hopHeaders",
                         spec=REPLACED,
                         statements=["IR-METADATA-HOP-HEADERS-REPLACED"])
def test_bound_session_requests_get_fresh_request_ids(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    session = uuid.uuid4().hex
    ids = []
    for _ in range(10):
        reply = gw.request(model, headers={SESSION_HEADER: session})
        assert reply.status == 200 and reply.backend == "provider-a", reply.describe()
        ids.append(reply.forwarded_headers.get(REQUEST_ID_HEADER))
    assert None not in ids and len(set(ids)) == len(ids), f"each request of one session needs its own id: {ids}"
