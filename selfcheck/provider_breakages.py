"""Named breakages of the reference provider gateway, each a monkeypatch of one provider-hop behaviour.

A breakage is applied in the gateway process before it starts (see ``selfcheck.provider_launch``).
The provider suite starts every gateway of its two-site grid with the same command, so each breakage
runs in site-a's consumer gateway as well as in site-b's provider gateways: every patch here changes
only what a provider pipeline (peer_identity_trust, provider_route, credential_inject, a listener that
requires client certificates) does, what the consumer does with a credential object in its overlay, or
how upstream TLS checks the server a hop cluster reaches.
Each broken gateway still starts and still carries site-a's traffic to the right provider backend, so
the shared hop of the suite comes up and a target fails on the broken behaviour itself.

Patches replace module or class attributes that the gateway looks up at call time; they never edit files.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import re
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from reference.gateway import build, config, hop_headers, tls
from reference.gateway.config import GatewayConfig
from reference.gateway.context import Reject, RequestContext
from reference.gateway.filters import credential_inject, provider_route
from reference.gateway.filters.base import Filter
from reference.gateway.filters.credential_inject import CredentialInjectFilter
from reference.gateway.filters.peer_identity_trust import FIELDS, PeerIdentityTrustFilter, TrustedPeer
from reference.gateway.filters.provider_route import ProviderRouteFilter
from reference.gateway.logfmt import kv
from reference.gateway.schema import ConfigError
from reference.overlay import validate
from selfcheck.registry import Breakage, registrar, wrap
from selfcheck.registry import patch as _patch

__all__ = ["BREAKAGES", "apply"]

BREAKAGES: dict[str, Breakage] = {}
AUTHORIZATION = "Authorization"
REFERENCE_FIELDS = ("name", "namespace", "key")  # of a credential reference in request metadata
MAX_PROVIDER_GATEWAYS = 2

OnRequest = Callable[[Any, RequestContext], Reject | None]


_breakage = registrar(BREAKAGES)


def apply(name: str) -> None:
    """Apply the named breakage to the imported gateway modules; KeyError for an unknown name."""
    BREAKAGES[name].apply()


def _wrap_on_request(cls: type, wrapper: Callable[[OnRequest, Any, RequestContext], Reject | None]) -> None:
    """Replace ``cls.on_request`` by ``wrapper(original, self, ctx)``."""
    wrap(cls, "on_request", wrapper)


def _route_of(route_filter: ProviderRouteFilter, ctx: RequestContext) -> provider_route.ProviderRoute | None:
    """The route the request's candidate header names, if any (read before provider_route strips it)."""
    candidate = ctx.headers.get(hop_headers.CANDIDATE)
    return route_filter.config.routes.get(candidate) if candidate is not None else None


# ------------------------------------------------------------------------------------- listener mTLS


@_breakage("client-cert-not-verified", "a listener set to require client certificates never asks for one, and "
           "peer_identity_trust lets a request without a peer identity through")
