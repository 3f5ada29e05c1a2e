"""provider_route: hop headers are validated, consumed and never forwarded; routes are exact."""

from __future__ import annotations

import pytest

from harness.grid import CANDIDATE_HEADER, PROVIDER_REVISION_HEADER, REQUEST_ID_HEADER, REVISION_HEADER, Reply
from suites.provider.support import MODEL, ProviderHop, served_by

SPEC_HOP = "routing architecture: provider-side request forwarding; provider hop revision"
SPEC_ROUTE = "routing architecture: provider_route validates an exact candidate/model/path map"
SPOOFED = {
    CANDIDATE_HEADER: "prov-cand-b1",
    REQUEST_ID_HEADER: "0" * 32,
    REVISION_HEADER: "f" * 64,
    PROVIDER_REVISION_HEADER: "e" * 64,
}


def _routing_headers(reply: Reply) -> dict[str, str]:
    return {k: v for k, v in reply.forwarded_headers.items() if k.startswith("x-ai-routing-")}


def _status(outcome: object) -> int | None:
    return outcome.status if isinstance(outcome, Reply) else None


@pytest.mark.conformance(id="PROV-HOP-SPOOF-THROUGH-EDGE", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_HOP + "; client-supplied routing context never reaches the provider backend")
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
                         spec=SPEC_HOP + "; provider_route removes x-ai-routing-* and sets the provider revision")
def test_direct_hop_headers_are_consumed(hop: ProviderHop) -> None:
    revision = "0123456789abcdef" * 4
    reply = hop.direct(headers={REVISION_HEADER: revision, PROVIDER_REVISION_HEADER: "e" * 64})
    assert isinstance(reply, Reply) and reply.status == 200, reply.describe()
    assert not _routing_headers(reply), f"x-ai-routing-* reached the backend: {_routing_headers(reply)}"
    assert reply.forwarded_headers.get(PROVIDER_REVISION_HEADER) == revision, reply.forwarded_headers


@pytest.mark.conformance(id="PROV-HOP-MALFORMED-REVISION", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_HOP + "; the revision is 64 lowercase hex, else 403")
@pytest.mark.parametrize("revision", ["F" * 64, "a" * 63, "a" * 65, "g" * 64, "sha256:" + "a" * 64, ""],
                         ids=["uppercase", "short", "long", "not-hex", "prefixed", "empty"])
def test_malformed_revision_is_403(hop: ProviderHop, revision: str) -> None:
    before = hop.backend_counts()
    outcome = hop.direct(headers={REVISION_HEADER: revision})
    assert _status(outcome) == 403, f"revision {revision!r} must give 403; got {outcome.describe()}"
    assert hop.backend_counts() == before


@pytest.mark.conformance(id="PROV-HOP-UNKNOWN-CANDIDATE", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_ROUTE + "; a missing or unknown candidate gives 403")
@pytest.mark.parametrize("candidate", ["prov-cand-nobody", None], ids=["unknown", "missing"])
def test_unknown_or_missing_candidate_is_403(hop: ProviderHop, candidate: str | None) -> None:
    before = hop.backend_counts()
    if candidate is None:
        outcome = hop.direct(drop=(CANDIDATE_HEADER,))
    else:
        outcome = hop.direct(headers={CANDIDATE_HEADER: candidate})
    assert _status(outcome) == 403, f"candidate {candidate!r} must give 403; got {outcome.describe()}"
    assert hop.backend_counts() == before


@pytest.mark.conformance(id="PROV-HOP-MISSING-REQUEST-ID", profile="provider", level="core", feature="hopHeaders",
                         spec=SPEC_ROUTE + "; a missing hop request id gives 403")
def test_missing_request_id_is_403(hop: ProviderHop) -> None:
    before = hop.backend_counts()
    outcome = hop.direct(drop=(REQUEST_ID_HEADER,))
    assert _status(outcome) == 403, f"a request without {REQUEST_ID_HEADER} must give 403; got {outcome.describe()}"
    assert hop.backend_counts() == before


@pytest.mark.conformance(id="PROV-ROUTE-MODEL-MISMATCH", profile="provider", level="core", feature="providerRoute",
                         spec=SPEC_ROUTE + "; a model not in the candidate's route gives 404")
@pytest.mark.parametrize("model", ["prov-model-2", "prov-model-unknown"], ids=["other-route", "unknown"])
def test_model_mismatch_is_404(hop: ProviderHop, model: str) -> None:
    before = hop.backend_counts()
    outcome = hop.direct(model=model)
    assert _status(outcome) == 404, f"model {model} for {hop.primary.candidate_id} must give 404; {outcome.describe()}"
    assert hop.backend_counts() == before


@pytest.mark.conformance(id="PROV-ROUTE-PATH-MISMATCH", profile="provider", level="core", feature="providerRoute",
                         spec=SPEC_ROUTE + "; a path not in the candidate's route gives 404")
def test_path_mismatch_is_404(hop: ProviderHop) -> None:
    before = hop.backend_counts()
    outcome = hop.direct(path="/v1/completions")
    assert _status(outcome) == 404, f"/v1/completions is not in the route's paths; got {outcome.describe()}"
    assert hop.backend_counts() == before


@pytest.mark.conformance(id="PROV-ROUTE-MISSING-MODEL", profile="provider", level="core", feature="providerRoute",
                         spec=SPEC_ROUTE + "; a request without a model gives 400")
def test_missing_model_is_400(hop: ProviderHop) -> None:
    before = hop.backend_counts()
    outcome = hop.direct(model=None)
    assert _status(outcome) == 400, f"a request without a model must give 400; got {outcome.describe()}"
    assert hop.backend_counts() == before
