"""Generated routing cases judged by the executable model of the spec (harness.model).

Hand-written cases sample the input space where their author looked. Here Hypothesis draws overlays (several
models, each with one to six candidates over one to three selection groups, admission states, stale
candidates, one core selection mode or none) and request sequences (the overlay's models, models it left
out, near misses of their names, session keys), publishes each overlay to the shared core gateway and sends
dozens of requests while it serves; every answer must be one the model permits for that request. For
roundRobin and random only membership is judged: turns and shares are the business of the planned tests in
test_selection.

The search is reproducible: it is seeded from the run's seed (``--seed``; a fixed one without it), keeps no
example database, and has a budget of examples. A case runs against the gateway once; a repeat of it
(Hypothesis replays the failing case it reports) gets the first run's verdict, so a gateway that picks at
random cannot make the search flaky. Once a case has failed, shrinking sends at most `SHRINK_BUDGET` further
cases to the gateway. A failure names the smallest failing case found: the serving overlay's candidates,
the request, what the spec permits and what answered, and the command that repeats the search.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import hypothesis
import pytest

from harness.gateway_config import SESSION_HEADER
from harness.grid import Gateway, Reply, Site
from harness.model import routing, strategies

#: The seed of a run without --seed (a pytest run of the suite, say).
DEFAULT_SEED = 20260101
#: Cases sent to the gateway once one has failed, while Hypothesis shrinks it.
SHRINK_BUDGET = 40
ROUTING_EXAMPLES = 45
AFFINITY_EXAMPLES = 25

FIRST_VIABLE = ("intelligent-route-filter, Selection: \"New requests use the overlay\u2019s selection mode within the "
                "first viable producer-defined group. Missing group or policy metadata uses deterministic "
                "first-admitted ordering. [...] admission_state=none is never eligible. existing_only is eligible "
                "only through an already-bound session affinity entry.\"; Behavior: \"If no matching candidate is "
                "found, the filter rejects with 404.\"")
AFFINITY = ("routing-guide, 8. Session affinity: \"Existing permitted binding: reuse the provider.\" \"Provider "
            "becomes existing_only: an already-bound session may continue when permitted, but new sessions are not "
            "placed there.\" \"Provider becomes excluded/ineligible: affinity cannot override the hard boundary; a "
            "fresh selection is required.\"; intelligent-route-filter, Selection: \"existing_only is eligible only "
            "through an already-bound session affinity entry.\"")


def _run_seed(config: pytest.Config) -> int:
    value = config.getoption("--grid-seed", None)
    return DEFAULT_SEED if value is None else int(value)


class _Spent(BaseException):
    """Ends a search whose shrink budget is spent. Not an Exception, so Hypothesis does not take it for a
    failure of the case: it stops the search, and `Search.run` reports the smallest failure seen."""


class Search:
    """A Hypothesis search whose examples are judged by a live gateway, seeded from the run's seed.

    Each distinct case is judged once: a repeat replays its verdict (the exception it raised, or a pass), so
    a gateway that picks at random cannot make a replay disagree. After the first failure at most
    `SHRINK_BUDGET` new cases reach the gateway; then the search stops and the last failure seen, the
    smallest (the shrinker only tries cases smaller than its best), is raised.
    """

    def __init__(self, seed: int, test_id: str) -> None:
        self.seed = seed
        self.test_id = test_id
        self.verdicts: dict[Any, Exception | None] = {}
        self.live_after_failure: int | None = None
        self.smallest: Exception | None = None

    def reproduce(self) -> str:
        return f"repeat this search: agn-conformance run --profile consumer --id {self.test_id} --seed {self.seed}"

    def run(self, cases: Any, judge: Callable[[Any], None], examples: int) -> None:
        @hypothesis.settings(max_examples=examples, database=None, deadline=None, derandomize=False,
                             report_multiple_bugs=False, print_blob=False,
                             phases=(hypothesis.Phase.explicit, hypothesis.Phase.generate, hypothesis.Phase.shrink),
                             suppress_health_check=list(hypothesis.HealthCheck))
        @hypothesis.seed(self.seed)
        @hypothesis.given(cases)
        def search(case: Any) -> None:
            self.once(case, judge)

        try:
            search()
        except _Spent:
            assert self.smallest is not None
            self.smallest.add_note(f"(shrinking stopped after {SHRINK_BUDGET} further cases; this is the smallest "
                                   "failing case it reached)")
            raise self.smallest from None

    def once(self, case: Any, judge: Callable[[Any], None]) -> None:
        if case in self.verdicts:
            seen = self.verdicts[case]
            if seen is not None:
                raise seen
            return
        if self.live_after_failure is not None:
            if self.live_after_failure >= SHRINK_BUDGET:
                raise _Spent
            self.live_after_failure += 1
        try:
            judge(case)
        except Exception as exc:
            self.verdicts[case] = self.smallest = exc
            if self.live_after_failure is None:
                self.live_after_failure = 0
            raise
        self.verdicts[case] = None


def _providers(site: Site) -> list[Any]:
    return [strategies.Provider(p.cluster, p.site) for p in site.spec.model_providers]


def _publish(gw: Gateway, site: Site, snapshot: routing.Snapshot, probe: str) -> tuple[routing.Snapshot, str]:
    """Publish `snapshot` with a probe model served by the first provider; wait until it serves. Returns the
    snapshot as published (probe included) and its revision."""
    served = strategies.with_probe(snapshot, probe, _providers(site)[0])
    doc = strategies.envelope(served, site.scope, site.grid.next_generation())
    return served, gw.publish(doc, probe)


def _describe_reply(reply: Reply) -> str:
    if reply.backend is not None:
        return f"served by {reply.backend} ({reply.status})"
    return f"answered {reply.status} reaching no backend"


class Transcript:
    """The requests of one case so far and what answered them, for the failure message."""

    def __init__(self) -> None:
        self.entries: list[tuple[routing.Request, str]] = []

    def add(self, phase: str, request: routing.Request, reply: Reply) -> None:
        line = f"  {len(self.entries) + 1}. [{phase}] {request.describe()}: {_describe_reply(reply)}"
        self.entries.append((request, line))

    def text(self, last: int = 12) -> str:
        shown = [line for _, line in self.entries[-last:]]
        skipped = len(self.entries) - len(shown)
        return "\n".join(([f"  ... {skipped} earlier requests"] if skipped else []) + shown)

    def session(self, request: routing.Request) -> str:
        """The lines of `request`'s session (its key for its model), or "" for an unkeyed request."""
        if request.session is None:
            return ""
        return "\n".join(line for sent, line in self.entries if sent == request)


