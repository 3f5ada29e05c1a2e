"""The mesh announcement: what one site gossips to the others as its SWIM member payload.

An announcement carries the site's gateway address, the GridNetworks it belongs to and its merged view of
provider records, so a record written at C reaches A through B even before A and C talk. It travels as
zlib-compressed JSON and must fit the membership payload limit; when it does not, other sites' tombstones
go first, then other sites' records (oldest first), since their own sites still announce them.

Decoding is strict because the bytes come from the network: a bounded inflate, JSON without NaN or
infinities, integers within 2**53 (what every JSON reader represents exactly), no duplicate or unknown
keys; every rejection is a DocumentError with a reason.

`OwnRecords` turns this site's InferenceProviders (with their latest metric samples) and AgentToolProviders
(their allowed discovered tools, under a `tool/` identity) into records. Revisions come
from a hybrid clock, max(previous + 1, wall milliseconds), raised only when the content changes, so a
restarted site still outranks what it announced before. A deleted provider becomes a tombstone (phase
Unavailable) for 600 s, long enough for every peer to learn of it. `RecordStore` is the merged view of
other sites' records; records claiming the local site are never merged: this site is their only author.
"""

from __future__ import annotations

import json
import logging
import math
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from reference.operator.core.candidates import allowed_tools
from reference.operator.core.model import MetricSample, Resources
from reference.operator.core.render import usable_signals
from reference.operator.mesh.records import (
    INFERENCE,
    MAX_DOCUMENT_BYTES,
    MAX_NAME,
    MAX_RECORDS,
    PHASES,
    TOOL,
    DocumentError,
    Key,
    Metrics,
    ProviderRecord,
    merge_record,
    record_from_dict,
    record_to_dict,
    unique_keys,
)
from reference.operator.mesh.sites import split_address

SCHEMA_VERSION = 1
TOMBSTONE_SECONDS = 600.0
MAX_NETWORKS = 256
MAX_JSON_INT = 2**53
UNAVAILABLE = "Unavailable"
#: AgentToolProviders announce under this prefix, so one named like an InferenceProvider keeps its own record.
TOOL_IDENTITY_PREFIX = "tool/"
_KEYS = ("schema_version", "site", "gateway", "networks", "records")

log = logging.getLogger(__name__)


class AnnouncementTooLarge(ValueError):
    """Even an announcement without records does not fit the payload limit."""


@dataclass(frozen=True)
class Announcement:
    """One site's payload: its name, gateway address (or None), networks and merged records."""

    site: str
    gateway: str | None = None
    networks: tuple[str, ...] = ()
    records: tuple[ProviderRecord, ...] = ()


def wall_millis() -> int:
    return time.time_ns() // 1_000_000


# --- encoding -----------------------------------------------------------------------------------


def announcement_to_dict(announcement: Announcement) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "site": announcement.site,
        "gateway": announcement.gateway,
        "networks": sorted(set(announcement.networks)),
        "records": [record_to_dict(r) for r in sorted(announcement.records, key=lambda r: r.key)],
    }


def encode_announcement(announcement: Announcement) -> bytes:
    """Compressed canonical JSON; refuses (DocumentError) anything its own decoder would reject."""
    text = json.dumps(announcement_to_dict(announcement), sort_keys=True, separators=(",", ":"), allow_nan=False)
    data = zlib.compress(text.encode(), 9)
    decode_announcement(data)
    return data


def fit_announcement(announcement: Announcement, max_bytes: int) -> tuple[bytes, Announcement]:
    """The encoded announcement within `max_bytes`, and what it kept.

    Records are dropped in this order until it fits: other sites' tombstones, other sites' records, this
    site's tombstones, this site's records; oldest revision first within each group.
    """
    data = encode_announcement(announcement)
    if len(data) <= max_bytes:
        return data, announcement

    def rank(record: ProviderRecord) -> tuple[bool, bool, int, Key]:
        return (record.site == announcement.site, record.phase != UNAVAILABLE, record.revision, record.key)

    ordered = sorted(announcement.records, key=rank)

    def attempt(dropped: int) -> tuple[bytes, Announcement]:
        kept = replace(announcement, records=tuple(ordered[dropped:]))
        return encode_announcement(kept), kept

    low, high = 1, len(ordered)
    best = attempt(high)
    if len(best[0]) > max_bytes:
        raise AnnouncementTooLarge(f"announcement without records is {len(best[0])} bytes, limit {max_bytes}")
    while low < high:  # the smallest number of dropped records that fits
        middle = (low + high) // 2
        candidate = attempt(middle)
        if len(candidate[0]) <= max_bytes:
            high, best = middle, candidate
        else:
            low = middle + 1
    return best


