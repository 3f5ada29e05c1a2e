"""Startup validation: a provider pipeline without required client certificates or trust first never starts.

Every refused config is paired, in the same test, with the same config with only the offending key fixed,
which must start and serve a trusted peer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness.gateway_config import PROVIDER_FILTER_ORDER, TrustedPeer
from harness.grid import GatewayStartFailed, ProviderGateway
from suites.provider.support import ProviderHop

SPEC = ("routing architecture, Provider-side request forwarding: \"Praxis AI rejects provider pipelines at startup "
        "unless the listener requires client certificates and an unconditional, fail-closed peer_identity_trust is "
        "the first filter before the top-level provider_route\"")
SPEC_SKIP = SPEC + "; \"The validation cannot be downgraded with the generic pipeline-validation skip options\""


def _refused_then_twin(hop: ProviderHop, start: Callable[..., ProviderGateway], what: str,
                       refused: dict[str, Any], fixed: dict[str, Any], fix: str) -> None:
    with pytest.raises(GatewayStartFailed) as failure:
        start(**refused)
    assert failure.value.exit_code not in (None, 0), (
        f"a provider gateway with {what} must exit non-zero: {failure.value}")
    twin = start(**fixed)
    assert twin.running(), f"the same config with {fix} must start"
    hop.assert_served(hop.direct(gateway=twin), hop.primary, f"a trusted peer of the same config with {fix}")


# Each listener that does not require client certificates, with the same listener requiring them.
LISTENERS: dict[str, dict[str, Any]] = {
    "no-tls": {"tls": False},
    "mode-omitted": {"client_cert_mode": None},
    "mode-none": {"client_cert_mode": "none"},
    "mode-request": {"client_cert_mode": "request"},
}


@pytest.mark.conformance(id="PROV-START-CLIENT-CERT-REQUIRED", profile="provider", level="core",
                         feature="providerStartupValidation", spec=SPEC,
                         statements=["OC-FORWARD-STARTUP-PEER-TRUST-FIRST", "OC-TRUST-CLIENT-CERT-REQUIRED"])
@pytest.mark.parametrize("listener", list(LISTENERS))
def test_provider_without_required_client_certificates_fails(
        hop: ProviderHop, start_provider: Callable[..., ProviderGateway], listener: str) -> None:
    _refused_then_twin(hop, start_provider, f"a listener that does not require client certificates ({listener})",
                       LISTENERS[listener], {"tls": True, "client_cert_mode": "require"},
                       "a TLS listener with client_cert_mode: require")


AFTER_PARSER = ("json_body_field", "peer_identity_trust", "provider_route", "credential_inject", "load_balancer")
AFTER_ROUTE = ("json_body_field", "provider_route", "peer_identity_trust", "credential_inject", "load_balancer")
SKIP = {"skip_pipeline_validation": True}
# Each chain without peer_identity_trust first: (the refused config, the same config fixed, what was fixed).
CHAINS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "trust-after-parser": ({"filter_order": AFTER_PARSER}, {"filter_order": PROVIDER_FILTER_ORDER},
                           "peer_identity_trust moved first"),
    "trust-after-route": ({"filter_order": AFTER_ROUTE}, {"filter_order": PROVIDER_FILTER_ORDER},
                          "peer_identity_trust moved first"),
    "trust-missing": ({"trusted_peers": None}, {"trusted_peers": [TrustedPeer(organization="ai-grid")]},
                      "a peer_identity_trust first"),
    # The twin keeps the skip option, so the refusal is for the order, not for the option.
    "skip-validation": ({"filter_order": AFTER_PARSER, "insecure_options": SKIP},
                        {"filter_order": PROVIDER_FILTER_ORDER, "insecure_options": SKIP},
                        "peer_identity_trust moved first (skip_pipeline_validation kept)"),
}


@pytest.mark.conformance(id="PROV-START-TRUST-FIRST", profile="provider", level="core",
                         feature="providerStartupValidation", spec=SPEC_SKIP,
                         statements=["OC-FORWARD-STARTUP-PEER-TRUST-FIRST", "OC-FORWARD-STARTUP-NO-SKIP",
                                     "IR-METADATA-PROVIDER-PEER-TRUST-FIRST"])
@pytest.mark.parametrize("chain", list(CHAINS))
def test_provider_without_trust_first_fails(hop: ProviderHop, start_provider: Callable[..., ProviderGateway],
                                            chain: str) -> None:
    refused, fixed, fix = CHAINS[chain]
    _refused_then_twin(hop, start_provider, f"peer_identity_trust not first ({chain})", refused, fixed, fix)


@pytest.mark.conformance(id="PROV-START-VALID-PROVIDER", profile="provider", level="core",
                         feature="providerStartupValidation", spec=SPEC + "; a valid provider pipeline starts",
                         statements=["OC-FORWARD-STARTUP-PEER-TRUST-FIRST", "OC-TRUST-CLIENT-CERT-REQUIRED"])
def test_valid_provider_pipeline_starts(start_provider: Callable[..., ProviderGateway], hop: ProviderHop) -> None:
    """A valid provider pipeline other than the session's (two trust entries, one pinning digest and
    organization together) starts and serves the trusted peer; fails on a gateway that refuses valid ones."""
    peers = [TrustedPeer(cert_digest=hop.consumer.digest, organization="ai-grid"),
             TrustedPeer(organization="another-grid")]
    gateway = start_provider(filter_order=PROVIDER_FILTER_ORDER, trusted_peers=peers)
    assert gateway.running()
    hop.assert_served(hop.direct(gateway=gateway), hop.primary,
                      "the trusted peer of a valid provider pipeline")
