"""What the mesh suites expect, derived here from the spec and the configured timing, not from reference/.

The discovered GridSite name follows the public AGN operator's `discovered_site_k8s_name(network, site)`;
the failure-detection bound follows from the SWIM timing the harness gives every operator.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_NOT_NAME_CHAR = re.compile(r"[^a-z0-9]")
MAX_NAME = 253


def discovered_site_name(network: str, site: str) -> str:
    """`{network}-{site}`, each lowercased with every character outside [a-z0-9] a hyphen and outer
    hyphens stripped; an empty part is dropped, both empty is `discovered-site`; at most 253 characters."""
    parts = []
    for part in (network, site):
        text = "".join(c.lower() if c.isascii() and c.isalnum() else "-" for c in part)
        text = text.strip("-")
        if text:
            parts.append(text)
    return ("-".join(parts) or "discovered-site")[:MAX_NAME]


@dataclass(frozen=True)
class SwimTiming:
    """The membership timing the harness configures; bounds in the suites are computed from it."""

    # memberlist's local profile probes every second with a 200 ms timeout; the suites allow 400 ms so a
    # loaded CI machine does not suspect a live operator whose event loop answered late
    probe_interval: float = 1.0
    probe_timeout: float = 0.4
    suspicion_mult: int = 3

    def suspicion_timeout(self, members: int) -> float:
        """SWIM's suspicion timeout as memberlist scales it: mult * max(1, log10(n)) * interval."""
        return self.suspicion_mult * max(1.0, math.log10(max(1, members))) * self.probe_interval

    def detection_bound(self, members: int) -> float:
        """Seconds from a member crashing until the others hold it dead, on a lossless network.

        Each member probes its peers in a shuffled round robin, so the crashed one is probed within two
        passes (2 * (n - 1) intervals); that probe fails by the end of its interval, the suspicion
        timeout runs, and the death is gossiped within one more interval.
        """
        return (2 * (members - 1) + 2) * self.probe_interval + self.suspicion_timeout(members)

    def as_placeholders(self) -> dict[str, str]:
        return {"probe_interval": f"{self.probe_interval:g}", "probe_timeout": f"{self.probe_timeout:g}",
                "suspicion_mult": str(self.suspicion_mult)}


#: Seconds an operator may take to notice a change and finish rendering (the reference polls at 0.1 s).
RECONCILE_SLACK = 2.0


def candidates_for(envelope: Mapping[str, Any] | None, model: str) -> list[dict[str, Any]]:
    """The overlay's inference candidates for `model`."""
    overlay = (envelope or {}).get("overlay") or {}
    return [c for c in overlay.get("candidates") or []
            if isinstance(c, dict) and c.get("name") == model and c.get("kind", "inference_model") == "inference_model"]


def from_site(envelope: Mapping[str, Any] | None, model: str, site: str) -> list[dict[str, Any]]:
    return [c for c in candidates_for(envelope, model) if c.get("site") == site]


def tools_from_site(envelope: Mapping[str, Any] | None, site: str) -> list[dict[str, Any]]:
    """The overlay's mcp_tool candidates hosted at `site`."""
    overlay = (envelope or {}).get("overlay") or {}
    return [c for c in overlay.get("candidates") or []
            if isinstance(c, dict) and c.get("kind") == "mcp_tool" and c.get("site") == site]


def models_in(envelope: Mapping[str, Any] | None) -> set[str]:
    overlay = (envelope or {}).get("overlay") or {}
    return {str(c.get("name")) for c in overlay.get("candidates") or [] if isinstance(c, dict)}


def records_of(status: Mapping[str, Any] | None, *, site: str, network: str | None = None,
               provider: str | None = None) -> list[dict[str, Any]]:
    """Records a site's mesh status lists as written by `site` (optionally one network or provider)."""
    rows = [r for r in (status or {}).get("records") or [] if isinstance(r, dict)]
    return [r for r in rows if r.get("site") == site and (network is None or r.get("network") == network)
            and (provider is None or r.get("provider") == provider)]


def _member(status: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    for member in (status or {}).get("members") or []:
        if isinstance(member, dict) and member.get("name") == name:
            return member
    return None


def member_status(status: Mapping[str, Any] | None, name: str) -> str | None:
    value = (_member(status, name) or {}).get("status")
    return str(value).lower() if value is not None else None


def member_age(status: Mapping[str, Any] | None, name: str) -> int | None:
    """The member's `ageSecs` as the status lists it (None when it lists no such member or no integer)."""
    value = (_member(status, name) or {}).get("ageSecs")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def summary(rows: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"{r.get('name')}@{r.get('site')}/{r.get('cluster')} fresh={r.get('fresh')}" for r in rows) \
        or "none"
