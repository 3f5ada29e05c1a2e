"""provider_route: hop headers are validated, consumed and never forwarded; routes are exact.

The spec gives no status for provider_route's refusals, so the core tests accept any HTTP 4xx answer
that reaches no backend; each pairs the refused request with the same request, only the fault fixed,
being served by the same gateway. The exact answers of the public provider_route are extended
(providerRouteStatus).
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.grid import CANDIDATE_HEADER, PROVIDER_REVISION_HEADER, REQUEST_ID_HEADER, REVISION_HEADER, Reply
from suites.provider.support import MODEL, OTHER_MODEL, ROUTE_REFUSAL, ProviderHop, exactly, served_by

_SECTION = "routing architecture, Provider-side request forwarding: "
SPEC_EDGE = (_SECTION + "\"the edge AI filter removes inbound copies of the fixed X-AI-Routing-* contract and "
             "reconstructs the selected stable candidate and hop request ID\"")
SPEC_FIELDS = (_SECTION + "\"reconstructs the selected stable candidate and hop request ID. The provider consumes "
               "those fields only after mTLS and peer_identity_trust\"")
SPEC_ROUTE = (_SECTION + "\"provider_route removes them, validates an exact provider-local candidate/model/path map, "
              "and selects the local backend cluster\"")
SPEC_REVISION = ("routing architecture, Revision lifecycle: \"The provider gateway validates its syntax, consumes it "
                 "after peer authentication, removes it from the forwarded request, and sets "
                 "x-ai-provider-routing-revision for backend telemetry\"")
SPEC_SYNTAX = (SPEC_REVISION + "; Revision semantics: \"The v1 revision is the lowercase SHA-256 digest of the "
               "RFC 8785 canonical form\"")
SPEC_STATUS = (SPEC_ROUTE + "; " + SPEC_REVISION + "; statuses of the public provider_route "
               "(praxis-proxy/ai filters/src/routing/provider_route.rs)")
SPOOFED = {
    CANDIDATE_HEADER: "prov-cand-b1",
    REQUEST_ID_HEADER: "0" * 32,
    REVISION_HEADER: "f" * 64,
    PROVIDER_REVISION_HEADER: "e" * 64,
}
VALID = "the well-formed hop headers, the route's model and path"


def _routing_headers(reply: Reply) -> dict[str, str]:
    return {k: v for k, v in reply.forwarded_headers.items() if k.startswith("x-ai-routing-")}


@pytest.mark.conformance(id="PROV-HOP-SPOOF-THROUGH-EDGE", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_EDGE + "; " + SPEC_ROUTE)
def test_spoofed_hop_headers_never_reach_the_backend(hop: ProviderHop) -> None:
    reply = hop.edge.request(MODEL, headers=SPOOFED)
    assert reply.status == 200, reply.describe()
    assert served_by(reply) == hop.primary.cluster, (
        f"the backend must be the route of the candidate site-a's snapshot selected ({hop.primary.candidate_id} -> "
        f"{hop.primary.cluster}), not of the spoofed one; got {reply.describe()}")
    assert not _routing_headers(reply), f"x-ai-routing-* reached the backend: {_routing_headers(reply)}"
    seen = reply.forwarded_headers.get(PROVIDER_REVISION_HEADER)
    assert seen == hop.revision, f"{PROVIDER_REVISION_HEADER} must be site-a's serving revision {hop.revision}; {seen=}"


@pytest.mark.conformance(id="PROV-HOP-CONSUMED", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_ROUTE + "; " + SPEC_REVISION)
def test_direct_hop_headers_are_consumed(hop: ProviderHop) -> None:
    revision = "0123456789abcdef" * 4
    reply = hop.direct(headers={REVISION_HEADER: revision, PROVIDER_REVISION_HEADER: "e" * 64})
    assert isinstance(reply, Reply) and reply.status == 200, reply.describe()
    assert not _routing_headers(reply), f"x-ai-routing-* reached the backend: {_routing_headers(reply)}"
    assert reply.forwarded_headers.get(PROVIDER_REVISION_HEADER) == revision, reply.forwarded_headers


# Each malformed revision with the nearest well-formed one (64 lowercase hex characters).
REVISIONS: dict[str, tuple[str, str]] = {
    "uppercase": ("F" * 64, "f" * 64),
    "short": ("a" * 63, "a" * 64),
    "long": ("a" * 65, "a" * 64),
    "not-hex": ("g" * 64, "f" * 64),
    "prefixed": ("sha256:" + "a" * 64, "a" * 64),
    "empty": ("", "a" * 64),
}


@pytest.mark.conformance(id="PROV-HOP-MALFORMED-REVISION", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_SYNTAX)
@pytest.mark.parametrize("case", list(REVISIONS))
def test_malformed_revision_is_refused(hop: ProviderHop, case: str) -> None:
    bad, good = REVISIONS[case]
    hop.assert_refused_with_twin(lambda: hop.direct(headers={REVISION_HEADER: bad}),
                                 lambda: hop.direct(headers={REVISION_HEADER: good}),
                                 what=f"revision {bad!r}", fixed=f"revision {good!r}", refusal=ROUTE_REFUSAL)


@pytest.mark.conformance(id="PROV-HOP-UNKNOWN-CANDIDATE", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_ROUTE + "; " + SPEC_FIELDS)
@pytest.mark.parametrize("candidate", ["unknown", "missing"])
def test_unknown_or_missing_candidate_is_refused(hop: ProviderHop, candidate: str) -> None:
    known = hop.primary.candidate_id
    if candidate == "unknown":
        hop.assert_refused_with_twin(lambda: hop.direct(headers={CANDIDATE_HEADER: "prov-cand-nobody"}),
                                     lambda: hop.direct(headers={CANDIDATE_HEADER: known}),
                                     what="candidate 'prov-cand-nobody' (in no route)",
                                     fixed=f"the route's candidate {known!r}", refusal=ROUTE_REFUSAL)
    else:
        hop.assert_refused_with_twin(lambda: hop.direct(drop=(CANDIDATE_HEADER,)), lambda: hop.direct(),
                                     what=f"a request without {CANDIDATE_HEADER}",
                                     fixed=f"{CANDIDATE_HEADER}: {known}", refusal=ROUTE_REFUSAL)


@pytest.mark.conformance(id="PROV-HOP-MISSING-REQUEST-ID", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_FIELDS)
def test_missing_request_id_is_refused(hop: ProviderHop) -> None:
    hop.assert_refused_with_twin(lambda: hop.direct(drop=(REQUEST_ID_HEADER,)), lambda: hop.direct(),
                                 what=f"a request without {REQUEST_ID_HEADER}", fixed=f"a {REQUEST_ID_HEADER}",
                                 refusal=ROUTE_REFUSAL)


@pytest.mark.conformance(id="PROV-ROUTE-MODEL-MISMATCH", profile="provider", level="core", feature="providerRoute",
                         spec=SPEC_ROUTE + "; a model other than the candidate's")
@pytest.mark.parametrize("model", [OTHER_MODEL, "prov-model-unknown"], ids=["other-route", "unknown"])
def test_model_mismatch_is_refused(hop: ProviderHop, model: str) -> None:
    hop.assert_refused_with_twin(lambda: hop.direct(model=model), lambda: hop.direct(),
                                 what=f"model {model} for candidate {hop.primary.candidate_id}",
                                 fixed=f"the candidate's model {hop.primary.model}", refusal=ROUTE_REFUSAL)


@pytest.mark.conformance(id="PROV-ROUTE-PATH-MISMATCH", profile="provider", level="core", feature="providerRoute",
                         spec=SPEC_ROUTE + "; a path not among the candidate's")
def test_path_mismatch_is_refused(hop: ProviderHop) -> None:
    hop.assert_refused_with_twin(lambda: hop.direct(path="/v1/completions"), lambda: hop.direct(),
                                 what="path /v1/completions (not in the route's paths)",
                                 fixed=f"the route's path {hop.primary.paths[0]}", refusal=ROUTE_REFUSAL)


@pytest.mark.conformance(id="PROV-ROUTE-MISSING-MODEL", profile="provider", level="core", feature="providerRoute",
                         spec=SPEC_ROUTE + "; a request naming no model matches no entry")
def test_missing_model_is_refused(hop: ProviderHop) -> None:
    hop.assert_refused_with_twin(lambda: hop.direct(model=None), lambda: hop.direct(),
                                 what="a request without a model", fixed=f"model {hop.primary.model}",
                                 refusal=ROUTE_REFUSAL)


# The public provider_route's answer to each refused request: (status, the refused request, the twin).
STATUS_CASES: dict[str, tuple[int, dict[str, Any], dict[str, Any]]] = {
    "unknown-candidate": (403, {"headers": {CANDIDATE_HEADER: "prov-cand-nobody"}}, {}),
    "missing-candidate": (403, {"drop": (CANDIDATE_HEADER,)}, {}),
    "missing-request-id": (403, {"drop": (REQUEST_ID_HEADER,)}, {}),
    "malformed-revision": (403, {"headers": {REVISION_HEADER: "F" * 64}}, {"headers": {REVISION_HEADER: "f" * 64}}),
    "missing-model": (400, {"model": None}, {}),
    "model-mismatch": (404, {"model": OTHER_MODEL}, {}),
    "path-mismatch": (404, {"path": "/v1/completions"}, {}),
}


@pytest.mark.conformance(id="PROV-ROUTE-STATUS", profile="provider", level="extended", feature="providerRouteStatus",
                         spec=SPEC_STATUS)
@pytest.mark.parametrize("case", list(STATUS_CASES))
def test_provider_route_refusal_status(hop: ProviderHop, case: str) -> None:
    status, bad, good = STATUS_CASES[case]
    hop.assert_refused_with_twin(lambda: hop.direct(**bad), lambda: hop.direct(**good),
                                 what=f"the {case} request", fixed=VALID, refusal=exactly(status))
