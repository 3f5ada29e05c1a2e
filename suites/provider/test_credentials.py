"""credential_inject on the provider gateway: the provider token replaces client Authorization and never leaks."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from harness import contract
from harness.gateway_config import CredentialRef, ProviderRoute
from harness.grid import CANDIDATE_HEADER, REVISION_HEADER, Gateway, GatewayStartFailed, ProviderGateway, Reply
from harness.suite_support import ReloadProbe
from suites.provider.support import MODEL, PROVIDER_CREDENTIAL, Outcome, ProviderHop, served_by

SPEC_CRED = "routing architecture: credential field security contract; native injection path"
SPEC_LEAK = SPEC_CRED + "; the token does not appear in overlays, configs, logs, metrics or error bodies"
SPEC_INJECT = ("routing architecture, Native injection path: \"credential_inject reads those metadata keys, looks up "
               "the matching token in its configured credential map, and injects Authorization: Bearer <token> into "
               "the upstream request\"")
SPEC_NOT_IN = ("File-backed token source: \"The token does NOT appear in: ... Tracing spans or log lines. HTTP error "
               "response bodies.\"")
SPEC_FIELDS = ("routing architecture, Credential field security contract: \"When credential is present on a candidate, "
               "the field contains only: strategy ... secretRef.name / secretRef.namespace / secretRef.key\"; Revision "
               "lifecycle: \"Invalid cold-start state fails closed. An invalid update retains the same-process "
               "last-known-good snapshot\"")
CLIENT_AUTH = "Bearer client-supplied-secret-4711"
AUTH = {"Authorization": CLIENT_AUTH}


def _bearer(hop: ProviderHop, token: str | None = None) -> str:
    return f"Bearer {token or hop.token}"


@pytest.mark.conformance(id="PROV-CRED-CLIENT-AUTH-REPLACED", profile="provider", level="core",
                         feature="credentialInject",
                         spec=SPEC_CRED + "; client Authorization never reaches the backend, the provider token does",
                         statements=["OC-NATIVE-INJECT-AUTHORIZATION", "OC-CREDENTIAL-FINAL-HOP-INJECTS"])
def test_provider_token_replaces_client_authorization(hop: ProviderHop) -> None:
    through_edge = hop.edge.request(MODEL, headers={"authorization": CLIENT_AUTH})
    assert through_edge.status == 200 and served_by(through_edge) == hop.primary.cluster, through_edge.describe()
    seen = through_edge.forwarded_headers.get("authorization")
    assert seen == _bearer(hop), f"the backend must see exactly the provider token; saw {seen!r}"
    direct = hop.direct(headers={"Authorization": CLIENT_AUTH})
    assert isinstance(direct, Reply) and direct.status == 200, direct.describe()
    assert direct.forwarded_headers.get("authorization") == _bearer(hop), direct.forwarded_headers


SECOND_CLIENT_AUTH = "Bearer client-second-secret-0815"
#: A client Authorization sent twice: each pair is two header lines, names spelled as given.
DUPLICATED_AUTH: dict[str, tuple[tuple[str, str], ...]] = {
    "same-case": (("Authorization", CLIENT_AUTH), ("Authorization", SECOND_CLIENT_AUTH)),
    "other-case": (("authorization", CLIENT_AUTH), ("Authorization", SECOND_CLIENT_AUTH)),
}


@pytest.mark.conformance(id="PROV-CRED-DUPLICATE-CLIENT-AUTH", profile="provider", level="core",
                         feature="credentialInject",
                         spec=SPEC_INJECT + "; RFC 9110, section 5.1: \"Field names are case-insensitive\"; "
                              "section 5.3: \"When a field name is repeated within a section, its combined field "
                              "value consists of the list of corresponding field line values\"",
                         statements=["OC-NATIVE-INJECT-AUTHORIZATION"])
@pytest.mark.parametrize("lines", list(DUPLICATED_AUTH))
def test_duplicated_client_authorization_is_replaced(hop: ProviderHop, lines: str) -> None:
    sent = DUPLICATED_AUTH[lines]
    reply = hop.assert_served(hop.direct(lines=sent), hop.primary,
                              f"a request with two client Authorization lines ({lines})")
    seen = reply.forwarded_headers.get("authorization")
    assert seen == _bearer(hop), (
        f"with the client's Authorization sent as {[name for name, _ in sent]} the backend must see exactly the "
        f"provider token; saw {seen!r}")


@pytest.mark.conformance(id="PROV-CRED-NO-CLIENT-AUTH-WITHOUT-CREDENTIAL", profile="provider", level="extended",
                         feature="clientAuthorizationStripped",
                         spec="the public provider_route (praxis-proxy/ai provider_route.rs, strip_edge_headers) "
                         "removes the client's Authorization on every route; the spec states only that the "
                         "provider's own token is injected",
                         statements=[])
def test_client_authorization_removed_on_route_without_credential(hop: ProviderHop) -> None:
    reply = hop.direct(hop.plain, headers={"Authorization": CLIENT_AUTH})
    assert isinstance(reply, Reply) and reply.status == 200 and served_by(reply) == hop.plain.cluster, reply.describe()
    assert "authorization" not in reply.forwarded_headers, (
        f"a route without a credential must forward no Authorization; saw {reply.forwarded_headers}")


def _provoke_errors(hop: ProviderHop) -> list[Reply]:
    """Requests that end in every error a provider gateway answers, each carrying a client Authorization."""
    auth = {"Authorization": CLIENT_AUTH}
    outcomes = [
        hop.direct(client=hop.pinned_wrong_org, headers=auth),  # trust
        hop.direct(headers={**auth, CANDIDATE_HEADER: "prov-cand-nobody"}),  # candidate
        hop.direct(headers={**auth, REVISION_HEADER: "X"}),  # revision
        hop.direct(model="prov-model-unknown", headers=auth),  # model
        hop.direct(path="/v1/completions", headers=auth),  # path
        hop.direct(model=None, headers=auth),  # no model
    ]
    assert all(not isinstance(o, Reply) or o.status >= 400 for o in outcomes), [o.describe() for o in outcomes]
    return [o for o in outcomes if isinstance(o, Reply)]


@pytest.mark.conformance(id="PROV-CRED-NO-LEAK", profile="provider", level="core", feature="credentialInject",
                         spec=SPEC_LEAK,
                         statements=["OC-TOKEN-NOT-IN-TRACES-LOGS", "OC-TOKEN-NOT-IN-ERROR-BODIES",
                                     "OC-CREDENTIAL-REMOTE-TOKENS-STAY"])
def test_token_appears_nowhere_but_the_backend_request(hop: ProviderHop) -> None:
    needle = hop.token.encode()
    ok = hop.edge.request(MODEL)
    assert ok.status == 200 and ok.forwarded_headers.get("authorization") == _bearer(hop), ok.describe()
    errors = _provoke_errors(hop)
    leaks = [f"error answer {r.describe()}" for r in errors
             if needle in r.body or any(hop.token in v for v in r.headers.values())]
    leaks += [f"response header {k}" for k, v in ok.headers.items() if hop.token in v]
    leaks += [f"error body {body[:120]!r}" for body in hop.error_bodies if needle in body]
    for gateway in hop.grid.gateways:
        if hop.token in gateway.metrics_text():
            leaks.append(f"/metrics of {gateway.name}")
        if gateway.last_overlay and needle in gateway.last_overlay:
            leaks.append(f"overlay of {gateway.name}")
    credentials = hop.grid.credentials_dir
    stored = hop.grid.files_containing(needle)
    assert any(p.is_relative_to(credentials) for p in stored), f"no credential file holds the token: {stored}"
    leaks += [f"file {p}" for p in hop.grid.files_containing(needle, exclude=[credentials])]
    assert not leaks, f"the provider token leaked into: {leaks}"


#: A second credential the one-off gateways of the unresolved-reference tests also hold.
ALT_CREDENTIAL = CredentialRef("provider-b-alt-token", PROVIDER_CREDENTIAL.namespace, PROVIDER_CREDENTIAL.key)
#: Credential references credential_inject holds no token for, each one field away from PROVIDER_CREDENTIAL.
UNRESOLVED: dict[str, CredentialRef] = {
    "unknown-secret": CredentialRef("provider-b-unconfigured", PROVIDER_CREDENTIAL.namespace, PROVIDER_CREDENTIAL.key),
    "other-key": CredentialRef(PROVIDER_CREDENTIAL.name, PROVIDER_CREDENTIAL.namespace, "other-key"),
    "other-namespace": CredentialRef(PROVIDER_CREDENTIAL.name, "grid-site-c", PROVIDER_CREDENTIAL.key),
}
UNRESOLVED_CANDIDATE = "prov-cand-unresolved-credential"


@dataclass
class _Unresolved:
    """A request whose route names a credential credential_inject holds no token for."""

    gateway: ProviderGateway
    tokens: dict[CredentialRef, str]
    outcome: Outcome
    reached: bool  # whether it reached a backend

    def twin(self, hop: ProviderHop) -> Reply:
        """The same request for the route whose credential is configured: served with that route's token."""
        reply = hop.assert_served(hop.direct(hop.primary, gateway=self.gateway, headers=AUTH), hop.primary,
                                  "the same request for the route whose credential is configured")
        seen = reply.forwarded_headers.get("authorization")
        assert seen == f"Bearer {self.tokens[PROVIDER_CREDENTIAL]}", (
            f"for the route whose credential is configured the backend must see its token; saw {seen!r}")
        return reply


