"""Provider records shared between sites: last-writer-wins merge, a versioned state document, filtering.

Each site announces its providers as records keyed by (network, site, provider). Replicas converge by
merging per key: the record with the greater (revision, writer) wins, with a digest of the content as the
final tie-break so the merge is commutative, associative and idempotent whatever arrives. A state
document carries a site's merged view to its peers; decoding is bounded and strict, and every rejection
comes with a reason. Remote values are never trusted as they are: metric values are clamped to their
ranges and non-finite values are treated as absent.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Protocol

from reference.operator.core.model import RemoteProviderRecord

SCHEMA_VERSION = 1
MAX_DOCUMENT_BYTES = 1 << 20
MAX_RECORDS = 4096
MAX_MODELS = 256
MAX_LABELS = 64
MAX_NAME = 253
MAX_LABEL_TEXT = 317
MAX_REVISION = (1 << 64) - 1
MAX_CAPACITY_WEIGHT = 1000

INFERENCE = "inference_model"
TOOL = "mcp_tool"
KINDS = (INFERENCE, TOOL)
PHASES = ("Pending", "Available", "Degraded", "Unavailable")
DEGRADED = "Degraded"
STALE_MEMBER_STATES = frozenset({"suspect", "dead"})

Key = tuple[str, str, str]


class DocumentError(ValueError):
    """A state document or record that is rejected; the message names the offending field."""


# --- records ------------------------------------------------------------------------------------


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def clamp_ratio(value: float | None) -> float | None:
    """A ratio signal from a peer: non-finite is absent, anything else is clamped into [0, 1]."""
    value = finite(value)
    return None if value is None else min(1.0, max(0.0, float(value)))


@dataclass(frozen=True)
class Metrics:
    """Routing signals of a provider as its own site measured them; None means no evidence."""

    queue_depth: float | None = None
    kv_cache_utilization: float | None = None
    healthy: bool | None = None

    def sanitised(self) -> Metrics:
        return Metrics(clamp_ratio(self.queue_depth), clamp_ratio(self.kv_cache_utilization), self.healthy)


@dataclass(frozen=True)
class ProviderRecord:
    """One provider as announced by its site.

    `revision` and `writer` order versions of the same record; the writing site raises the revision when
    the provider changes. `site_selector` is the provider's access policy: labels a consumer site must
    carry.
    """

    network: str
    site: str
    provider: str
    cluster: str
    models: tuple[str, ...] = ()
    kind: str = INFERENCE
    backend_kind: str = ""
    phase: str = "Available"
    metrics: Metrics = field(default_factory=Metrics)
    site_selector: tuple[tuple[str, str], ...] = ()
    capacity_weight: int = 1
    revision: int = 0
    writer: str = ""

    @property
    def key(self) -> Key:
        return (self.network, self.site, self.provider)

    @cached_property
    def digest(self) -> str:
        """SHA-256 of the canonical JSON form; the last tie-break between equal (revision, writer)."""
        text = json.dumps(record_to_dict(self), sort_keys=True, separators=(",", ":"), allow_nan=True)
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def version(self) -> tuple[int, str, str]:
        return (self.revision, self.writer, self.digest)


def make_record(**fields: Any) -> ProviderRecord:
    """Build a record from Python values, validated exactly as a decoded one would be."""
    return record_from_dict(record_to_dict(ProviderRecord(**fields)), "record")


# --- merge --------------------------------------------------------------------------------------


def merge_record(a: ProviderRecord, b: ProviderRecord) -> ProviderRecord:
    """Last writer wins on (revision, writer, digest); both records must share a key."""
    if a.key != b.key:
        raise ValueError(f"cannot merge records with different keys {a.key} and {b.key}")
    return a if a.version >= b.version else b


def merge_states(*states: Mapping[Key, ProviderRecord]) -> dict[Key, ProviderRecord]:
    """The join of replica states: every key of any state, each holding its winning record."""
    merged: dict[Key, ProviderRecord] = {}
    for state in states:
        for key, record in state.items():
            current = merged.get(key)
            merged[key] = record if current is None else merge_record(current, record)
    return merged


def state_of(records: Iterable[ProviderRecord]) -> dict[Key, ProviderRecord]:
    """Index records by key, merging any duplicates."""
    return merge_states(*({record.key: record} for record in records))


# --- state document -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StateDocument:
    """A site's view of provider records in one network, as broadcast to its peers."""

    network: str
    writer_site: str
    records: tuple[ProviderRecord, ...] = ()
    schema_version: int = SCHEMA_VERSION