# --- strict decoding ----------------------------------------------------------------------------


def _inflate(data: bytes) -> bytes:
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(data, MAX_DOCUMENT_BYTES + 1)
    except zlib.error as error:
        raise DocumentError(f"payload: not a zlib stream ({error})") from None
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise DocumentError(f"payload: inflates beyond {MAX_DOCUMENT_BYTES} bytes")
    if not inflater.eof:
        raise DocumentError("payload: truncated zlib stream")
    if inflater.unused_data:
        raise DocumentError("payload: trailing bytes after the zlib stream")
    return raw


def _int(text: str) -> int:
    if len(text.lstrip("-")) > 16 or abs(int(text)) > MAX_JSON_INT:
        raise DocumentError(f"document: integer {text[:24]} exceeds 2**53")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise DocumentError(f"document: number {text[:24]} is not finite")
    return value


def _constant(text: str) -> Any:
    raise DocumentError(f"document: {text} is not allowed")


def _name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME or not value.isprintable():
        raise DocumentError(f"{path}: expected a non-empty printable string of at most {MAX_NAME} characters")
    return value


def decode_announcement(data: bytes) -> Announcement:
    """Inflate, parse and validate a payload; any defect raises DocumentError naming it, nothing else."""
    if not isinstance(data, bytes | bytearray):
        raise DocumentError(f"payload: expected bytes, got {type(data).__name__}")
    raw = _inflate(bytes(data))
    try:
        text = raw.decode("utf-8")
        body = json.loads(
            text, object_pairs_hook=unique_keys, parse_int=_int, parse_float=_float, parse_constant=_constant
        )
    except DocumentError:
        raise
    except UnicodeDecodeError:
        raise DocumentError("document: not UTF-8") from None
    except (ValueError, RecursionError) as error:
        raise DocumentError(f"document: not valid JSON ({error})") from None
    return _announcement(body)


def _announcement(body: Any) -> Announcement:
    if not isinstance(body, dict):
        raise DocumentError("document: expected an object")
    unknown = sorted(set(body) - set(_KEYS))
    if unknown:
        raise DocumentError(f"{unknown[0]}: unknown field")
    missing = [key for key in _KEYS if key not in body]
    if missing:
        raise DocumentError(f"{missing[0]}: required")
    version = body["schema_version"]
    if type(version) is not int or version != SCHEMA_VERSION:
        raise DocumentError(f"schema_version: unsupported {version!r}, expected {SCHEMA_VERSION}")
    site = _name(body["site"], "site")
    gateway = body["gateway"]
    if gateway is not None:
        try:
            split_address(_name(gateway, "gateway"))
        except ValueError as error:
            raise DocumentError(f"gateway: {error}") from None
    networks = body["networks"]
    if not isinstance(networks, list) or len(networks) > MAX_NETWORKS:
        raise DocumentError(f"networks: expected a list of at most {MAX_NETWORKS} names")
    names = [_name(n, f"networks[{i}]") for i, n in enumerate(networks)]
    if len(set(names)) != len(names):
        raise DocumentError("networks: duplicate network name")
    items = body["records"]
    if not isinstance(items, list) or len(items) > MAX_RECORDS:
        raise DocumentError(f"records: expected a list of at most {MAX_RECORDS} records")
    records: list[ProviderRecord] = []
    seen: set[Key] = set()
    for index, item in enumerate(items):
        record = record_from_dict(item, f"records[{index}]")
        if record.key in seen:
            raise DocumentError(f"records[{index}]: duplicate record for {record.key}")
        seen.add(record.key)
        records.append(record)
    return Announcement(site, gateway, tuple(names), tuple(records))


# --- this site's records ------------------------------------------------------------------------


