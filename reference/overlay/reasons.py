"""Closed vocabulary of overlay rejection reasons.

The names of the public fixtures (digest_mismatch, scope_mismatch, ...) are part of it, so reports and
metrics never carry free text from an overlay.
"""

from __future__ import annotations

REASONS: frozenset[str] = frozenset(
    {
        "read_error",  # file missing or unreadable
        "too_large",  # more than MAX_OVERLAY_BYTES
        "invalid_json",  # not UTF-8 JSON, NaN/Infinity literals, duplicate keys
        "missing_schema_version",  # reserved envelope field present without schema_version
        "unsupported_schema_version",
        "malformed_structure",  # wrong types or missing required envelope objects
        "malformed_digest",  # revision/content_digest value not 64 lowercase hex, wrong kind/algorithm
        "revision_digest_mismatch",  # revision.value != content_digest.value
        "digest_mismatch",  # recomputed digest differs
        "non_canonical_value",  # RFC 8785 cannot encode it (huge integer, lone surrogate)
        "scope_mismatch",  # scope disagrees with the payload or with the expected scope
        "invalid_scope",
        "invalid_provenance",
        "invalid_candidate",
        "duplicate_candidate",
        "too_many_candidates",
        "empty_candidates",  # legacy payloads and static lists must be non-empty
        "invalid_selection_policy",
        "invalid_selection_group",
        "invalid_traffic_weight",
        "invalid_credential",
        "legacy_not_allowed",  # legacy payload while an expected scope is configured
        "unknown_cluster",  # candidate cluster outside the configured clusters allowlist
    }
)


class OverlayRejected(ValueError):
    """An overlay that must not be served; `reason` is always a member of REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in REASONS:
            raise AssertionError(f"reason {reason!r} is not in the closed vocabulary")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
