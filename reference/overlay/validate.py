"""Strict validation of the v1 envelope and the legacy flat payload.

Every failure is an `OverlayRejected` with a reason from the closed vocabulary; no input, however
malformed, escapes as another exception. Checks run in a fixed order so a given input always gets
the same reason: JSON, format detection, schema version, structure, digests, scope, provenance,
candidates, selection policy and groups, then the cluster allowlist.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from reference.overlay.digest import canonical_digest
from reference.overlay.model import (
    ADMISSION_STATES,
    CANDIDATE_KINDS,
    SELECTION_MODES,
    Candidate,
    Credential,
    Overlay,
    Scope,
)
from reference.overlay.reasons import OverlayRejected

MAX_OVERLAY_BYTES = 2 * 1024 * 1024
MAX_CANDIDATES = 1024
MAX_TEXT = 256  # bytes, for names, sites, clusters, scope, provenance and secret locators
MAX_STABLE_ID = 256
MAX_SELECTION_TIER = 128
MAX_TRAFFIC_WEIGHT = 1000
SCHEMA_VERSION = "1.0.0"
# Any of these at the top level selects strict envelope parsing (`overlay` alone does not).
RESERVED_ENVELOPE_FIELDS = frozenset({"schema_version", "revision", "content_digest", "scope", "provenance"})
_HEX64 = re.compile(r"[0-9a-f]{64}")
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)
_CREDENTIAL_FIELDS = frozenset({"strategy", "secretRef"})
_SECRET_REF_FIELDS = frozenset({"name", "namespace", "key"})
_STATIC_FIELDS = frozenset({"kind", "name", "site", "cluster", "fresh", "credential"})


def parse_overlay(
    data: bytes,
    expected_scope: Mapping[str, str] | None = None,
    allowed_clusters: Iterable[str] | None = None,
) -> Overlay:
    """Validate overlay bytes (envelope or legacy) and return the snapshot to serve."""
    if len(data) > MAX_OVERLAY_BYTES:
        raise OverlayRejected("too_large", f"{len(data)} bytes exceeds {MAX_OVERLAY_BYTES}")
    doc = _load_json(data)
    if not isinstance(doc, dict):
        raise OverlayRejected("malformed_structure", "top level is not a JSON object")
    if RESERVED_ENVELOPE_FIELDS & doc.keys():
        overlay = _parse_envelope(doc, expected_scope)
    else:
        if expected_scope:
            raise OverlayRejected("legacy_not_allowed", "an expected scope is configured; legacy payload refused")
        overlay = _parse_legacy(doc)
    if allowed_clusters is not None:
        _check_clusters(overlay.candidates, frozenset(allowed_clusters))
    return overlay


def parse_static_candidates(
    raw: Any, local_site: str, allowed_clusters: Iterable[str] | None = None
) -> Overlay:
    """Inline candidates from the gateway config: non-empty, no weights, no unknown fields."""
    if not isinstance(raw, list):
        raise OverlayRejected("malformed_structure", "candidates must be a list")
    if not raw:
        raise OverlayRejected("empty_candidates", "static candidate list is empty")
    for index, item in enumerate(raw):
        if isinstance(item, dict):
            unknown = sorted(set(item) - _STATIC_FIELDS)
            if unknown:
                raise OverlayRejected("invalid_candidate", f"candidates[{index}]: unknown field {unknown[0]!r}")
    candidates = _parse_candidates(raw)
    overlay = _build(
        "static", local_site=_text(local_site, "local_site", "invalid_scope"), candidates=candidates
    )
    if allowed_clusters is not None:
        _check_clusters(overlay.candidates, frozenset(allowed_clusters))
    return overlay


# --- JSON ---------------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise OverlayRejected("invalid_json", f"non-finite literal {name} is not JSON")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise OverlayRejected("invalid_json", f"duplicate key {key!r}")
        out[key] = value
    return out


def _load_json(data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OverlayRejected("invalid_json", f"not UTF-8: {exc.reason}") from None
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys)
    except OverlayRejected:
        raise
    except (ValueError, RecursionError) as exc:
        raise OverlayRejected("invalid_json", str(exc)[:200]) from None


# --- envelope -----------------------------------------------------------------------------------


def _parse_envelope(doc: dict[str, Any], expected_scope: Mapping[str, str] | None) -> Overlay:
    if "schema_version" not in doc:
        raise OverlayRejected("missing_schema_version", "envelope field present without schema_version")
    if doc["schema_version"] != SCHEMA_VERSION:
        raise OverlayRejected("unsupported_schema_version", f"schema_version {doc['schema_version']!r}")
    for name in ("revision", "content_digest", "scope", "provenance", "overlay"):
        if not isinstance(doc.get(name), dict):
            raise OverlayRejected("malformed_structure", f"{name} must be an object")
    revision, content_digest = doc["revision"], doc["content_digest"]
    payload = doc["overlay"]
    if not isinstance(payload.get("candidates"), list):
        raise OverlayRejected("malformed_structure", "overlay.candidates must be a list")
    for name in ("network", "local_site"):
        if not isinstance(payload.get(name), str):
            raise OverlayRejected("malformed_structure", f"overlay.{name} must be a string")
    if revision.get("kind") != "content_addressed" or revision.get("algorithm") != "sha256":
        raise OverlayRejected("malformed_digest", "revision must be content_addressed sha256")
    if content_digest.get("algorithm") != "sha256":
        raise OverlayRejected("malformed_digest", "content_digest algorithm must be sha256")
    revision_value = _hex64(revision.get("value"), "revision.value")
    digest_value = _hex64(content_digest.get("value"), "content_digest.value")
    try:
        computed = canonical_digest(payload)
    except Exception as exc:  # rfc8785 raises several types; all mean "cannot canonicalise"
        raise OverlayRejected("non_canonical_value", f"{type(exc).__name__}: {str(exc)[:120]}") from None
    if digest_value != computed:
        raise OverlayRejected("digest_mismatch", f"content_digest {digest_value} != computed {computed}")
    if revision_value != digest_value:
        raise OverlayRejected("revision_digest_mismatch", "revision.value differs from content_digest.value")
    scope = _parse_scope(doc["scope"])
    if scope.network != payload["network"] or scope.local_site != payload["local_site"]:
        raise OverlayRejected("scope_mismatch", "scope disagrees with overlay network/local_site")
    if doc["provenance"].get("source_name") != scope.network:
        raise OverlayRejected("scope_mismatch", "provenance.source_name differs from scope.network")
    if expected_scope:
        for key, want in expected_scope.items():
            got = getattr(scope, key)
            if got != want:
                raise OverlayRejected("scope_mismatch", f"scope.{key} {got!r} != expected {want!r}")
    generation = _check_provenance(doc["provenance"])
    candidates = _parse_candidates(payload["candidates"])
    mode = _parse_selection_policy(payload)
    _check_groups(candidates, mode)
    return _build(
        "envelope",
        local_site=payload["local_site"],
        network=payload["network"],
        candidates=candidates,
        selection_mode=mode,
        revision=revision_value,
        scope=scope,
        source_generation=generation,
    )


def _hex64(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise OverlayRejected("malformed_digest", f"{where} must be 64 lowercase hex characters")
    return value


def _parse_scope(raw: dict[str, Any]) -> Scope:
    values = {key: _text(raw.get(key), f"scope.{key}", "invalid_scope") for key in Scope.__dataclass_fields__}
    return Scope(**values)


def _check_provenance(raw: dict[str, Any]) -> int:
    for key in ("producer", "producer_version", "source_name", "source_uid"):
        _text(raw.get(key), f"provenance.{key}", "invalid_provenance")
    generation = raw.get("source_generation")
    if isinstance(generation, bool) or not isinstance(generation, int) or not 1 <= generation <= 2**53:
        raise OverlayRejected("invalid_provenance", "provenance.source_generation must be a positive integer")
    rendered_at = raw.get("rendered_at")
    if not isinstance(rendered_at, str) or not _is_rfc3339(rendered_at):
        raise OverlayRejected("invalid_provenance", "provenance.rendered_at must be an RFC 3339 timestamp")
    return generation


def _is_rfc3339(value: str) -> bool:
    if not _RFC3339.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


# --- legacy -------------------------------------------------------------------------------------


def _parse_legacy(doc: dict[str, Any]) -> Overlay:
    raw = doc.get("candidates")
    if not isinstance(raw, list):
        raise OverlayRejected("malformed_structure", "legacy payload needs a candidates list")
    if not raw:
        raise OverlayRejected("empty_candidates", "legacy payload has no candidates")
    local_site = _text(doc.get("local_site"), "local_site", "malformed_structure")
    network = doc.get("network")
    if network is not None:
        network = _text(network, "network", "malformed_structure")
    candidates = _parse_candidates(raw)
    mode = _parse_selection_policy(doc)
    _check_groups(candidates, mode)
    return _build("legacy", local_site=local_site, network=network, candidates=candidates, selection_mode=mode)


# --- candidates ---------------------------------------------------------------------------------


def _parse_candidates(raw: list[Any]) -> tuple[Candidate, ...]:
    if len(raw) > MAX_CANDIDATES:
        raise OverlayRejected("too_many_candidates", f"{len(raw)} candidates exceeds {MAX_CANDIDATES}")
    seen: set[tuple[str, str, str, str]] = set()
    seen_ids: set[str] = set()
    out: list[Candidate] = []
    for index, item in enumerate(raw):
        candidate = _parse_candidate(item, f"candidates[{index}]")
        if candidate.identity in seen:
            raise OverlayRejected("duplicate_candidate", f"candidates[{index}] repeats {candidate.identity}")
        if candidate.stable_id in seen_ids:
            raise OverlayRejected("duplicate_candidate", f"candidates[{index}] repeats stable_id")
        seen.add(candidate.identity)
        seen_ids.add(str(candidate.stable_id))
        out.append(candidate)
    return tuple(out)


def _parse_candidate(item: Any, where: str) -> Candidate:
    if not isinstance(item, dict):
        raise OverlayRejected("invalid_candidate", f"{where} is not an object")
    kind = item.get("kind")
    if not isinstance(kind, str) or kind not in CANDIDATE_KINDS:  # a list or object must not reach `in`
        raise OverlayRejected("invalid_candidate", f"{where}.kind must be one of {sorted(CANDIDATE_KINDS)}")
    name = _text(item.get("name"), f"{where}.name", "invalid_candidate")
    site = _text(item.get("site"), f"{where}.site", "invalid_candidate")
    cluster = _text(item.get("cluster"), f"{where}.cluster", "invalid_candidate")
    fresh = item.get("fresh", True)
    if not isinstance(fresh, bool):
        raise OverlayRejected("invalid_candidate", f"{where}.fresh must be a boolean")
    stable_id = item.get("stable_id")
    if stable_id is None:
        stable_id = default_stable_id(kind, name, site, cluster)
    else:
        stable_id = _text(stable_id, f"{where}.stable_id", "invalid_candidate", MAX_STABLE_ID)
        if not _is_header_value(stable_id):
            raise OverlayRejected("invalid_candidate", f"{where}.stable_id must be a valid header value")
    admission = item.get("admission_state", "new_and_existing")
    if not isinstance(admission, str) or admission not in ADMISSION_STATES:
        raise OverlayRejected("invalid_candidate", f"{where}.admission_state must be one of {sorted(ADMISSION_STATES)}")
    rank = _optional_index(item.get("rank"), f"{where}.rank", "invalid_candidate")
    group = _optional_index(item.get("selection_group"), f"{where}.selection_group", "invalid_selection_group")
    tier = item.get("selection_tier")
    if tier is not None:
        tier = _text(tier, f"{where}.selection_tier", "invalid_candidate", MAX_SELECTION_TIER)
    weight = item.get("traffic_weight")
    if weight is not None and (not _is_int(weight) or not 1 <= weight <= MAX_TRAFFIC_WEIGHT):
        raise OverlayRejected("invalid_traffic_weight", f"{where}.traffic_weight must be an integer 1..1000")
    credential = _parse_credential(item["credential"], where) if "credential" in item else None
    return Candidate(
        kind=kind,
        name=name,
        site=site,
        cluster=cluster,
        fresh=fresh,
        stable_id=stable_id,
        admission_state=admission,
        rank=rank,
        selection_group=group,
        selection_tier=tier,
        traffic_weight=weight,
        credential=credential,
    )


def _parse_credential(raw: Any, where: str) -> Credential:
    if not isinstance(raw, dict):
        raise OverlayRejected("invalid_credential", f"{where}.credential must be an object")
    unknown = sorted(set(raw) - _CREDENTIAL_FIELDS)
    if unknown:
        raise OverlayRejected("invalid_credential", f"{where}.credential has unknown field {unknown[0]!r}")
    if raw.get("strategy") != "bearer_token":
        raise OverlayRejected("invalid_credential", f"{where}.credential.strategy must be bearer_token")
    ref = raw.get("secretRef")
    if not isinstance(ref, dict):
        raise OverlayRejected("invalid_credential", f"{where}.credential.secretRef must be an object")
    unknown = sorted(set(ref) - _SECRET_REF_FIELDS)
    if unknown:
        raise OverlayRejected("invalid_credential", f"{where}.credential.secretRef has unknown field {unknown[0]!r}")
    fields = {key: _text(ref.get(key), f"{where}.credential.secretRef.{key}", "invalid_credential") for key in
              ("name", "namespace", "key")}
    return Credential(strategy="bearer_token", **fields)


def _parse_selection_policy(payload: dict[str, Any]) -> str | None:
    if "selection_policy" not in payload:
        return None
    policy = payload["selection_policy"]
    if not isinstance(policy, dict) or not isinstance(policy.get("mode"), str):
        raise OverlayRejected("invalid_selection_policy", "selection_policy must be an object with a mode")
    unknown = sorted(set(policy) - {"mode"})
    if unknown:  # the public Praxis AI code refuses them rather than guess what they would change
        raise OverlayRejected("invalid_selection_policy", f"selection_policy has unknown member {unknown[0]!r}")
    if policy["mode"] not in SELECTION_MODES:
        raise OverlayRejected("invalid_selection_policy", f"unknown selection mode {policy['mode']!r}")
    return str(policy["mode"])


def _check_groups(candidates: tuple[Candidate, ...], mode: str | None) -> None:
    """Groups per capability: all or none grouped, from 0, contiguous, non-decreasing, one admission state.

    A traffic_weight under another mode is accepted and plays no part in selection: the spec defines it as
    a weight for weightedRandom and forbids it nowhere else.
    """
    if mode == "weightedRandom":
        for c in candidates:
            if c.selection_group is None or c.traffic_weight is None:
                raise OverlayRejected(
                    "invalid_traffic_weight",
                    f"weightedRandom needs selection_group and traffic_weight on {c.kind}/{c.name}@{c.site}",
                )
    for (kind, name), members in _by_capability(candidates).items():
        grouped = [c.selection_group is not None for c in members]
        if not any(grouped):
            continue
        if not all(grouped):
            raise OverlayRejected("invalid_selection_group", f"{kind}/{name} mixes grouped and ungrouped candidates")
        previous = -1
        states: dict[int, str] = {}
        for c in members:
            group = c.selection_group
            assert group is not None
            if group < previous or group > previous + 1:
                raise OverlayRejected(
                    "invalid_selection_group", f"{kind}/{name} groups must start at 0 and be contiguous"
                )
            previous = group
            if states.setdefault(group, c.admission_state) != c.admission_state:
                raise OverlayRejected(
                    "invalid_selection_group", f"{kind}/{name} group {group} mixes admission states"
                )


def _check_clusters(candidates: tuple[Candidate, ...], allowed: frozenset[str]) -> None:
    for c in candidates:
        if c.cluster not in allowed:
            raise OverlayRejected("unknown_cluster", f"cluster {c.cluster!r} is not in the configured clusters")


# --- helpers ------------------------------------------------------------------------------------


def _by_capability(candidates: Iterable[Candidate]) -> dict[tuple[str, str], tuple[Candidate, ...]]:
    grouped: dict[tuple[str, str], list[Candidate]] = {}
    for c in candidates:
        grouped.setdefault((c.kind, c.name), []).append(c)
    return {key: tuple(value) for key, value in grouped.items()}


def _build(fmt: str, *, local_site: str, candidates: tuple[Candidate, ...], **extra: Any) -> Overlay:
    return Overlay(
        format=fmt,
        local_site=local_site,
        candidates=candidates,
        by_capability=_by_capability(candidates),
        **extra,
    )


def default_stable_id(kind: str, name: str, site: str, cluster: str) -> str:
    """The id a candidate without stable_id is known by: kind/name/site/cluster, hashed when too long."""
    plain = f"{kind}/{name}/{site}/{cluster}"
    if len(plain.encode("utf-8", "surrogatepass")) <= MAX_STABLE_ID and _is_header_value(plain):
        return plain
    digest = hashlib.sha256()
    for part in (kind, name, site, cluster):
        encoded = part.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "big") + encoded)
    return "sha256:" + digest.hexdigest()


def _is_header_value(value: str) -> bool:
    """Visible ASCII plus space and tab, not starting or ending with white space."""
    return value == value.strip() and all(ch == "\t" or 0x20 <= ord(ch) <= 0x7E for ch in value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional_index(value: Any, where: str, reason: str) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or not 0 <= value < MAX_CANDIDATES:
        raise OverlayRejected(reason, f"{where} must be an integer 0..{MAX_CANDIDATES - 1}")
    return int(value)


def _text(value: Any, where: str, reason: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or not value.strip():
        raise OverlayRejected(reason, f"{where} must be a non-empty string")
    if len(value.encode("utf-8", "surrogatepass")) > limit:
        raise OverlayRejected(reason, f"{where} longer than {limit} bytes")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise OverlayRejected(reason, f"{where} contains control characters")
    return value