def record_to_dict(record: ProviderRecord) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    if record.metrics.queue_depth is not None:
        metrics["queue_depth"] = record.metrics.queue_depth
    if record.metrics.kv_cache_utilization is not None:
        metrics["kv_cache_utilization"] = record.metrics.kv_cache_utilization
    if record.metrics.healthy is not None:
        metrics["healthy"] = record.metrics.healthy
    return {
        "network": record.network,
        "site": record.site,
        "provider": record.provider,
        "cluster": record.cluster,
        "models": list(record.models),
        "kind": record.kind,
        "backend_kind": record.backend_kind,
        "phase": record.phase,
        "metrics": metrics,
        "access_policy": {"site_selector": dict(record.site_selector)},
        "capacity_weight": record.capacity_weight,
        "revision": record.revision,
        "writer": record.writer,
    }


def encode_state(document: StateDocument) -> bytes:
    """Compact JSON with records in key order; refuses a document that would not decode."""
    body = {
        "schema_version": document.schema_version,
        "network": document.network,
        "writer_site": document.writer_site,
        "records": [
            record_to_dict(replace(r, metrics=r.metrics.sanitised()))
            for r in sorted(document.records, key=lambda r: r.key)
        ],
    }
    data = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    decode_state(data)
    return data


def decode_state(data: bytes | str) -> StateDocument:
    """Parse and validate a state document; any defect raises DocumentError naming it, nothing else."""
    raw = data.encode() if isinstance(data, str) else data
    if not isinstance(raw, bytes | bytearray):
        raise DocumentError(f"document: expected bytes, got {type(data).__name__}")
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise DocumentError(f"document: {len(raw)} bytes exceeds the limit of {MAX_DOCUMENT_BYTES}")
    try:
        body = json.loads(raw, object_pairs_hook=unique_keys)
    except DocumentError:
        raise
    except (ValueError, RecursionError) as error:
        raise DocumentError(f"document: not valid JSON ({error})") from None
    return _document(body)


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DocumentError(f"document: duplicate key {key!r}")
        out[key] = value
    return out


_DOCUMENT_KEYS = {"schema_version", "network", "writer_site", "records"}
_RECORD_KEYS = {
    "network",
    "site",
    "provider",
    "cluster",
    "models",
    "kind",
    "backend_kind",
    "phase",
    "metrics",
    "access_policy",
    "capacity_weight",
    "revision",
    "writer",
}
_REQUIRED_RECORD_KEYS = {"network", "site", "provider", "cluster", "revision", "writer"}
_METRIC_KEYS = {"queue_depth", "kv_cache_utilization", "healthy"}


def _document(body: Any) -> StateDocument:
    obj = _object(body, "document", _DOCUMENT_KEYS, _DOCUMENT_KEYS)
    version = obj["schema_version"]
    if type(version) is not int or version != SCHEMA_VERSION:
        raise DocumentError(f"schema_version: unsupported {version!r}, expected {SCHEMA_VERSION}")
    network = _name(obj["network"], "network")
    writer_site = _name(obj["writer_site"], "writer_site")
    items = obj["records"]
    if not isinstance(items, list):
        raise DocumentError("records: expected a list")
    if len(items) > MAX_RECORDS:
        raise DocumentError(f"records: {len(items)} records exceeds the limit of {MAX_RECORDS}")
    records: list[ProviderRecord] = []
    seen: set[Key] = set()
    for index, item in enumerate(items):
        path = f"records[{index}]"
        record = record_from_dict(item, path)
        if record.network != network:
            raise DocumentError(f"{path}.network: {record.network!r} differs from the document network {network!r}")
        if record.key in seen:
            raise DocumentError(f"{path}: duplicate record for {record.key}")
        seen.add(record.key)
        records.append(record)
    return StateDocument(network=network, writer_site=writer_site, records=tuple(records))


def record_from_dict(item: Any, path: str) -> ProviderRecord:
    """Validate one record object; metric values are sanitised rather than rejected."""
    obj = _object(item, path, _RECORD_KEYS, _REQUIRED_RECORD_KEYS)
    models = obj.get("models", [])
    if not isinstance(models, list) or len(models) > MAX_MODELS:
        raise DocumentError(f"{path}.models: expected a list of at most {MAX_MODELS} names")
    kind = obj.get("kind", INFERENCE)
    if kind not in KINDS:
        raise DocumentError(f"{path}.kind: must be one of {list(KINDS)}")
    phase = obj.get("phase", "Available")
    if phase not in PHASES:
        raise DocumentError(f"{path}.phase: must be one of {list(PHASES)}")
    backend_kind = obj.get("backend_kind", "")
    if not isinstance(backend_kind, str) or len(backend_kind) > MAX_NAME:
        raise DocumentError(f"{path}.backend_kind: expected a string of at most {MAX_NAME} characters")
    return ProviderRecord(
        network=_name(obj["network"], f"{path}.network"),
        site=_name(obj["site"], f"{path}.site"),
        provider=_name(obj["provider"], f"{path}.provider"),
        cluster=_name(obj["cluster"], f"{path}.cluster"),
        models=tuple(_name(m, f"{path}.models[{i}]") for i, m in enumerate(models)),
        kind=kind,
        backend_kind=backend_kind,
        phase=phase,
        metrics=_metrics(obj.get("metrics", {}), f"{path}.metrics"),
        site_selector=_selector(obj.get("access_policy", {}), f"{path}.access_policy"),
        capacity_weight=_integer(obj.get("capacity_weight", 1), f"{path}.capacity_weight", 1, MAX_CAPACITY_WEIGHT),
        revision=_integer(obj["revision"], f"{path}.revision", 0, MAX_REVISION),
        writer=_name(obj["writer"], f"{path}.writer"),
    )


