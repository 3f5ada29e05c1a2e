"""A stand-in for selfcheck.judge.SuiteRuns that hands out prepared runs, for judging verdicts on hand-made runs."""

from __future__ import annotations

from concurrent.futures import Future

from selfcheck.judge import SuiteRun
from selfcheck.targets import Targets


class PreparedRuns:
    """Hands out the prepared runs in order, as SuiteRuns.submit starts them, and notes each label asked for."""

    def __init__(self, *runs: SuiteRun) -> None:
        self.runs = list(runs)
        self.labels: list[str] = []

    def submit(self, label: str, _breakage: str, _targets: Targets, budget_scale: float = 1.0) -> Future[SuiteRun]:
        self.labels.append(label)
        future: Future[SuiteRun] = Future()
        future.set_result(self.runs.pop(0))
        return future
