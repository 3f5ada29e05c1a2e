"""Provider records: merge laws, the state document codec, filtering and the hand-off to the rendering core."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.operator.core import FixedClock, Resources, render
from reference.operator.mesh import records as rec
from reference.operator.mesh.records import (
    DocumentError,
    MemberHealth,
    Metrics,
    ProviderRecord,
    StateDocument,
    core_records,
    decode_state,
    encode_state,
    make_record,
    merge_record,
    merge_states,
    remote_records,
    state_of,
    to_core,
)
from reference.operator.mesh.sites import discovered_site_k8s_name

NET = "grid"

# --- strategies ---------------------------------------------------------------------------------

small_names = st.sampled_from(["a", "b", "c"])
metric_values = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(10**6), max_value=10**6)
)


@st.composite
def records(draw: st.DrawFn, network: st.SearchStrategy[str] | None = None) -> ProviderRecord:
    return make_record(
        network=draw(network if network is not None else st.sampled_from([NET, "other"])),
        site=draw(small_names),
        provider=draw(st.sampled_from(["p", "q"])),
        cluster=draw(st.sampled_from(["c1", "c2"])),
        models=tuple(draw(st.lists(st.sampled_from(["m1", "m2", "m3"]), max_size=3))),
        kind=draw(st.sampled_from(rec.KINDS)),
        backend_kind=draw(st.sampled_from(["", "vllm"])),
        phase=draw(st.sampled_from(rec.PHASES)),
        metrics=Metrics(draw(metric_values), draw(metric_values), draw(st.sampled_from([None, True, False]))),
        site_selector=tuple(sorted(draw(st.dictionaries(small_names, small_names, max_size=2)).items())),
        capacity_weight=draw(st.integers(1, rec.MAX_CAPACITY_WEIGHT)),
        revision=draw(st.integers(0, 3)),
        writer=draw(small_names),
    )


def same_key_records() -> st.SearchStrategy[ProviderRecord]:
    return records(st.just(NET)).map(lambda r: replace(r, site="a", provider="p"))


states = st.lists(records(), max_size=6).map(state_of)


# --- merge laws ---------------------------------------------------------------------------------


@given(same_key_records(), same_key_records())
def test_record_merge_is_commutative(a: ProviderRecord, b: ProviderRecord) -> None:
    assert merge_record(a, b) == merge_record(b, a)


@settings(max_examples=60)
@given(same_key_records(), same_key_records(), same_key_records())
def test_record_merge_is_associative(a: ProviderRecord, b: ProviderRecord, c: ProviderRecord) -> None:
    assert merge_record(merge_record(a, b), c) == merge_record(a, merge_record(b, c))


@given(same_key_records())
def test_record_merge_is_idempotent(a: ProviderRecord) -> None:
    assert merge_record(a, a) == a


@settings(max_examples=60)
@given(states, states)
def test_state_merge_is_commutative(x: dict[Any, ProviderRecord], y: dict[Any, ProviderRecord]) -> None:
    assert merge_states(x, y) == merge_states(y, x)


@settings(max_examples=60)
@given(states, states, states)
def test_state_merge_is_associative(
    x: dict[Any, ProviderRecord], y: dict[Any, ProviderRecord], z: dict[Any, ProviderRecord]
) -> None:
    assert merge_states(merge_states(x, y), z) == merge_states(x, merge_states(y, z))


@given(states)
def test_state_merge_is_idempotent(x: dict[Any, ProviderRecord]) -> None:
    assert merge_states(x, x) == x


@settings(max_examples=60)
@given(st.lists(records(), max_size=8), st.randoms(use_true_random=False))
def test_any_delivery_order_converges(items: list[ProviderRecord], random: Any) -> None:
    shuffled = list(items)
    random.shuffle(shuffled)
    assert state_of(items) == state_of(shuffled)


@given(same_key_records(), same_key_records())
def test_last_writer_wins_on_revision_then_writer(a: ProviderRecord, b: ProviderRecord) -> None:
    winner = merge_record(a, b)
    if a.revision != b.revision:
        assert winner.revision == max(a.revision, b.revision)
    elif a.writer != b.writer:
        assert winner.writer == max(a.writer, b.writer)
    else:
        assert winner in (a, b)


def test_higher_revision_beats_higher_writer() -> None:
    old = make_record(network=NET, site="c", provider="p", cluster="old", revision=1, writer="z")
    new = make_record(network=NET, site="c", provider="p", cluster="new", revision=2, writer="a")
    assert merge_record(old, new).cluster == "new"
    assert merge_states({old.key: old}, {new.key: new})[new.key].cluster == "new"


def test_merge_refuses_different_keys() -> None:
    a = make_record(network=NET, site="c", provider="p", cluster="x", revision=1, writer="c")
    b = make_record(network=NET, site="c", provider="q", cluster="x", revision=1, writer="c")
    with pytest.raises(ValueError, match="different keys"):
        merge_record(a, b)


# --- state document -----------------------------------------------------------------------------


def good_record(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "network": NET,
        "site": "site-c",
        "provider": "p1",
        "cluster": "gw-c",
        "models": ["m1"],
        "kind": "inference_model",
        "backend_kind": "vllm",
        "phase": "Available",
        "metrics": {"queue_depth": 0.25, "kv_cache_utilization": 0.5, "healthy": True},
        "access_policy": {"site_selector": {"tier": "gold"}},
        "capacity_weight": 3,
        "revision": 7,
        "writer": "site-c",
    }
    body.update(overrides)
    return body


def document(*items: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"schema_version": 1, "network": NET, "writer_site": "site-b", "records": list(items)}
    body.update(overrides)
    return body


def raw(body: Any) -> bytes:
    return json.dumps(body).encode()


@given(st.lists(records(st.just(NET)), max_size=6))
def test_document_round_trip(items: list[ProviderRecord]) -> None:
    merged = tuple(state_of(items).values())
    doc = StateDocument(network=NET, writer_site="site-a", records=merged)
    decoded = decode_state(encode_state(doc))
    assert (decoded.network, decoded.writer_site, decoded.schema_version) == (NET, "site-a", 1)
    assert state_of(decoded.records) == state_of(merged)


def test_encoding_is_canonical() -> None:
    a = make_record(network=NET, site="b", provider="p", cluster="x", revision=1, writer="b")
    b = make_record(network=NET, site="a", provider="p", cluster="x", revision=1, writer="a")
    one = encode_state(StateDocument(NET, "s", (a, b)))
    two = encode_state(StateDocument(NET, "s", (b, a)))
    assert one == two
    assert [r["site"] for r in json.loads(one)["records"]] == ["a", "b"]


def test_good_document_decodes_every_field() -> None:
    doc = decode_state(raw(document(good_record())))
    (record,) = doc.records
    assert record == ProviderRecord(
        network=NET,
        site="site-c",
        provider="p1",
        cluster="gw-c",
        models=("m1",),
        kind="inference_model",
        backend_kind="vllm",
        phase="Available",
        metrics=Metrics(0.25, 0.5, True),
        site_selector=(("tier", "gold"),),
        capacity_weight=3,
        revision=7,
        writer="site-c",
    )


def test_optional_record_fields_default() -> None:
    minimal = {k: good_record()[k] for k in ("network", "site", "provider", "cluster", "revision", "writer")}
    (record,) = decode_state(raw(document(minimal))).records
    assert (record.models, record.kind, record.phase, record.metrics, record.capacity_weight) == (
        (),
        "inference_model",
        "Available",
        Metrics(),
        1,
    )


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ([], "document: expected an object"),
        (document(schema_version=2), "schema_version: unsupported 2"),
        (document(schema_version=True), "schema_version: unsupported True"),
        (document(schema_version="1"), "schema_version: unsupported '1'"),
        ({k: v for k, v in document().items() if k != "records"}, "document.records: required"),
        (document(extra=1), "document.extra: unknown field"),
        (document(network=""), "network: expected a non-empty string"),
        (document(writer_site=7), "writer_site: expected a non-empty string"),
        (document(records={}), "records: expected a list"),
        (document(good_record(network="other")), "records[0].network: 'other' differs"),
        (document(good_record(), good_record()), "records[1]: duplicate record"),
        (document(good_record(revision=-1)), "records[0].revision: expected an integer"),
        (document(good_record(revision=2**64)), "records[0].revision: expected an integer"),
        (document(good_record(revision=1.0)), "records[0].revision: expected an integer"),
        (document(good_record(revision=True)), "records[0].revision: expected an integer"),
        (document(good_record(capacity_weight=0)), "records[0].capacity_weight"),
        (document(good_record(phase="Gone")), "records[0].phase: must be one of"),
        (document(good_record(kind="agent")), "records[0].kind: must be one of"),
        (document(good_record(models="m1")), "records[0].models: expected a list"),
        (document(good_record(models=[""])), "records[0].models[0]: expected a non-empty string"),
        (document(good_record(models=["m"] * 257)), "records[0].models: expected a list of at most 256"),
        (document(good_record(site="x" * 254)), "records[0].site: must be at most 253"),
        (document(good_record(provider="a\nb")), "records[0].provider: must be at most 253 printable"),
        (document(good_record(metrics={"queue_depth": "0.5"})), "records[0].metrics.queue_depth: expected a number"),
        (document(good_record(metrics={"healthy": 1})), "records[0].metrics.healthy: expected a boolean"),
        (document(good_record(metrics={"latency": 1})), "records[0].metrics.latency: unknown field"),
        (document(good_record(access_policy={"site_selector": []})), "records[0].access_policy.site_selector"),
        (document(good_record(access_policy={"site_selector": {"k": 1}})), "site_selector.k: expected a label"),
        (document({"network": NET}), "records[0].cluster: required"),
        (document(good_record(bogus=1)), "records[0].bogus: unknown field"),
    ],
)
def test_bad_documents_rejected_with_reason(body: Any, reason: str) -> None:
    with pytest.raises(DocumentError) as caught:
        decode_state(raw(body))
    assert reason in str(caught.value)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b'{"network": "a", "network": "b"}', "duplicate key 'network'"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        (b" " * (rec.MAX_DOCUMENT_BYTES + 1), "exceeds the limit"),
    ],
)
def test_malformed_bytes_rejected_with_reason(data: bytes, reason: str) -> None:
    with pytest.raises(DocumentError, match=reason):
        decode_state(data)


def test_too_many_records_rejected() -> None:
    items = [
        {"network": NET, "site": "s", "provider": f"p{i}", "cluster": "c", "revision": 1, "writer": "s"}
        for i in range(rec.MAX_RECORDS + 1)
    ]
    with pytest.raises(DocumentError, match="exceeds the limit of 4096"):
        decode_state(raw(document(*items)))


def test_encode_refuses_an_oversized_document() -> None:
    big = [
        make_record(network=NET, site="s", provider=f"p{i}", cluster="c" * 200, revision=1, writer="s")
        for i in range(4096)
    ]
    with pytest.raises(DocumentError, match="exceeds the limit"):
        encode_state(StateDocument(NET, "s", tuple(big)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NaN", None),
        ("Infinity", None),
        ("-Infinity", None),
        ("1e999", None),
        ("-3", 0.0),
        ("7.5", 1.0),
        ("0.4", 0.4),
        ("null", None),
        ("1", 1.0),
    ],
)
def test_remote_metric_values_clamped_and_non_finite_absent(text: str, expected: float | None) -> None:
    body = json.dumps(document(good_record(metrics={}))).replace(
        '"metrics": {}', f'"metrics": {{"queue_depth": {text}, "kv_cache_utilization": {text}}}'
    )
    (record,) = decode_state(body).records
    assert record.metrics.queue_depth == expected
    assert record.metrics.kv_cache_utilization == expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200)
@given(st.binary(max_size=256))
def test_arbitrary_bytes_never_crash(data: bytes) -> None:
    try:
        doc = decode_state(data)
    except DocumentError as error:
        assert str(error).startswith(("document", "schema_version", "network", "writer_site", "records"))
        return
    assert isinstance(doc, StateDocument)


@settings(max_examples=300)
@given(st.sampled_from(sorted(rec._RECORD_KEYS | {"extra"})), json_values)
def test_any_field_value_is_accepted_or_rejected_with_reason(field: str, value: Any) -> None:
    body = document(good_record(**{field: value}))
    try:
        doc = decode_state(json.dumps(body))
    except DocumentError as error:
        assert str(error)
        return
    (record,) = doc.records
    for metric in (record.metrics.queue_depth, record.metrics.kv_cache_utilization):
        assert metric is None or (math.isfinite(metric) and 0.0 <= metric <= 1.0)


@settings(max_examples=200)
@given(st.sampled_from(sorted(rec._DOCUMENT_KEYS | {"extra"})), json_values)
def test_any_document_value_is_accepted_or_rejected_with_reason(field: str, value: Any) -> None:
    body = document(good_record())
    body[field] = value
    try:
        decode_state(json.dumps(body))
    except DocumentError as error:
        assert str(error)


# --- filtering ----------------------------------------------------------------------------------


@given(st.lists(records(), max_size=10), st.sampled_from([NET, "other"]), small_names)
def test_filter_keeps_exactly_other_sites_of_the_network(items: list[ProviderRecord], network: str, local: str) -> None:
    kept = remote_records(items, network, local)
    assert kept == [r for r in items if r.network == network and r.site != local]
    assert all(r.network == network and r.site != local for r in kept)


def test_filter_drops_wrong_network_and_self_echo() -> None:
    mine = make_record(network=NET, site="site-a", provider="p", cluster="x", revision=1, writer="site-a")
    relayed_echo = make_record(network=NET, site="site-a", provider="q", cluster="x", revision=2, writer="site-b")
    foreign = make_record(network="other", site="site-c", provider="p", cluster="x", revision=1, writer="site-c")
    remote = make_record(network=NET, site="site-c", provider="p", cluster="x", revision=1, writer="site-c")
    assert remote_records([mine, relayed_echo, foreign, remote], NET, "site-a") == [remote]


# --- conversion ---------------------------------------------------------------------------------


def record_c(**overrides: Any) -> ProviderRecord:
    fields: dict[str, Any] = {
        "network": NET,
        "site": "site-c",
        "provider": "p1",
        "cluster": "gw-c",
        "models": ("m1",),
        "revision": 1,
        "writer": "site-c",
    }
    fields.update(overrides)
    return make_record(**fields)


@pytest.mark.parametrize(
    ("member", "phase", "age"),
    [
        (None, "Available", 0),
        (MemberHealth("alive"), "Available", 0),
        (MemberHealth("alive", age_secs=40), "Available", 0),
        (MemberHealth("suspect", age_secs=12), "Degraded", 12),
        (MemberHealth("dead", age_secs=900), "Degraded", 900),
        (MemberHealth("Dead", age_secs=0), "Degraded", 0),
    ],
)
def test_member_state_degrades_with_age(member: MemberHealth | None, phase: str, age: int) -> None:
    core = to_core(record_c(), member)
    assert (core.phase, core.age_secs) == (phase, age)


def test_unavailable_stays_unavailable_and_metrics_are_sanitised() -> None:
    core = to_core(record_c(phase="Unavailable"), MemberHealth("dead", 5))
    assert core.phase == "Unavailable"
    raw_record = ProviderRecord(NET, "site-c", "p", "gw", metrics=Metrics(math.nan, 4.0, None))
    core = to_core(raw_record)
    assert (core.queue_depth, core.kv_cache_utilization, core.healthy) == (None, 1.0, True)
    assert (core.name, core.cluster, core.site) == ("p", "gw", "site-c")


def test_core_records_filters_then_converts() -> None:
    items = [record_c(), record_c(site="site-a", writer="site-a"), record_c(network="other")]
    out = core_records(items, NET, "site-a", {"site-c": MemberHealth("suspect", 3)})
    assert [(r.site, r.phase, r.age_secs) for r in out] == [("site-c", "Degraded", 3)]


# --- through the rendering core -----------------------------------------------------------------


def resources(site_phase: str | None, *, site_name: str | None = None, ttl: int | None = 60) -> Resources:
    spec: dict[str, Any] = {"gatewayRefs": [{"name": "gw", "namespace": "ns", "localSiteName": "site-a"}]}
    if ttl is not None:
        spec["staleCandidateTtlSeconds"] = ttl
    objects: list[dict[str, Any]] = [{"kind": "GridNetwork", "metadata": {"name": NET}, "spec": spec}]
    if site_phase is not None:
        objects.append(
            {
                "kind": "GridSite",
                "metadata": {"name": site_name or discovered_site_k8s_name(NET, "site-c")},
                "spec": {"gridNetworkRef": NET},
                "status": {"phase": site_phase},
            }
        )
    return Resources.from_objects(objects)


def overlay(res: Resources, items: list[ProviderRecord], members: dict[str, MemberHealth] | None = None) -> list[Any]:
    (out,) = render(res, remote_records=core_records(items, NET, "site-a", members), clock=FixedClock())
    return [(c["site"], c["cluster"], c["fresh"]) for c in out.envelope["overlay"]["candidates"]]


@pytest.mark.parametrize("site_phase", [None, "Pending", "Discovered", "Connecting", "Unreachable", "Left"])
def test_remote_provider_absent_until_grid_site_active(site_phase: str | None) -> None:
    assert overlay(resources(site_phase), [record_c()]) == []


def test_remote_provider_present_once_discovered_grid_site_active() -> None:
    assert overlay(resources("Active"), [record_c()]) == [("site-c", "gw-c", True)]


def test_grid_site_declared_under_the_site_name_also_counts() -> None:
    assert overlay(resources("Active", site_name="site-c"), [record_c()]) == [("site-c", "gw-c", True)]


def test_grid_site_of_another_network_does_not_count() -> None:
    res = resources("Active")
    other = Resources.from_objects(
        [
            {
                "kind": "GridNetwork",
                "metadata": {"name": NET},
                "spec": {"gatewayRefs": [{"name": "gw", "localSiteName": "site-a"}]},
            },
            {
                "kind": "GridSite",
                "metadata": {"name": discovered_site_k8s_name(NET, "site-c")},
                "spec": {"gridNetworkRef": "other"},
                "status": {"phase": "Active"},
            },
        ]
    )
    assert overlay(res, [record_c()]) != []
    assert overlay(other, [record_c()]) == []


@pytest.mark.parametrize(
    ("member", "expected"),
    [
        (MemberHealth("alive"), [("site-c", "gw-c", True)]),
        (MemberHealth("suspect", 1), [("site-c", "gw-c", False)]),
        (MemberHealth("dead", 59), [("site-c", "gw-c", False)]),
        (MemberHealth("dead", 60), []),
        (MemberHealth("dead", 61), []),
        (MemberHealth("dead", 0), [("site-c", "gw-c", False)]),
    ],
)
def test_degraded_remote_kept_until_ttl_and_unknown_age_retained(member: MemberHealth, expected: list[Any]) -> None:
    assert overlay(resources("Active"), [record_c()], {"site-c": member}) == expected


def test_without_ttl_degraded_remote_is_kept() -> None:
    assert overlay(resources("Active", ttl=None), [record_c()], {"site-c": MemberHealth("dead", 10**6)}) == [
        ("site-c", "gw-c", False)
    ]
