"""The AI-owned x-ai-routing-* request headers a consumer gateway sends on a provider hop.

Client-supplied copies are never allowed to survive an edge routing decision, so every request that
passes intelligent_route loses all of them; they are re-created only for provider-hop clusters.
"""

from __future__ import annotations

import os
import time

from multidict import CIMultiDict

PREFIX = "x-ai-routing-"
CANDIDATE = "x-ai-routing-candidate"
REQUEST_ID = "x-ai-routing-request-id"
REVISION = "x-ai-routing-revision"
_PREFIX_LEN = len(PREFIX)


def strip(headers: CIMultiDict[str]) -> None:
    """Remove every x-ai-routing-* header, whatever its case."""
    doomed = [name for name in headers if name[:_PREFIX_LEN].lower() == PREFIX]
    for name in doomed:
        headers.popall(name, None)


class RequestIdGenerator:
    """Provider-hop request IDs: 32 lowercase hex characters, unique per process.

    16 hex digits of microseconds since the epoch, 4 of a random per-generator seed and 12 of a
    monotonically increasing counter (wrapping at 2**48), the layout Praxis core request IDs use.
    """

    def __init__(self, seed: int | None = None) -> None:
        self._seed = (seed if seed is not None else int.from_bytes(os.urandom(2), "big")) & 0xFFFF
        self._counter = 0

    def __call__(self) -> str:
        self._counter = (self._counter + 1) & 0xFFFF_FFFF_FFFF
        micros = time.time_ns() // 1000
        return f"{micros & 0xFFFF_FFFF_FFFF_FFFF:016x}{self._seed:04x}{self._counter:012x}"


def set_hop(headers: CIMultiDict[str], candidate_id: str, request_id: str, revision: str | None) -> None:
    headers[CANDIDATE] = candidate_id
    headers[REQUEST_ID] = request_id
    if revision is not None:
        headers[REVISION] = revision
