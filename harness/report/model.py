"""The outcome of one conformance test, as the report writer consumes it.

Outcomes follow Gateway API conformance: ``unsupported`` marks an extended test whose feature the
implementation does not claim; it is not a skip (nothing went wrong) and is reported per feature.
``notApplicable`` marks a demo claim outside AGN routing (a NetworkPolicy, a model server): listed in the
report with its reason, never silently dropped, and neither a pass nor a skip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

__all__ = ["LEVELS", "OUTCOMES", "Level", "Outcome", "TestResult"]

Level = Literal["core", "extended", "demo"]
Outcome = Literal["passed", "failed", "skipped", "unsupported", "notApplicable", "notJudged"]

LEVELS: tuple[str, ...] = get_args(Level)
OUTCOMES: tuple[str, ...] = get_args(Outcome)


@dataclass(frozen=True)
class TestResult:
    """One conformance test's result; ``message`` is the failure text or skip reason."""

    __test__ = False  # not a pytest test class despite the name

    id: str
    profile: str
    level: Level
    feature: str
    spec: str
    outcome: Outcome
    duration_s: float
    message: str = ""
    statements: tuple[str, ...] = ()  # ids of the catalogued spec statements the test enforces
    timeline: tuple[dict[str, Any], ...] = ()  # what the test observed over time (demo tests record one)
    features_used: tuple[str, ...] = ()  # extended features its inputs asked of the implementation (feature_use)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"TestResult {self.id!r}: level must be one of {LEVELS}, got {self.level!r}")
        if self.outcome not in OUTCOMES:
            raise ValueError(
                f"TestResult {self.id!r}: outcome must be one of {OUTCOMES}, got {self.outcome!r}")
