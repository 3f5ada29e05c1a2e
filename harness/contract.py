"""The suites' own oracle for the v1 overlay contract.

It builds envelopes (valid ones, and each kind of broken one) and computes digests without importing
anything from `reference/`, so a bug in the reference validator cannot hide itself by also being the
judge. Every case it builds carries the outcome the spec requires.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import rfc8785

SCHEMA_VERSION = "1.0.0"
MAX_CANDIDATES = 1024
MAX_OVERLAY_BYTES = 2 * 1024 * 1024


def digest(overlay: dict[str, Any]) -> str:
    """SHA-256 over the RFC 8785 form of network, local_site, ordered candidates and selection_policy."""
    fields: dict[str, Any] = {key: overlay[key] for key in ("network", "local_site", "candidates")}
    if "selection_policy" in overlay:
        fields["selection_policy"] = overlay["selection_policy"]
    return hashlib.sha256(rfc8785.dumps(fields)).hexdigest()


def candidate(name: str, site: str, cluster: str, kind: str = "inference_model", **extra: Any) -> dict[str, Any]:
    """One overlay candidate; `extra` adds fields such as selection_group, traffic_weight, admission_state."""
    out: dict[str, Any] = {"kind": kind, "name": name, "site": site, "cluster": cluster, "fresh": True}
    out.update(extra)
    return out


@dataclass(frozen=True)
class ScopeSpec:
    network: str
    gateway: str
    namespace: str
    local_site: str

    def as_dict(self) -> dict[str, str]:
        return {
            "network": self.network,
            "gateway": self.gateway,
            "namespace": self.namespace,
            "local_site": self.local_site,
        }


def envelope(
    candidates: Iterable[dict[str, Any]],
    scope: ScopeSpec,
    *,
    selection_mode: str | None = None,
    generation: int = 1,
    rendered_at: str = "2026-01-01T00:00:00Z",
) -> dict[str, Any]:
    """A valid v1 envelope whose revision and content digest are computed here."""
    overlay: dict[str, Any] = {
        "network": scope.network,
        "local_site": scope.local_site,
        "candidates": [copy.deepcopy(c) for c in candidates],
    }
    if selection_mode is not None:
        overlay["selection_policy"] = {"mode": selection_mode}
    return seal(
        {
            "schema_version": SCHEMA_VERSION,
            "scope": scope.as_dict(),
            "provenance": {
                "producer": "agn-conformance",
                "producer_version": "1",
                "source_name": scope.network,
                "source_uid": "00000000-0000-4000-8000-000000000001",
                "source_generation": generation,
                "rendered_at": rendered_at,
            },
            "overlay": overlay,
        }
    )


def seal(doc: dict[str, Any]) -> dict[str, Any]:
    """Set revision and content_digest from the document's overlay (after an edit)."""
    value = digest(doc["overlay"])
    doc["revision"] = {"kind": "content_addressed", "algorithm": "sha256", "value": value}
    doc["content_digest"] = {"algorithm": "sha256", "value": value}
    return doc


def revision_of(doc: dict[str, Any]) -> str:
    return str(doc["revision"]["value"])


def legacy(candidates: Iterable[dict[str, Any]], local_site: str, network: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"local_site": local_site, "candidates": [copy.deepcopy(c) for c in candidates]}
    if network is not None:
        out["network"] = network
    return out


def encode(doc: Any) -> bytes:
    return json.dumps(doc, indent=1).encode("utf-8")


@dataclass(frozen=True)
class Case:
    """An overlay and what a conforming consumer must do with it.

    `expected` is "accept", "accept_legacy" or "reject"; `revision` is set for accepted envelopes.
    """

    name: str
    data: bytes
    expected: str
    revision: str | None = None
    why: str = ""


def _edit(base: dict[str, Any], change: Callable[[dict[str, Any]], None], reseal: bool) -> bytes:
    doc = copy.deepcopy(base)
    change(doc)
    if reseal:
        seal(doc)
    return encode(doc)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = doc
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value

    return change


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = doc
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        del target[last]

    return change


def _candidates(mutate: Callable[[list[dict[str, Any]]], None]) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        mutate(doc["overlay"]["candidates"])

    return change


