"""Overlay revisions in the demos: an envelope's revision, and a consumer gateway reaching one, with each stage
on the test's timeline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.grid import Gateway
from harness.timeline import Timeline
from harness.timeouts import timeouts

__all__ = ["revision_of", "wait_accepted_and_serving"]


def revision_of(envelope: Mapping[str, Any] | None) -> str | None:
    """An overlay envelope's revision value; None for no envelope or one without a revision."""
    value = ((envelope or {}).get("revision") or {}).get("value")
    return None if value is None else str(value)


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
