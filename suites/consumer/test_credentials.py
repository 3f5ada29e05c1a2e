"""credential_inject on a final-hop consumer: the token of the candidate intelligent_route selected is injected.

For a direct API provider the consumer gateway is the final hop: its chain is intelligent_route, then
credential_inject, then load_balancer, and the candidate's credential reference picks the token. The
variant `inject` runs that chain without provider hop clusters; its tokens are files, as the spec's
file-backed token source mounts them.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

import pytest

from harness import contract
from harness.backends import OperationUnsupported
from harness.gateway_config import CredentialRef
from harness.grid import Gateway, Reply, Site
from harness.timeouts import timeouts
from harness.waiting import WaitTimeout, poll_until

_ARCH = "routing architecture, "
NATIVE_PATH = (_ARCH + "Native injection path: \"intelligent_route selects the candidate and writes the secretRef "
               "fields to in-process filter metadata\"; \"credential_inject reads those metadata keys, looks up the "
               "matching token in its configured credential map, and injects Authorization: Bearer <token> into the "
               "upstream request\"; Consumer config filter chain ordering: intelligent_route, credential_inject, "
               "load_balancer")
FINAL_HOP = (_ARCH + "Credential field security contract: \"For direct API-provider or cloud-provider fallback, the "
             "consumer gateway is often also the final-hop gateway, so it mounts the Secret and Praxis AI injects the "
             "credential before forwarding to the provider API.\"")
LOCAL_FALLBACK = (_ARCH + "API-provider fallback: \"The fallback decision is therefore still local to the consumer "
                  "gateway at request time: intelligent_route selects from the pre-rendered candidate list, and the "
                  "Praxis AI filter chain handles credential injection and upstream forwarding.\"")
RELOAD_SWAPS = "intelligent_route filter, Scope: \"overlay hot reload swaps the candidate list and local_site only\""
NEW_SECRET = ("intelligent_route filter, Scope: \"An already-configured projected credential resolver can use a newly "
              "selected, already-mounted Secret without rebuilding the filter pipeline.\"; its configuration "
              "(projected_credential_mount_base, <base>/<namespace>/<name>/<key>) from the public credential_inject "
              "of praxis-proxy/ai")
FILE_SOURCE = (_ARCH + "File-backed token source: \"The consumer pod mounts that Secret as a file, and "
               "credential_inject reads the token from its configured file: path at filter construction time.\"")
CLIENT_AUTH = "Bearer client-supplied-secret-0815"


def _tokens(model: str, *names: str) -> dict[CredentialRef, str]:
    """A random token per reference; the reference names are unique to the test's model."""
    return {CredentialRef(f"{name}-{model[-10:]}", "grid-system"): f"tok-{name}-{secrets.token_hex(12)}"
            for name in names}


def _with_credential(site: Site, provider: str, model: str, ref: CredentialRef | None, **fields: Any) -> dict[str, Any]:
    candidate = site.candidate(provider, model, **fields)
    if ref is not None:
        candidate["credential"] = ref.as_ref()
    return candidate


def _authorization(reply: Reply) -> str | None:
    return reply.forwarded_headers.get("authorization")


def _assert_not_leaked(gateway: Gateway, tokens: Mapping[CredentialRef, str]) -> None:
    """The tokens appear neither in the gateway's /metrics nor in its log."""
    texts = {"/metrics": gateway.metrics_text(), "the log": gateway.log_tail(2000)}
    leaks = sorted(where for where, text in texts.items() for token in tokens.values() if token in text)
    assert not leaks, f"a provider token appears in the gateway's {leaks}"


@pytest.mark.conformance(id="CONS-CRED-INJECT-SELECTED", profile="consumer", level="core", feature="credentialInject",
                         spec=NATIVE_PATH + "; " + FINAL_HOP,
                         statements=["OC-NATIVE-TWO-FILTERS", "OC-NATIVE-CHAIN-ORDER", "OC-API-INJECT-BEFORE-FORWARD",
                                     "OC-CREDENTIAL-DIRECT-FALLBACK-CONSUMER"])
