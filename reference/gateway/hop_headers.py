"""The AI-owned x-ai-routing-* request headers a consumer gateway sends on a provider hop.

Client-supplied copies are never allowed to survive an edge routing decision, so every request that
passes intelligent_route loses all of them; they are re-created only for provider-hop clusters.
"""

from __future__ import annotations

import uuid

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


def new_request_id() -> str:
    """A provider-hop request ID: a random UUID4 as 32 lowercase hex characters."""
    return uuid.uuid4().hex


def set_hop(headers: CIMultiDict[str], candidate_id: str, request_id: str, revision: str | None) -> None:
    headers[CANDIDATE] = candidate_id
    headers[REQUEST_ID] = request_id
    if revision is not None:
        headers[REVISION] = revision