def own_content(
    resources: Resources, samples: Iterable[MetricSample], site: str, cluster: str, now: float
) -> dict[Key, ProviderRecord]:
    """This site's records without revisions: one per InferenceProvider and AgentToolProvider of a local
    GridNetwork whose `spec.site` is unset or this site. Provider metrics are the latest usable sample,
    normalised to [0, 1]; a tool record lists the allowed discovered tools and carries no metrics.

    An InferenceProvider's record names its own `spec.clusterName` (the Praxis upstream cluster that reaches
    the provider's site), so two providers of one model at one site stay two candidates elsewhere; one that
    declares none is reached through this site's routing `cluster`."""
    networks = {network.name for network in resources.networks}
    latest = {sample.provider: sample for sample in samples}
    out: dict[Key, ProviderRecord] = {}
    for provider in resources.providers:
        if provider.network not in networks or (provider.site and provider.site != site):
            continue
        signals, _ = usable_signals(provider, latest.get(provider.name), now)
        metrics = Metrics()
        if signals is not None:
            metrics = Metrics(signals.queue_depth, signals.kv_cache_utilization, signals.healthy)
        record = ProviderRecord(
            network=provider.network,
            site=site,
            provider=provider.name,
            cluster=provider.routing_cluster_ref or cluster,
            models=tuple(provider.models),
            kind=INFERENCE,
            phase=provider.phase if provider.phase in PHASES else "Available",
            metrics=metrics,
            site_selector=tuple(sorted(provider.access_selector.items())),
            capacity_weight=provider.capacity_weight,
            writer=site,
        )
        _announceable(out, record, f"InferenceProvider {provider.name}")
    for tool_provider in resources.tool_providers:
        if tool_provider.network not in networks or (tool_provider.site and tool_provider.site != site):
            continue
        record = ProviderRecord(
            network=tool_provider.network,
            site=site,
            provider=TOOL_IDENTITY_PREFIX + tool_provider.name,
            cluster=cluster,
            models=tuple(allowed_tools(tool_provider)),
            kind=TOOL,
            phase=tool_provider.phase if tool_provider.phase in PHASES else "Available",
            site_selector=tuple(sorted(tool_provider.access_selector.items())),
            writer=site,
        )
        _announceable(out, record, f"AgentToolProvider {tool_provider.name}")
    return out


def _announceable(out: dict[Key, ProviderRecord], record: ProviderRecord, what: str) -> None:
    """Keep `record` if the record format accepts it (a name it refuses is logged and skipped)."""
    try:
        out[record.key] = record_from_dict(record_to_dict(record), what)
    except DocumentError as error:
        log.warning("not announcing %s: %s", what, error)


def _content(record: ProviderRecord) -> ProviderRecord:
    return replace(record, revision=0)


