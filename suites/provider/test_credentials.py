"""credential_inject on the provider gateway: the provider token replaces client Authorization and never leaks."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import pytest

from harness import contract
from harness.gateway_config import ProviderRoute
from harness.grid import CANDIDATE_HEADER, REVISION_HEADER, Gateway, GatewayStartFailed, ProviderGateway, Reply
from harness.suite_support import ReloadProbe
from suites.provider.support import MODEL, PROVIDER_CREDENTIAL, ProviderHop, served_by

SPEC_CRED = "routing architecture: credential field security contract; native injection path"
SPEC_LEAK = SPEC_CRED + "; the token does not appear in overlays, configs, logs, metrics or error bodies"
CLIENT_AUTH = "Bearer client-supplied-secret-4711"


def _bearer(hop: ProviderHop, token: str | None = None) -> str:
    return f"Bearer {token or hop.token}"


@pytest.mark.conformance(id="PROV-CRED-CLIENT-AUTH-REPLACED", profile="provider", level="core",
                         feature="credentialInject",
                         spec=SPEC_CRED + "; client Authorization never reaches the backend, the provider token does")
def test_provider_token_replaces_client_authorization(hop: ProviderHop) -> None:
    through_edge = hop.edge.request(MODEL, headers={"authorization": CLIENT_AUTH})
    assert through_edge.status == 200 and served_by(through_edge) == hop.primary.cluster, through_edge.describe()
    seen = through_edge.forwarded_headers.get("authorization")
    assert seen == _bearer(hop), f"the backend must see exactly the provider token; saw {seen!r}"
    direct = hop.direct(headers={"Authorization": CLIENT_AUTH})
    assert isinstance(direct, Reply) and direct.status == 200, direct.describe()
    assert direct.forwarded_headers.get("authorization") == _bearer(hop), direct.forwarded_headers


@pytest.mark.conformance(id="PROV-CRED-NO-CLIENT-AUTH-WITHOUT-CREDENTIAL", profile="provider", level="core",
                         feature="credentialInject",
                         spec=SPEC_CRED + "; provider_route removes client Authorization on every route")
def test_client_authorization_removed_on_route_without_credential(hop: ProviderHop) -> None:
    reply = hop.direct(hop.plain, headers={"Authorization": CLIENT_AUTH})
    assert isinstance(reply, Reply) and reply.status == 200 and served_by(reply) == hop.plain.cluster, reply.describe()
    assert "authorization" not in reply.forwarded_headers, (
        f"a route without a credential must forward no Authorization; saw {reply.forwarded_headers}")


def _provoke_errors(hop: ProviderHop) -> list[Reply]:
    """Requests that end in every error a provider gateway answers, each carrying a client Authorization."""
    auth = {"Authorization": CLIENT_AUTH}
    outcomes = [
        hop.direct(client=hop.pinned_wrong_org, headers=auth),  # 403 trust
        hop.direct(headers={**auth, CANDIDATE_HEADER: "prov-cand-nobody"}),  # 403 candidate
        hop.direct(headers={**auth, REVISION_HEADER: "X"}),  # 403 revision
        hop.direct(model="prov-model-unknown", headers=auth),  # 404
        hop.direct(path="/v1/completions", headers=auth),  # 404
        hop.direct(model=None, headers=auth),  # 400
    ]
    return [o for o in outcomes if isinstance(o, Reply)]


@pytest.mark.conformance(id="PROV-CRED-NO-LEAK", profile="provider", level="core", feature="credentialInject",
                         spec=SPEC_LEAK)
def test_token_appears_nowhere_but_the_backend_request(hop: ProviderHop) -> None:
    needle = hop.token.encode()
    ok = hop.edge.request(MODEL)
    assert ok.status == 200 and ok.forwarded_headers.get("authorization") == _bearer(hop), ok.describe()
    errors = _provoke_errors(hop)
    assert len(errors) == 6 and all(r.status >= 400 for r in errors), [r.describe() for r in errors]
    leaks = [f"error answer {r.describe()}" for r in errors
             if needle in r.body or any(hop.token in v for v in r.headers.values())]
    leaks += [f"response header {k}" for k, v in ok.headers.items() if hop.token in v]
    leaks += [f"error body {body[:120]!r}" for body in hop.error_bodies if needle in body]
    for gateway in hop.grid.gateways:
        if hop.token in gateway.metrics_text():
            leaks.append(f"/metrics of {gateway.proc.name}")
        if gateway.last_overlay and needle in gateway.last_overlay:
            leaks.append(f"overlay of {gateway.proc.name}")
    credentials = hop.grid.credentials_dir
    stored = hop.grid.files_containing(needle)
    assert any(p.is_relative_to(credentials) for p in stored), f"no credential file holds the token: {stored}"
    leaks += [f"file {p}" for p in hop.grid.files_containing(needle, exclude=[credentials])]
    assert not leaks, f"the provider token leaked into: {leaks}"


@pytest.mark.conformance(id="PROV-CRED-UNKNOWN-FIELD-REJECTED", profile="provider", level="core",
                         feature="credentialReference",
                         spec=SPEC_CRED + "; credential objects reject unknown fields (cold start fails, LKG kept)")
@pytest.mark.parametrize("where", ["credential", "secretRef"])
def test_credential_with_unknown_field_is_rejected(hop: ProviderHop, start_edge: Callable[[bytes | None], Gateway],
                                                   where: str) -> None:
    def overlay(extra: bool) -> dict[str, Any]:
        credential: dict[str, Any] = PROVIDER_CREDENTIAL.as_ref()
        if extra:
            target = credential if where == "credential" else credential["secretRef"]
            target["value"] = "inline-secret-material"
        candidate = hop.a.remote_candidate(hop.by_org, hop.primary, credential=credential)
        return hop.a.envelope([candidate])

    bad = overlay(True)
    with pytest.raises(GatewayStartFailed) as failure:
        start_edge(contract.encode(bad))
    assert failure.value.exit_code not in (None, 0), f"cold start with an unknown {where} field: {failure.value}"

    edge = start_edge(contract.encode(overlay(False)))
    good_revision = contract.revision_of(overlay(False))
    edge.wait_serving(good_revision, MODEL)
    reloads = ReloadProbe(edge, "prometheusMetrics" in hop.grid.features)
    before = reloads.snapshot()
    edge.write_overlay(bad)
    reloads.wait(before, "rejected")
    reply = edge.request(MODEL)
    assert reply.status == 200, reply.describe()
    assert edge.serving_revision(MODEL) == good_revision, "an overlay with an unknown credential field replaced LKG"


def _extended_source(hop: ProviderHop, start_provider: Callable[..., ProviderGateway], source: str) -> None:
    token = f"agn-{source}-token-{secrets.token_hex(12)}"
    gateway = start_provider(tokens={PROVIDER_CREDENTIAL: token}, source=source)
    route: ProviderRoute = hop.primary
    reply = hop.direct(route, gateway=gateway, headers={"Authorization": CLIENT_AUTH})
    assert isinstance(reply, Reply) and reply.status == 200, reply.describe()
    assert reply.forwarded_headers.get("authorization") == f"Bearer {token}", reply.forwarded_headers
    errors = [hop.direct(route, gateway=gateway, model="prov-model-unknown"),
              hop.direct(route, gateway=gateway, headers={CANDIDATE_HEADER: "prov-cand-nobody"})]
    for outcome in errors:
        assert isinstance(outcome, Reply) and token.encode() not in outcome.body, outcome.describe()
    assert token not in gateway.metrics_text()
    assert token.encode() not in gateway.proc.process.log_path.read_bytes(), "the token is in the gateway's log"


@pytest.mark.conformance(id="PROV-CRED-ENV-SOURCE", profile="provider", level="extended",
                         feature="credentialEnvSource", spec=SPEC_CRED + "; credential_inject env_var source")
def test_env_var_credential_source(hop: ProviderHop, start_provider: Callable[..., ProviderGateway]) -> None:
    _extended_source(hop, start_provider, "env_var")


@pytest.mark.conformance(id="PROV-CRED-VALUE-SOURCE", profile="provider", level="extended",
                         feature="credentialValueSource", spec=SPEC_CRED + "; credential_inject value source")
def test_value_credential_source(hop: ProviderHop, start_provider: Callable[..., ProviderGateway]) -> None:
    _extended_source(hop, start_provider, "value")
