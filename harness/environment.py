"""Problems of the environment a run happens in, never of the implementation it judges.

A cluster that cannot be created, a host port another process holds, an image that is not there: nothing of
the implementation has run yet, so a test that needed them is not judged. It is reported with the outcome
``notJudged`` and its cause, never as a failure of the implementation (harness.report.verdict).
"""

from __future__ import annotations

__all__ = ["NOT_JUDGED_REASON", "EnvironmentProblem", "is_not_judged"]

#: How the skip reason of a test the environment kept from being judged begins.
NOT_JUDGED_REASON = "not judged (environment)"


class EnvironmentProblem(RuntimeError):
    """The environment could not provide what a test needs; the message names the cause."""


def is_not_judged(reason: str) -> bool:
    """Whether a skip reason says the environment kept the test from being judged."""
    return reason.removeprefix("Skipped: ").startswith(NOT_JUDGED_REASON)