def _unresolved(hop: ProviderHop, start_provider: Callable[..., ProviderGateway], case: str) -> _Unresolved:
    """Start a provider gateway with a route whose credential it holds no token for, and send it a request."""
    tokens = {PROVIDER_CREDENTIAL: f"agn-cred-{secrets.token_hex(16)}",
              ALT_CREDENTIAL: f"agn-cred-alt-{secrets.token_hex(16)}"}
    route = ProviderRoute(UNRESOLVED_CANDIDATE, MODEL, hop.primary.cluster, credential=UNRESOLVED[case])
    try:
        gateway = start_provider(routes=(*hop.routes, route), tokens=tokens)
    except GatewayStartFailed as exc:
        pytest.skip("this gateway refuses at startup a route whose credential it holds no token for, so a "
                    f"credential failure at request time cannot be provoked: {str(exc).splitlines()[0]}")
    before = hop.backend_counts()
    outcome = hop.direct(route, gateway=gateway, headers=AUTH)
    return _Unresolved(gateway, tokens, outcome, hop.backend_counts() != before)


@pytest.mark.conformance(id="PROV-CRED-UNRESOLVED-NO-LEAK", profile="provider", level="core",
                         feature="credentialInject", spec=SPEC_INJECT + "; " + SPEC_NOT_IN,
                         statements=["OC-NATIVE-INJECT-AUTHORIZATION", "OC-TOKEN-NOT-IN-TRACES-LOGS",
                                     "OC-TOKEN-NOT-IN-ERROR-BODIES"])