def _object(value: Any, path: str, allowed: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DocumentError(f"{path}: expected an object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise DocumentError(f"{path}.{unknown[0]}: unknown field")
    missing = sorted(required - set(value))
    if missing:
        raise DocumentError(f"{path}.{missing[0]}: required")
    return value


def _name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DocumentError(f"{path}: expected a non-empty string")
    if len(value) > MAX_NAME or not value.isprintable():
        raise DocumentError(f"{path}: must be at most {MAX_NAME} printable characters")
    return value


def _integer(value: Any, path: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise DocumentError(f"{path}: expected an integer in {low}..{high}")
    return value


def _metric(value: Any, path: str) -> float | None:
    """Numbers only; NaN, infinities and out-of-range values become absent or clamped, never an error."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DocumentError(f"{path}: expected a number")
    try:
        return clamp_ratio(float(value))
    except OverflowError:
        return None


def _metrics(value: Any, path: str) -> Metrics:
    obj = _object(value, path, _METRIC_KEYS, set())
    healthy = obj.get("healthy")
    if healthy is not None and not isinstance(healthy, bool):
        raise DocumentError(f"{path}.healthy: expected a boolean")
    return Metrics(
        queue_depth=_metric(obj.get("queue_depth"), f"{path}.queue_depth"),
        kv_cache_utilization=_metric(obj.get("kv_cache_utilization"), f"{path}.kv_cache_utilization"),
        healthy=healthy,
    )


def _selector(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    obj = _object(value, path, {"site_selector"}, set())
    labels = obj.get("site_selector", {})
    if not isinstance(labels, dict) or len(labels) > MAX_LABELS:
        raise DocumentError(f"{path}.site_selector: expected an object of at most {MAX_LABELS} labels")
    for key, label in labels.items():
        if not key or len(key) > MAX_LABEL_TEXT or not isinstance(label, str) or len(label) > MAX_LABEL_TEXT:
            raise DocumentError(f"{path}.site_selector.{key}: expected a label string")
    return tuple(sorted(labels.items()))


# --- filtering and conversion -------------------------------------------------------------------


def remote_records(records: Iterable[ProviderRecord], network: str, local_site: str) -> list[ProviderRecord]:
    """Records of other sites in this network: never another network's, never our own echo."""
    return [r for r in records if r.network == network and r.site != local_site]


@dataclass(frozen=True)
class MemberHealth:
    """A site's membership state (alive, suspect, dead, left) and seconds since it became suspect or dead.

    An age of 0 on a suspect or dead member means the age is unknown, and stale candidates are retained.
    """

    status: str
    age_secs: int = 0


class MemberLike(Protocol):
    """Anything with a membership status and age, such as MemberHealth or a SWIM member snapshot."""

    @property
    def status(self) -> str: ...

    @property
    def age_secs(self) -> int: ...


def _status(member: MemberLike | None) -> str | None:
    if member is None:
        return None
    raw = getattr(member.status, "value", member.status)
    return str(raw).lower()


def to_core(record: ProviderRecord, member: MemberLike | None = None) -> RemoteProviderRecord:
    """The rendering core's view of a remote record.

    A record whose writing site's member is suspect or dead becomes Degraded (rendered `fresh: false`)
    with that member's age, so the stale-candidate TTL can evict it later; its metrics are sanitised.
    """
    phase, age = record.phase, 0
    if _status(member) in STALE_MEMBER_STATES and member is not None:
        phase = DEGRADED if record.phase != "Unavailable" else record.phase
        age = max(0, int(member.age_secs))
    metrics = record.metrics.sanitised()
    return RemoteProviderRecord(
        network=record.network,
        site=record.site,
        name=record.provider,
        cluster=record.cluster,
        kind=record.kind,
        models=record.models,
        phase=phase,
        age_secs=age,
        queue_depth=metrics.queue_depth,
        kv_cache_utilization=metrics.kv_cache_utilization,
        healthy=True if metrics.healthy is None else metrics.healthy,
        capacity_weight=record.capacity_weight,
    )


def core_records(
    records: Iterable[ProviderRecord],
    network: str,
    local_site: str,
    members: Mapping[str, MemberLike] | None = None,
) -> list[RemoteProviderRecord]:
    """Filter then convert: what `render(remote_records=...)` takes for one network and local site."""
    members = members or {}
    return [to_core(r, members.get(r.site)) for r in remote_records(records, network, local_site)]
