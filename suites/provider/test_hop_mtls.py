"""The provider hop authenticates the provider gateway: a consumer gateway sends nothing to a server it cannot verify.

Each case starts a provider gateway of site-b whose listener presents a certificate site-a's hop cannot
verify, and a consumer gateway of site-a whose hop cluster reaches it; the twin is a consumer gateway with
the same overlay and the same client certificate whose hop reaches the session's provider gateway, which
presents its own grid certificate for the configured sni.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness import contract
from harness.grid import Gateway, ProviderGateway
from harness.pki import ServerFiles
from suites.provider.support import MODEL, ProviderHop

SPEC_HOP = ("routing architecture, Multi-cluster model routing: \"For remote sites, traffic goes gateway-to-gateway "
            "over mTLS before reaching provider-local filters and serving infrastructure\"; intelligent_route filter: "
            "\"These AI-owned, non-reserved headers are sent only to an mTLS-authenticated provider gateway\"")


def _other_ca(hop: ProviderHop) -> ServerFiles:
    """The configured sni, signed by a CA outside the grid."""
    return hop.pki.foreign_server("provider-hop-other-ca", hop.by_org.sni)


def _other_name(hop: ProviderHop) -> ServerFiles:
    """The grid CA, for another name than the configured sni."""
    return hop.pki.server("provider-hop-other-name", f"other-gateway.{hop.b.spec.name}.grid.test")


#: Server certificates a consumer's hop must refuse, each one fault away from the provider gateway's own.
SERVER_CERTS: dict[str, tuple[Callable[[ProviderHop], ServerFiles], str]] = {
    "other-ca": (_other_ca, "a certificate for the configured sni from another CA"),
    "other-name": (_other_name, "a grid-CA certificate for another name than the configured sni"),
}


@pytest.mark.conformance(id="PROV-HOP-PROVIDER-CERT-VERIFIED", profile="provider", level="core",
                         feature="providerHop", spec=SPEC_HOP + "; the provider gateway's certificate is verified",
                         statements=["IR-METADATA-HOP-HEADERS-MTLS-ONLY", "OC-MULTI-REMOTE-MTLS",
                                     "OC-ELIGIBILITY-DATA-PLANE-SEPARATE"])
@pytest.mark.parametrize("case", list(SERVER_CERTS))
def test_hop_to_unverifiable_provider_gateway_is_not_served(
        hop: ProviderHop, start_provider: Callable[..., ProviderGateway], start_edge: Callable[..., Gateway],
        case: str) -> None:
    make, presented = SERVER_CERTS[case]
    unverifiable = start_provider(server_cert=make(hop))
    overlay = hop.a.envelope([hop.a.remote_candidate(unverifiable, hop.primary)])
    encoded = contract.encode(overlay)
    edge = start_edge(encoded, unverifiable)
    twin = start_edge(encoded)
    # The twin first: once it serves this overlay, the edge started before it has loaded the same one.
    twin.wait_serving(contract.revision_of(overlay), MODEL)
    before = hop.backend_counts()
    reply = edge.request(MODEL)
    assert not 200 <= reply.status < 300, (
        f"a hop to a provider gateway presenting {presented} must fail; the request was served: {reply.describe()}")
    assert unverifiable.running(), "the provider gateway presenting that certificate exited"
    after = hop.backend_counts()
    assert after == before, f"a hop to a provider gateway presenting {presented} reached a backend: {before} -> {after}"
    hop.assert_served(twin.request(MODEL), hop.primary,
                      "the same request through a consumer gateway with the same overlay and client certificate "
                      "whose hop reaches a provider gateway presenting its grid certificate for the configured sni")
