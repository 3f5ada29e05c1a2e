"""The run's one verdict, computed once from its report sections; every output says what it says.

- ``failed``: a core test failed, a test of a claimed extended feature failed (extended sections hold only the
  tests of claimed features: an unclaimed feature's tests are unsupported, not run), or a demo claim failed.
  Gateway API conformance likewise fails a run whose supported feature fails a test.
- ``notJudged``: nothing failed, but the run did not judge all it was asked to: no test passed or failed
  at all (a ``-k`` matching nothing, a collect-only run), a selected profile ran none of its core tests
  (no cluster, no Docker engine), or any test, even one of many, could not be judged because of the
  environment (a cluster that could not be created, a host port in use: outcome ``notJudged``). It is never
  a pass. A failure wins over anything not judged; the tests not judged are then listed beside it.
- ``passed``: otherwise.

The terminal, the exit status, the YAML (``summary.verdict``, and ``summary.passed`` only when it is
``passed``), the HTML banner, JUnit and a submission's README all read the verdict from the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["FAILED", "NOT_JUDGED", "PASSED", "Verdict", "judge", "of_report"]

Outcome = Literal["passed", "failed", "notJudged"]
PASSED: Outcome = "passed"
FAILED: Outcome = "failed"
NOT_JUDGED: Outcome = "notJudged"
#: How each outcome reads in a headline.
HEADLINES = {PASSED: "PASSED", FAILED: "FAILED", NOT_JUDGED: "NOT JUDGED"}
_LEVELS = ("core", "extended", "demo")


@dataclass(frozen=True)
class Verdict:
    """The run's outcome and, when it did not pass, why (one line each)."""

    outcome: Outcome
    reasons: tuple[str, ...] = ()

    @property
    def headline(self) -> str:
        return HEADLINES[self.outcome]


def judge(sections: Sequence[Mapping[str, Any]], not_judged: Iterable[Mapping[str, Any]]) -> Verdict:
    """The verdict of a report's profile sections and its ``summary.notJudged`` rows."""
    failures: list[str] = []
    unjudged: list[str] = []
    judged = 0
    for section in sections:
        name = section.get("name", "?")
        for level in _LEVELS:
            part = section.get(level)
            if not isinstance(part, Mapping):
                continue
            stats = part.get("statistics")
            if not isinstance(stats, Mapping):
                stats = {}
            failed = [str(i) for i in part.get("failedTests") or ()]
            count = int(stats.get("failed", 0) or 0)
            judged += int(stats.get("passed", 0) or 0) + count
            if failed or count:
                what = "claimed extended feature" if level == "extended" else level
                failures.append(f"{name}: {max(count, len(failed))} {what} test(s) failed")
            environment = [row for row in part.get("notJudgedTests") or () if isinstance(row, Mapping)]
            if environment:
                unjudged.append(f"{name}: {len(environment)} {level} test(s) not judged "
                                f"({environment[0].get('reason', '')})")
    unjudged += [f"{row.get('profile', '?')}: no core test ran ({row.get('reason', '')})"
                 for row in not_judged if isinstance(row, Mapping)]
    if failures:
        return Verdict(FAILED, tuple(failures + unjudged))
    if unjudged:
        return Verdict(NOT_JUDGED, tuple(unjudged))
    if judged == 0:
        return Verdict(NOT_JUDGED, ("no test passed or failed: nothing was judged",))
    return Verdict(PASSED)


def of_report(report: Mapping[str, Any]) -> Verdict:
    """The verdict a written report carries, checked against its sections: a hand-edited or truncated report
    cannot claim more than its sections show (the worse of the two wins)."""
    profiles = report.get("profiles")
    summary = report.get("summary")
    if not isinstance(profiles, list) or not all(isinstance(p, Mapping) for p in profiles) or \
            not isinstance(summary, Mapping):
        return Verdict(NOT_JUDGED, ("the report has no readable profiles or summary",))
    shown = judge(profiles, summary.get("notJudged") or ())
    order: tuple[Outcome, ...] = (PASSED, NOT_JUDGED, FAILED)
    claimed = next((o for o in order if o == summary.get("verdict")), None)
    if claimed is None:
        return Verdict(FAILED, (f"the report's summary gives no verdict ({summary.get('verdict')!r})", *shown.reasons))
    if order.index(shown.outcome) >= order.index(claimed):
        return shown
    return Verdict(claimed, tuple(str(r) for r in summary.get("reasons") or ()))
