"""provider_route: hop headers are validated, consumed and never forwarded; routes are exact.

The spec gives no status for provider_route's refusals, so the core tests accept any HTTP 4xx answer
that reaches no backend; each pairs the refused request with the same request, only the fault fixed,
being served by the same gateway. The exact answers of the public provider_route are extended
(providerRouteStatus).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import pytest

from harness.gateway_config import SESSION_COOKIE, SESSION_HEADER
from harness.grid import CANDIDATE_HEADER, PROVIDER_REVISION_HEADER, REQUEST_ID_HEADER, REVISION_HEADER, Reply
from suites.provider.support import MODEL, OTHER_MODEL, ROUTE_REFUSAL, Outcome, ProviderHop, exactly, served_by

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
SPEC_NAMES = ("RFC 9110, section 5.1: \"Field names are case-insensitive\"; the spec names the contract \"the fixed "
              "X-AI-Routing-* contract\"")
VALID = "the well-formed hop headers, the route's model and path"
HOP_NAMES = (CANDIDATE_HEADER, REQUEST_ID_HEADER, REVISION_HEADER)
#: Other spellings of a lowercase hop header name; the same field by RFC 9110.
LETTER_CASES: dict[str, Callable[[str], str]] = {
    "upper": str.upper,  # X-AI-ROUTING-CANDIDATE
    "capitalized": lambda name: "-".join(part.capitalize() for part in name.split("-")),  # X-Ai-Routing-Candidate
    "mixed": lambda name: "X-AI-Routing-" + name.removeprefix("x-ai-routing-").title(),  # X-AI-Routing-Request-Id
}


def _routing_headers(reply: Reply) -> dict[str, str]:
    return {k: v for k, v in reply.forwarded_headers.items() if k.startswith("x-ai-routing-")}


@pytest.mark.conformance(id="PROV-HOP-SPOOF-THROUGH-EDGE", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_EDGE + "; " + SPEC_ROUTE,
                         statements=["OC-FORWARD-EDGE-RECONSTRUCTS", "IR-METADATA-HOP-HEADERS-REPLACED",
                                     "OC-LIFECYCLE-HOP-REVISION-SET", "OC-FORWARD-PROVIDER-ROUTE-EXACT-MAP",
                                     "OC-LIFECYCLE-PROVIDER-REVISION"])
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
                         spec=SPEC_ROUTE + "; " + SPEC_REVISION,
                         statements=["OC-FORWARD-PROVIDER-ROUTE-EXACT-MAP", "OC-LIFECYCLE-PROVIDER-REVISION"])
def test_direct_hop_headers_are_consumed(hop: ProviderHop) -> None:
    revision = "0123456789abcdef" * 4
    reply = hop.direct(headers={REVISION_HEADER: revision, PROVIDER_REVISION_HEADER: "e" * 64})
    assert isinstance(reply, Reply) and reply.status == 200, reply.describe()
    assert not _routing_headers(reply), f"x-ai-routing-* reached the backend: {_routing_headers(reply)}"
    assert reply.forwarded_headers.get(PROVIDER_REVISION_HEADER) == revision, reply.forwarded_headers


SPEC_NO_AFFINITY = _SECTION + "\"It performs no discovery, scoring, affinity, or hot reload.\""


@pytest.mark.conformance(id="PROV-HOP-NO-AFFINITY", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_NO_AFFINITY + "; " + SPEC_ROUTE,
                         statements=["OC-FORWARD-PROVIDER-ROUTE-NO-DISCOVERY"])
def test_session_does_not_pin_a_provider_route(hop: ProviderHop) -> None:
    """Two hop requests carrying one session (header and cookie) but naming different candidates are each
    served by the backend of the candidate they name, in both orders. Fails if provider_route binds a
    session to the first backend it served, overriding the candidate the edge selected.

    Only affinity is observable here: a provider gateway has no metrics or overlay input to discover,
    score or reload from.
    """
    for order in ((hop.primary, hop.spoof_target), (hop.spoof_target, hop.primary)):
        session = secrets.token_hex(8)
        carried = {SESSION_HEADER: session, "cookie": f"{SESSION_COOKIE}={session}"}
        for route in order:
            hop.assert_served(hop.direct(route, headers=carried), route,
                              f"a hop request naming {route.candidate_id} in session {session} (the session's "
                              f"first request named {order[0].candidate_id})")


@pytest.mark.conformance(id="PROV-HOP-HEADER-CASE", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_ROUTE + "; " + SPEC_REVISION + "; " + SPEC_NAMES,
                         statements=["OC-FORWARD-PROVIDER-ROUTE-EXACT-MAP", "OC-LIFECYCLE-PROVIDER-REVISION"])
@pytest.mark.parametrize("case", list(LETTER_CASES))
def test_hop_headers_in_other_letter_cases_are_consumed(hop: ProviderHop, case: str) -> None:
    """The hop headers spelled in another letter case are the same fields: they pick the route, the revision
    is mirrored for the backend, and no spelling of them reaches it."""
    recase = LETTER_CASES[case]
    revision = "0123456789abcdef" * 4
    sent = hop.by_org.hop_headers(hop.primary.candidate_id, revision=revision)
    spelled = {recase(name): value for name, value in sent.items()}
    reply = hop.direct(headers=spelled, drop=HOP_NAMES)
    hop.assert_served(reply, hop.primary, f"a request whose hop headers are spelled {sorted(spelled)} (candidate "
                      f"{hop.primary.candidate_id})")
    assert isinstance(reply, Reply)
    assert not _routing_headers(reply), (
        f"hop headers spelled {sorted(spelled)}: x-ai-routing-* reached the backend: {_routing_headers(reply)}")
    seen = reply.forwarded_headers.get(PROVIDER_REVISION_HEADER)
    assert seen == revision, (
        f"the revision sent as {recase(REVISION_HEADER)} must reach the backend as {PROVIDER_REVISION_HEADER}: "
        f"expected {revision}, saw {seen!r}")


#: A second copy of one hop header in another letter case, with another value than the proper one.
CASE_COPIES: dict[str, tuple[str, str]] = {
    "candidate": (LETTER_CASES["mixed"](CANDIDATE_HEADER), "prov-cand-b1"),
    "request-id": (LETTER_CASES["mixed"](REQUEST_ID_HEADER), "0" * 32),
    "revision": (LETTER_CASES["mixed"](REVISION_HEADER), "f" * 64),
}


@pytest.mark.conformance(id="PROV-HOP-SPOOF-CASE-COPY", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_ROUTE + "; " + SPEC_REVISION + "; " + SPEC_NAMES,
                         statements=["OC-FORWARD-PROVIDER-ROUTE-EXACT-MAP", "OC-LIFECYCLE-PROVIDER-REVISION"])
@pytest.mark.parametrize("copy", list(CASE_COPIES))
def test_hop_header_copy_in_another_case_never_reaches_the_backend(hop: ProviderHop, copy: str) -> None:
    """A request with the proper lowercase hop headers and a second copy of one in another letter case.

    The spec does not say which copy wins, nor whether such a request is served: a served one must carry
    no x-ai-routing-* line of any spelling to the backend; a refused one must reach no backend, and the
    same request without the copy is then served."""
    name, value = CASE_COPIES[copy]
    before = hop.backend_counts()
    outcome: Outcome = hop.direct(headers={name: value})
    what = f"a request with a second {name}: {value} beside the proper lowercase hop headers"
    if isinstance(outcome, Reply) and outcome.status == 200:
        assert served_by(outcome) is not None, f"{what}: the answer is not a backend's: {outcome.describe()}"
        assert not _routing_headers(outcome), f"{what}: x-ai-routing-* reached the backend: {_routing_headers(outcome)}"
        return
    assert ROUTE_REFUSAL.check(outcome), (
        f"{what} must be served without it or refused ({ROUTE_REFUSAL.text}); got {outcome.describe()}")
    after = hop.backend_counts()
    assert after == before, f"{what} was refused, yet it reached a backend: {before} -> {after}"
    hop.assert_served(hop.direct(), hop.primary, "the same request without the second copy")


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
                         spec=SPEC_SYNTAX,
                         statements=["OC-LIFECYCLE-PROVIDER-REVISION"])
@pytest.mark.parametrize("case", list(REVISIONS))
def test_malformed_revision_is_refused(hop: ProviderHop, case: str) -> None:
    bad, good = REVISIONS[case]
    hop.assert_refused_with_twin(lambda: hop.direct(headers={REVISION_HEADER: bad}),
                                 lambda: hop.direct(headers={REVISION_HEADER: good}),
                                 what=f"revision {bad!r}", fixed=f"revision {good!r}", refusal=ROUTE_REFUSAL)


@pytest.mark.conformance(id="PROV-HOP-UNKNOWN-CANDIDATE", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_ROUTE + "; " + SPEC_FIELDS,
                         statements=["OC-FORWARD-PROVIDER-ROUTE-EXACT-MAP", "OC-TRUST-IDENTITY-NOT-ROUTE"])
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
                         spec=SPEC_FIELDS,
                         statements=[])
def test_missing_request_id_is_refused(hop: ProviderHop) -> None:
    hop.assert_refused_with_twin(lambda: hop.direct(drop=(REQUEST_ID_HEADER,)), lambda: hop.direct(),
                                 what=f"a request without {REQUEST_ID_HEADER}", fixed=f"a {REQUEST_ID_HEADER}",
                                 refusal=ROUTE_REFUSAL)


@pytest.mark.conformance(id="PROV-HOP-CANDIDATE-EXACT", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_ROUTE + "; a candidate id differing only in letter case is another candidate",
                         statements=["OC-FORWARD-PROVIDER-ROUTE-EXACT-MAP"])
def test_candidate_differing_in_letter_case_is_refused(hop: ProviderHop) -> None:
    known = hop.primary.candidate_id
    hop.assert_refused_with_twin(lambda: hop.direct(headers={CANDIDATE_HEADER: known.upper()}),
                                 lambda: hop.direct(headers={CANDIDATE_HEADER: known}),
                                 what=f"candidate {known.upper()!r} (the route's is {known!r})",
                                 fixed=f"the route's candidate {known!r}", refusal=ROUTE_REFUSAL)


@pytest.mark.conformance(id="PROV-ROUTE-MODEL-MISMATCH", profile="provider", level="core", feature="providerRoute",
                         spec=SPEC_ROUTE + "; a model other than the candidate's",
                         statements=["OC-FORWARD-PROVIDER-ROUTE-EXACT-MAP", "OC-TRUST-IDENTITY-NOT-ROUTE",
                                     "OC-LIFECYCLE-HEADERS-CORRELATION-ONLY"])
@pytest.mark.parametrize("model", [OTHER_MODEL, "prov-model-unknown"], ids=["other-route", "unknown"])
def test_model_mismatch_is_refused(hop: ProviderHop, model: str) -> None:
    hop.assert_refused_with_twin(lambda: hop.direct(model=model), lambda: hop.direct(),
                                 what=f"model {model} for candidate {hop.primary.candidate_id}",
                                 fixed=f"the candidate's model {hop.primary.model}", refusal=ROUTE_REFUSAL)


@pytest.mark.conformance(id="PROV-ROUTE-PATH-MISMATCH", profile="provider", level="core", feature="providerRoute",
                         spec=SPEC_ROUTE + "; a path not among the candidate's",
                         statements=["OC-FORWARD-PROVIDER-ROUTE-EXACT-MAP"])
def test_path_mismatch_is_refused(hop: ProviderHop) -> None:
    hop.assert_refused_with_twin(lambda: hop.direct(path="/v1/completions"), lambda: hop.direct(),
                                 what="path /v1/completions (not in the route's paths)",
                                 fixed=f"the route's path {hop.primary.paths[0]}", refusal=ROUTE_REFUSAL)


@pytest.mark.conformance(id="PROV-ROUTE-MODEL-EXACT", profile="provider", level="core", feature="providerRoute",
                         spec=SPEC_ROUTE + "; a model differing only in letter case is another model",
                         statements=["OC-FORWARD-PROVIDER-ROUTE-EXACT-MAP"])
def test_model_differing_in_letter_case_is_refused(hop: ProviderHop) -> None:
    model = hop.primary.model
    hop.assert_refused_with_twin(lambda: hop.direct(model=model.upper()), lambda: hop.direct(model=model),
                                 what=f"model {model.upper()} for candidate {hop.primary.candidate_id} (its route's "
                                 f"model is {model})", fixed=f"the candidate's model {model}", refusal=ROUTE_REFUSAL)


#: Paths that have the route's only path as a prefix without being it.
PREFIXED_PATHS = {"subpath": "/v1/chat/completions/extra", "longer-segment": "/v1/chat/completionsX"}


@pytest.mark.conformance(id="PROV-ROUTE-PATH-EXACT", profile="provider", level="core", feature="providerRoute",
                         spec=SPEC_ROUTE + "; a path that only begins with the route's path is another path",
                         statements=["OC-FORWARD-PROVIDER-ROUTE-EXACT-MAP"])
@pytest.mark.parametrize("case", list(PREFIXED_PATHS))
def test_path_extending_the_route_path_is_refused(hop: ProviderHop, case: str) -> None:
    path, exact = PREFIXED_PATHS[case], hop.primary.paths[0]
    assert path.startswith(exact) and path != exact and hop.primary.paths == (exact,)
    hop.assert_refused_with_twin(lambda: hop.direct(path=path), lambda: hop.direct(path=exact),
                                 what=f"path {path} (the route's path {exact} is only its prefix)",
                                 fixed=f"the route's path {exact}", refusal=ROUTE_REFUSAL)


@pytest.mark.conformance(id="PROV-ROUTE-MISSING-MODEL", profile="provider", level="core", feature="providerRoute",
                         spec=SPEC_ROUTE + "; a request naming no model matches no entry",
                         statements=["OC-FORWARD-PROVIDER-ROUTE-EXACT-MAP"])
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
                         spec=SPEC_STATUS,
                         statements=["OC-FORWARD-PROVIDER-ROUTE-EXACT-MAP", "OC-LIFECYCLE-PROVIDER-REVISION"])
@pytest.mark.parametrize("case", list(STATUS_CASES))
def test_provider_route_refusal_status(hop: ProviderHop, case: str) -> None:
    status, bad, good = STATUS_CASES[case]
    hop.assert_refused_with_twin(lambda: hop.direct(**bad), lambda: hop.direct(**good),
                                 what=f"the {case} request", fixed=VALID, refusal=exactly(status))
