"""The mesh announcement: codec round trip, strict decoding, size fitting, own records and the merged store."""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import replace
from typing import Any

import pytest

from harness.resources import gateway_ref, grid_network, inference_provider
from reference.operator.core.model import MetricSample, Resources
from reference.operator.mesh.announce import (
    MAX_JSON_INT,
    Announcement,
    AnnouncementTooLarge,
    OwnRecords,
    RecordStore,
    decode_announcement,
    encode_announcement,
    fit_announcement,
    own_content,
)
from reference.operator.mesh.records import (
    MAX_DOCUMENT_BYTES,
    DocumentError,
    Metrics,
    ProviderRecord,
    make_record,
    record_to_dict,
)
from reference.operator.mesh.swim import LOCAL

NET = "grid"


def record(site: str, provider: str, revision: int = 1, **fields: Any) -> ProviderRecord:
    base: dict[str, Any] = {"network": NET, "site": site, "provider": provider, "cluster": f"{site}-gw"}
    base.update(models=("m",), revision=revision, writer=site)
    base.update(fields)
    return make_record(**base)


def body(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema_version": 1,
        "site": "site-b",
        "gateway": "127.0.0.1:8443",
        "networks": [NET],
        "records": [json.loads(json.dumps(record_to_dict(record("site-c", "p1", 5))))],
    }
    doc.update(overrides)
    return doc


def packed(text: str | bytes) -> bytes:
    return zlib.compress(text.encode() if isinstance(text, str) else text)


# --- codec --------------------------------------------------------------------------------------


def test_round_trip_keeps_everything_in_key_order() -> None:
    records = (
        record("site-c", "p2", 7, metrics=Metrics(0.25, 0.5, True), capacity_weight=3),
        record("site-b", "p1", 2, phase="Unavailable", site_selector=(("tier", "gold"),)),
        record("site-c", "p1", 9, models=("m1", "m2")),
    )
    announcement = Announcement("site-b", "[::1]:8443", ("grid", "other"), records)
    data = encode_announcement(announcement)
    assert zlib.decompress(data).startswith(b"{")
    decoded = decode_announcement(data)
    assert decoded == Announcement(
        "site-b", "[::1]:8443", ("grid", "other"), tuple(sorted(records, key=lambda r: r.key))
    )
    assert decode_announcement(encode_announcement(decoded)) == decoded
    assert decode_announcement(encode_announcement(Announcement("a"))) == Announcement("a")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"not zlib at all", "not a zlib stream"),
        (zlib.compress(b'{"schema_version": 1}')[:-4], "truncated"),
        (zlib.compress(b"{}") + b"extra", "trailing bytes"),
        (zlib.compress(b" " * (MAX_DOCUMENT_BYTES + 10)), "inflates beyond"),
        (packed(b"\xff\xfe{}"), "not UTF-8"),
        (packed("{not json"), "not valid JSON"),
        (packed("[]"), "expected an object"),
        (packed(json.dumps(body(schema_version=2))), "schema_version: unsupported"),
        (packed(json.dumps(body(schema_version="1"))), "schema_version: unsupported"),
        (packed(json.dumps(body(schema_version=True))), "schema_version: unsupported"),
        (packed(json.dumps(body(extra=1))), "extra: unknown field"),
        (packed(json.dumps({k: v for k, v in body().items() if k != "gateway"})), "gateway: required"),
        (packed(json.dumps(body(site=""))), "site:"),
        (packed(json.dumps(body(site=7))), "site:"),
        (packed(json.dumps(body(gateway="no-port"))), "gateway:"),
        (packed(json.dumps(body(gateway="h:99999"))), "gateway:"),
        (packed(json.dumps(body(networks="grid"))), "networks:"),
        (packed(json.dumps(body(networks=["grid", "grid"]))), "networks: duplicate"),
        (packed(json.dumps(body(networks=[""]))), "networks[0]"),
        (packed(json.dumps(body(records={}))), "records:"),
        (packed(json.dumps(body(records=[{"site": "x"}]))), "records[0]"),
        (packed('{"schema_version": 1, "schema_version": 1}'), "duplicate key"),
    ],
)
def test_strict_decoding_gives_a_reason(data: bytes, fragment: str) -> None:
    with pytest.raises(DocumentError) as caught:
        decode_announcement(data)
    assert fragment in str(caught.value), str(caught.value)


