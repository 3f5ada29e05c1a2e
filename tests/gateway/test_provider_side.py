"""The provider gateway of a grid hop: downstream mTLS, peer_identity_trust, provider_route and
credential_inject, as a real `agn-gateway` process in front of an echo backend on 127.0.0.1."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_support import EchoUpstream, GatewayProcess, config_text, running_gateway
from provider_tls_support import TRUSTED_ORG, Pki

TOKEN_VALUE = "tok-value-7f3a9c1e5b"
TOKEN_ENV = "tok-env-2d8e4b6a0c"
TOKEN_FILE = "tok-file-9b1c3e5d7f"
TOKENS = (TOKEN_VALUE, TOKEN_ENV, TOKEN_FILE)
ENV_NAME = "AGN_TEST_PROVIDER_TOKEN"
REVISION = "ab" * 32
HOP_ID = "0006400000000000beef000000000001"
PATH = "/v1/chat/completions"
ROUTES = {  # candidate id -> (model, credential name or None)
    "inference_model/m-value/site-b/provider-b": ("m-value", "by-value"),
    "inference_model/m-env/site-b/provider-b": ("m-env", "by-env"),
    "inference_model/m-file/site-b/provider-b": ("m-file", "by-file"),
    "inference_model/m-missing/site-b/provider-b": ("m-missing", "not-configured"),
    "inference_model/m-none/site-b/provider-b": ("m-none", None),
}
CAND = {model: cid for cid, (model, _) in ROUTES.items()}
HANDSHAKE_REFUSED = (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError)


def provider_filters(
    backend: str, token_file: Path, trusted: list[dict[str, str]] | None = None
) -> list[dict[str, Any]]:
    routes = []
    for cid, (model, cred) in ROUTES.items():
        route: dict[str, Any] = {"candidate_id": cid, "model": model, "paths": [PATH, "/v1/responses"],
                                 "cluster": "backend"}
        if cred is not None:
            route["credential"] = {"strategy": "bearer_token",
                                   "secretRef": {"name": cred, "namespace": "grid", "key": "token"}}
        routes.append(route)
    ref = {"namespace": "grid", "key": "token", "strategy": "bearer_token"}
    return [
        {"filter": "peer_identity_trust", "trusted_peers": trusted or [{"organization": TRUSTED_ORG}]},
        {"filter": "json_body_field", "field": "model", "header": "X-Model"},
        {"filter": "provider_route", "provider_id": "site-b", "model_header": "X-Model",
         "emit_demo_attribution": True, "routes": routes},
        {"filter": "credential_inject", "credentials": [
            {"name": "by-value", **ref, "value": TOKEN_VALUE},
            {"name": "by-env", **ref, "env_var": ENV_NAME},
            {"name": "by-file", **ref, "file": str(token_file)},
        ]},
        {"filter": "load_balancer", "clusters": [{"name": "backend", "endpoints": [backend]}]},
    ]


def provider_config(tmp_path: Path, pki: Pki, backend: str, **kwargs: Any) -> Path:
    token_file = tmp_path / "secrets" / "by-file" / "token"
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text(TOKEN_FILE + "\n")
    listeners = [{"name": "provider", "address": "127.0.0.1:0", "filter_chains": ["main"],
                  "tls": pki.listener_tls()}]
    path = tmp_path / "provider.yaml"
    path.write_text(config_text(provider_filters(backend, token_file, **kwargs), listeners=listeners))
    return path


@contextlib.contextmanager
def provider(tmp_path: Path, pki: Pki, backend: EchoUpstream, **kwargs: Any) -> Iterator[GatewayProcess]:
    config = provider_config(tmp_path, pki, backend.endpoint, **kwargs)
    with running_gateway(config, env={ENV_NAME: TOKEN_ENV}, log_level="debug") as gateway:
        yield gateway


def hop(candidate: str | None, *, request_id: str | None = HOP_ID, revision: str | None = REVISION,
        **extra: str) -> dict[str, str]:
    headers = dict(extra)
    if candidate is not None:
        headers["x-ai-routing-candidate"] = candidate
    if request_id is not None:
        headers["x-ai-routing-request-id"] = request_id
    if revision is not None:
        headers["x-ai-routing-revision"] = revision
    return headers


def post(http: httpx.Client, gateway: GatewayProcess, model: str | None, headers: dict[str, str],
         path: str = PATH) -> httpx.Response:
    body = {"model": model, "messages": []} if model is not None else {"messages": []}
    return http.post(f"https://{gateway.listeners['provider']}{path}", json=body, headers=headers)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def test_trusted_hop_is_routed_with_provider_credentials(tmp_path: Path, pki: Pki) -> None:
    with EchoUpstream("backend") as backend, provider(tmp_path, pki, backend) as gateway, pki.https(pki.client) as http:
        for model, token in (("m-value", TOKEN_VALUE), ("m-env", TOKEN_ENV), ("m-file", TOKEN_FILE)):
            extra = {"Authorization": "Bearer client-secret", "x-ai-routing-extra": "edge-only",
                     "x-ai-provider-request-id": "spoofed", "x-ai-provider-attribution": "spoofed"}
            response = post(http, gateway, model, hop(CAND[model], **extra))
            assert response.status_code == 200, response.text
            seen = response.json()["headers"]
            assert seen["authorization"] == f"Bearer {token}"
            assert not [name for name in seen if name.startswith("x-ai-routing-")], seen
            assert seen["x-ai-provider-routing-revision"] == REVISION
            assert seen["x-ai-provider-request-id"] == HOP_ID
            assert seen["x-ai-provider-attribution"] == "site-b"
            assert response.headers["x-ai-demo-provider-gateway"] == "site-b"
        # a route without a credential passes, still without the client's Authorization
        response = post(http, gateway, "m-none", hop(CAND["m-none"], revision=None, Authorization="Bearer client"))
        assert response.status_code == 200, response.text
        seen = response.json()["headers"]
        assert "authorization" not in seen and "x-ai-provider-routing-revision" not in seen
        assert len(backend.requests) == 4

        rejected = {
            "missing candidate": (403, post(http, gateway, "m-value", hop(None))),
            "unknown candidate": (403, post(http, gateway, "m-value", hop("inference_model/x/site-z/c"))),
            "missing hop request id": (403, post(http, gateway, "m-value", hop(CAND["m-value"], request_id=None))),
            "upper-case revision": (403, post(http, gateway, "m-value", hop(CAND["m-value"], revision="AB" * 32))),
            "short revision": (403, post(http, gateway, "m-value", hop(CAND["m-value"], revision="ab" * 31))),
            "missing model": (400, post(http, gateway, None, hop(CAND["m-value"]))),
            "model mismatch": (404, post(http, gateway, "m-env", hop(CAND["m-value"]))),
            "path mismatch": (404, post(http, gateway, "m-value", hop(CAND["m-value"]), path="/v1/completions")),
            "unconfigured credential": (503, post(http, gateway, "m-missing", hop(CAND["m-missing"]))),
        }
        statuses = {name: response.status_code for name, (_, response) in rejected.items()}
        assert statuses == {name: status for name, (status, _) in rejected.items()}
        assert len(backend.requests) == 4, "a rejected request reached the backend"
        bodies = [response.text for _, response in rejected.values()]
        metrics = httpx.get(f"http://{gateway.admin}/metrics", timeout=10.0, trust_env=False).text
    log = gateway.stderr_path.read_text(errors="replace")
    assert "provider_route" in log or "decision" in log, "debug log was expected to record decisions"
    for token in TOKENS:
        assert token not in log, "a token value appeared in the gateway log"
        assert token not in metrics, "a token value appeared in /metrics"
        assert not any(token in body for body in bodies), "a token value appeared in an error body"


def test_only_verified_trusted_peers_get_through(tmp_path: Path, pki: Pki) -> None:
    trusted = [{"organization": TRUSTED_ORG}, {"cert_digest": pki.listed.digest}]
    with EchoUpstream("backend") as backend, provider(tmp_path, pki, backend, trusted=trusted) as gateway:
        refused: dict[str, str] = {}
        for name, cert in (("no client cert", None), ("wrong CA", pki.wrong_ca), ("expired", pki.expired)):
            with pki.https(cert) as http:
                try:
                    response = post(http, gateway, "m-value", hop(CAND["m-value"]))
                except HANDSHAKE_REFUSED as exc:
                    refused[name] = type(exc).__name__
                else:
                    refused[name] = f"answered {response.status_code}"
        assert all(not outcome.startswith("answered") for outcome in refused.values()), refused
        outcomes: dict[str, int] = {}
        for name, client in (("trusted org", pki.client), ("listed digest", pki.listed),
                             ("other org, unlisted digest", pki.other_org)):
            with pki.https(client) as http:
                outcomes[name] = post(http, gateway, "m-none", hop(CAND["m-none"])).status_code
        assert outcomes == {"trusted org": 200, "listed digest": 200, "other org, unlisted digest": 403}
        with pki.https(pki.other_org) as http:
            response = post(http, gateway, "m-none", hop(CAND["m-none"]))
        assert response.text == "forbidden\n", "the 403 body must not explain the decision"
        assert len(backend.requests) == 2


def test_plain_http_to_a_tls_listener_never_reaches_a_filter(tmp_path: Path, pki: Pki) -> None:
    with EchoUpstream("backend") as backend, provider(tmp_path, pki, backend) as gateway:
        with pytest.raises(httpx.HTTPError):
            httpx.post(f"http://{gateway.listeners['provider']}{PATH}", headers=hop(CAND["m-none"]),
                       json={"model": "m-none"}, timeout=5.0, trust_env=False)
        assert backend.requests == []

