"""In-process checks of peer_identity_trust, provider_route and credential_inject decisions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from gateway_support import candidate, envelope, route_filter
from multidict import CIMultiDict
from provider_tls_support import TRUSTED_ORG, Pki

from reference.gateway.context import RequestContext
from reference.gateway.filters import credential_inject, peer_identity_trust, provider_route
from reference.gateway.filters.credential_inject import CredentialInjectFilter
from reference.gateway.filters.peer_identity_trust import PeerIdentityTrustFilter
from reference.gateway.filters.provider_route import ProviderRouteFilter
from reference.gateway.schema import ConfigError
from reference.gateway.tls import PeerIdentity, identity_from_der

DIGEST = "0f" * 32


def ctx(headers: dict[str, str] | None = None, path: str = "/v1/chat/completions", peer: Any = None) -> RequestContext:
    request = RequestContext("POST", path, path, CIMultiDict(headers or {}), b"")
    request.peer = peer
    return request


def trust(*peers: dict[str, str]) -> PeerIdentityTrustFilter:
    raw = {"filter": "peer_identity_trust", "trusted_peers": list(peers)}
    return PeerIdentityTrustFilter(peer_identity_trust.parse(raw, "f"))


def test_every_field_of_an_entry_must_match_and_any_entry_admits() -> None:
    peer = PeerIdentity(DIGEST, TRUSTED_ORG, "01:02")
    cases = {
        "org only": (trust({"organization": TRUSTED_ORG}), True),
        "org and serial": (trust({"organization": TRUSTED_ORG, "serial_number": "01:02"}), True),
        "org right, serial wrong": (trust({"organization": TRUSTED_ORG, "serial_number": "01:03"}), False),
        "digest and wrong org": (trust({"cert_digest": DIGEST, "organization": "x"}), False),
        "second entry admits": (trust({"organization": "x"}, {"cert_digest": DIGEST}), True),
        "spiffe without uri san": (trust({"spiffe_id": "spiffe://grid/consumer"}), False),
    }
    outcomes = {name: f.on_request(ctx(peer=peer)) is None for name, (f, _) in cases.items()}
    assert outcomes == {name: expected for name, (_, expected) in cases.items()}


def test_no_peer_identity_is_forbidden_with_a_bare_body() -> None:
    rejection = trust({"organization": TRUSTED_ORG}).on_request(ctx())
    assert rejection is not None and (rejection.status, rejection.body) == (403, "forbidden\n")


@pytest.mark.parametrize(
    ("peers", "fragment"),
    [([], "must not be empty"), ([{}], "at least one match field"), ([{"organization": " "}], "non-blank"),
     ([{"cert_digest": "ab"}], "64 lowercase hex"), ([{"spiffe_id": "spiffe://grid/*"}], "wildcard"),
     ([{"serial": "1"}], "unknown key")],
)
def test_trusted_peer_config_errors(peers: list[dict[str, str]], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        peer_identity_trust.parse({"filter": "peer_identity_trust", "trusted_peers": peers}, "f")
    assert fragment in str(info.value)


def test_identity_uses_the_der_digest_joined_organizations_and_colon_hex_serial(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    leaf = x509.load_pem_x509_certificates(pki.client.cert.read_bytes())[0]
    identity = identity_from_der(leaf.public_bytes(Encoding.DER))
    assert identity.cert_digest == pki.client.digest and len(identity.cert_digest) == 64
    assert identity.organization == TRUSTED_ORG
    assert identity.serial_number == pki.client.serial
    assert all(len(part) == 2 for part in (identity.serial_number or "").split(":"))


def provider(**extra: Any) -> ProviderRouteFilter:
    raw = {"filter": "provider_route", "provider_id": "site-b", "routes": [
        {"candidate_id": "cand-1", "model": "m", "paths": ["/v1/chat/completions"], "cluster": "backend"}], **extra}
    return ProviderRouteFilter(provider_route.parse(raw, "f"))


def test_provider_route_strips_edge_fields_even_when_it_rejects() -> None:
    request = ctx({"x-ai-routing-candidate": "unknown", "x-ai-routing-request-id": "r1", "X-Model": "m",
                   "x-ai-routing-other": "1", "Authorization": "Bearer client"})
    rejection = provider().on_request(request)
    assert rejection is not None and rejection.status == 403
    assert not [name for name in request.headers if name.lower().startswith("x-ai-routing-")]
    assert "Authorization" not in request.headers


def test_provider_route_replaces_an_earlier_credential_reference() -> None:
    request = ctx({"x-ai-routing-candidate": "cand-1", "x-ai-routing-request-id": "r1", "X-Model": "m"})
    request.metadata["intelligent_route.credential.name"] = "edge-secret"
    assert provider().on_request(request) is None
    assert request.cluster == "backend"
    assert not [k for k in request.metadata if k.startswith("intelligent_route.credential.")]
    assert "x-ai-provider-routing-revision" not in request.headers


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [({"model_header": "x-praxis-model"}, "reserved"), ({"routes": []}, "1-1024"),
     ({"routes": [{"candidate_id": "c", "model": "m", "paths": ["v1"], "cluster": "b"}]}, "absolute"),
     ({"routes": [{"candidate_id": "c", "model": "m", "paths": ["/a"], "cluster": "b",
                   "credential": {"strategy": "apikey", "secretRef": {"name": "n", "namespace": "s", "key": "k"}}}]},
      "unsupported credential strategy")],
)
def test_provider_route_config_errors(extra: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        provider(**extra)
    assert fragment in str(info.value)


def injector(token: str = "tok-123") -> CredentialInjectFilter:
    raw = {"filter": "credential_inject", "credentials": [
        {"name": "tok", "namespace": "grid", "key": "token", "strategy": "bearer_token", "value": token}]}
    return CredentialInjectFilter(credential_inject.parse(raw, "f"))


def reference(**fields: str) -> dict[str, str]:
    return {f"intelligent_route.credential.{k}": v for k, v in fields.items()}


def test_credential_inject_outcomes() -> None:
    full = reference(strategy="bearer_token", name="tok", namespace="grid", key="token")
    cases = {
        "no reference passes untouched": ({}, None, "Bearer client"),
        "full reference injects": (full, None, "Bearer tok-123"),
        "partial reference": ({k: v for k, v in full.items() if not k.endswith(".key")}, 503, "Bearer client"),
        "unknown reference": ({**full, "intelligent_route.credential.name": "other"}, 503, "Bearer client"),
        "unsupported strategy": ({**full, "intelligent_route.credential.strategy": "apikey"}, 503, "Bearer client"),
    }
    seen = {}
    for name, (metadata, _, _) in cases.items():
        request = ctx({"Authorization": "Bearer client"})
        request.metadata.update(metadata)
        rejection = injector().on_request(request)
        seen[name] = (metadata, rejection.status if rejection else None, request.headers.get("Authorization"))
    assert seen == cases
    assert "tok-123" not in repr(injector()) and "tok-123" not in repr(credential_inject.parse(
        {"filter": "credential_inject", "credentials": [
            {"name": "tok", "namespace": "grid", "key": "token", "value": "tok-123"}]}, "f"))


def test_consumer_final_hop_injects_the_selected_candidates_credential() -> None:
    credential = {"strategy": "bearer_token", "secretRef": {"name": "tok", "namespace": "grid", "key": "token"}}
    route = route_filter({}, envelope([candidate("m", "site-b", "direct", credential=credential)]))
    request = ctx({"X-Model": "m", "Authorization": "Bearer end-user"})
    assert route.on_request(request) is None and request.cluster == "direct"
    assert injector().on_request(request) is None
    assert request.headers.getall("Authorization") == ["Bearer tok-123"]


def test_oversized_credential_file_is_refused_without_echoing_it(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("s" * (credential_inject.MAX_TOKEN_BYTES + 1))
    raw = {"filter": "credential_inject", "credentials": [
        {"name": "tok", "namespace": "grid", "key": "token", "file": str(secret)}]}
    with pytest.raises(ConfigError) as info:
        credential_inject.parse(raw, "f")
    assert info.value.path == "f.credentials[0].file" and "exceeds" in info.value.message
    assert "sss" not in str(info.value)


def test_projected_resolver_reads_the_mount_per_request_and_fails_closed(tmp_path: Path) -> None:
    """A reference the startup table lacks is read from <base>/<namespace>/<name>/<key> when a request
    selects it (so a Secret mounted later is used); absent, unsafe or unusable values fail closed (503)."""
    raw = {"filter": "credential_inject", "credentials": [], "projected_credential_mount_base": str(tmp_path)}
    inject = CredentialInjectFilter(credential_inject.parse(raw, "f"))
    full = reference(strategy="bearer_token", name="tok", namespace="grid", key="token")

    def outcome(**fields: str) -> tuple[int | None, str | None]:
        request = ctx({"Authorization": "Bearer client"})
        request.metadata.update({**full, **{f"intelligent_route.credential.{k}": v for k, v in fields.items()}})
        rejection = inject.on_request(request)
        return (rejection.status if rejection else None), request.headers.get("Authorization")

    assert outcome() == (503, "Bearer client"), "nothing mounted yet"
    (tmp_path / "grid" / "tok").mkdir(parents=True)
    (tmp_path / "grid" / "tok" / "token").write_text("tok-projected\n")
    assert outcome() == (None, "Bearer tok-projected")
    (tmp_path / "grid" / "tok" / "token").write_text("tok-rotated\n")
    assert outcome() == (None, "Bearer tok-rotated"), "the mount is read per request"
    (tmp_path / "grid" / "tok" / "bad").write_text("two\nlines\n")
    assert outcome(key="bad") == (503, "Bearer client")
    assert outcome(name="..", key="token") == (503, "Bearer client")
    assert outcome(name="tok/../tok") == (503, "Bearer client")


@pytest.mark.parametrize(("base", "fragment"), [("relative/dir", "absolute"), ("", "1-4096 bytes")])
def test_projected_mount_base_must_be_an_absolute_path(base: str, fragment: str) -> None:
    raw = {"filter": "credential_inject", "credentials": [], "projected_credential_mount_base": base}
    with pytest.raises(ConfigError) as info:
        credential_inject.parse(raw, "f")
    assert info.value.path == "f.projected_credential_mount_base" and fragment in info.value.message
    with pytest.raises(ConfigError, match="requires projected_credential_mount_base"):
        credential_inject.parse({"filter": "credential_inject", "credentials": []}, "f")