def test_each_selected_candidate_gets_its_own_token(site: Site, fresh_gateway: Any, model: str) -> None:
    """Two roundRobin candidates, each with its own credential reference, and a client Authorization:
    every request reaches the backend it selected with exactly that candidate's token, over six cycles;
    a candidate without a credential gets neither token. Fails if credential_inject acts on anything but
    intelligent_route's per-request selection (the first reference it saw, a fixed one, none at all)."""
    tokens = _tokens(model, "api-a", "api-b")
    ref_a, ref_b = tokens
    plain = model + "-plain"
    doc = site.envelope([_with_credential(site, "provider-a", model, ref_a, selection_group=0),
                         _with_credential(site, "provider-b", model, ref_b, selection_group=0),
                         _with_credential(site, "provider-c", plain, None)], mode="roundRobin")
    gateway = fresh_gateway("inject", contract.encode(doc), tokens=tokens)
    expected = {"provider-a": f"Bearer {tokens[ref_a]}", "provider-b": f"Bearer {tokens[ref_b]}"}
    seen: dict[str, int] = {}
    for _ in range(12):
        reply = gateway.request(model, headers={"Authorization": CLIENT_AUTH})
        assert reply.status == 200 and reply.backend in expected, reply.describe()
        got = _authorization(reply)
        which = "the other candidate's token" if got in expected.values() else repr(got)
        assert got == expected[reply.backend], f"{reply.backend} must receive its own candidate's token, not {which}"
        seen[reply.backend] = seen.get(reply.backend, 0) + 1
    assert set(seen) == set(expected), f"roundRobin over both candidates served {seen}"
    reply = gateway.request(plain, headers={"Authorization": CLIENT_AUTH})
    assert reply.status == 200 and reply.backend == "provider-c", reply.describe()
    leaked = [ref.name for ref, token in tokens.items() if token in (_authorization(reply) or "")]
    assert not leaked, f"a candidate without a credential received the token of {leaked}"
    _assert_not_leaked(gateway, tokens)


@pytest.mark.conformance(id="CONS-CRED-API-FALLBACK", profile="consumer", level="core", feature="credentialInject",
                         spec=LOCAL_FALLBACK + "; " + NATIVE_PATH,
                         statements=["OC-API-FALLBACK-LOCAL-DECISION"])
def test_api_fallback_is_chosen_and_injected_by_the_consumer(site: Site, fresh_gateway: Any, model: str) -> None:
    """Group 0 a self-hosted candidate that takes no new work, group 1 an API-provider candidate with a
    credential: requests go to the API provider with its token. Republished with group 0 admitted (no
    operator involved), the self-hosted backend serves them without the token. Fails if the consumer
    does not fall back by itself or forwards the fallback without injecting its credential."""
    tokens = _tokens(model, "api")
    (ref,) = tokens

    def overlay(admission: str) -> dict[str, Any]:
        return site.envelope([_with_credential(site, "provider-a", model, None, selection_group=0,
                                               admission_state=admission),
                              _with_credential(site, "provider-b", model, ref, selection_group=1)])

    gateway = fresh_gateway("inject", contract.encode(overlay("none")), tokens=tokens)
    for _ in range(3):
        reply = gateway.request(model, headers={"Authorization": CLIENT_AUTH})
        assert reply.status == 200 and reply.backend == "provider-b", (
            f"with group 0 taking no new work the API provider serves; got {reply.describe()}")
        assert _authorization(reply) == f"Bearer {tokens[ref]}", (
            f"the API provider must receive its token; it received {_authorization(reply)!r}")
    # no provider hop, so no revision header to wait for: wait for the backend the new overlay selects
    gateway.write_overlay(overlay("new_and_existing"))
    reply = poll_until(lambda: gateway.request(model, headers={"Authorization": CLIENT_AUTH}),
                       lambda r: r.status == 200 and r.backend == "provider-a", timeout=timeouts().reload,
                       what="the self-hosted candidate, admitted again, to serve", describe=Reply.describe)
    assert tokens[ref] not in (_authorization(reply) or ""), "the self-hosted backend received the API token"
    _assert_not_leaked(gateway, tokens)