def rejection_cases(valid: dict[str, Any]) -> list[Case]:
    """Each kind of broken envelope, derived from a valid one with at least two candidates of one model.

    The base must carry a selection policy-free, group-free candidate list; the cases add what they need.
    """
    if len(valid["overlay"]["candidates"]) < 2:
        raise ValueError("rejection_cases needs a base envelope with at least two candidates")
    first = valid["overlay"]["candidates"][0]
    cases: list[tuple[str, bytes, str]] = [
        ("wrong-content-digest", _edit(valid, _set("content_digest.value", "0" * 64), False), "bad content digest"),
        ("revision-disagrees", _edit(valid, _set("revision.value", "1" * 64), False), "revision differs from digest"),
        ("uppercase-digest", _edit(valid, lambda d: _upper_digests(d), False), "digest must be lowercase hex"),
        ("short-digest", _edit(valid, lambda d: _both_digests(d, "ab" * 20), False), "digest must be 64 hex"),
        ("stale-digest-after-edit", _edit(valid, _set("overlay.candidates.0.site", "elsewhere"), False),
         "candidates changed without a new digest"),
        ("missing-schema-version", _edit(valid, _delete("schema_version"), False), "envelope without schema_version"),
        ("unsupported-schema-version", _edit(valid, _set("schema_version", "2.0.0"), False), "unknown major version"),
        ("revision-not-object", _edit(valid, _set("revision", "abc"), False), "revision must be an object"),
        ("overlay-missing", _edit(valid, _delete("overlay"), False), "envelope without overlay"),
        ("revision-kind-wrong", _edit(valid, _set("revision.kind", "sequence"), False), "revision kind"),
        ("scope-network-mismatch", _edit(valid, _set("scope.network", "other-net"), False),
         "scope.network differs from overlay.network"),
        ("scope-local-site-mismatch", _edit(valid, _set("scope.local_site", "other-site"), False),
         "scope.local_site differs from overlay.local_site"),
        ("source-generation-zero", _edit(valid, _set("provenance.source_generation", 0), False),
         "source_generation must be positive"),
        ("rendered-at-not-rfc3339", _edit(valid, _set("provenance.rendered_at", "yesterday"), False),
         "rendered_at must be RFC 3339"),
        ("blank-producer", _edit(valid, _set("provenance.producer", "  "), False), "producer must be non-blank"),
        ("unknown-kind", _edit(valid, _set("overlay.candidates.0.kind", "gpu_pool"), True), "unknown candidate kind"),
        ("missing-cluster", _edit(valid, _delete("overlay.candidates.0.cluster"), True), "cluster is required"),
        ("overlong-name", _edit(valid, _candidates(lambda cs: _rename(cs, "m" * 257)), True),
         "names are bounded to 256 bytes"),
        ("unknown-admission-state", _edit(valid, _set("overlay.candidates.0.admission_state", "maybe"), True),
         "admission_state vocabulary"),
        ("duplicate-candidate", _edit(valid, _candidates(lambda cs: cs.append(copy.deepcopy(cs[0]))), True),
         "duplicate (kind, name, site, cluster)"),
        ("too-many-candidates", _edit(valid, _candidates(lambda cs: _grow(cs, first, MAX_CANDIDATES + 1)), True),
         "at most 1024 candidates"),
        ("unknown-selection-mode", _edit(valid, _set("overlay.selection_policy", {"mode": "leastLoaded"}), True),
         "unknown selection modes are rejected"),
        ("selection-policy-not-object", _edit(valid, _set("overlay.selection_policy", "roundRobin"), True),
         "malformed selection policy"),
        ("weighted-missing-weight", _edit(valid, lambda d: _weighted(d, weights=None), True),
         "weightedRandom needs a weight on every candidate"),
        ("weight-zero", _edit(valid, lambda d: _weighted(d, weights=0), True), "traffic_weight is 1..1000"),
        ("weight-too-large", _edit(valid, lambda d: _weighted(d, weights=1001), True), "traffic_weight is 1..1000"),
        ("weight-without-weighted-mode", _edit(valid, _set("overlay.candidates.0.traffic_weight", 5), True),
         "traffic_weight only with weightedRandom"),
        ("group-not-from-zero", _edit(valid, lambda d: _groups(d, start=1), True), "groups start at 0"),
        ("group-gap", _edit(valid, lambda d: _groups(d, start=0, step=2), True), "groups are contiguous"),
        ("group-decreasing", _edit(valid, lambda d: _groups(d, start=0, reverse=True), True), "groups are monotonic"),
        ("group-mixed-with-ungrouped", _edit(valid, _set("overlay.candidates.0.selection_group", 0), True),
         "no mixing of grouped and ungrouped candidates"),
        ("group-mixes-admission", _edit(valid, lambda d: _mixed_admission(d), True),
         "a group cannot mix admission states"),
        ("credential-unknown-field", _edit(valid, lambda d: _credential(d, token="s3cr3t"), True),
         "credential objects reject unknown fields"),
        ("secret-ref-unknown-field", _edit(valid, lambda d: _credential(d, ref_extra="value"), True),
         "secretRef rejects unknown fields"),
        ("huge-integer", _edit(valid, _set("overlay.candidates.0.future_counter", 2**64), False),
         "RFC 8785 cannot encode integers beyond 2**53"),
        ("candidates-not-list", _edit(valid, _set("overlay.candidates", {"a": 1}), False), "candidates is a list"),
    ]
    out = [Case(name, data, "reject", why=why) for name, data, why in cases]
    nan = encode(valid).replace(b'"fresh": true', b'"fresh": NaN', 1)
    out.append(Case("nan-literal", nan, "reject", why="NaN is not JSON"))
    out.append(Case("not-json", b"{\"schema_version\": ", "reject", why="truncated JSON"))
    out.append(Case("top-level-array", b"[]", "reject", why="top level must be an object"))
    padding = {"padding": "x" * (MAX_OVERLAY_BYTES + 16)}
    big = copy.deepcopy(valid)
    big.update(padding)
    out.append(Case("oversized-file", encode(big), "reject", why="reads are bounded to 2 MiB"))
    return out


