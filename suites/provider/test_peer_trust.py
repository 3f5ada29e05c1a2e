"""mTLS and peer_identity_trust: only a trusted peer's certificate gets past the provider gateway.

Every refused certificate is paired, in the same test, with the nearest certificate the same gateway
admits (site-a's, or one that satisfies the same kind of trust entry), sending the same request.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.grid import Reply
from suites.provider.support import ProviderHop, served_by

SPEC_MTLS = ("routing architecture, Provider gateway trust: \"Provider gateways terminate mTLS before forwarding "
             "traffic to local inference infrastructure\"; \"Provider gateways require a client certificate\"")
SPEC_TRUST = ("routing architecture, Provider gateway trust: \"provider gateways verify the peer identity from the "
              "downstream client certificate and reject untrusted peers with HTTP 403 before forwarding to local "
              "infrastructure\"; \"can match both its exact digest and organization\"")
SPEC_ORDER = ("routing architecture, Provider-side request forwarding: \"The provider consumes those fields only "
              "after mTLS and peer_identity_trust\"; Provider gateway trust: \"reject untrusted peers with HTTP 403 "
              "before forwarding to local infrastructure\"")
SITE_A = "site-a's grid certificate"


@pytest.mark.conformance(id="PROV-MTLS-NO-CLIENT-CERT", profile="provider", level="core", feature="providerMtls",
                         spec=SPEC_MTLS,
                         statements=["OC-TRUST-TERMINATE-MTLS", "OC-TRUST-CLIENT-CERT-REQUIRED",
                                     "OC-LIFECYCLE-HEADERS-CORRELATION-ONLY", "OC-ELIGIBILITY-DATA-PLANE-SEPARATE"])
def test_client_without_certificate_is_refused(hop: ProviderHop) -> None:
    hop.assert_refused_with_twin(lambda: hop.direct(client=None), lambda: hop.direct(),
                                 what="a client without a certificate", fixed=SITE_A)


@pytest.mark.conformance(id="PROV-MTLS-OTHER-CA", profile="provider", level="core", feature="providerMtls",
                         spec=SPEC_MTLS + "; the client certificate is verified against the grid CA",
                         statements=["OC-TRUST-TERMINATE-MTLS"])
def test_certificate_from_another_ca_is_refused(hop: ProviderHop) -> None:
    foreign = hop.pki.foreign_client("foreign-ai-grid")
    hop.assert_refused_with_twin(lambda: hop.direct(client=foreign), lambda: hop.direct(),
                                 what="a certificate with organization ai-grid from another CA",
                                 fixed=SITE_A + " (organization ai-grid, signed by the grid CA)")


@pytest.mark.conformance(id="PROV-MTLS-EXPIRED", profile="provider", level="core", feature="providerMtls",
                         spec=SPEC_MTLS + "; an expired certificate is no peer identity",
                         statements=["OC-TRUST-TERMINATE-MTLS"])
def test_expired_certificate_is_refused(hop: ProviderHop) -> None:
    expired = hop.pki.expired_client("expired-ai-grid")
    hop.assert_refused_with_twin(lambda: hop.direct(client=expired), lambda: hop.direct(),
                                 what="an expired grid certificate", fixed=SITE_A + " (valid now)")


@pytest.mark.conformance(id="PROV-TRUST-WRONG-ORGANIZATION", profile="provider", level="core",
                         feature="peerIdentityTrust", spec=SPEC_TRUST + "; organization entries",
                         statements=["OC-TRUST-UNTRUSTED-403", "OC-TRUST-CLIENT-CERT-REQUIRED",
                                     "OC-LIFECYCLE-HEADERS-CORRELATION-ONLY"])
def test_wrong_organization_is_refused(hop: ProviderHop) -> None:
    wrong = hop.pki.wrong_organization_client("other-organization")
    hop.assert_refused_with_twin(lambda: hop.direct(client=wrong), lambda: hop.direct(),
                                 what="a grid-CA certificate of organization not-ai-grid (trust: organization ai-grid)",
                                 fixed=SITE_A + " (organization ai-grid)")


@pytest.mark.conformance(id="PROV-TRUST-ORGANIZATION-EXACT", profile="provider", level="core",
                         feature="peerIdentityTrust",
                         spec=SPEC_TRUST + "; an organization differing only in letter case is another organization",
                         statements=["OC-TRUST-UNTRUSTED-403", "OC-TRUST-CLIENT-CERT-REQUIRED"])
def test_organization_differing_in_letter_case_is_refused(hop: ProviderHop) -> None:
    cased = hop.pki.wrong_organization_client("organization-letter-case", organization="AI-Grid")
    hop.assert_refused_with_twin(lambda: hop.direct(client=cased), lambda: hop.direct(),
                                 what="a grid-CA certificate of organization AI-Grid (trust: organization ai-grid)",
                                 fixed=SITE_A + " (organization ai-grid)")


@pytest.mark.conformance(id="PROV-TRUST-UNLISTED-DIGEST", profile="provider", level="core",
                         feature="peerIdentityTrust", spec=SPEC_TRUST + "; cert_digest entries match exactly",
                         statements=["OC-TRUST-UNTRUSTED-403", "OC-TRUST-CLIENT-CERT-REQUIRED",
                                     "OC-ELIGIBILITY-DATA-PLANE-SEPARATE"])
def test_unlisted_digest_is_refused(hop: ProviderHop) -> None:
    unlisted = hop.pki.unlisted_client("unlisted-digest")
    hop.assert_refused_with_twin(lambda: hop.direct(client=unlisted, gateway=hop.pinned),
                                 lambda: hop.direct(gateway=hop.pinned), gateway=hop.pinned,
                                 what="a grid certificate of organization ai-grid whose digest no entry lists",
                                 fixed=SITE_A + " (organization ai-grid, digest listed)")


@pytest.mark.conformance(id="PROV-TRUST-ENTRY-ALL-FIELDS", profile="provider", level="core",
                         feature="peerIdentityTrust", spec=SPEC_TRUST + "; all fields of an entry must match",
                         statements=["OC-TRUST-UNTRUSTED-403", "OC-TRUST-CLIENT-CERT-REQUIRED"])
def test_listed_digest_with_wrong_organization_is_refused(hop: ProviderHop) -> None:
    hop.assert_refused_with_twin(
        lambda: hop.direct(client=hop.pinned_wrong_org, gateway=hop.pinned),
        lambda: hop.direct(client=hop.pinned_both, gateway=hop.pinned), gateway=hop.pinned,
        what="a certificate whose digest is listed in an entry that also requires organization ai-grid",
        fixed="a certificate listed the same way (digest and organization ai-grid) that has organization ai-grid")


@pytest.mark.conformance(id="PROV-TRUST-TRUSTED-PEER", profile="provider", level="core",
                         feature="peerIdentityTrust", spec=SPEC_TRUST + "; a trusted peer is admitted",
                         statements=["OC-TRUST-CLIENT-CERT-REQUIRED"])
@pytest.mark.parametrize("trust", ["organization", "digest"])
def test_trusted_peer_passes(hop: ProviderHop, trust: str) -> None:
    gateway = hop.by_org if trust == "organization" else hop.pinned
    before = hop.backend_counts()
    reply = hop.direct(gateway=gateway)
    assert isinstance(reply, Reply) and reply.status == 200, f"site-a's certificate must pass: {reply.describe()}"
    assert served_by(reply) == hop.primary.cluster, reply.describe()
    after = hop.backend_counts()
    assert after[hop.primary.cluster] == before[hop.primary.cluster] + 1, (before, after)


# Probes a trusted peer gets a non-403 answer for from the routing side of the pipeline (the inference
# parser or provider_route), so an untrusted peer's 403 for the same probe can only come from trust having
# run first. An unknown candidate is no such probe: provider_route itself answers it with 403, so its
# untrusted 403 would look the same whichever filter ran first.
PROBES: dict[str, dict[str, Any]] = {
    "model-mismatch": {"model": "prov-model-unknown"},
    "path-mismatch": {"path": "/v1/completions"},
    "missing-model": {"model": None},
    "body-not-object": {"body": ["not", "an", "object"]},
}


@pytest.mark.conformance(id="PROV-TRUST-BEFORE-ROUTING", profile="provider", level="core",
                         feature="peerIdentityTrust", spec=SPEC_ORDER,
                         statements=["OC-TRUST-UNTRUSTED-403", "OC-FORWARD-PROVIDER-CONSUMES-AFTER-TRUST",
                                     "IR-METADATA-PROVIDER-PEER-TRUST-FIRST", "OC-FORWARD-FIRST-POSITION-NO-BYPASS",
                                     "OC-FORWARD-PROVIDER-PATH", "OC-ELIGIBILITY-DATA-PLANE-SEPARATE"])
@pytest.mark.parametrize("probe", list(PROBES))
def test_untrusted_peer_gets_403_before_routing_answers(hop: ProviderHop, probe: str) -> None:
    kwargs = PROBES[probe]
    trusted = hop.direct(**kwargs)
    if not isinstance(trusted, Reply) or trusted.status == 403:
        pytest.skip(f"a trusted peer's {probe} probe gets {trusted.describe()} from this gateway, so an untrusted "
                    "peer's 403 for it cannot show that peer_identity_trust ran before routing")
    wrong = hop.pinned_wrong_org  # grid CA, organization not-ai-grid: TLS succeeds, trust must not
    before = hop.backend_counts()
    untrusted = hop.direct(client=wrong, **kwargs)
    assert isinstance(untrusted, Reply) and untrusted.status == 403, (
        f"a trusted peer's {probe} probe gets {trusted.status} from the routing filters; the same probe from an "
        f"untrusted peer must get 403 from peer_identity_trust first; got {untrusted.describe()}")
    after = hop.backend_counts()
    assert after == before, f"the untrusted peer's {probe} probe reached a backend: {before} -> {after}"