class OwnRecords:
    """This site's authoritative records, with hybrid-clock revisions and timed tombstones.

    Echoes of this site's records (from peers' views) are never merged, but they are checked: one that
    outranks the current record (an earlier run with a clock ahead) makes the revision jump past it, and
    one for a provider this site no longer has is retracted with a tombstone. Echoes seen before the
    first `update` wait for it, so a restart does not retract providers that still exist.
    """

    def __init__(
        self,
        site: str,
        cluster: str,
        *,
        now: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = wall_millis,
        tombstone_seconds: float = TOMBSTONE_SECONDS,
    ) -> None:
        self.site = site
        self.cluster = cluster
        self._now = now
        self._wall_ms = wall_ms
        self.tombstone_seconds = tombstone_seconds
        self._records: dict[Key, ProviderRecord] = {}
        self._tombstoned_at: dict[Key, float] = {}
        self._last_revision: dict[Key, int] = {}
        self._pending_echoes: dict[Key, ProviderRecord] = {}
        self._ready = False

    def records(self) -> tuple[ProviderRecord, ...]:
        return tuple(self._records[key] for key in sorted(self._records))

    def _revision(self, key: Key, floor: int = 0) -> int:
        revision = max(self._last_revision.get(key, 0) + 1, floor + 1, self._wall_ms())
        self._last_revision[key] = revision
        return revision

    def _tombstone(self, record: ProviderRecord, floor: int = 0) -> ProviderRecord:
        self._tombstoned_at[record.key] = self._now()
        return replace(
            record, phase=UNAVAILABLE, metrics=Metrics(), writer=self.site, revision=self._revision(record.key, floor)
        )

    def update(self, resources: Resources, samples: Iterable[MetricSample]) -> bool:
        """Bring the records in line with the resources; True when any record changed."""
        desired = own_content(resources, samples, self.site, self.cluster, self._now())
        changed = False
        for key, content in desired.items():
            current = self._records.get(key)
            if current is not None and _content(current) == content:
                continue
            self._records[key] = replace(content, revision=self._revision(key))
            self._tombstoned_at.pop(key, None)
            changed = True
        for key, current in list(self._records.items()):
            if key not in desired and key not in self._tombstoned_at:
                self._records[key] = self._tombstone(current)
                changed = True
        self._ready = True
        pending, self._pending_echoes = self._pending_echoes, {}
        for echo in pending.values():
            changed = self.observe_echo(echo) or changed
        return changed

    def expire(self) -> bool:
        """Drop tombstones older than the tombstone lifetime; True when any was dropped."""
        now = self._now()
        old = [key for key, at in self._tombstoned_at.items() if now - at >= self.tombstone_seconds]
        for key in old:
            del self._tombstoned_at[key]
            self._records.pop(key, None)
        return bool(old)

    def observe_echo(self, echo: ProviderRecord) -> bool:
        """React to a record of this site heard from a peer; True when a record of ours changed."""
        if echo.site != self.site:
            return False
        if not self._ready:
            held = self._pending_echoes.get(echo.key)
            self._pending_echoes[echo.key] = echo if held is None else merge_record(held, echo)
            return False
        current = self._records.get(echo.key)
        if current is None:
            if echo.phase == UNAVAILABLE:
                return False
            self._records[echo.key] = self._tombstone(echo, echo.revision)
            return True
        if echo.version > current.version:
            self._records[echo.key] = replace(current, revision=self._revision(echo.key, echo.revision))
            return True
        return False


# --- the merged view of other sites -------------------------------------------------------------


class RecordStore:
    """Other sites' records, merged last-writer-wins; records of the local site are never merged.

    Tombstones are forgotten `tombstone_seconds` after they arrived, but the version they carried stays
    as a floor so an older copy still circulating cannot bring the provider back.
    """

    def __init__(
        self,
        local_site: str,
        *,
        now: Callable[[], float] = time.monotonic,
        tombstone_seconds: float = TOMBSTONE_SECONDS,
    ) -> None:
        self.local_site = local_site
        self._now = now
        self.tombstone_seconds = tombstone_seconds
        self._records: dict[Key, ProviderRecord] = {}
        self._tombstone_seen: dict[Key, float] = {}
        self._floors: dict[Key, tuple[int, str, str]] = {}

    def others(self) -> list[ProviderRecord]:
        return [self._records[key] for key in sorted(self._records)]

    def merge(self, incoming: Iterable[ProviderRecord]) -> bool:
        """Merge records heard from a peer; True when the view changed."""
        changed = False
        for record in incoming:
            if record.site == self.local_site:
                continue
            floor = self._floors.get(record.key)
            if floor is not None and record.version <= floor:
                continue
            current = self._records.get(record.key)
            winner = record if current is None else merge_record(current, record)
            if winner is current:
                continue
            self._records[record.key] = winner
            if winner.phase == UNAVAILABLE:
                self._tombstone_seen[record.key] = self._now()
            else:
                self._tombstone_seen.pop(record.key, None)
            changed = True
        return changed

    def expire(self) -> bool:
        """Forget tombstones past their lifetime; True when any was forgotten."""
        now = self._now()
        old = [key for key, at in self._tombstone_seen.items() if now - at >= self.tombstone_seconds]
        for key in old:
            del self._tombstone_seen[key]
            self._floors[key] = self._records.pop(key).version
        return bool(old)

    def view(self, own: Iterable[ProviderRecord]) -> tuple[ProviderRecord, ...]:
        """The merged state this site announces: its own records plus everything learned, in key order."""
        merged: Mapping[Key, ProviderRecord] = {**self._records, **{r.key: r for r in own}}
        return tuple(merged[key] for key in sorted(merged))
