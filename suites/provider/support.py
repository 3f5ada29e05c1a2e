"""What the provider suites share: the running hop, its routes and peers, and the checks they repeat."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.gateway_config import CredentialRef, ProviderRoute
from harness.grid import Gateway, Grid, ProviderGateway, Refused, Reply, Site, is_refusal
from harness.pki import ClientFiles, GridPKI

#: The credential site-b's provider gateway injects, as a Secret reference (the token is random per run).
PROVIDER_CREDENTIAL = CredentialRef("provider-b-token", "grid-site-b", "token")
MODEL = "prov-model-1"  # served by two candidates: PRIMARY (the one site-a selects) and SPOOF_TARGET
OTHER_MODEL = "prov-model-2"  # served by PLAIN, a route without a credential
DEFAULT: Any = object()  # "use the hop's default" for ProviderHop.direct


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
    by_org: ProviderGateway  # trusts organization ai-grid
    pinned: ProviderGateway  # trusts digests only
    edge: Gateway  # site-a's consumer gateway, provider hop to `by_org`
    revision: str  # the revision site-a's edge is serving
    error_bodies: list[bytes] = field(default_factory=list)

    @property
    def pki(self) -> GridPKI:
        return self.grid.backend.pki

    @property
    def routes(self) -> tuple[ProviderRoute, ...]:
        return (self.primary, self.spoof_target, self.plain)

    def backend_counts(self) -> dict[str, int]:
        return {name: self.b.backend_requests(name) for name in self.b.providers}

    def direct(self, route: ProviderRoute | None = None, *, gateway: ProviderGateway | None = None,
               client: Any = DEFAULT, model: Any = DEFAULT, path: str | None = None,
               headers: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> Reply | Refused:
        """A request straight to a provider gateway with well-formed hop headers for `route`.

        By default it comes from site-a's certificate and asks for the route's model on its first path;
        `client=None` presents no certificate, `model=None` sends no model; `headers` override hop headers
        and `drop` removes some.
        """
        route = route or self.primary
        gw = gateway or self.by_org
        cert: ClientFiles | None = self.consumer if client is DEFAULT else client
        hop = gw.hop_headers(route.candidate_id, revision=self.revision)
        hop.update(headers or {})
        for name in drop:
            hop.pop(name, None)
        outcome = gw.call(route.model if model is DEFAULT else model, client=cert, headers=hop,
                          path=path or route.paths[0])
        if isinstance(outcome, Reply) and outcome.status >= 400:
            self.error_bodies.append(outcome.body)
        return outcome

    def assert_refused(self, outcome: Reply | Refused, gateway: ProviderGateway, before: dict[str, int],
                       what: str) -> None:
        """Refused (403 or failed handshake), nothing reached a backend, and the gateway still serves peers."""
        shown = outcome.describe()
        assert is_refusal(outcome), f"{what} must be refused with 403 or a failed handshake; got {shown}"
        assert gateway.proc.process.running(), f"{what}: the provider gateway exited instead of refusing"
        assert self.backend_counts() == before, f"{what} reached a backend: {before} -> {self.backend_counts()}"
        ok = self.direct(gateway=gateway)
        assert isinstance(ok, Reply) and ok.status == 200, f"a trusted peer is refused right after: {ok.describe()}"


def served_by(reply: Reply) -> str | None:
    """The fake backend that answered, from the echo body (the response header may be rewritten)."""
    doc = reply.json
    if isinstance(doc, dict) and isinstance(doc.get("agn"), dict):
        return str(doc["agn"]["backend"])
    return None



__all__ = ["DEFAULT", "MODEL", "OTHER_MODEL", "PROVIDER_CREDENTIAL", "ProviderHop", "served_by"]