@pytest.mark.parametrize("case", list(UNRESOLVED))
def test_unresolved_credential_injects_and_leaks_nothing(hop: ProviderHop,
                                                          start_provider: Callable[..., ProviderGateway],
                                                          case: str) -> None:
    run = _unresolved(hop, start_provider, case)
    if run.reached:
        assert isinstance(run.outcome, Reply) and served_by(run.outcome) is not None, (
            "the request reached a backend but its answer is not the backend's, so what it carried cannot be "
            f"shown: {run.outcome.describe()}")
        seen = run.outcome.forwarded_headers.get("authorization") or ""
        assert not any(s in seen for s in (*run.tokens.values(), CLIENT_AUTH)), (
            f"credential {UNRESOLVED[case]} has no configured token, yet the backend saw authorization {seen!r}")
    twin = run.twin(hop)
    leaks: list[str] = []
    answers = [("answer", run.outcome)] if isinstance(run.outcome, Reply) else []
    log, metrics = run.gateway.log_text(), run.gateway.metrics_text()
    for token in run.tokens.values():
        for name, answer in answers:
            if token.encode() in answer.body:
                leaks.append(f"the {name} body ({answer.describe()})")
        for name, answer in [*answers, ("twin answer", twin)]:
            leaks += [f"{name} header {k}" for k, v in answer.headers.items() if token in v]
        leaks += ["the provider gateway's log"] if token in log else []
        leaks += ["the provider gateway's /metrics"] if token in metrics else []
    assert not leaks, f"a configured provider token leaked after a credential failure into: {leaks}"


@pytest.mark.conformance(id="PROV-CRED-FAIL-CLOSED", profile="provider", level="extended",
                         feature="credentialFailClosed",
                         spec=SPEC_INJECT + "; 503 of the public credential_inject "
                              "(praxis-proxy/ai filters/src/routing/credential_inject.rs)",
                         statements=["OC-NATIVE-INJECT-AUTHORIZATION"])
