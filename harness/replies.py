"""What a gateway under test answered: a reply (status, headers, what the fake backend saw) or a refusal."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from harness import traffic

__all__ = ["Refused", "Reply", "is_refusal"]


@dataclass
class Reply:
    """One answered request: status, headers, and what the fake backend saw."""

    status: int
    headers: httpx.Headers
    body: bytes

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    @property
    def backend(self) -> str | None:
        return self.headers.get(traffic.BACKEND_HEADER)

    @property
    def forwarded_headers(self) -> dict[str, str]:
        """Request headers as the backend received them (lowercased names)."""
        doc = self.json
        if isinstance(doc, dict) and isinstance(doc.get("agn"), dict):
            return dict(doc["agn"]["request"]["headers"])
        return {}

    @property
    def peer(self) -> dict[str, Any] | None:
        """The client certificate the backend verified on its mTLS listener (`cert_digest`, `organization`,
        `common_name`); None when the request reached it without one."""
        doc = self.json
        if isinstance(doc, dict) and isinstance(doc.get("agn"), dict) and isinstance(doc["agn"].get("peer"), dict):
            return dict(doc["agn"]["peer"])
        return None

    def describe(self) -> str:
        return f"{self.status} backend={self.backend} body={self.body[:200]!r}"


@dataclass(frozen=True)
class Refused:
    """A request the TLS layer refused: the handshake failed or the connection closed before any answer."""

    reason: str

    def describe(self) -> str:
        return f"refused ({self.reason})"


def is_refusal(outcome: Reply | Refused) -> bool:
    """403 or a failed handshake: how a provider gateway turns away an untrusted peer."""
    return isinstance(outcome, Refused) or outcome.status == 403
