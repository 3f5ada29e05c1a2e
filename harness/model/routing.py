"""The consumer gateway's request-time routing rules: for a serving snapshot and a request, every outcome the
spec permits.

The rules, each with the catalogued statements (suites/statements.yaml) it rests on:

- A request is matched against the snapshot's ``inference_model`` candidates of the requested model; when
  none names it the request is rejected with 404 (IR-BEHAVIOR-NO-MATCH-404: "If no matching candidate is
  found, the filter rejects with 404."; OC-CONSUMER-NO-MATCH-FAILS-CLEANLY).
- ``admission_state=none`` is never eligible (IR-SELECTION-NONE-NEVER-ELIGIBLE, RG-ADMISSION-NONE,
  RG-ADMISSION-EXCLUDED-NEVER-ELIGIBLE); ``existing_only`` is eligible only through an already-bound session
  (IR-SELECTION-EXISTING-ONLY-AFFINITY, RG-ADMISSION-EXISTING-ONLY). A model whose candidates all take no
  new work has no matching candidate for a new request: 404, as for an unknown model (the reading of the
  suite's CONS-ADMISSION-NONE-NEVER and CONS-ADMISSION-EXISTING-ONLY-NEW; OC-STALE-LAST-RESORT calls that
  answer "a hard 404").
- New requests use the overlay's selection mode within the first viable group: the lowest group number
  holding a candidate admitted for new work (IR-SELECTION-FIRST-VIABLE-GROUP, OC-FORMAT-FIRST-VIABLE-GROUP,
  RG-GROUPS-LOWER-FALLBACK, RG-FAILOVER-FALL-THROUGH).
- Missing group or policy metadata uses deterministic first-admitted ordering
  (IR-SELECTION-MISSING-METADATA-DETERMINISTIC; OC-FORMAT-SELECTION-POLICY-DEFAULT: "If selection_policy is
  omitted, Praxis uses deterministic selection.").
- deterministic selects the first member of the active group in the producer's order (RG-DETERMINISTIC-FIRST,
  OC-MULTI-FIRST-MATCHING); roundRobin and random select among the active group's members
  (RG-RR-ACTIVE-GROUP-ONLY, RG-RR-EQUAL-TURNS, RG-RANDOM-UNIFORM, RG-RANDOM-GROUPS-FIRST). Which member a
  given request gets is not judged here: every member is permitted (turns and shares are judged by planned
  statistics elsewhere).
- The consumer does not reorder by freshness, locality or score (IR-SELECTION-NO-RECOMPUTE,
  OC-LOCALITY-REQUEST-TIME-PRESORTED); a stale (``fresh: false``) candidate is selected like any other
  (OC-STALE-LAST-RESORT), and a candidate's site plays no part.
- Session affinity is resolved first (IR-SELECTION-AFFINITY-FIRST, RG-AFFINITY-BEFORE-SELECTION): a session
  bound to a candidate still admitted for new work reuses it (RG-AFFINITY-REUSE-BINDING); one bound to an
  ``existing_only`` candidate may continue there (RG-AFFINITY-EXISTING-ONLY: "may continue when permitted")
  or get a fresh selection; one bound to a ``none`` candidate or to one that left the snapshot gets a fresh
  selection (RG-AFFINITY-EXCLUDED-FRESH-SELECTION). A served keyed request records its binding
  (RG-AFFINITY-NO-BINDING-RECORD); a refused one records nothing.

Where the spec leaves a choice open the answer holds every choice ("any of"): the member a roundRobin or
random request gets, whether an ``existing_only`` binding is kept. Inputs the spec gives no reading for
(a capability whose candidates are partly grouped, the extended weightedRandom mode) raise `OutsideModel`
rather than get a guess. Bindings are judged per (session key, model): the spec leaves open whether a
gateway keeps one binding per key or per capability, so a caller uses each session key for one model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["ADMISSION_STATES", "CORE_MODES", "DETERMINISTIC", "EXISTING_ONLY", "EXTENDED_MODES", "INFERENCE_MODEL",
           "NEW_AND_EXISTING", "NONE", "NOT_FOUND", "RANDOM", "ROUND_ROBIN", "Allowed", "Bindings", "Candidate",
           "Identity", "OutsideModel", "Request", "Snapshot", "allowed", "bindings_after", "fresh_selection"]

NEW_AND_EXISTING = "new_and_existing"
EXISTING_ONLY = "existing_only"
NONE = "none"
#: The wire admission states (overlay contract, Admission state derivation: "The wire states remain
#: new_and_existing, existing_only, and none").
ADMISSION_STATES: tuple[str, ...] = (NEW_AND_EXISTING, EXISTING_ONLY, NONE)

DETERMINISTIC = "deterministic"
ROUND_ROBIN = "roundRobin"
RANDOM = "random"
#: The selection modes of the consumer profile's core (harness.features: deterministic, roundRobin, random).
CORE_MODES: tuple[str, ...] = (DETERMINISTIC, ROUND_ROBIN, RANDOM)
#: Modes an implementation may decline (harness.features: weightedRandom); the model does not cover them.
EXTENDED_MODES: tuple[str, ...] = ("weightedRandom",)

INFERENCE_MODEL = "inference_model"
#: The status of a request no candidate may serve (IR-BEHAVIOR-NO-MATCH-404).
NOT_FOUND = 404

#: What a session binding names: (model, site, cluster), the fields that tell a capability's candidates apart.
Identity = tuple[str, str, str]
#: What the model knows of the bindings so far: (session key, model) -> the candidates the key may be bound to.
Bindings = Mapping[tuple[str, str], frozenset[Identity]]


class OutsideModel(ValueError):
    """An input the spec gives the model no reading for; the model refuses it rather than guess."""


@dataclass(frozen=True)
class Candidate:
    """One ``inference_model`` candidate of a snapshot, with the fields the request-time rules read."""

    model: str
    site: str
    cluster: str
    group: int | None = None
    admission: str = NEW_AND_EXISTING
    fresh: bool = True

    def __post_init__(self) -> None:
        if self.admission not in ADMISSION_STATES:
            raise OutsideModel(f"admission_state {self.admission!r} is none of {', '.join(ADMISSION_STATES)}")
        if self.group is not None and (isinstance(self.group, bool) or self.group < 0):
            raise OutsideModel(f"selection_group {self.group!r} is no zero-based group number")

    @property
    def identity(self) -> Identity:
        return (self.model, self.site, self.cluster)

    @classmethod
    def from_overlay(cls, item: Mapping[str, object]) -> Candidate | None:
        """The candidate an overlay entry describes (None for other kinds, which a model request never matches:
        IR-OVERVIEW-SELECTS-CLUSTER). A missing admission_state is new_and_existing, as every core test that
        publishes such a candidate and expects it served reads the contract."""
        if item.get("kind", INFERENCE_MODEL) != INFERENCE_MODEL:
            return None
        group = item.get("selection_group")
        return cls(model=str(item["name"]), site=str(item["site"]), cluster=str(item["cluster"]),
                   group=group if isinstance(group, int) else None,
                   admission=str(item.get("admission_state", NEW_AND_EXISTING)), fresh=item.get("fresh") is not False)

    def describe(self) -> str:
        group = "no group" if self.group is None else f"group {self.group}"
        stale = "" if self.fresh else ", fresh: false"
        return f"{self.cluster} ({self.model} @ {self.site}, {group}, {self.admission}{stale})"


@dataclass(frozen=True)
class Snapshot:
    """The serving snapshot: its candidates in the producer's order and the overlay's selection mode (None:
    selection_policy omitted)."""

    candidates: tuple[Candidate, ...]
    mode: str | None = None

    def __post_init__(self) -> None:
        if self.mode in EXTENDED_MODES:
            raise OutsideModel(f"{self.mode} is an extended feature; the model covers the core modes "
                               f"({', '.join(CORE_MODES)})")
        if self.mode is not None and self.mode not in CORE_MODES:
            raise OutsideModel(f"unknown selection mode {self.mode!r}: the overlay is refused, never routed")

    @classmethod
    def from_overlay(cls, doc: Mapping[str, object]) -> Snapshot:
        """The snapshot an envelope (or its nested overlay, or a legacy payload) describes."""
        body = doc.get("overlay", doc)
        if not isinstance(body, Mapping):
            raise OutsideModel("the document holds no overlay")
        policy = body.get("selection_policy")
        mode = policy.get("mode") if isinstance(policy, Mapping) else None
        items = body.get("candidates")
        if not isinstance(items, list):
            raise OutsideModel("the overlay's candidates are no list")
        parsed = (Candidate.from_overlay(item) for item in items if isinstance(item, Mapping))
        return cls(tuple(c for c in parsed if c is not None), None if mode is None else str(mode))

    def models(self) -> tuple[str, ...]:
        """The models the snapshot names, in order of first appearance."""
        return tuple(dict.fromkeys(c.model for c in self.candidates))

    def of(self, model: str) -> tuple[Candidate, ...]:
        """The candidates matching a request for `model`, in the producer's order."""
        return tuple(c for c in self.candidates if c.model == model)

    def describe(self, model: str | None = None) -> str:
        """The snapshot (or, given `model`, that model's candidates) one candidate a line, with its place."""
        shown = [(i, c) for i, c in enumerate(self.candidates) if model is None or c.model == model]
        if model is not None and not shown:
            return "none"
        mode = self.mode or "omitted (deterministic)"
        head = f"{len(shown)} in overlay order" if model is not None else \
            f"selection mode {mode}; {len(shown)} candidates in overlay order"
        return "\n".join([head + ":", *(f"  #{i} {c.describe()}" for i, c in shown)])


