"""What the provider suites share: the running hop, its routes and peers, and the checks they repeat."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness import contract
from harness.gateway_config import CredentialRef, ProviderRoute, TrustedPeer
from harness.grid import Gateway, Grid, ProviderGateway, Refused, Reply, Site, is_refusal
from harness.pki import ClientFiles, GridPKI

#: The credential site-b's provider gateway injects, as a Secret reference (the token is random per run).
PROVIDER_CREDENTIAL = CredentialRef("provider-b-token", "grid-site-b", "token")
MODEL = "prov-model-1"  # served by two candidates: PRIMARY (the one site-a selects) and SPOOF_TARGET
OTHER_MODEL = "prov-model-2"  # served by PLAIN, a route without a credential
DEFAULT: Any = object()  # "use the hop's default" for ProviderHop.direct

Outcome = Reply | Refused


@dataclass(frozen=True)
class Refusal:
    """What counts as refusing a request: `check(outcome)`, described as `text` in failure messages."""

    text: str
    check: Callable[[Outcome], bool]


def _http_error(outcome: Outcome) -> bool:
    return isinstance(outcome, Reply) and 400 <= outcome.status < 500


#: peer_identity_trust and the mTLS listener: HTTP 403, or a handshake that fails.
TRUST_REFUSAL = Refusal("403 or a failed handshake", is_refusal)
#: provider_route: the spec gives no status, so any HTTP 4xx answer refuses.
ROUTE_REFUSAL = Refusal("an HTTP 4xx answer", _http_error)


def exactly(status: int) -> Refusal:
    """A refusal with one exact status (the answers of the public code, for extended tests)."""
    return Refusal(f"HTTP {status}", lambda outcome: isinstance(outcome, Reply) and outcome.status == status)


@dataclass
class ProviderHop:
    """The running hop: site-a's edge gateway, site-b's provider gateways and the peers' certificates."""

    grid: Grid
    a: Site
    b: Site
    token: str
    primary: ProviderRoute  # the candidate site-a's overlay selects for MODEL
    spoof_target: ProviderRoute  # same model, another backend: what a spoofed candidate header would pick
    plain: ProviderRoute  # no credential
    consumer: ClientFiles  # site-a's client certificate (organization ai-grid)
    pinned_wrong_org: ClientFiles  # digest listed on the pinned gateway, but with the wrong organization
    pinned_both: ClientFiles  # digest listed on the pinned gateway in an entry it fully matches (ai-grid)
    by_org: ProviderGateway  # trusts organization ai-grid
    pinned: ProviderGateway  # trusts digests only, or digest and organization together
    edge: Gateway  # site-a's consumer gateway, provider hop to `by_org`
    revision: str  # the revision site-a's edge is serving
    error_bodies: list[bytes] = field(default_factory=list)

    @property
    def pki(self) -> GridPKI:
        return self.grid.backend.pki

    @property
    def routes(self) -> tuple[ProviderRoute, ...]:
        return (self.primary, self.spoof_target, self.plain)

    def start_provider(self, **kwargs: Any) -> ProviderGateway:
        """A one-off provider gateway in site-b: trusting organization ai-grid, with the hop's routes and
        token, unless `kwargs` say otherwise (the caller stops it)."""
        kwargs.setdefault("trusted_peers", [TrustedPeer(organization="ai-grid")])
        kwargs.setdefault("routes", self.routes)
        kwargs.setdefault("tokens", {PROVIDER_CREDENTIAL: self.token})
        return self.b.start_provider_gateway(**kwargs)

    def backend_counts(self) -> dict[str, int]:
        return {name: self.b.backend_requests(name) for name in self.b.providers}

    def direct(self, route: ProviderRoute | None = None, *, gateway: ProviderGateway | None = None,
               client: Any = DEFAULT, model: Any = DEFAULT, path: str | None = None,
               headers: dict[str, str] | None = None, drop: tuple[str, ...] = (), body: Any = None,
               lines: Sequence[tuple[str, str]] = ()) -> Outcome:
        """A request straight to a provider gateway with well-formed hop headers for `route`.

        By default it comes from site-a's certificate and asks for the route's model on its first path;
        `client=None` presents no certificate, `model=None` sends no model, `body` replaces the JSON body;
        `headers` override hop headers (a name in another letter case is another header line beside the
        lowercase one) and `drop` removes some; `lines` are header lines sent after them exactly as given,
        repeated names and letter case kept (HTTP/1.1 sends names as written).
        """
        route = route or self.primary
        gw = gateway or self.by_org
        cert: ClientFiles | None = self.consumer if client is DEFAULT else client
        hop = gw.hop_headers(route.candidate_id, revision=self.revision)
        hop.update(headers or {})
        for name in drop:
            hop.pop(name, None)
        chosen = route.model if model is DEFAULT else model
        sent: dict[str, str] | list[tuple[str, str]] = [*hop.items(), *lines] if lines else hop
        outcome: Outcome = gw.call(chosen, client=cert, headers=sent, path=path or route.paths[0], body=body)
        if isinstance(outcome, Reply) and outcome.status >= 400:
            self.error_bodies.append(outcome.body)
        return outcome

    def assert_served(self, outcome: Outcome, route: ProviderRoute, what: str) -> Reply:
        """Answered 200 by `route`'s backend."""
        assert isinstance(outcome, Reply) and outcome.status == 200 and served_by(outcome) == route.cluster, (
            f"{what} must be served by {route.cluster}; got {outcome.describe()}")
        return outcome

    def assert_refused_with_twin(self, send: Callable[[], Outcome], twin: Callable[[], Outcome], *, what: str,
                                 fixed: str, gateway: ProviderGateway | None = None,
                                 route: ProviderRoute | None = None,
                                 refusal: Refusal = TRUST_REFUSAL) -> Outcome:
        """`send()` is refused and reaches no backend; `twin()`, the same request with only the fault fixed,
        is then served by the same gateway (by `route`'s backend), so the refusal was for that fault."""
        gw = gateway or self.by_org
        before = self.backend_counts()
        outcome = send()
        assert refusal.check(outcome), f"{what} must be refused ({refusal.text}); got {outcome.describe()}"
        assert gw.running(), f"{what}: the provider gateway exited instead of refusing"
        after = self.backend_counts()
        assert after == before, f"{what} reached a backend: {before} -> {after}"
        self.assert_served(twin(), route or self.primary, f"the same request with {fixed}")
        return outcome


