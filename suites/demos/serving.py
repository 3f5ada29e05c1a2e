"""A consumer gateway reaching an overlay revision, with each stage on the test's timeline."""

from __future__ import annotations

from typing import Any

from harness.grid import Gateway
from harness.timeline import Timeline
from harness.timeouts import timeouts

__all__ = ["wait_accepted_and_serving"]


def wait_accepted_and_serving(timeline: Timeline, chain: Any, gateway: Gateway, revision: str | None, model: str,
                              site: str) -> None:
    """Wait until `gateway` (fed by `chain`) has accepted `revision` and serves `model` from it, recording both
    stages; nothing to wait for when the overlay carries no revision."""
    if revision is None:
        return
    chain.wait_accepted(revision)
    timeline.revision("accepted", revision, site=site)
    gateway.wait_serving(revision, model, timeout=timeouts().remote_route)
    timeline.revision("serving", revision, site=site)