def acceptance_cases(valid: dict[str, Any]) -> list[Case]:
    """Envelopes that differ from `valid` in ways a consumer must accept, with the revision to expect."""
    rev = revision_of(valid)
    out = [Case("valid", encode(valid), "accept", rev)]
    later = copy.deepcopy(valid)
    later["provenance"]["rendered_at"] = "2099-12-31T23:59:59Z"
    later["provenance"]["source_generation"] = 7
    out.append(Case("timestamp-and-generation-change", encode(later), "accept", rev, "not part of the revision"))
    additive = copy.deepcopy(valid)
    additive["future_field"] = {"anything": [1, 2]}
    additive["provenance"]["future_note"] = "x"
    additive["overlay"]["generated_at"] = "2026-01-01T00:00:00Z"
    out.append(Case("unknown-additive-fields", encode(additive), "accept", rev, "forward compatible"))
    extra = copy.deepcopy(valid)
    extra["overlay"]["candidates"][0]["future_hint"] = "abc"
    seal(extra)
    out.append(Case("unknown-candidate-field", encode(extra), "accept", revision_of(extra), "in the digest"))
    empty = copy.deepcopy(valid)
    empty["overlay"]["candidates"] = []
    seal(empty)
    out.append(Case("empty-authoritative", encode(empty), "accept", revision_of(empty), "authoritative no-route"))
    return out


def legacy_cases(local_site: str, candidates: list[dict[str, Any]]) -> list[Case]:
    return [
        Case("legacy", encode(legacy(candidates, local_site)), "accept_legacy"),
        Case("legacy-empty", encode(legacy([], local_site)), "reject", why="legacy payloads must be non-empty"),
    ]


# --- mutation helpers -------------------------------------------------------------------------


def _both_digests(doc: dict[str, Any], value: str) -> None:
    doc["revision"]["value"] = value
    doc["content_digest"]["value"] = value


def _upper_digests(doc: dict[str, Any]) -> None:
    _both_digests(doc, doc["revision"]["value"].upper())


def _rename(cs: list[dict[str, Any]], name: str) -> None:
    cs[0]["name"] = name


def _grow(cs: list[dict[str, Any]], template: dict[str, Any], count: int) -> None:
    cs.clear()
    for index in range(count):
        item = copy.deepcopy(template)
        item["site"] = f"site-{index:05d}"
        item.pop("stable_id", None)
        cs.append(item)


def _weighted(doc: dict[str, Any], weights: int | None) -> None:
    doc["overlay"]["selection_policy"] = {"mode": "weightedRandom"}
    for c in doc["overlay"]["candidates"]:
        c["selection_group"] = 0
        if weights is None:
            c.pop("traffic_weight", None)
        else:
            c["traffic_weight"] = weights
    if weights is None:
        doc["overlay"]["candidates"][0]["traffic_weight"] = 10


def _groups(doc: dict[str, Any], start: int, step: int = 1, reverse: bool = False) -> None:
    cs = doc["overlay"]["candidates"]
    numbers = [start + step * index for index in range(len(cs))]
    if reverse:
        numbers = [0] + [0] * (len(cs) - 1)
        numbers[0] = 1
        cs[1]["selection_group"] = 0
    for c, number in zip(cs, numbers, strict=True):
        c["selection_group"] = number
        c.pop("admission_state", None)
    if reverse:
        cs[0]["selection_group"], cs[1]["selection_group"] = 1, 0


def _mixed_admission(doc: dict[str, Any]) -> None:
    cs = doc["overlay"]["candidates"]
    for c in cs:
        c["selection_group"] = 0
    cs[0]["admission_state"] = "new_and_existing"
    cs[1]["admission_state"] = "existing_only"


def _credential(doc: dict[str, Any], token: str | None = None, ref_extra: str | None = None) -> None:
    cred: dict[str, Any] = {"strategy": "bearer_token", "secretRef": {"name": "n", "namespace": "ns", "key": "token"}}
    if token is not None:
        cred["token"] = token
    if ref_extra is not None:
        cred["secretRef"]["value"] = ref_extra
    doc["overlay"]["candidates"][0]["credential"] = cred
