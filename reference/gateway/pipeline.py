"""A listener's filters run in order as one pipeline; the first Reject answers the request.

With `metrics.filter_duration: true` in the config each filter's run is timed into the proxy's
praxis_filter_duration_seconds{filter} histogram; without it nothing is measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from reference.gateway.context import Reject, RequestContext
from reference.gateway.filters.base import Filter

#: Records one filter run: (filter type, seconds).
Observe = Callable[[str, float], None]


class Pipeline:
    __slots__ = ("name", "filters", "needs_body", "_steps", "_types", "_observe")

    def __init__(self, name: str, filters: Sequence[Filter], types: Sequence[str] = (),
                 observe: Observe | None = None) -> None:
        self.name = name
        self.filters = tuple(filters)
        self.needs_body = any(getattr(f, "needs_body", False) for f in self.filters)
        self._steps = tuple(f.on_request for f in self.filters)
        self._types = tuple(types)
        if observe is not None and len(self._types) != len(self._steps):
            raise ValueError(f"pipeline {name}: timing needs one filter type per filter")
        self._observe = observe

    def run(self, ctx: RequestContext) -> Reject | None:
        if self._observe is not None:
            return self._timed(ctx, self._observe)
        for step in self._steps:
            rejection = step(ctx)
            if rejection is not None:
                return rejection
        return None

    def _timed(self, ctx: RequestContext, observe: Observe) -> Reject | None:
        for step, kind in zip(self._steps, self._types, strict=True):
            started = time.perf_counter()
            rejection = step(ctx)
            observe(kind, time.perf_counter() - started)
            if rejection is not None:
                return rejection
        return None