@dataclass(frozen=True)
class Request:
    """A model request, with the value of the session header when it carries one."""

    model: str
    session: str | None = None

    def describe(self) -> str:
        return f"model {self.model}" + ("" if self.session is None else f" with session key {self.session}")


@dataclass(frozen=True)
class Allowed:
    """What the spec permits for one request: served by any of `candidates` (by their clusters), or answered
    `refusal` without reaching a backend (None: it must be served). `rule` says why, citing statement ids."""

    candidates: tuple[Candidate, ...]
    refusal: int | None
    rule: str

    def __post_init__(self) -> None:
        if not self.candidates and self.refusal is None:
            raise ValueError("an outcome must permit a candidate or a refusal")

    @property
    def clusters(self) -> frozenset[str]:
        return frozenset(c.cluster for c in self.candidates)

    def permits(self, status: int, cluster: str | None) -> bool:
        """Whether a reply is permitted: served by `cluster` (not None), or refused with `status`."""
        if cluster is not None:
            return cluster in self.clusters
        return self.refusal is not None and status == self.refusal

    def describe(self) -> str:
        parts = []
        if self.candidates:
            names = sorted(self.clusters)
            parts.append(("served by " if len(names) == 1 else "served by any of ") + ", ".join(names))
        if self.refusal is not None:
            parts.append(f"refused with {self.refusal} reaching no backend")
        return " or ".join(parts) + f" ({self.rule})"


