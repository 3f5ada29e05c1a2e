"""Upstream mTLS from a consumer gateway's cluster: the client certificate, SNI/name verification and
keep-alive reuse, then the whole grid hop consumer gateway -> provider gateway -> backend."""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from gateway_support import SCOPE, EchoUpstream, client, config_text, envelope, revision_of, running_gateway
from provider_tls_support import TRUSTED_ORG, Pki
from test_provider_side import ENV_NAME, TOKEN_ENV, TOKEN_VALUE, provider_config

from reference.gateway.tls import peer_identity

HOP_CLUSTER = "provider-b"
MODEL = "m-value"


class MutualTlsEcho(EchoUpstream):
    """An HTTPS server on 127.0.0.1 that requires a client certificate and reports, per request, the
    client's source port and the organization of the certificate it presented."""

    def __init__(self, pki: Pki) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(pki.server.cert), str(pki.server.key))
        context.load_verify_locations(cafile=str(pki.ca_file))
        context.verify_mode = ssl.CERT_REQUIRED
        super().__init__("mtls-echo", handler=self._handle, ssl_context=context)
        self.seen: list[dict[str, Any]] = []

    async def _handle(self, request: web.Request) -> web.Response:
        peer = peer_identity(request.transport)
        peername = request.transport.get_extra_info("peername") if request.transport else None
        record = {
            "port": peername[1] if peername else None,
            "organization": peer.organization if peer else None,
            "headers": {k.lower(): v for k, v in request.headers.items()},
        }
        self.seen.append(record)
        return web.json_response(record)


def consumer_config(tmp_path: Path, pki: Pki, provider_port: int, overlay: bytes, **tls: Any) -> Path:
    overlay_file = tmp_path / "routing-overlay.json"
    overlay_file.write_bytes(overlay)
    filters: list[dict[str, Any]] = [
        {"filter": "json_body_field", "field": "model", "header": "X-Model"},
        {"filter": "intelligent_route", "overlay_file": str(overlay_file), "expected_overlay_scope": dict(SCOPE),
         "reload": {"enabled": False}, "provider_hop_clusters": [HOP_CLUSTER]},
        {"filter": "load_balancer", "clusters": [
            {"name": HOP_CLUSTER, "endpoints": [f"127.0.0.1:{provider_port}"], "tls": {**pki.cluster_tls(), **tls}},
        ]},
    ]
    path = tmp_path / "consumer.yaml"
    path.write_text(config_text(filters))
    return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def overlay() -> bytes:
    from gateway_support import candidate

    return envelope([candidate(MODEL, "site-b", HOP_CLUSTER)])


def test_consumer_cluster_presents_its_client_cert_and_keeps_the_connection(tmp_path: Path, pki: Pki) -> None:
    data = overlay()
    with MutualTlsEcho(pki) as upstream:
        with running_gateway(consumer_config(tmp_path, pki, upstream.port, data)) as gateway, client() as http:
            answers = [
                http.post(gateway.url() + "/v1/chat/completions", json={"model": MODEL}) for _ in range(4)
            ]
        assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
        assert {seen["organization"] for seen in upstream.seen} == {TRUSTED_ORG}
        ports = {seen["port"] for seen in upstream.seen}
        assert len(ports) == 1, f"expected one reused upstream connection, saw source ports {ports}"
        headers = upstream.seen[0]["headers"]
        assert headers["x-ai-routing-candidate"] == f"inference_model/{MODEL}/site-b/{HOP_CLUSTER}"
        assert headers["x-ai-routing-revision"] == revision_of(data)
        assert len(headers["x-ai-routing-request-id"]) == 32


def test_upstream_name_mismatch_fails_closed(tmp_path: Path, pki: Pki) -> None:
    with MutualTlsEcho(pki) as upstream:
        config = consumer_config(tmp_path, pki, upstream.port, overlay(), sni="wrong.grid.test")
        with running_gateway(config) as gateway, client() as http:
            answer = http.post(gateway.url() + "/v1/chat/completions", json={"model": MODEL})
        assert answer.status_code == 502, answer.text
        assert upstream.seen == []


def test_grid_hop_consumer_to_provider_to_backend(tmp_path: Path, pki: Pki) -> None:
    data = overlay()
    provider_dir = tmp_path / "provider"
    provider_dir.mkdir()
    with EchoUpstream("backend") as backend, running_gateway(
        provider_config(provider_dir, pki, backend.endpoint), env={ENV_NAME: TOKEN_ENV}
    ) as provider:
        provider_port = int(provider.listeners["provider"].rpartition(":")[2])
        config = consumer_config(tmp_path, pki, provider_port, data)
        with running_gateway(config) as consumer, client() as http:
            answers = [
                http.post(
                    consumer.url() + "/v1/chat/completions",
                    json={"model": MODEL},
                    headers={"Authorization": "Bearer end-user", "x-ai-routing-candidate": "forged"},
                )
                for _ in range(3)
            ]
    assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
    seen = [request["headers"] for request in backend.requests]
    assert len(seen) == 3
    assert all(h["authorization"] == f"Bearer {TOKEN_VALUE}" for h in seen)
    assert all(not any(name.startswith("x-ai-routing-") for name in h) for h in seen), json.dumps(seen)
    assert {h["x-ai-provider-routing-revision"] for h in seen} == {revision_of(data)}
    request_ids = [h["x-ai-provider-request-id"] for h in seen]
    assert len(set(request_ids)) == 3 and all(len(r) == 32 for r in request_ids), request_ids
    assert all(a.headers["x-ai-demo-provider-gateway"] == "site-b" for a in answers)