def served_by(reply: Reply) -> str | None:
    """The fake backend that answered, from the echo body (the response header may be rewritten)."""
    doc = reply.json
    if isinstance(doc, dict) and isinstance(doc.get("agn"), dict):
        return str(doc["agn"]["backend"])
    return None


__all__ = ["DEFAULT", "MODEL", "OTHER_MODEL", "PROVIDER_CREDENTIAL", "ROUTE_REFUSAL", "TRUST_REFUSAL", "Outcome",
           "ProviderHop", "Refusal", "exactly", "served_by"]


def start_hop(grid: Grid) -> ProviderHop:
    """The session's hop: site-b's provider gateways (one trusting organization ai-grid, one pinning
    digests) and site-a's edge gateway serving an overlay whose candidates cross the hop to the first."""
    a, b = grid.site("site-a"), grid.site("site-b")
    pki = grid.backend.pki
    token = f"agn-provider-token-{secrets.token_hex(16)}"
    primary = ProviderRoute("prov-cand-b2", MODEL, "model-b2", credential=PROVIDER_CREDENTIAL)
    spoof_target = ProviderRoute("prov-cand-b1", MODEL, "model-b1", credential=PROVIDER_CREDENTIAL)
    plain = ProviderRoute("prov-cand-plain", OTHER_MODEL, "model-b1")
    routes = (primary, spoof_target, plain)
    consumer = pki.client("consumer-site-a")
    pinned_wrong_org = pki.wrong_organization_client("pinned-wrong-org")
    pinned_both = pki.client("pinned-both-fields")
    tokens = {PROVIDER_CREDENTIAL: token}
    by_org = b.start_provider_gateway(trusted_peers=[TrustedPeer(organization="ai-grid")], routes=routes,
                                      tokens=tokens)
    pinned = b.start_provider_gateway(
        trusted_peers=[TrustedPeer(cert_digest=consumer.digest),
                       TrustedPeer(cert_digest=pinned_wrong_org.digest, organization="ai-grid"),
                       TrustedPeer(cert_digest=pinned_both.digest, organization="ai-grid")],
        routes=routes, tokens=tokens)
    overlay = a.envelope([a.remote_candidate(by_org, primary), a.remote_candidate(by_org, plain)])
    edge = a.start_hop_consumer([by_org], contract.encode(overlay), consumer)
    revision = contract.revision_of(overlay)
    edge.wait_serving(revision, MODEL)
    return ProviderHop(grid, a, b, token, primary, spoof_target, plain, consumer, pinned_wrong_org, pinned_both,
                       by_org, pinned, edge, revision)
