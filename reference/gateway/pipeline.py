"""A listener's filters run in order as one pipeline; the first Reject answers the request."""

from __future__ import annotations

from collections.abc import Sequence

from reference.gateway.context import Reject, RequestContext
from reference.gateway.filters.base import Filter


class Pipeline:
    __slots__ = ("name", "filters", "needs_body", "_steps")

    def __init__(self, name: str, filters: Sequence[Filter]) -> None:
        self.name = name
        self.filters = tuple(filters)
        self.needs_body = any(getattr(f, "needs_body", False) for f in self.filters)
        self._steps = tuple(f.on_request for f in self.filters)

    def run(self, ctx: RequestContext) -> Reject | None:
        for step in self._steps:
            rejection = step(ctx)
            if rejection is not None:
                return rejection
        return None
