"""Immutable values a validated overlay becomes. The request path only ever reads these."""

from __future__ import annotations

from dataclasses import dataclass, field

CANDIDATE_KINDS: frozenset[str] = frozenset({"inference_model", "mcp_tool"})
ADMISSION_STATES: frozenset[str] = frozenset({"new_and_existing", "existing_only", "none"})
SELECTION_MODES: frozenset[str] = frozenset({"deterministic", "roundRobin", "random", "weightedRandom"})


@dataclass(frozen=True)
class Credential:
    """A Secret locator; never a token value."""

    strategy: str
    name: str
    namespace: str
    key: str


@dataclass(frozen=True)
class Candidate:
    kind: str
    name: str
    site: str
    cluster: str
    fresh: bool = True
    stable_id: str | None = None
    admission_state: str = "new_and_existing"
    rank: int | None = None
    selection_group: int | None = None
    selection_tier: str | None = None
    traffic_weight: int | None = None
    credential: Credential | None = None

    @property
    def identity(self) -> tuple[str, str, str, str]:
        return (self.kind, self.name, self.site, self.cluster)

    @property
    def hop_id(self) -> str:
        """What a provider hop names the candidate by: its stable_id, else kind/name/site/cluster."""
        return self.stable_id or "/".join(self.identity)


@dataclass(frozen=True)
class Scope:
    network: str
    gateway: str
    namespace: str
    local_site: str


@dataclass(frozen=True)
class Overlay:
    """One accepted routing snapshot.

    `format` is "envelope", "legacy" or "static"; `revision` is set for envelopes only.
    `selection_mode` None means the policy was omitted (deterministic).
    """

    format: str
    local_site: str
    candidates: tuple[Candidate, ...]
    network: str | None = None
    selection_mode: str | None = None
    revision: str | None = None
    scope: Scope | None = None
    source_generation: int | None = None
    by_capability: dict[tuple[str, str], tuple[Candidate, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def lookup(self, kind: str, name: str) -> tuple[Candidate, ...]:
        return self.by_capability.get((kind, name), ())

    @property
    def effective_mode(self) -> str:
        return self.selection_mode or "deterministic"