def _wait_served_by(gateway: Gateway, model: str, backend: str, what: str) -> Reply:
    """Poll until `model` is served by `backend` (an injecting gateway sends no revision header to wait for);
    on timeout the message adds what the gateway logged about overlays."""
    try:
        return poll_until(lambda: gateway.request(model), lambda r: r.status == 200 and r.backend == backend,
                          timeout=timeouts().reload, what=what, describe=Reply.describe)
    except WaitTimeout as exc:
        raise WaitTimeout(f"{exc}\n{gateway.overlay_log()}") from None


@pytest.mark.conformance(id="CONS-CRED-RELOAD-SELECTS-CONFIGURED-TOKEN", profile="consumer", level="core",
                         feature="credentialInject", spec=RELOAD_SWAPS + "; " + NATIVE_PATH,
                         statements=["IR-SCOPE-RELOAD-SWAPS-CANDIDATES-ONLY", "OC-NATIVE-INJECT-AUTHORIZATION"])
def test_reloaded_overlay_selects_another_configured_token(site: Site, fresh_gateway: Any, model: str) -> None:
    """Two credentials in credential_inject's map from the start; the overlay's candidate names the first,
    then a hot-reloaded revision names the second for the same cluster (and adds a model, which shows the
    revision serving). Once it serves, the candidate's requests carry the second token, with no restart.
    Fails if credential_inject keeps the token it resolved first for a cluster or candidate, or resolves
    references only for the overlay it started with."""
    tokens = _tokens(model, "first", "second")
    first, second = tokens
    marker = model + "-v2"

    def overlay(ref: CredentialRef, *extra: dict[str, Any]) -> dict[str, Any]:
        return site.envelope([_with_credential(site, "provider-a", model, ref), *extra])

    gateway = fresh_gateway("inject", contract.encode(overlay(first)), tokens=tokens)
    reply = gateway.request(model, headers={"Authorization": CLIENT_AUTH})
    assert reply.status == 200 and reply.backend == "provider-a", reply.describe()
    assert _authorization(reply) == f"Bearer {tokens[first]}", (
        f"the first revision's credential must be injected; got {_authorization(reply)!r}")
    gateway.write_overlay(overlay(second, _with_credential(site, "provider-b", marker, None)))
    _wait_served_by(gateway, marker, "provider-b", "the reloaded revision (its added model) to serve")
    for _ in range(3):
        reply = gateway.request(model, headers={"Authorization": CLIENT_AUTH})
        assert reply.status == 200 and reply.backend == "provider-a", reply.describe()
        got = _authorization(reply)
        which = "the first revision's token" if got == f"Bearer {tokens[first]}" else repr(got)
        assert got == f"Bearer {tokens[second]}", (
            f"after the reload the candidate names the second mounted Secret, whose token it must carry, not {which}")
    _assert_not_leaked(gateway, tokens)


@pytest.mark.conformance(id="CONS-CRED-FILE-READ-AT-CONSTRUCTION", profile="consumer", level="core",
                         feature="credentialInject", spec=FILE_SOURCE,
                         statements=["OC-FILE-READ-AT-CONSTRUCTION"])
