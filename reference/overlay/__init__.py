"""The v1 routing-overlay contract as the reference components consume it.

One parser serves the gateway, the operator and overlay-sync: `parse_overlay` turns bytes into an
immutable `Overlay` or raises `OverlayRejected` with a reason from `REASONS`.
"""

from reference.overlay.digest import canonical_digest, semantic_payload
from reference.overlay.model import (
    ADMISSION_STATES,
    CANDIDATE_KINDS,
    SELECTION_MODES,
    Candidate,
    Credential,
    Overlay,
    Scope,
)
from reference.overlay.reasons import REASONS, OverlayRejected
from reference.overlay.validate import MAX_CANDIDATES, MAX_OVERLAY_BYTES, parse_overlay, parse_static_candidates

__all__ = [
    "ADMISSION_STATES",
    "CANDIDATE_KINDS",
    "MAX_CANDIDATES",
    "MAX_OVERLAY_BYTES",
    "REASONS",
    "SELECTION_MODES",
    "Candidate",
    "Credential",
    "Overlay",
    "OverlayRejected",
    "Scope",
    "canonical_digest",
    "parse_overlay",
    "parse_static_candidates",
    "semantic_payload",
]