def _client_cert_not_verified() -> None:
    original_context = tls.server_context

    def server_context(cert_path: str, key_path: str, client_ca: str | None, mode: str, min_version: str | None,
                       path: str) -> ssl.SSLContext:
        context = original_context(cert_path, key_path, client_ca, mode, min_version, path)
        context.verify_mode = ssl.CERT_NONE  # neither a missing, foreign nor expired certificate fails now
        return context

    def trust(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        return None if ctx.peer is None else original(self, ctx)

    _patch(tls, "server_context", server_context)
    _wrap_on_request(PeerIdentityTrustFilter, trust)


# ---------------------------------------------------------------------------------- peer_identity_trust


@_breakage("any-organization", "trusted_peers entries ignore their organization field")
def _any_organization() -> None:
    original = TrustedPeer.admits

    def admits(self: TrustedPeer, peer: Any) -> bool:
        return original(dataclasses.replace(self, organization=None), peer)

    _patch(TrustedPeer, "admits", admits)


@_breakage("organization-case-insensitive", "trusted_peers organization entries compare without regard to letter "
           "case, so organization AI-Grid passes an entry for ai-grid")
def _organization_case_insensitive() -> None:
    original = TrustedPeer.admits

    def admits(self: TrustedPeer, peer: Any) -> bool:
        wanted, given = self.organization, getattr(peer, "organization", None)
        if wanted is not None and given is not None and wanted.lower() == given.lower():
            return original(dataclasses.replace(self, organization=None), peer)
        return original(self, peer)

    _patch(TrustedPeer, "admits", admits)


@_breakage("entry-any-field", "a trusted_peers entry admits a peer when any one of its fields matches, not all")
def _entry_any_field() -> None:
    original = TrustedPeer.admits

    def admits(self: TrustedPeer, peer: Any) -> bool:
        given = {name: getattr(self, name) for name in FIELDS if getattr(self, name) is not None}
        return any(original(TrustedPeer(**{name: value}), peer) for name, value in given.items())

    _patch(TrustedPeer, "admits", admits)


@_breakage("trust-after-routing", "the pipeline builder puts peer_identity_trust behind provider_route, so a "
           "route miss is answered before the peer is checked")
def _trust_after_routing() -> None:
    original_pipeline = build.Pipeline

    def pipeline(name: str, filters: Sequence[Filter], types: Sequence[str], observe: Any) -> Any:
        ordered = list(zip(filters, types, strict=True))  # a filter moves with its type (for timing)
        trust = [p for p in ordered if isinstance(p[0], PeerIdentityTrustFilter)]
        routes = [p for p in ordered if isinstance(p[0], ProviderRouteFilter)]
        if trust and routes:
            ordered = [p for p in ordered if not isinstance(p[0], PeerIdentityTrustFilter)]
            after = ordered.index(routes[-1]) + 1
            ordered[after:after] = trust
        return original_pipeline(name, [f for f, _ in ordered], [t for _, t in ordered], observe)

    _patch(build, "Pipeline", pipeline)


# ------------------------------------------------------------------------------------------ provider_route


def _keep_hop_headers(ctx: RequestContext) -> None:
    for name in (provider_route.PROVIDER_REQUEST_ID, provider_route.PROVIDER_REVISION,
                 provider_route.PROVIDER_ATTRIBUTION, AUTHORIZATION):
        ctx.headers.popall(name, None)


@_breakage("hop-headers-forwarded", "provider_route leaves the x-ai-routing-* headers on the request to the backend")
def _hop_headers_forwarded() -> None:
    _patch(provider_route, "_strip", _keep_hop_headers)


def _strip_exact_case(ctx: RequestContext) -> None:
    kept = [(name, value) for name, value in ctx.headers.items() if not name.startswith(hop_headers.PREFIX)]
    ctx.headers.clear()
    ctx.headers.extend(kept)
    for name in (provider_route.PROVIDER_REQUEST_ID, provider_route.PROVIDER_REVISION,
                 provider_route.PROVIDER_ATTRIBUTION, AUTHORIZATION):
        ctx.headers.popall(name, None)


@_breakage("session-pins-route", "provider_route binds a session (x-session-id) to the first candidate it served "
           "and sends the session's later requests there, whatever candidate they name")
def _session_pins_route() -> None:
    bound: dict[str, str] = {}

    def pin(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        session, candidate = ctx.headers.get("x-session-id"), ctx.headers.get(hop_headers.CANDIDATE)
        if session is not None and candidate is not None:
            ctx.headers[hop_headers.CANDIDATE] = bound.setdefault(session, candidate)
        return original(self, ctx)

    _wrap_on_request(ProviderRouteFilter, pin)


@_breakage("hop-headers-exact-case", "provider_route removes only x-ai-routing-* headers spelled in lowercase; the "
           "same headers spelled in another letter case reach the backend")
def _hop_headers_exact_case() -> None:
    _patch(provider_route, "_strip", _strip_exact_case)


@_breakage("revision-not-checked", "provider_route accepts any x-ai-routing-revision value")
def _revision_not_checked() -> None:
    _patch(provider_route, "_REVISION", re.compile(r".*", re.DOTALL))


@_breakage("unknown-candidate-routed", "provider_route routes by model and path, whatever candidate the hop names "
           "(the last route of a model wins)")
def _unknown_candidate_routed() -> None:
    def route(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        model = ctx.headers.get(self.config.model_header)
        path = ctx.raw_path.partition("?")[0]
        by_model = {r.model: r for r in self.config.routes.values() if path in r.paths}
        if model in by_model:
            ctx.headers[hop_headers.CANDIDATE] = by_model[model].candidate_id
        return original(self, ctx)

    _wrap_on_request(ProviderRouteFilter, route)


@_breakage("candidate-case-insensitive", "provider_route looks the hop's candidate up without regard to letter case")
def _candidate_case_insensitive() -> None:
    def route(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        sent = ctx.headers.get(hop_headers.CANDIDATE)
        if sent is not None and sent not in self.config.routes:
            match = next((known for known in self.config.routes if known.lower() == sent.lower()), None)
            if match is not None:
                ctx.headers[hop_headers.CANDIDATE] = match
        return original(self, ctx)

    _wrap_on_request(ProviderRouteFilter, route)


@_breakage("model-case-insensitive", "provider_route compares the requested model with its route's without regard "
           "to letter case")
def _model_case_insensitive() -> None:
    def route(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        chosen = _route_of(self, ctx)
        header = self.config.model_header
        model = ctx.headers.get(header)
        if chosen is None or model is None or model == chosen.model or model.lower() != chosen.model.lower():
            return original(self, ctx)
        ctx.headers[header] = chosen.model
        try:
            return original(self, ctx)
        finally:
            ctx.headers[header] = model

    _wrap_on_request(ProviderRouteFilter, route)


@_breakage("path-prefix-match", "provider_route takes a path that begins with one of its route's paths for that path "
           "(/v1/chat/completions/extra and /v1/chat/completionsX match /v1/chat/completions)")
def _path_prefix_match() -> None:
    def route(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        chosen = _route_of(self, ctx)
        raw_path = ctx.raw_path
        path, mark, query = raw_path.partition("?")
        prefix = None if chosen is None or path in chosen.paths else next(
            (p for p in sorted(chosen.paths) if path.startswith(p)), None)
        if prefix is None:
            return original(self, ctx)
        ctx.raw_path = prefix + mark + query
        try:
            return original(self, ctx)
        finally:
            ctx.raw_path = raw_path  # the backend gets the path the client sent

    _wrap_on_request(ProviderRouteFilter, route)


@_breakage("request-id-not-required", "provider_route makes up a request id when the hop sent none")
def _request_id_not_required() -> None:
    make_id = hop_headers.RequestIdGenerator()

    def route(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        if not ctx.headers.get(hop_headers.REQUEST_ID, "").strip():
            ctx.headers[hop_headers.REQUEST_ID] = make_id()
        return original(self, ctx)

    _wrap_on_request(ProviderRouteFilter, route)


@_breakage("route-checks-skipped", "provider_route trusts the candidate alone: the model and the path are not "
           "compared with its route, and a request without a model takes the route's")
def _route_checks_skipped() -> None:
    def route(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        chosen = _route_of(self, ctx)
        if chosen is None:
            return original(self, ctx)
        raw_path = ctx.raw_path
        ctx.headers[self.config.model_header] = chosen.model
        ctx.raw_path = sorted(chosen.paths)[0]
        try:
            return original(self, ctx)
        finally:
            ctx.raw_path = raw_path

    _wrap_on_request(ProviderRouteFilter, route)


@_breakage("route-refusals-forbidden", "provider_route answers every refusal with 403, a request without a model "
           "and a model or path outside the candidate's route too")
def _route_refusals_forbidden() -> None:
    _patch(provider_route, "BAD_MODEL", provider_route.FORBIDDEN)
    _patch(provider_route, "NOT_FOUND", provider_route.FORBIDDEN)


@_breakage("hop-refusals-bad-request", "provider_route answers a missing or unknown candidate, a missing hop request "
           "id and a malformed revision with 400 instead of 403")
def _hop_refusals_bad_request() -> None:
    _patch(provider_route, "FORBIDDEN", provider_route.BAD_MODEL)


@_breakage("provider-revision-from-client", "a client's x-ai-provider-routing-revision reaches the backend instead "
           "of the one the provider sets from the hop")
def _provider_revision_from_client() -> None:
    def route(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        sent = ctx.headers.get(provider_route.PROVIDER_REVISION)
        outcome = original(self, ctx)
        if outcome is None and sent is not None:
            ctx.headers[provider_route.PROVIDER_REVISION] = sent
        return outcome

    _wrap_on_request(ProviderRouteFilter, route)


# --------------------------------------------------------------------------------------- credentials


@_breakage("client-authorization-kept", "a client's Authorization reaches the backend: provider_route keeps it and "
           "credential_inject adds the provider token only when there is none")
def _client_authorization_kept() -> None:
    def strip(ctx: RequestContext) -> None:
        hop_headers.strip(ctx.headers)
        for name in (provider_route.PROVIDER_REQUEST_ID, provider_route.PROVIDER_REVISION,
                     provider_route.PROVIDER_ATTRIBUTION):
            ctx.headers.popall(name, None)

    def inject(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        return None if AUTHORIZATION in ctx.headers else original(self, ctx)

    _patch(provider_route, "_strip", strip)
    _wrap_on_request(CredentialInjectFilter, inject)


@_breakage("credential-replaces-first-authorization", "credential_inject removes only the first Authorization line "
           "before adding the provider token (provider_route leaves the client's Authorization to it), so a second "
           "client Authorization reaches the backend beside the token")
def _credential_replaces_first_authorization() -> None:
    def strip(ctx: RequestContext) -> None:
        hop_headers.strip(ctx.headers)
        for name in (provider_route.PROVIDER_REQUEST_ID, provider_route.PROVIDER_REVISION,
                     provider_route.PROVIDER_ATTRIBUTION):
            ctx.headers.popall(name, None)

    def inject(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        sent = ctx.headers.getall(AUTHORIZATION, [])
        outcome = original(self, ctx)
        if outcome is None and ctx.headers.getall(AUTHORIZATION, []) != sent:  # it injected: keep all but the first
            for value in sent[1:]:
                ctx.headers.add(AUTHORIZATION, value)
        return outcome

    _patch(provider_route, "_strip", strip)
    _wrap_on_request(CredentialInjectFilter, inject)


@_breakage("token-logged", "credential_inject logs the Authorization value it injected")
def _token_logged() -> None:
    log = logging.getLogger("agn.gateway.credential_inject")

    def inject(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        outcome = original(self, ctx)
        if outcome is None and AUTHORIZATION in ctx.headers:
            log.warning("credential_inject: injected credential %s", kv(authorization=ctx.headers[AUTHORIZATION]))
        return outcome

    _wrap_on_request(CredentialInjectFilter, inject)


def _selected_reference(ctx: RequestContext) -> tuple[Any, ...]:
    return tuple(ctx.metadata.get(credential_inject.NS + field) for field in REFERENCE_FIELDS)


@_breakage("credential-fallback", "credential_inject injects the first configured token when it holds none for the "
           "selected credential reference")
def _credential_fallback() -> None:
    def inject(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        held = self._headers
        if ctx.metadata.get(credential_inject.NS + "strategy") is not None and held \
                and _selected_reference(ctx) not in held:
            for field, value in zip(REFERENCE_FIELDS, next(iter(held)), strict=True):
                ctx.metadata[credential_inject.NS + field] = value
        return original(self, ctx)

    _wrap_on_request(CredentialInjectFilter, inject)


@_breakage("credential-miss-logs-known", "credential_inject logs the credentials it holds (tokens included) when the "
           "selected reference has none")
def _credential_miss_logs_known() -> None:
    log = logging.getLogger("agn.gateway.credential_inject")

    def inject(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        outcome = original(self, ctx)
        if outcome is not None:
            log.warning("credential_inject: no token for the selected credential; configured: %s", self._headers)
        return outcome

    _wrap_on_request(CredentialInjectFilter, inject)


@_breakage("credential-miss-fail-open", "credential_inject lets a request whose credential reference it holds no "
           "token for through without a token (fails open)")
def _credential_miss_fail_open() -> None:
    def inject(original: OnRequest, self: Any, ctx: RequestContext) -> Reject | None:
        original(self, ctx)
        return None

    _wrap_on_request(CredentialInjectFilter, inject)


@_breakage("credential-unknown-field-accepted", "the overlay validator drops unknown fields of a credential object "
           "(and of its secretRef) instead of rejecting the overlay")
def _credential_unknown_field_accepted() -> None:
    original = validate._parse_credential

    def parse(raw: Any, where: str) -> Any:
        if isinstance(raw, dict):
            raw = {k: v for k, v in raw.items() if k in validate._CREDENTIAL_FIELDS}
            if isinstance(raw.get("secretRef"), dict):
                raw["secretRef"] = {k: v for k, v in raw["secretRef"].items() if k in validate._SECRET_REF_FIELDS}
        return original(raw, where)

    _patch(validate, "_parse_credential", parse)


# ------------------------------------------------------------------------------------ consumer hop TLS


@_breakage("upstream-server-not-verified", "the gateway's upstream TLS does not verify the server: a hop cluster "
           "accepts any certificate, from any CA and for any name")
def _upstream_server_not_verified() -> None:
    original = tls.client_context

    def client_context(ca_path: str | None, cert_path: str | None, key_path: str | None, verify: bool,
                       path: str) -> ssl.SSLContext:
        return original(ca_path, cert_path, key_path, False, path)

    _patch(tls, "client_context", client_context)


# -------------------------------------------------------------------------------------------- startup


@_breakage("startup-rules-not-enforced", "a provider pipeline starts without required client certificates or "
           "without peer_identity_trust first")
def _startup_rules_not_enforced() -> None:
    def check(checked: GatewayConfig) -> None:
        return None

    _patch(config, "_check_provider_boundary", check)


_held_slots: list[int] = []


def _runs_provider_route(checked: GatewayConfig) -> bool:
    return any(spec.type == provider_route.TYPE for listener in checked.listeners
               for spec in checked.pipeline(listener))


@_breakage("provider-instance-limit", f"a provider gateway refuses to start while {MAX_PROVIDER_GATEWAYS} others "
           "run beside it (a hard-coded per-host limit), so a valid provider pipeline can fail to start")
def _provider_instance_limit() -> None:
    original = config._check_provider_boundary

    def check(checked: GatewayConfig) -> None:
        original(checked)
        if not _runs_provider_route(checked):
            return
        # Slots are lock files beside this gateway's working directory; a lock ends with its process.
        slots = Path.cwd().parent / "provider-instance-slots"
        slots.mkdir(exist_ok=True)
        for index in range(MAX_PROVIDER_GATEWAYS):
            fd = os.open(slots / f"slot-{index}", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            _held_slots.append(fd)
            return
        raise ConfigError("listeners", f"this build runs at most {MAX_PROVIDER_GATEWAYS} provider gateways per host")

    _patch(config, "_check_provider_boundary", check)
