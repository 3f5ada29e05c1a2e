"""What a failed conformance test says: its assertion's own message, the same in every output.

The report, JUnit, a submission's README, `compare` and the progress line all quote it, so it is computed in
one place from pytest's report of the failure.
"""

from __future__ import annotations

import pytest

__all__ = ["FAILURE_MESSAGE_LIMIT", "failure_message"]

#: Characters kept of a failure's message (its assertion's own words and table; the diagnostics keep it all).
FAILURE_MESSAGE_LIMIT = 4000


def failure_message(report: pytest.TestReport) -> str:
    """What a failure says, as its assertion said it: the exception's own message (first line, then any table
    it carries), never a source excerpt or a traceback tail; `AssertionError: ` is left off, other exception
    names are kept (a timed-out wait says it was one). Without a crash message, the long representation's
    last lines."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = str(getattr(crash, "message", "") or "").strip()
    if not text:
        return str(report.longreprtext)[-FAILURE_MESSAGE_LIMIT:]
    text = text.removeprefix("AssertionError: ").removeprefix("AssertionError")
    return text.strip()[:FAILURE_MESSAGE_LIMIT] or "assertion failed"
