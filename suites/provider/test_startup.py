"""Startup validation: a provider pipeline without required client certificates or trust first never starts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness.gateway_config import PROVIDER_FILTER_ORDER, TrustedPeer
from harness.grid import GatewayStartFailed, ProviderGateway, Reply
from suites.provider.support import ProviderHop

SPEC = ("routing architecture: Praxis AI rejects provider pipelines at startup unless the listener requires client "
        "certificates and an unconditional peer_identity_trust is the first filter before provider_route")


def _refuses(start: Callable[..., ProviderGateway], what: str, **kwargs: object) -> None:
    with pytest.raises(GatewayStartFailed) as failure:
        start(**kwargs)
    assert failure.value.exit_code not in (None, 0), (
        f"a provider gateway with {what} must exit non-zero: {failure.value}")


@pytest.mark.conformance(id="PROV-START-CLIENT-CERT-REQUIRED", profile="provider", level="core",
                         feature="providerStartupValidation", spec=SPEC)
@pytest.mark.parametrize("listener", ["no-tls", "mode-omitted", "mode-none", "mode-request"])
def test_provider_without_required_client_certificates_fails(start_provider: Callable[..., ProviderGateway],
                                                             listener: str) -> None:
    table: dict[str, dict[str, object]] = {
        "no-tls": {"tls": False},
        "mode-omitted": {"client_cert_mode": None},
        "mode-none": {"client_cert_mode": "none"},
        "mode-request": {"client_cert_mode": "request"},
    }
    kwargs = table[listener]
    _refuses(start_provider, f"a listener that does not require client certificates ({listener})", **kwargs)


@pytest.mark.conformance(id="PROV-START-TRUST-FIRST", profile="provider", level="core",
                         feature="providerStartupValidation",
                         spec=SPEC + "; the generic pipeline-validation skip options cannot downgrade it")
@pytest.mark.parametrize("chain", ["trust-after-parser", "trust-after-route", "trust-missing", "skip-validation"])
def test_provider_without_trust_first_fails(start_provider: Callable[..., ProviderGateway], chain: str) -> None:
    after_parser = ("json_body_field", "peer_identity_trust", "provider_route", "credential_inject", "load_balancer")
    after_route = ("json_body_field", "provider_route", "peer_identity_trust", "credential_inject", "load_balancer")
    table: dict[str, dict[str, object]] = {
        "trust-after-parser": {"filter_order": after_parser},
        "trust-after-route": {"filter_order": after_route},
        "trust-missing": {"trusted_peers": None},
        "skip-validation": {"filter_order": after_parser,
                            "insecure_options": {"skip_pipeline_validation": True}},
    }
    kwargs = table[chain]
    _refuses(start_provider, f"peer_identity_trust not first ({chain})", **kwargs)


@pytest.mark.conformance(id="PROV-START-VALID-PROVIDER", profile="provider", level="core",
                         feature="providerStartupValidation", spec=SPEC + "; a valid provider pipeline starts")
def test_valid_provider_pipeline_starts(start_provider: Callable[..., ProviderGateway], hop: ProviderHop) -> None:
    """A valid provider pipeline other than the session's (two trust entries, one pinning digest and
    organization together) starts and serves the trusted peer; fails on a gateway that refuses valid ones."""
    peers = [TrustedPeer(cert_digest=hop.consumer.digest, organization="ai-grid"),
             TrustedPeer(organization="another-grid")]
    gateway = start_provider(filter_order=PROVIDER_FILTER_ORDER, trusted_peers=peers)
    assert gateway.proc.process.running()
    outcome = hop.direct(gateway=gateway)
    assert isinstance(outcome, Reply) and outcome.status == 200, (
        f"the trusted peer must be served by a valid provider pipeline; got {outcome.describe()}")