def test_token_file_is_read_when_the_filter_is_built(site: Site, fresh_gateway: Any, model: str) -> None:
    """The token file's content is injected; after the file is deleted under the running gateway, and across
    an overlay hot reload that follows, requests still carry that token (the filter read it when it was
    built). Fails if credential_inject reads its file per request or again on an overlay reload."""
    tokens = _tokens(model, "file")
    (ref,) = tokens
    marker = model + "-v2"
    expected = f"Bearer {tokens[ref]}"

    def overlay(*extra: dict[str, Any]) -> dict[str, Any]:
        return site.envelope([_with_credential(site, "provider-a", model, ref), *extra])

    gateway = fresh_gateway("inject", contract.encode(overlay()), tokens=tokens)
    reply = gateway.request(model, headers={"Authorization": CLIENT_AUTH})
    assert reply.status == 200 and reply.backend == "provider-a", reply.describe()
    assert _authorization(reply) == expected, (
        f"the token file's content must be injected; got {_authorization(reply)!r}")
    try:
        gateway.remove_credential_file(ref)
    except OperationUnsupported as exc:
        pytest.skip(str(exc))
    gateway.write_overlay(overlay(_with_credential(site, "provider-b", marker, None)))
    _wait_served_by(gateway, marker, "provider-b", "the revision written after the token file was deleted to serve")
    for _ in range(3):
        reply = gateway.request(model, headers={"Authorization": CLIENT_AUTH})
        assert reply.status == 200 and reply.backend == "provider-a", (
            f"with its token file deleted after startup the candidate must still be served; got {reply.describe()}")
        assert _authorization(reply) == expected, (
            f"the token read when the filter was built must still be injected; got {_authorization(reply)!r}")


@pytest.mark.conformance(id="CONS-CRED-PROJECTED-NEW-SECRET", profile="consumer", level="extended",
                         feature="projectedCredentials", spec=NEW_SECRET + "; " + NATIVE_PATH,
                         statements=["IR-SCOPE-CREDENTIAL-RESOLVER-NEW-SECRET"])
def test_projected_resolver_uses_a_newly_selected_secret(site: Site, fresh_gateway: Any, model: str) -> None:
    """credential_inject with an empty startup table and a projected mount base. Secret A is mounted and
    the overlay selects it: its token is injected. Secret B is mounted while the gateway runs, and a
    hot-reloaded revision selects B for the same cluster (adding a model, which shows the revision
    serving): B's token is injected, with no restart. Fails if the resolver reads only the Secrets present
    at startup, or keeps the token it resolved first for the cluster."""
    tokens = _tokens(model, "first", "second")
    first, second = tokens
    marker = model + "-v2"

    def overlay(ref: CredentialRef, *extra: dict[str, Any]) -> dict[str, Any]:
        return site.envelope([_with_credential(site, "provider-a", model, ref), *extra])

    gateway = fresh_gateway("inject", contract.encode(overlay(first)), projected=True)
    try:
        gateway.mount_secret(first, tokens[first])
    except OperationUnsupported as exc:
        pytest.skip(str(exc))
    reply = gateway.request(model, headers={"Authorization": CLIENT_AUTH})
    assert reply.status == 200 and reply.backend == "provider-a", (
        f"the mounted Secret the overlay selects must be usable; got {reply.describe()}")
    assert _authorization(reply) == f"Bearer {tokens[first]}", (
        f"the mounted Secret the overlay selects must be injected; got {_authorization(reply)!r}")
    gateway.mount_secret(second, tokens[second])
    gateway.write_overlay(overlay(second, _with_credential(site, "provider-b", marker, None)))
    _wait_served_by(gateway, marker, "provider-b", "the revision selecting the second Secret to serve")
    for _ in range(3):
        reply = gateway.request(model, headers={"Authorization": CLIENT_AUTH})
        assert reply.status == 200 and reply.backend == "provider-a", (
            f"the newly selected, mounted Secret must be usable; got {reply.describe()}")
        got = _authorization(reply)
        which = "the first Secret's token" if got == f"Bearer {tokens[first]}" else repr(got)
        assert got == f"Bearer {tokens[second]}", f"the newly selected Secret's token must be injected, not {which}"
    _assert_not_leaked(gateway, tokens)
