"""What grid_site_route answers when it routes nowhere: OpenAI-style JSON errors.

400 without a model, 404 for a model no candidate names, 429 with Retry-After while the model sheds,
503 with Retry-After when no site serving the model is ready.
"""

from __future__ import annotations

import json

from reference.gateway.context import Reject

JSON = "application/json"


def error(status: int, message: str, kind: str, code: str, retry_after: int | None = None) -> Reject:
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})
    headers = (("Retry-After", str(retry_after)),) if retry_after is not None else ()
    return Reject(status, body + "\n", headers, JSON)


def no_model(header: str) -> Reject:
    return error(400, f"the request names no model (header {header} or body field model)",
                 "invalid_request_error", "model_required")


def unknown_model(model: str) -> Reject:
    return error(404, f"no site serves the model {model!r}", "invalid_request_error", "model_not_found")


def shed(model: str, retry_after: int) -> Reject:
    return error(429, f"every site serving {model!r} is at capacity; retry after {retry_after} s",
                 "rate_limit_error", "capacity_exhausted", retry_after)


def not_ready(model: str, retry_after: int) -> Reject:
    return error(503, f"no site serving {model!r} is ready; retry after {retry_after} s",
                 "server_error", "no_ready_site", retry_after)