@pytest.mark.parametrize("case", list(UNRESOLVED))
def test_unresolved_credential_fails_closed_with_503(hop: ProviderHop,
                                                     start_provider: Callable[..., ProviderGateway],
                                                     case: str) -> None:
    run = _unresolved(hop, start_provider, case)
    assert isinstance(run.outcome, Reply) and run.outcome.status == 503, (
        f"a route whose credential {UNRESOLVED[case]} has no configured token must get 503; "
        f"got {run.outcome.describe()}")
    assert not run.reached, "a request whose credential failed reached a backend"
    run.twin(hop)


@pytest.mark.conformance(id="PROV-CRED-UNKNOWN-FIELD-REJECTED", profile="provider", level="core",
                         feature="credentialReference", spec=SPEC_FIELDS,
                         statements=["IR-ENVELOPE-CREDENTIAL-UNKNOWN-FIELDS-REJECTED", "IR-ENVELOPE-COLD-START-FAILS",
                                     "OC-LIFECYCLE-COLD-START-FAILS-CLOSED", "IR-RELOAD-INVALID-RETAINS",
                                     "IR-ENVELOPE-RELOAD-RETAINS-LKG", "OC-LIFECYCLE-INVALID-UPDATE-LKG",
                                     "OC-DELIVERY-INVALID-LKG", "RG-RELOAD-INVALID-LKG"])
@pytest.mark.parametrize("where", ["credential", "secretRef"])
def test_credential_with_unknown_field_is_rejected(hop: ProviderHop, start_edge: Callable[[bytes | None], Gateway],
                                                   where: str) -> None:
    def overlay(extra: bool, ref: CredentialRef = PROVIDER_CREDENTIAL) -> dict[str, Any]:
        credential: dict[str, Any] = ref.as_ref()
        if extra:
            target = credential if where == "credential" else credential["secretRef"]
            target["value"] = "inline-secret-material"
        candidate = hop.a.remote_candidate(hop.by_org, hop.primary, credential=credential)
        return hop.a.envelope([candidate])

    with pytest.raises(GatewayStartFailed) as failure:
        start_edge(contract.encode(overlay(True)))
    assert failure.value.exit_code not in (None, 0), f"cold start with an unknown {where} field: {failure.value}"
    # The twin of the cold start: the same overlay without the unknown field starts and serves.
    edge = start_edge(contract.encode(overlay(False)))
    good_revision = contract.revision_of(overlay(False))
    edge.wait_serving(good_revision, MODEL)

    # A reload naming another Secret with the unknown field is rejected; the same reload without it is served.
    reloads = ReloadProbe(edge, "prometheusMetrics" in hop.grid.features)
    before = reloads.snapshot()
    edge.write_overlay(overlay(True, ALT_CREDENTIAL))
    reloads.wait(before, "rejected")
    reply = edge.request(MODEL)
    assert reply.status == 200, reply.describe()
    assert edge.serving_revision(MODEL) == good_revision, "an overlay with an unknown credential field replaced LKG"
    edge.publish(overlay(False, ALT_CREDENTIAL), MODEL)


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
    assert token.encode() not in gateway.log_bytes(), "the token is in the gateway's log"


@pytest.mark.conformance(id="PROV-CRED-ENV-SOURCE", profile="provider", level="extended",
                         feature="credentialEnvSource", spec=SPEC_CRED + "; credential_inject env_var source",
                         statements=["OC-NATIVE-INJECT-AUTHORIZATION", "OC-TOKEN-NOT-IN-TRACES-LOGS",
                                     "OC-TOKEN-NOT-IN-ERROR-BODIES"])
def test_env_var_credential_source(hop: ProviderHop, start_provider: Callable[..., ProviderGateway]) -> None:
    _extended_source(hop, start_provider, "env_var")


@pytest.mark.conformance(id="PROV-CRED-VALUE-SOURCE", profile="provider", level="extended",
                         feature="credentialValueSource", spec=SPEC_CRED + "; credential_inject value source",
                         statements=["OC-NATIVE-INJECT-AUTHORIZATION", "OC-TOKEN-NOT-IN-TRACES-LOGS",
                                     "OC-TOKEN-NOT-IN-ERROR-BODIES"])
def test_value_credential_source(hop: ProviderHop, start_provider: Callable[..., ProviderGateway]) -> None:
    _extended_source(hop, start_provider, "value")