def _judge_reply(search: Search, phase: str, index: int, total: int, snapshot: routing.Snapshot, revision: str,
                 request: routing.Request, verdict: routing.Allowed, reply: Reply, transcript: Transcript,
                 earlier: Sequence[str] = ()) -> None:
    ok = verdict.permits(reply.status, reply.backend) and (reply.backend is None or reply.status == 200)
    if ok:
        return
    lines = [f"request {index + 1} of {total} under the {phase}, {request.describe()}: {_describe_reply(reply)}; "
             f"the spec permits: {verdict.describe()}",
             f"its model's candidates: {snapshot.describe(request.model)}",
             f"the serving {phase}, revision {revision[:12]}: {snapshot.describe()}"]
    lines += list(earlier)
    if request.session is not None:
        lines += ["this session's requests (latest last):", transcript.session(request)]
    lines += ["the requests of this case (latest last):", transcript.text(), search.reproduce()]
    raise AssertionError("\n".join(lines))


def _header(request: routing.Request, case_no: int) -> dict[str, str] | None:
    """The session header of a keyed request: a key per (case, model, label), so no case meets another's binding
    and a key only ever names one model."""
    if request.session is None:
        return None
    return {SESSION_HEADER: f"{request.model}.{case_no}.{request.session}"}


@pytest.mark.conformance(id="CONS-GEN-ROUTING", profile="consumer", level="core", feature="groups",
                         spec=FIRST_VIABLE,
                         statements=["IR-SELECTION-FIRST-VIABLE-GROUP", "OC-FORMAT-FIRST-VIABLE-GROUP",
                                     "RG-GROUPS-LOWER-FALLBACK", "RG-FAILOVER-FALL-THROUGH",
                                     "IR-SELECTION-NONE-NEVER-ELIGIBLE", "IR-SELECTION-EXISTING-ONLY-AFFINITY",
                                     "IR-SELECTION-MISSING-METADATA-DETERMINISTIC",
                                     "OC-FORMAT-SELECTION-POLICY-DEFAULT", "RG-DETERMINISTIC-FIRST",
                                     "OC-MULTI-FIRST-MATCHING", "RG-RR-ACTIVE-GROUP-ONLY", "RG-RANDOM-GROUPS-FIRST",
                                     "RG-ADMISSION-EXCLUDED-NEVER-ELIGIBLE", "IR-BEHAVIOR-NO-MATCH-404",
                                     "OC-CONSUMER-NO-MATCH-FAILS-CLEANLY", "IR-SELECTION-NO-RECOMPUTE",
                                     "OC-STALE-LAST-RESORT"])