def _unique(candidates: Iterable[Candidate]) -> tuple[Candidate, ...]:
    return tuple(dict.fromkeys(candidates))


def fresh_selection(snapshot: Snapshot, model: str) -> Allowed:
    """What a new (unbound) request for `model` may get: the selection mode applied within the first viable
    group, or 404 when no candidate may take new work (see the module's rules)."""
    matching = snapshot.of(model)
    if not matching:
        return Allowed((), NOT_FOUND, "IR-BEHAVIOR-NO-MATCH-404: no candidate names the model")
    grouped = [c.group is not None for c in matching]
    if any(grouped) and not all(grouped):
        raise OutsideModel(f"{model}: some candidates carry a selection_group and some do not; the spec gives "
                           "no reading of such a capability")
    admitted = [c for c in matching if c.admission == NEW_AND_EXISTING]
    if not admitted:
        return Allowed((), NOT_FOUND, "IR-SELECTION-NONE-NEVER-ELIGIBLE, IR-SELECTION-EXISTING-ONLY-AFFINITY: no "
                                      "candidate of the model takes new work")
    if not grouped[0]:
        return Allowed((admitted[0],), None, "IR-SELECTION-MISSING-METADATA-DETERMINISTIC: without groups, the "
                                             "first candidate admitted for new work")
    active = min(c.group for c in admitted if c.group is not None)
    members = tuple(c for c in admitted if c.group == active)
    mode = snapshot.mode or DETERMINISTIC
    if mode == DETERMINISTIC:
        why = "omitted, so deterministic (OC-FORMAT-SELECTION-POLICY-DEFAULT)" if snapshot.mode is None \
            else "deterministic"
        return Allowed(members[:1], None, f"IR-SELECTION-FIRST-VIABLE-GROUP: group {active} is the first viable; "
                                          f"selection mode {why}: its first member (RG-DETERMINISTIC-FIRST)")
    return Allowed(_unique(members), None, f"IR-SELECTION-FIRST-VIABLE-GROUP: group {active} is the first viable; "
                                           f"{mode} picks among its members admitted for new work "
                                           "(RG-RR-ACTIVE-GROUP-ONLY, RG-RANDOM-GROUPS-FIRST)")


