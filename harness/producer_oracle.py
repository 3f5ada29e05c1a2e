"""The producer suites' own oracle: what an operator's output must look like, written from the spec.

Nothing here imports `reference/`: the ConfigMap name rule, the envelope checks and the ordering keys
are computed independently, so a bug in the reference operator cannot hide itself by also being the judge.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness import contract

MAX_NAME = 63
NAME_PREFIX = 20
ANNOTATIONS = {
    "schema": "grid.praxis.fast/overlay-schema-version",
    "revision": "grid.praxis.fast/overlay-revision",
    "digest": "grid.praxis.fast/overlay-content-digest",
}
_DIGEST = re.compile(r"[0-9a-f]{64}")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
ADMISSION_ORDER = {"new_and_existing": 0, "existing_only": 1}
LOCALITY_ORDER = {"same_site": 0, "same_zone": 1, "same_region": 2, "cross_region": 3, "unknown": 4}


def fnv1a32(text: str) -> str:
    value = 0x811C9DC5
    for byte in text.encode("utf-8"):
        value = ((value ^ byte) * 0x01000193) % (1 << 32)
    return format(value, "08x")


def configmap_name(network: str, gateway: str) -> str:
    """`grid-overlay-{network}-{gateway}`; over 63 characters, 20-character prefixes and a hash of both."""
    name = f"grid-overlay-{network}-{gateway}"
    if len(name) <= MAX_NAME:
        return name
    return f"grid-overlay-{network[:NAME_PREFIX]}-{gateway[:NAME_PREFIX]}-{fnv1a32(network + '/' + gateway)}"


def envelope_problems(envelope: Mapping[str, Any], scope: contract.ScopeSpec) -> list[str]:
    """Every way `envelope` breaks the v1 consumer contract for `scope` ([] when it is valid)."""
    problems: list[str] = []
    if envelope.get("schema_version") != contract.SCHEMA_VERSION:
        problems.append(f"schema_version {envelope.get('schema_version')!r} != {contract.SCHEMA_VERSION!r}")
    if envelope.get("scope") != scope.as_dict():
        problems.append(f"scope {envelope.get('scope')!r} != {scope.as_dict()!r}")
    overlay = envelope.get("overlay")
    if not isinstance(overlay, dict):
        return [*problems, "overlay is not an object"]
    revision = (envelope.get("revision") or {}).get("value")
    content = (envelope.get("content_digest") or {}).get("value")
    try:
        expected = contract.digest(overlay)
    except (KeyError, TypeError, ValueError) as exc:
        return [*problems, f"overlay cannot be digested: {exc}"]
    if content != expected:
        problems.append(f"content_digest {content!r} != recomputed {expected!r}")
    if revision != content:
        problems.append(f"revision {revision!r} != content_digest {content!r}")
    if not isinstance(revision, str) or not _DIGEST.fullmatch(revision):
        problems.append(f"revision {revision!r} is not 64 lowercase hex digits")
    if overlay.get("network") != scope.network or overlay.get("local_site") != scope.local_site:
        problems.append("overlay network/local_site differ from the scope")
    provenance = envelope.get("provenance") or {}
    generation = provenance.get("source_generation")
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
        problems.append(f"provenance.source_generation {generation!r} is not a positive integer")
    rendered_at = provenance.get("rendered_at")
    if not isinstance(rendered_at, str) or not _RFC3339.fullmatch(rendered_at):
        problems.append(f"provenance.rendered_at {rendered_at!r} is not RFC 3339")
    return problems


def candidates(envelope: Mapping[str, Any], kind: str | None = "inference_model") -> list[dict[str, Any]]:
    found = (envelope.get("overlay") or {}).get("candidates") or []
    return [c for c in found if isinstance(c, dict) and (kind is None or c.get("kind") == kind)]


def names(envelope: Mapping[str, Any], model: str | None = None) -> list[str]:
    """Candidate cluster names in overlay order, optionally for one model."""
    return [str(c.get("cluster")) for c in candidates(envelope) if model is None or c.get("name") == model]


def by_cluster(envelope: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c.get("cluster")): c for c in candidates(envelope)}


def groups(envelope: Mapping[str, Any], model: str | None = None) -> list[list[str]]:
    """Clusters partitioned by selection_group, groups in ascending order."""
    out: dict[int, list[str]] = {}
    for c in candidates(envelope):
        if model is None or c.get("name") == model:
            out.setdefault(int(c.get("selection_group", 0)), []).append(str(c.get("cluster")))
    return [out[key] for key in sorted(out)]


def group_problems(envelope: Mapping[str, Any]) -> list[str]:
    """Groups per capability zero-based and contiguous, in overlay order; ranks zero-based and unique."""
    problems: list[str] = []
    per_capability: dict[tuple[str, str], list[int]] = {}
    for c in candidates(envelope, kind=None):
        group = c.get("selection_group", 0)
        per_capability.setdefault((str(c.get("kind")), str(c.get("name"))), []).append(
            group if isinstance(group, int) else -1)
    for key, numbers in per_capability.items():
        if numbers != sorted(numbers):
            problems.append(f"{key}: selection groups out of order {numbers}")
        if sorted(set(numbers)) != list(range(len(set(numbers)))):
            problems.append(f"{key}: selection groups {sorted(set(numbers))} are not zero-based and contiguous")
    ranks = [int(c["rank"]) for c in candidates(envelope, kind=None) if isinstance(c.get("rank"), int)]
    if ranks and sorted(ranks) != list(range(len(ranks))):
        problems.append(f"ranks {ranks} are not zero-based and unique")
    return problems


def ordered(rows: Iterable[Mapping[str, Any]], policy: str) -> list[str]:
    """Clusters in the order the spec's table gives for `policy` (rows carry the enrichment fields)."""

    def key(row: Mapping[str, Any]) -> tuple[Any, ...]:
        admission = ADMISSION_ORDER[str(row["admission_state"])]
        fresh = 0 if row.get("fresh", True) else 1
        locality = LOCALITY_ORDER[str(row["locality"])]
        score = -float(row.get("score", 0.0))
        tie = (str(row["site"]), str(row["name"]), str(row["cluster"]))
        if policy == "scoreFirst":
            return (admission, fresh, score, locality, tie)
        return (admission, locality, fresh, score, tie)

    return [str(row["cluster"]) for row in sorted(rows, key=key)]


def token_leaks(token: str, texts: Mapping[str, str]) -> list[str]:
    """Names of the texts that contain `token` (empty when the secret stayed secret)."""
    return [name for name, text in texts.items() if token in text]


def require(problems: Sequence[str], what: str) -> None:
    assert not problems, f"{what}:\n  " + "\n  ".join(problems)