def _with_metric(raw: str) -> bytes:
    """A valid document whose first record's queue_depth is the literal JSON text `raw`."""
    text = json.dumps(body(), sort_keys=True)
    marker = '"metrics": {}'
    assert marker in text
    return packed(text.replace(marker, '"metrics": {"queue_depth": ' + raw + "}"))


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [("NaN", "NaN is not allowed"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e999", "not finite")],
)
def test_non_finite_numbers_are_rejected(raw: str, fragment: str) -> None:
    assert decode_announcement(_with_metric("0.5")).records[0].metrics.queue_depth == 0.5
    with pytest.raises(DocumentError) as caught:
        decode_announcement(_with_metric(raw))
    assert fragment in str(caught.value)


def test_integers_beyond_2_pow_53_are_rejected() -> None:
    doc = body()
    doc["records"][0]["revision"] = MAX_JSON_INT
    assert decode_announcement(packed(json.dumps(doc))).records[0].revision == MAX_JSON_INT
    for value in (MAX_JSON_INT + 1, 10**30, -(MAX_JSON_INT + 1)):
        doc["records"][0]["revision"] = value
        with pytest.raises(DocumentError, match="exceeds 2\\*\\*53"):
            decode_announcement(packed(json.dumps(doc)))


def test_duplicate_records_and_bad_fields_are_rejected() -> None:
    one = record_to_dict(record("site-c", "p1"))
    with pytest.raises(DocumentError, match="duplicate record"):
        decode_announcement(packed(json.dumps(body(records=[one, one]))))
    with pytest.raises(DocumentError, match=r"records\[0\]\.phase"):
        decode_announcement(packed(json.dumps(body(records=[{**one, "phase": "Gone"}]))))
    with pytest.raises(DocumentError, match="expected bytes"):
        decode_announcement("text")  # type: ignore[arg-type]


def test_encoder_refuses_what_the_decoder_would_reject() -> None:
    with pytest.raises(DocumentError, match="exceeds 2"):
        encode_announcement(Announcement("a", records=(record("b", "p", MAX_JSON_INT + 1),)))


# --- size fitting -------------------------------------------------------------------------------


def _noisy(site: str, index: int, revision: int, **fields: Any) -> ProviderRecord:
    """A record with incompressible names, so payload size grows with the record count."""
    token = hashlib.sha256(f"{site}/{index}".encode()).hexdigest()
    return record(site, f"p-{token[:24]}", revision, models=(f"m-{token[24:56]}",), **fields)


def test_fitting_drops_others_tombstones_then_oldest_other_records() -> None:
    own = tuple(_noisy("site-a", i, 1000 + i) for i in range(3))
    others_dead = tuple(_noisy("site-c", i, 10 + i, phase="Unavailable") for i in range(20))
    others_live = tuple(_noisy("site-b", i, 100 + i) for i in range(150))
    announcement = Announcement("site-a", None, (NET,), own + others_dead + others_live)
    limit = LOCAL.max_payload_bytes // 2
    assert len(encode_announcement(announcement)) > limit
    data, kept = fit_announcement(announcement, limit)
    assert len(data) <= limit
    assert decode_announcement(data) == replace(kept, records=tuple(sorted(kept.records, key=lambda r: r.key)))
    kept_keys = {r.key for r in kept.records}
    assert {r.key for r in own} <= kept_keys, "own records are the last to go"
    assert not kept_keys & {r.key for r in others_dead}, "others' tombstones go first"
    live_kept = [r for r in others_live if r.key in kept_keys]
    assert 0 < len(live_kept) < len(others_live)
    assert min(r.revision for r in live_kept) > max(r.revision for r in others_live if r.key not in kept_keys)
    # one record fewer dropped would not fit: the fit keeps as much as it can
    dropped = len(announcement.records) - len(kept.records)
    order = sorted(announcement.records, key=lambda r: (r.site == "site-a", r.phase != "Unavailable", r.revision))
    assert len(encode_announcement(replace(announcement, records=tuple(order[dropped - 1 :])))) > limit


def test_fitting_leaves_a_small_announcement_alone_and_fails_when_nothing_fits() -> None:
    small = Announcement("site-a", "127.0.0.1:1", (NET,), (record("site-b", "p"),))
    data, kept = fit_announcement(small, LOCAL.max_payload_bytes)
    assert kept is small and data == encode_announcement(small)
    with pytest.raises(AnnouncementTooLarge):
        fit_announcement(small, 10)


# --- own records --------------------------------------------------------------------------------


class Clocks:
    def __init__(self) -> None:
        self.seconds = 0.0
        self.millis = 1_000_000

    def now(self) -> float:
        return self.seconds

    def wall_ms(self) -> int:
        return self.millis


def resources(*providers: dict[str, Any], networks: tuple[str, ...] = (NET,)) -> Resources:
    objects = [grid_network(n, [gateway_ref("site-a")]) for n in networks]
    return Resources.from_objects([*objects, *providers])


def provider(name: str, models: tuple[str, ...] = ("m",), **extra: Any) -> dict[str, Any]:
    extra.setdefault("site", "site-a")
    extra.setdefault("network", NET)
    network = extra.pop("network")
    return inference_provider(name, network, cluster=f"{name}-local", models=models, **extra)


def test_own_content_one_record_per_local_provider_with_normalised_metrics() -> None:
    undeclared = provider("p3")
    undeclared["spec"] = {k: v for k, v in undeclared["spec"].items() if k != "clusterName"}
    res = resources(
        provider("p1", metricsConfig={"queueCapacity": 10, "signalNames": {"queueDepth": "q"}}, capacityWeight=4),
        provider("p2", phase="Degraded", accessPolicy={"siteSelector": {"matchLabels": {"tier": "gold"}}}),
        provider("elsewhere", site="site-z"),
        provider("no-network", network="missing"),
        provider("unsited", site=None),
        undeclared,
    )
    sample = MetricSample("p1", 1, queue_depth=5.0, kv_cache_utilization=3.0, healthy=False)
    content = own_content(res, [sample], "site-a", "a-route", now=0.0)
    assert sorted(key[2] for key in content) == ["p1", "p2", "p3", "unsited"]
    p1, p2 = content[(NET, "site-a", "p1")], content[(NET, "site-a", "p2")]
    assert (p1.cluster, p1.writer, p1.kind, p1.capacity_weight) == ("p1-local", "site-a", "inference_model", 4), \
        "a provider's record names its own clusterName"
    assert content[(NET, "site-a", "p3")].cluster == "a-route", "without one, the site's routing cluster"
    assert p1.metrics == Metrics(0.5, 1.0, False)
    assert p2.metrics == Metrics() and p2.phase == "Degraded" and p2.site_selector == (("tier", "gold"),)


def test_revisions_follow_a_hybrid_clock_and_move_only_on_change() -> None:
    clocks = Clocks()
    own = OwnRecords("site-a", "a-route", now=clocks.now, wall_ms=clocks.wall_ms)
    res = resources(provider("p1"))
    assert own.update(res, [])
    (first,) = own.records()
    assert first.revision == 1_000_000
    clocks.millis += 5000
    assert not own.update(res, [])
    assert own.records() == (first,)
    assert not own.update(res, [MetricSample("other", 1, queue_depth=1.0)])
    assert own.update(resources(provider("p1", models=("m", "m2"))), [])
    (second,) = own.records()
    assert second.revision == 1_005_000 and second.models == ("m", "m2")
    clocks.millis = 10  # the wall clock stepped back: the revision still grows
    assert own.update(res, [])
    assert own.records()[0].revision == 1_005_001


def test_metric_changes_bump_but_a_new_scrape_of_the_same_values_does_not() -> None:
    clocks = Clocks()
    own = OwnRecords("site-a", "a", now=clocks.now, wall_ms=clocks.wall_ms)
    res = resources(provider("p1", metricsConfig={"queueCapacity": 10, "signalNames": {"queueDepth": "q"}}))
    assert own.update(res, [MetricSample("p1", 1, queue_depth=2.0)])
    revision = own.records()[0].revision
    assert not own.update(res, [MetricSample("p1", 2, queue_depth=2.0)])
    assert own.update(res, [MetricSample("p1", 3, queue_depth=4.0)])
    assert own.records()[0].revision == revision + 1 and own.records()[0].metrics.queue_depth == 0.4


def test_deleted_provider_becomes_a_tombstone_for_600_seconds() -> None:
    clocks = Clocks()
    own = OwnRecords("site-a", "a", now=clocks.now, wall_ms=clocks.wall_ms)
    own.update(resources(provider("p1"), provider("p2")), [])
    live = {r.provider: r for r in own.records()}
    assert own.update(resources(provider("p1")), [])
    tomb = {r.provider: r for r in own.records()}["p2"]
    assert tomb.phase == "Unavailable" and tomb.revision > live["p2"].revision and tomb.metrics == Metrics()
    assert not own.update(resources(provider("p1")), []), "a tombstone is not re-issued"
    clocks.seconds += 599
    assert not own.expire()
    clocks.seconds += 1
    assert own.expire()
    assert [r.provider for r in own.records()] == ["p1"]
    assert own.update(resources(provider("p1"), provider("p2")), [])
    assert {r.provider: r for r in own.records()}["p2"].phase == "Available"


def test_provider_back_within_the_tombstone_window_outranks_the_tombstone() -> None:
    clocks = Clocks()
    own = OwnRecords("site-a", "a", now=clocks.now, wall_ms=clocks.wall_ms)
    own.update(resources(provider("p1")), [])
    own.update(resources(), [])
    (tomb,) = own.records()
    own.update(resources(provider("p1")), [])
    (back,) = own.records()
    assert back.phase == "Available" and back.revision > tomb.revision
    clocks.seconds += 700
    assert not own.expire()


# --- echoes and the merged store ----------------------------------------------------------------


def test_echo_of_the_local_site_is_never_merged() -> None:
    store = RecordStore("site-a")
    assert not store.merge([record("site-a", "p1", 99)])
    assert store.others() == []
    assert store.merge([record("site-b", "p1", 1), record("site-c", "p1", 1)])
    assert not store.merge([record("site-b", "p1", 1)])
    assert store.merge([record("site-b", "p1", 2, models=("new",))])
    assert [(r.site, r.revision) for r in store.others()] == [("site-b", 2), ("site-c", 1)]
    own = (record("site-a", "p1", 3),)
    assert [r.site for r in store.view(own)] == ["site-a", "site-b", "site-c"]


def test_echoes_only_correct_this_sites_own_records() -> None:
    clocks = Clocks()
    own = OwnRecords("site-a", "a", now=clocks.now, wall_ms=clocks.wall_ms)
    stale = record("site-a", "gone", 5)
    ahead = record("site-a", "p1", 9_000_000)
    assert not own.observe_echo(stale), "echoes before the first update wait for it"
    assert not own.observe_echo(ahead)
    assert own.update(resources(provider("p1")), [])
    mine = {r.provider: r for r in own.records()}
    assert mine["p1"].revision == 9_000_001 and mine["p1"].cluster == "p1-local", \
        "our content, above the earlier run's"
    assert mine["gone"].phase == "Unavailable" and mine["gone"].revision > stale.revision
    assert not own.observe_echo(mine["p1"])
    assert not own.observe_echo(record("site-b", "p1", 10**9))
    assert not own.observe_echo(record("site-a", "other-tomb", 3, phase="Unavailable"))


def test_forgotten_tombstone_cannot_be_resurrected_by_an_older_copy() -> None:
    clocks = Clocks()
    store = RecordStore("site-a", now=clocks.now, tombstone_seconds=600)
    live = record("site-b", "p1", 1)
    assert store.merge([live])
    assert store.merge([record("site-b", "p1", 2, phase="Unavailable")])
    clocks.seconds += 600
    assert store.expire()
    assert store.others() == []
    assert not store.merge([live])
    assert store.merge([record("site-b", "p1", 3)])
