"""mTLS and peer_identity_trust: only a trusted peer's certificate gets past the provider gateway."""

from __future__ import annotations

import pytest

from harness.grid import Reply
from suites.provider.support import ProviderHop, served_by

SPEC_MTLS = "routing architecture: provider gateway trust (mTLS terminated, client certificate required)"
SPEC_TRUST = "routing architecture: provider gateway trust; peer_identity_trust trusted_peers (AND per entry)"


@pytest.mark.conformance(id="PROV-MTLS-NO-CLIENT-CERT", profile="provider", level="core", feature="providerMtls",
                         spec=SPEC_MTLS)
def test_client_without_certificate_is_refused(hop: ProviderHop) -> None:
    before = hop.backend_counts()
    hop.assert_refused(hop.direct(client=None), hop.by_org, before, "a client without a certificate")


@pytest.mark.conformance(id="PROV-MTLS-OTHER-CA", profile="provider", level="core", feature="providerMtls",
                         spec=SPEC_MTLS + "; client_ca is the grid CA")
def test_certificate_from_another_ca_is_refused(hop: ProviderHop) -> None:
    foreign = hop.pki.foreign_client("foreign-ai-grid")
    before = hop.backend_counts()
    hop.assert_refused(hop.direct(client=foreign), hop.by_org, before,
                       "a certificate with organization ai-grid from another CA")


@pytest.mark.conformance(id="PROV-MTLS-EXPIRED", profile="provider", level="core", feature="providerMtls",
                         spec=SPEC_MTLS + "; an expired certificate is no peer identity")
def test_expired_certificate_is_refused(hop: ProviderHop) -> None:
    expired = hop.pki.expired_client("expired-ai-grid")
    before = hop.backend_counts()
    hop.assert_refused(hop.direct(client=expired), hop.by_org, before, "an expired grid certificate")


@pytest.mark.conformance(id="PROV-TRUST-WRONG-ORGANIZATION", profile="provider", level="core",
                         feature="peerIdentityTrust", spec=SPEC_TRUST + "; organization entries")
def test_wrong_organization_is_refused(hop: ProviderHop) -> None:
    wrong = hop.pki.wrong_organization_client("other-organization")
    before = hop.backend_counts()
    hop.assert_refused(hop.direct(client=wrong), hop.by_org, before,
                       "a grid-CA certificate with organization not-ai-grid (trust: organization ai-grid)")


@pytest.mark.conformance(id="PROV-TRUST-UNLISTED-DIGEST", profile="provider", level="core",
                         feature="peerIdentityTrust", spec=SPEC_TRUST + "; cert_digest entries match exactly")
def test_unlisted_digest_is_refused(hop: ProviderHop) -> None:
    unlisted = hop.pki.unlisted_client("unlisted-digest")
    before = hop.backend_counts()
    hop.assert_refused(hop.direct(client=unlisted, gateway=hop.pinned), hop.pinned, before,
                       "a grid certificate of organization ai-grid whose digest no entry lists")


@pytest.mark.conformance(id="PROV-TRUST-ENTRY-ALL-FIELDS", profile="provider", level="core",
                         feature="peerIdentityTrust", spec=SPEC_TRUST + "; all fields of an entry must match")
def test_listed_digest_with_wrong_organization_is_refused(hop: ProviderHop) -> None:
    before = hop.backend_counts()
    hop.assert_refused(hop.direct(client=hop.pinned_wrong_org, gateway=hop.pinned), hop.pinned, before,
                       "a certificate whose digest is listed in an entry that also requires organization ai-grid")


@pytest.mark.conformance(id="PROV-TRUST-TRUSTED-PEER", profile="provider", level="core",
                         feature="peerIdentityTrust", spec=SPEC_TRUST + "; a trusted peer is admitted")
@pytest.mark.parametrize("trust", ["organization", "digest"])
def test_trusted_peer_passes(hop: ProviderHop, trust: str) -> None:
    gateway = hop.by_org if trust == "organization" else hop.pinned
    before = hop.backend_counts()
    reply = hop.direct(gateway=gateway)
    assert isinstance(reply, Reply) and reply.status == 200, f"site-a's certificate must pass: {reply.describe()}"
    assert served_by(reply) == hop.primary.cluster, reply.describe()
    after = hop.backend_counts()
    assert after[hop.primary.cluster] == before[hop.primary.cluster] + 1, (before, after)


@pytest.mark.conformance(id="PROV-TRUST-BEFORE-ROUTING", profile="provider", level="core",
                         feature="peerIdentityTrust",
                         spec=SPEC_TRUST + "; untrusted peers get 403 before anything else runs")
@pytest.mark.parametrize("probe", ["unknown-candidate", "model-mismatch", "path-mismatch", "missing-model"])
def test_untrusted_peer_gets_403_before_routing_answers(hop: ProviderHop, probe: str) -> None:
    wrong = hop.pinned_wrong_org  # grid CA, organization not-ai-grid: TLS succeeds, trust must not
    table: dict[str, dict[str, object]] = {
        "unknown-candidate": {"headers": {"x-ai-routing-candidate": "prov-cand-nobody"}},
        "model-mismatch": {"model": "prov-model-unknown"},
        "path-mismatch": {"path": "/v1/completions"},
        "missing-model": {"model": None},
    }
    kwargs = table[probe]
    before = hop.backend_counts()
    outcome = hop.direct(client=wrong, **kwargs)  # type: ignore[arg-type]
    assert isinstance(outcome, Reply) and outcome.status == 403, (
        f"an untrusted peer sending a request provider_route would answer otherwise ({probe}) must get 403 "
        f"from peer_identity_trust first; got {outcome.describe()}")
    assert hop.backend_counts() == before