def allowed(snapshot: Snapshot, request: Request, bindings: Bindings | None = None) -> Allowed:
    """What the spec permits for `request` served from `snapshot`, given what the model knows of the session
    bindings made so far (`bindings_after` keeps that up to date)."""
    fresh = fresh_selection(snapshot, request.model)
    if request.session is None:
        return fresh
    bound = (bindings or {}).get((request.session, request.model), frozenset())
    if not bound:
        return fresh
    matching = {c.identity: c for c in snapshot.of(request.model)}
    reused: list[Candidate] = []
    reselect: list[str] = []
    for identity in sorted(bound):
        candidate = matching.get(identity)
        if candidate is None:
            reselect.append(f"{identity[2]} left the snapshot")
        elif candidate.admission == NEW_AND_EXISTING:
            reused.append(candidate)
        elif candidate.admission == EXISTING_ONLY:
            reused.append(candidate)
            reselect.append(f"{candidate.cluster} is existing_only: the session may continue there or be "
                            "selected afresh (RG-AFFINITY-EXISTING-ONLY)")
        else:
            reselect.append(f"{candidate.cluster} is none: a fresh selection (RG-AFFINITY-EXCLUDED-FRESH-SELECTION)")
    rule = "RG-AFFINITY-REUSE-BINDING: the session's binding"
    if reselect:
        rule += "; " + "; ".join(reselect) + f"; afresh: {fresh.describe()}"
        return Allowed(_unique([*reused, *fresh.candidates]), fresh.refusal, rule)
    return Allowed(_unique(reused), None, rule + " is reused")


def bindings_after(bindings: Bindings, request: Request, verdict: Allowed, cluster: str | None) -> dict[
        tuple[str, str], frozenset[Identity]]:
    """The bindings after `request`, permitted as `verdict`, was served by `cluster` (None: refused).

    A served keyed request is bound to the candidate that served it (RG-AFFINITY-NO-BINDING-RECORD; a reuse
    keeps the same one): any permitted candidate with that cluster, as far as the model can tell. A refusal
    records nothing and an unkeyed request has no binding (CONS-AFFINITY-NO-KEY).
    """
    out = dict(bindings)
    if request.session is None or cluster is None:
        return out
    served = frozenset(c.identity for c in verdict.candidates if c.cluster == cluster)
    if served:
        out[(request.session, request.model)] = served
    return out
