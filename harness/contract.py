"""The suites' own oracle for the v1 overlay contract.

It builds envelopes (valid ones, and each kind of broken one) and computes digests without importing
anything from `reference/`, so a bug in the reference validator cannot hide itself by also being the
judge. Every case it builds carries the outcome the spec requires.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
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


def revision_in(doc: bytes | Mapping[str, Any]) -> str | None:
    """The revision an overlay carries, whatever was written (None: bytes that are no envelope with one)."""
    if isinstance(doc, bytes):
        try:
            doc = json.loads(doc)
        except ValueError:
            return None
    revision = doc.get("revision") if isinstance(doc, Mapping) else None
    value = revision.get("value") if isinstance(revision, Mapping) else None
    return value if isinstance(value, str) else None


def legacy(candidates: Iterable[dict[str, Any]], local_site: str, network: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"local_site": local_site, "candidates": [copy.deepcopy(c) for c in candidates]}
    if network is not None:
        out["network"] = network
    return out


def encode(doc: Any) -> bytes:
    return json.dumps(doc, indent=1).encode("utf-8")


#: Feature names of the rules that only the public Praxis AI code gives (see harness.impl FEATURE_DESCRIPTIONS).
STRICT = "strictOverlayValidation"
LIMITS = "exactValueLimits"
#: The extended selection mode whose weight rules some cases judge: a gateway that declines it refuses every
#: weightedRandom overlay as an unknown mode, twin included, so those cases belong to the feature.
WEIGHTED = "weightedRandom"

#: What the spec documents say, quoted; a core case rests on one of these.
DIGEST_RULE = ("overlay contract, Revision semantics: \"Praxis AI rejects an envelope when either value is malformed, "
               "the values disagree, or the recomputed digest does not match.\"")
STRICT_PARSING = ("intelligent-route-filter, Envelope contract: \"Any reserved envelope field selects strict envelope "
                  "parsing; malformed envelopes never fall back to legacy.\"")
REVISION_SHAPE = ("overlay contract, Routing overlay format: revision is {kind: content_addressed, algorithm: sha256, "
                  "value}; " + STRICT_PARSING)
SCHEMA_RULE = ("overlay-contract v1 vector unsupported-schema-version.json (expected: reject); Routing overlay format: "
               "\"schema_version\": \"1.0.0\"")
SCOPE_RULE = ("overlay contract, Scope and provenance: \"Scope binds an overlay to one network, gateway, namespace, "
              "and local site.\" (v1 vectors network-scope-mismatch.json, local-site-scope-mismatch.json: reject)")
GENERATION_RULE = ("intelligent-route-filter: \"source_generation is a positive monotonic generation of the source "
                   "resource.\"; overlay contract: \"Praxis AI validates required values and bounds before accepting "
                   "the envelope.\"")
BOUNDS_RULE = ("overlay contract, Revision lifecycle: \"Praxis AI performs bounded reads and strict validation before "
               "replacing its in-memory snapshot.\"; \"Praxis AI validates required values and bounds before accepting "
               "the envelope.\"")
CLUSTER_RULE = ("overlay contract, Multi-cluster model routing: a candidate names \"the Praxis upstream cluster\" it "
                "selects; " + BOUNDS_RULE)
MODE_RULE = ("overlay contract: \"Unknown selection modes and malformed policy structures are rejected rather than "
             "silently changed to a different mode.\"")
WEIGHT_RULE = ("intelligent-route-filter, Selection: \"every non-empty weighted candidate list must supply a selection "
               "group and an integer traffic_weight from 1 through 1000.\"")
GROUP_RULE = ("overlay contract: \"selection_group is a zero-based, contiguous priority group for each capability (the "
              "candidate's kind and name).\"")
CREDENTIAL_RULE = ("intelligent-route-filter, Envelope contract: \"credential objects reject unknown fields to prevent "
                   "secret material from entering the overlay.\"")
JSON_RULE = "the overlay file is JSON (RFC 8259): " + STRICT_PARSING
PUBLIC_CODE = ("the public Praxis AI code (praxis-proxy/ai filters/src/routing: overlay.rs, descriptor.rs, "
               "group_index.rs)")

#: The catalogued statements (suites/statements.yaml) a case's refusal judges, by what the case breaks. Rules
#: the catalogue gives only as a producer's obligation (contiguous groups, a positive source_generation) are
#: not named here: refusing them judges the consumer, not a producer.
DIGEST_IDS = ("OC-REVISION-CONSUMER-REJECTS-MISMATCH",)
RECOMPUTED_IDS = DIGEST_IDS + ("IR-ENVELOPE-DIGEST-RECOMPUTED",)
STRICT_IDS = ("IR-ENVELOPE-RESERVED-FIELD-STRICT",)
SCOPE_IDS = ("OC-SCOPE-BINDS",)
PROVENANCE_IDS = ("OC-PROVENANCE-VALIDATED",)
BOUNDS_IDS = ("OC-LIFECYCLE-BOUNDED-STRICT",)
MODE_IDS = ("OC-FORMAT-UNKNOWN-MODE-REJECTED",)
WEIGHT_IDS = ("IR-SELECTION-WEIGHTED-REQUIREMENTS",)
CREDENTIAL_IDS = ("IR-ENVELOPE-CREDENTIAL-UNKNOWN-FIELDS-REJECTED",)

#: A value no sane bound admits (the public code's bound is 256 bytes) and a file no sane read accepts.
GROSS_VALUE_BYTES = 64 * 1024
GROSS_OVERLAY_BYTES = 16 * MAX_OVERLAY_BYTES
#: Sixteen times the public code's candidate limit, encoded compactly so it stays under its read bound.
GROSS_CANDIDATES = 16 * MAX_CANDIDATES
MAX_VALUE_BYTES = 256


@dataclass
class Case:
    """An overlay and what a conforming consumer must do with it.

    `expected` is "accept", "accept_legacy" or "reject"; `revision` is set for accepted envelopes. A
    rejection carries the rule it rests on (`spec`), the extended feature that gates it when only the
    public code gives the rule (`feature`, None for core), the ids of the catalogued statements its refusal
    judges (`statements`), and its `twin`: the minimally different valid overlay the same consumer must
    accept, so a refusal counts only for the stated reason.
    """

    name: str
    source: bytes | Callable[[], bytes]  # the overlay, or how to make it (for the costly ones, on first use)
    expected: str
    revision: str | None = None
    why: str = ""
    spec: str = ""
    feature: str | None = None
    twin: bytes | None = None
    twin_revision: str | None = None
    statements: tuple[str, ...] = ()

    @functools.cached_property
    def data(self) -> bytes:
        return self.source if isinstance(self.source, bytes) else self.source()


Change = Callable[[dict[str, Any]], None]


def _edit(base: dict[str, Any], change: Change, reseal: bool) -> bytes:
    doc = copy.deepcopy(base)
    change(doc)
    if reseal:
        seal(doc)
    return encode(doc)


def _set(path: str, value: Any) -> Change:
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


def _delete(path: str) -> Change:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = doc
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        del target[last]

    return change


def _candidates(mutate: Callable[[list[dict[str, Any]]], None]) -> Change:
    def change(doc: dict[str, Any]) -> None:
        mutate(doc["overlay"]["candidates"])

    return change


def _both(*changes: Change) -> Change:
    def change(doc: dict[str, Any]) -> None:
        for step in changes:
            step(doc)

    return change


def _keep(doc: dict[str, Any]) -> None:
    """The twin of a case whose fault is the whole difference from the base: the base itself."""


@dataclass(frozen=True)
class _Lazy:
    """An overlay made on first use: collecting the cases needs only their names and rules."""

    make: Callable[[], bytes]


class _Cases:
    """Builds rejection cases and their twins from one valid base envelope."""

    def __init__(self, valid: dict[str, Any]) -> None:
        self.valid = valid
        self.out: list[Case] = []

    def add(self, name: str, bad: Change | bytes | _Lazy, why: str, spec: str, *, twin: Change = _keep,
            reseal: bool = True, feature: str | None = None, compact: bool = False,
            statements: tuple[str, ...] = ()) -> None:
        """`bad` edits the base into the refused overlay (resealed unless `reseal` is false, so the digest is
        right and the stated fault is the only one); `twin` edits the base into its accepted neighbour."""
        data: bytes | Callable[[], bytes] = bad.make if isinstance(bad, _Lazy) else (
            bad if isinstance(bad, bytes) else _edit(self.valid, bad, reseal))
        twin_doc = copy.deepcopy(self.valid)
        twin(twin_doc)
        seal(twin_doc)
        twin_data = encode_compact(twin_doc) if compact else encode(twin_doc)
        self.out.append(Case(name, data, "reject", why=why, spec=spec, feature=feature, twin=twin_data,
                             twin_revision=revision_of(twin_doc), statements=statements))


def encode_compact(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def rejection_cases(valid: dict[str, Any]) -> list[Case]:
    """Each kind of broken envelope with its accepted twin, derived from a valid one with two candidates of one
    model, no selection policy and no groups; the cases add what they need.
    """
    if len(valid["overlay"]["candidates"]) < 2:
        raise ValueError("rejection_cases needs a base envelope with at least two candidates")
    first = valid["overlay"]["candidates"][0]
    c = _Cases(valid)
    # digests and envelope structure
    c.add("wrong-content-digest", _set("content_digest.value", "0" * 64), "bad content digest", DIGEST_RULE,
          reseal=False, statements=DIGEST_IDS)
    c.add("revision-disagrees", _set("revision.value", "1" * 64), "revision differs from digest", DIGEST_RULE,
          reseal=False, statements=DIGEST_IDS)
    c.add("uppercase-digest", _upper_digests, "digest must be lowercase hex", DIGEST_RULE, reseal=False,
          statements=DIGEST_IDS)
    c.add("short-digest", lambda d: _both_digests(d, "ab" * 20), "digest must be 64 hex", DIGEST_RULE, reseal=False,
          statements=DIGEST_IDS)
    c.add("stale-digest-after-edit", _set("overlay.candidates.0.site", "elsewhere"),
          "candidates changed without a new digest", DIGEST_RULE, reseal=False,
          twin=_set("overlay.candidates.0.site", "elsewhere"), statements=RECOMPUTED_IDS)
    c.add("missing-schema-version", _delete("schema_version"), "envelope without schema_version", STRICT_PARSING,
          reseal=False, statements=STRICT_IDS)
    c.add("unsupported-schema-version", _set("schema_version", "2.0.0"), "unknown major version", SCHEMA_RULE,
          reseal=False, statements=STRICT_IDS)
    c.add("revision-not-object", _set("revision", "abc"), "revision must be an object", REVISION_SHAPE, reseal=False,
          statements=STRICT_IDS + DIGEST_IDS)
    c.add("overlay-missing", _delete("overlay"), "envelope without overlay", STRICT_PARSING, reseal=False,
          statements=STRICT_IDS)
    c.add("revision-kind-wrong", _set("revision.kind", "sequence"), "revision kind", REVISION_SHAPE, reseal=False,
          statements=STRICT_IDS)
    # The overlay's own network and site change (resealed), not the scope: a changed scope would also be
    # another gateway's scope, and a changed network would also differ from provenance.source_name.
    c.add("scope-network-mismatch", _set("overlay.network", "other-net"), "overlay.network differs from scope.network",
          SCOPE_RULE, statements=SCOPE_IDS)
    c.add("scope-local-site-mismatch", _set("overlay.local_site", "other-site"),
          "overlay.local_site differs from scope.local_site", SCOPE_RULE, statements=SCOPE_IDS)
    c.add("source-generation-zero", _set("provenance.source_generation", 0), "source_generation must be positive",
          GENERATION_RULE, reseal=False, twin=_set("provenance.source_generation", 1), statements=PROVENANCE_IDS)
    # resealed, so the digest matches and the shape is the only fault
    c.add("candidates-not-list", _set("overlay.candidates", {"a": 1}), "candidates is a list", STRICT_PARSING,
          statements=STRICT_IDS)
    c.add("huge-integer", _set("overlay.candidates.0.future_counter", 2**64),
          "an unknown candidate field whose integer RFC 8785 cannot carry exactly, under the base's digest",
          DIGEST_RULE, reseal=False, twin=_set("overlay.candidates.0.future_counter", 7), statements=RECOMPUTED_IDS)
    # candidates
    c.add("missing-cluster", _delete("overlay.candidates.0.cluster"), "cluster is required", CLUSTER_RULE,
          statements=BOUNDS_IDS)
    c.add("gross-name", _candidates(lambda cs: _rename(cs, "m" * GROSS_VALUE_BYTES)),
          f"a {GROSS_VALUE_BYTES // 1024} KiB candidate name", BOUNDS_RULE, statements=BOUNDS_IDS)
    c.add("gross-candidate-count", _Lazy(lambda: encode_compact(_grown(valid, first, GROSS_CANDIDATES))),
          f"{GROSS_CANDIDATES} candidates", BOUNDS_RULE, statements=BOUNDS_IDS)
    c.add("gross-file", _Lazy(lambda: _padded(valid, GROSS_OVERLAY_BYTES)),
          f"a {GROSS_OVERLAY_BYTES >> 20} MiB overlay file", BOUNDS_RULE, statements=BOUNDS_IDS)
    # selection policy, weights and groups
    c.add("unknown-selection-mode", _set("overlay.selection_policy", {"mode": "leastLoaded"}),
          "unknown selection modes are rejected", MODE_RULE, twin=_set("overlay.selection_policy", {"mode": "random"}),
          statements=MODE_IDS)
    c.add("selection-policy-not-object", _set("overlay.selection_policy", "roundRobin"), "malformed selection policy",
          MODE_RULE, twin=_set("overlay.selection_policy", {"mode": "roundRobin"}), statements=MODE_IDS)
    c.add("selection-policy-without-mode", _set("overlay.selection_policy", {}), "a policy object without a mode",
          MODE_RULE, twin=_set("overlay.selection_policy", {"mode": "roundRobin"}), statements=MODE_IDS)
    c.add("weighted-missing-weight", lambda d: _weighted(d, 10, drop_weight=1),
          "every weighted candidate needs a weight",
          WEIGHT_RULE, twin=lambda d: _weighted(d, 10), feature=WEIGHTED, statements=WEIGHT_IDS)
    # no candidate keeps a group: one grouped beside an ungrouped one would also break all-or-none grouping
    c.add("weighted-missing-group", lambda d: _weighted(d, 10, drop_group=True),
          "every weighted candidate needs a group", WEIGHT_RULE, twin=lambda d: _weighted(d, 10), feature=WEIGHTED,
          statements=WEIGHT_IDS)
    c.add("weight-zero", lambda d: _weighted(d, 0), "traffic_weight is 1..1000", WEIGHT_RULE,
          twin=lambda d: _weighted(d, 1), feature=WEIGHTED, statements=WEIGHT_IDS)
    c.add("weight-too-large", lambda d: _weighted(d, 1001), "traffic_weight is 1..1000", WEIGHT_RULE,
          twin=lambda d: _weighted(d, 1000), feature=WEIGHTED, statements=WEIGHT_IDS)
    c.add("weight-not-integer", lambda d: _weighted(d, 2.5), "traffic_weight is an integer", WEIGHT_RULE,
          twin=lambda d: _weighted(d, 2), feature=WEIGHTED, statements=WEIGHT_IDS)
    c.add("group-not-from-zero", lambda d: _groups(d, [1, 2]), "groups start at 0", GROUP_RULE,
          twin=lambda d: _groups(d, [0, 1]))
    c.add("group-gap", lambda d: _groups(d, [0, 2]), "groups are contiguous", GROUP_RULE,
          twin=lambda d: _groups(d, [0, 1]))
    c.add("credential-unknown-field", lambda d: _credential(d, token="s3cr3t"),
          "credential objects reject unknown fields", CREDENTIAL_RULE, twin=_credential, statements=CREDENTIAL_IDS)
    c.add("secret-ref-unknown-field", lambda d: _credential(d, ref_extra="value"), "secretRef rejects unknown fields",
          CREDENTIAL_RULE, twin=_credential, statements=CREDENTIAL_IDS)
    # rules of the public code only
    # [0, 1, 0]: starts at 0 and is contiguous, so decreasing is its only fault ([1, 0] would not start at 0)
    c.add("group-decreasing", lambda d: _groups(_third(d), [0, 1, 0]), "groups are non-decreasing in candidate order",
          PUBLIC_CODE, twin=lambda d: _groups(_third(d), [0, 1, 1]), feature=STRICT)
    c.add("group-mixed-with-ungrouped", _set("overlay.candidates.0.selection_group", 0),
          "a capability's candidates are all grouped or none", PUBLIC_CODE, twin=lambda d: _groups(d, [0, 0]),
          feature=STRICT)
    c.add("group-mixes-admission", lambda d: _mixed_admission(d, [0, 0]), "a group has one admission state",
          PUBLIC_CODE, twin=lambda d: _mixed_admission(d, [0, 1]), feature=STRICT)
    c.add("selection-policy-unknown-member", _set("overlay.selection_policy", {"mode": "roundRobin", "order": "x"}),
          "selection_policy has no member besides mode", PUBLIC_CODE,
          twin=_set("overlay.selection_policy", {"mode": "roundRobin"}), feature=STRICT, statements=MODE_IDS)
    c.add("unknown-kind", _set("overlay.candidates.0.kind", "gpu_pool"), "unknown candidate kind", PUBLIC_CODE,
          twin=_set("overlay.candidates.0.kind", "mcp_tool"), feature=STRICT)
    c.add("unknown-admission-state", _set("overlay.candidates.0.admission_state", "maybe"),
          "admission_state vocabulary", PUBLIC_CODE, twin=_set("overlay.candidates.0.admission_state", "existing_only"),
          feature=STRICT)
    c.add("duplicate-candidate", _candidates(lambda cs: cs.append(copy.deepcopy(cs[0]))),
          "duplicate (kind, name, site, cluster)", PUBLIC_CODE, twin=_candidates(_append_other_site), feature=STRICT)
    c.add("rendered-at-not-rfc3339", _set("provenance.rendered_at", "yesterday"), "rendered_at must be RFC 3339",
          PUBLIC_CODE, reseal=False, twin=_set("provenance.rendered_at", "2026-02-03T04:05:06.789+01:00"),
          feature=STRICT, statements=PROVENANCE_IDS)
    c.add("blank-producer", _set("provenance.producer", "  "), "producer must be non-blank", PUBLIC_CODE,
          reseal=False, twin=_set("provenance.producer", "p"), feature=STRICT, statements=PROVENANCE_IDS)
    c.add("source-name-mismatch", _set("provenance.source_name", "other-net"),
          "provenance.source_name differs from scope.network", PUBLIC_CODE, reseal=False, feature=STRICT,
          statements=PROVENANCE_IDS)
    c.add("overlong-name", _candidates(lambda cs: _rename(cs, "m" * (MAX_VALUE_BYTES + 1))),
          f"names are bounded to {MAX_VALUE_BYTES} bytes", PUBLIC_CODE,
          twin=_candidates(lambda cs: _rename(cs, "m" * MAX_VALUE_BYTES)), feature=LIMITS, statements=BOUNDS_IDS)
    c.add("too-many-candidates", _candidates(lambda cs: _grow(cs, first, MAX_CANDIDATES + 1)),
          f"at most {MAX_CANDIDATES} candidates", PUBLIC_CODE,
          twin=_candidates(lambda cs: _grow(cs, first, MAX_CANDIDATES)), compact=True, feature=LIMITS,
          statements=BOUNDS_IDS)
    c.add("oversized-file", _padded(valid, MAX_OVERLAY_BYTES + 1), "reads are bounded to 2 MiB", PUBLIC_CODE,
          twin=lambda d: _pad_to(d, MAX_OVERLAY_BYTES), compact=True, feature=LIMITS, statements=BOUNDS_IDS)
    out = c.out
    # bytes that are not a JSON object: the twin is the base
    base = encode(valid)
    for name, data, why in (("nan-literal", base.replace(b'"fresh": true', b'"fresh": NaN', 1), "NaN is not JSON"),
                            ("not-json", b"{\"schema_version\": ", "truncated JSON"),
                            ("top-level-array", b"[]", "top level must be an object")):
        out.append(Case(name, data, "reject", why=why, spec=JSON_RULE, twin=base, twin_revision=revision_of(valid),
                        statements=STRICT_IDS if name == "nan-literal" else ()))
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
        item = dict(template)  # a candidate's values are scalars
        item["site"] = f"site-{index:05d}"
        item.pop("stable_id", None)
        cs.append(item)


def _grown(valid: dict[str, Any], template: dict[str, Any], count: int) -> dict[str, Any]:
    doc = copy.deepcopy(valid)
    _grow(doc["overlay"]["candidates"], template, count)
    return seal(doc)


def _append_other_site(cs: list[dict[str, Any]]) -> None:
    twin = copy.deepcopy(cs[0])
    twin["site"] = "site-twin"
    twin.pop("stable_id", None)
    cs.append(twin)


def _pad_to(doc: dict[str, Any], size: int) -> None:
    """Grow the envelope with an unknown additive field until its compact encoding is exactly `size` bytes."""
    doc["padding"] = ""
    doc["padding"] = "x" * (size - len(encode_compact(doc)))


def _padded(valid: dict[str, Any], size: int) -> bytes:
    doc = copy.deepcopy(valid)
    _pad_to(doc, size)
    return encode_compact(doc)


def _weighted(doc: dict[str, Any], weight: Any, drop_weight: int | None = None, drop_group: bool = False) -> None:
    doc["overlay"]["selection_policy"] = {"mode": WEIGHTED}
    for index, c in enumerate(doc["overlay"]["candidates"]):
        if not drop_group:
            c["selection_group"] = 0
        c["traffic_weight"] = weight
        if index == drop_weight:
            del c["traffic_weight"]


def _third(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with a third candidate: the first one's capability and cluster at another site."""
    _append_other_site(doc["overlay"]["candidates"])
    return doc


def _groups(doc: dict[str, Any], numbers: list[int]) -> None:
    for c, number in zip(doc["overlay"]["candidates"], numbers, strict=False):
        c["selection_group"] = number
        c.pop("admission_state", None)


def _mixed_admission(doc: dict[str, Any], numbers: list[int]) -> None:
    """Two admission states; in one group when `numbers` is [0, 0], apart otherwise."""
    _groups(doc, numbers)
    cs = doc["overlay"]["candidates"]
    cs[0]["admission_state"] = "new_and_existing"
    cs[1]["admission_state"] = "existing_only"


def _credential(doc: dict[str, Any], token: str | None = None, ref_extra: str | None = None) -> None:
    cred: dict[str, Any] = {"strategy": "bearer_token", "secretRef": {"name": "n", "namespace": "ns", "key": "token"}}
    if token is not None:
        cred["token"] = token
    if ref_extra is not None:
        cred["secretRef"]["value"] = ref_extra
    doc["overlay"]["candidates"][0]["credential"] = cred