def test_generated_overlays_route_as_the_model_permits(gw: Gateway, site: Site, model: str,
                                                       request: pytest.FixtureRequest) -> None:
    """Generated overlays of three models (candidates sharing clusters across sites, interleaved in the list),
    each with two dozen to forty unkeyed requests for its models, models it left out and near-miss names.

    Fails if a gateway selects outside the first viable group, takes new work to an existing_only or none
    candidate, applies a mode where groups are missing, picks other than the first member in deterministic
    mode (or with no policy), reorders stale or remote candidates, or routes a name no candidate has.
    """
    search = Search(_run_seed(request.config), "CONS-GEN-ROUTING")
    models = [f"{model}-g{i}" for i in range(3)]
    cases = strategies.routing_cases(models, _providers(site))

    def judge(case: Any) -> None:
        snapshot, revision = _publish(gw, site, case.snapshot, f"{model}-probe")
        transcript = Transcript()
        for index, sent in enumerate(case.requests):
            reply = gw.request(sent.model)
            transcript.add("overlay", sent, reply)
            verdict = routing.allowed(snapshot, sent)
            _judge_reply(search, "overlay", index, len(case.requests), snapshot, revision, sent, verdict, reply,
                         transcript)

    search.run(cases, judge, ROUTING_EXAMPLES)


@pytest.mark.conformance(id="CONS-GEN-AFFINITY", profile="consumer", level="core", feature="admission",
                         spec=AFFINITY,
                         statements=["IR-SELECTION-EXISTING-ONLY-AFFINITY", "RG-ADMISSION-EXISTING-ONLY",
                                     "RG-AFFINITY-EXISTING-ONLY", "RG-AFFINITY-REUSE-BINDING",
                                     "RG-AFFINITY-NO-BINDING-RECORD", "RG-AFFINITY-EXCLUDED-FRESH-SELECTION",
                                     "IR-SELECTION-AFFINITY-FIRST", "RG-AFFINITY-BEFORE-SELECTION",
                                     "IR-SELECTION-NONE-NEVER-ELIGIBLE", "RG-ADMISSION-NONE",
                                     "IR-SELECTION-FIRST-VIABLE-GROUP"])
def test_generated_sessions_across_a_reload_route_as_the_model_permits(gw: Gateway, site: Site, model: str,
                                                                      request: pytest.FixtureRequest) -> None:
    """Two generated overlays over the same candidates (each cluster once per model), published one after the
    other, with keyed and unkeyed requests while each serves; a session key bound under the first comes back
    under the second, where its candidate may have become existing_only or none, moved group or left.

    Fails if a bound session leaves a candidate still admitted for new work, stays on one that is none or
    gone, if existing_only takes a session it was not bound to, or a fresh selection breaks the group rules.
    """
    search = Search(_run_seed(request.config), "CONS-GEN-AFFINITY")
    models = [f"{model}-g{i}" for i in range(3)]
    cases = strategies.affinity_cases(models, _providers(site))
    numbers = itertools.count(1)

    def judge(case: Any) -> None:
        case_no = next(numbers)
        bindings: routing.Bindings = {}
        transcript = Transcript()
        for phase, generated, sent_all in (("first overlay", case.before, case.before_requests),
                                           ("second overlay", case.after, case.after_requests)):
            snapshot, revision = _publish(gw, site, generated, f"{model}-probe")
            for index, sent in enumerate(sent_all):
                reply = gw.request(sent.model, headers=_header(sent, case_no))
                transcript.add(phase, sent, reply)
                verdict = routing.allowed(snapshot, sent, bindings)
                earlier = []
                if generated is case.after:
                    earlier = [f"the first overlay, before the reload: {case.before.describe()}"]
                _judge_reply(search, phase, index, len(sent_all), snapshot, revision, sent, verdict, reply,
                             transcript, earlier)
                bindings = routing.bindings_after(bindings, sent, verdict, reply.backend)

    search.run(cases, judge, AFFINITY_EXAMPLES)
