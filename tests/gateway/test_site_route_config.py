"""grid_site_route's filter block and serving config: defaults, strict keys, every refusal naming its key
beside the nearest value that is accepted, and what building the filter reads from GRID_SERVING_CONFIG."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from site_route_support import Lines

from reference.gateway.build import build
from reference.gateway.config import parse_config
from reference.gateway.filters.grid_site_route import GridSiteRouteFilter
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.schema import ConfigError
from reference.gateway.site_route.serving_config import SERVING_ENV, parse_serving
from reference.gateway.site_route.settings import AvailabilitySettings, GridSiteRouteConfig, PrefixSettings

WHERE = "filter_chains[0].filters[1]"


def base(**block: Any) -> dict[str, Any]:
    return {
        "listeners": [{"name": "proxy", "address": "127.0.0.1:0", "filter_chains": ["serving"]}],
        "filter_chains": [{"name": "serving", "filters": [
            {"filter": "json_body_field", "field": "model", "header": "X-Model"},
            {"filter": "grid_site_route", **block},
            {"filter": "load_balancer", "clusters": [
                {"name": "site-a-pool", "endpoints": ["127.0.0.1:8001"]},
                {"name": "site-b-pool", "endpoints": ["127.0.0.1:8002"]},
            ]},
        ]}],
        "insecure_options": {"allow_private_endpoints": True},
    }


def options(raw: dict[str, Any]) -> GridSiteRouteConfig:
    spec = parse_config(raw).chains["serving"].filters[1]
    assert isinstance(spec.options, GridSiteRouteConfig)
    return spec.options


def test_nothing_needs_setting_and_the_defaults_are_the_guides() -> None:
    parsed = options(base())
    assert parsed.model_header == "X-Model"
    assert parsed.availability == AvailabilitySettings(
        smoothing=0.3, ceiling_half_life_ms=600_000, ceiling_floor=8, explore_floor=0.25, full_after_ms=5_000,
        room_after_ms=2_000, queue_full=1.0, shedding=False)
    assert parsed.prefix == PrefixSettings()  # no prefix_affinity block: affinity on with its defaults
    assert options(base(availability={}, prefix_affinity={})).prefix == PrefixSettings(True, 0.8, 0.02)
    assert options(base(prefix_affinity={"enabled": False})).prefix is None


# (key below the filter, refused value, accepted nearest value)
TWINS = [
    ("availability.smoothing", 0, 0.001),
    ("availability.smoothing", 1.01, 1),
    ("availability.smoothing", "0.3", 0.3),
    ("availability.ceiling_half_life_ms", 0, 1),
    ("availability.ceiling_half_life_ms", 1.5, 2),
    ("availability.ceiling_floor", 0.99, 1),
    ("availability.explore_floor", -0.01, 0),
    ("availability.explore_floor", 1.01, 1),
    ("availability.full_after_ms", -1, 0),
    ("availability.room_after_ms", -1, 0),
    ("availability.queue_full", -0.5, 0),
    ("availability.queue_full", float("nan"), 0.5),
    ("availability.shedding", "true", True),
    ("prefix_affinity.enabled", 1, True),
    ("prefix_affinity.threshold", 0, 0.01),
    ("prefix_affinity.threshold", 1.1, 1),
    ("prefix_affinity.exploration", -0.1, 0),
    ("prefix_affinity.exploration", 2, 1),
    ("model_header", "X Model", "X-Model-Name"),
    ("model_header", "x-praxis-model", "x-model"),
]


def with_value(dotted: str, value: Any) -> dict[str, Any]:
    raw = base()
    block = raw["filter_chains"][0]["filters"][1]
    *parents, last = dotted.split(".")
    for name in parents:
        block = block.setdefault(name, {})
    block[last] = value
    return raw


@pytest.mark.parametrize(("dotted", "refused", "accepted"), TWINS, ids=[f"{t[0]}={t[1]!r}" for t in TWINS])
def test_each_refusal_names_its_key_beside_an_accepted_twin(dotted: str, refused: Any, accepted: Any) -> None:
    options(with_value(dotted, accepted))
    with pytest.raises(ConfigError) as info:
        parse_config(with_value(dotted, refused))
    assert info.value.path == f"{WHERE}.{dotted}", str(info.value)


@pytest.mark.parametrize("dotted", ["bogus", "availability.bogus", "prefix_affinity.prefill_tokens_per_second"])
def test_unknown_keys_are_refused_by_name(dotted: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(with_value(dotted, 1))
    assert info.value.path == f"{WHERE}.{dotted}" and "unknown key" in str(info.value)


def test_a_load_balancer_must_follow() -> None:
    raw = base()
    del raw["filter_chains"][0]["filters"][2]
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.path == WHERE and "load_balancer" in str(info.value)


# ---------------------------------------------------------------------------------------- serving config

def serving_doc(**top: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "local_site": "site-a",
        "window_secs": 60,
        "load_window_ms": 2000,
        "candidates": [
            {"kind": "inference_model", "name": "m", "site": "site-a", "cluster": "site-a-pool", "fresh": True},
            {"kind": "inference_model", "name": "m", "site": "site-b", "cluster": "site-b-pool", "fresh": True,
             "admission": "excluded"},
        ],
        "peers": [{"site": "site-b", "addr": "127.0.0.1:9443", "server_name": "site-b.signals",
                   "authority": "site-b.signals", "path": "/v1/site/signals", "interval_ms": 250,
                   "connect_timeout_ms": 2000, "request_timeout_ms": 2000, "grid_ca_path": "/tls/ca.pem",
                   "client_cert_path": "/tls/client.pem", "client_key_path": "tls/client.key"}],
    }
    doc.update(top)
    return doc


def test_the_serving_config_parses_with_its_defaults() -> None:
    parsed = parse_serving(serving_doc(), Path("/etc/grid"))
    assert [c.admitted for c in parsed.candidates] == [True, False]
    (peer,) = parsed.peers
    assert peer.url == "https://127.0.0.1:9443/v1/site/signals"
    assert str(peer.client_key_path) == "/etc/grid/tls/client.key"  # relative to the file's directory
    minimal = parse_serving({"local_site": "a", "candidates": []})
    assert (minimal.window_secs, minimal.load_window_ms, minimal.peers) == (60, 2000, ())


SERVING_TWINS = [
    ("window_secs", 0, 1),
    ("load_window_ms", 0, 1),
    ("candidates[1].admission", "excluded_now", "existing_only"),
    ("candidates[0].kind", "model", "mcp_tool"),
    ("candidates[0].fresh", "yes", False),
    ("peers[0].interval_ms", 9, 10),
    ("peers[0].addr", "127.0.0.1", "127.0.0.1:1"),
    ("peers[0].addr", "127.0.0.1:0", "[::1]:1"),
    ("peers[0].path", "v1/site/signals", "/signals"),
    ("peers[0].request_timeout_ms", 0, 1),
    ("peers[0].grid_ca_path", "", "ca.pem"),
]


def serving_with(dotted: str, value: Any) -> dict[str, Any]:
    doc = serving_doc()
    target: Any = doc
    parts = dotted.replace("]", "").replace("[", ".").split(".")
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    target[parts[-1]] = value
    return doc


@pytest.mark.parametrize(("dotted", "refused", "accepted"), SERVING_TWINS,
                         ids=[f"{t[0]}={t[1]!r}" for t in SERVING_TWINS])
def test_each_serving_refusal_names_its_key_beside_an_accepted_twin(dotted: str, refused: Any,
                                                                     accepted: Any) -> None:
    parse_serving(serving_with(dotted, accepted))
    with pytest.raises(ConfigError) as info:
        parse_serving(serving_with(dotted, refused))
    assert info.value.path == dotted, str(info.value)


def test_serving_config_unknown_keys_and_duplicates_are_refused() -> None:
    for doc, path in [
        (serving_doc(extra=1), "extra"),
        (serving_with("peers[0].bogus", 1), "peers[0].bogus"),
        (serving_with("candidates[0].weight", 1), "candidates[0].weight"),
        (serving_doc(peers=serving_doc()["peers"] * 2), "peers[1].site"),
        (serving_doc(candidates=serving_doc()["candidates"][:1] * 2), "candidates[1]"),
    ]:
        with pytest.raises(ConfigError) as info:
            parse_serving(doc)
        assert info.value.path == path, str(info.value)


# ---------------------------------------------------------------------------------------- building

def write_serving(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "serving.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_building_without_the_environment_or_with_a_bad_file_is_a_config_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse_config(base())
    monkeypatch.delenv(SERVING_ENV, raising=False)
    with pytest.raises(ConfigError) as info:
        build(config, GatewayMetrics())
    assert info.value.path == WHERE and SERVING_ENV in str(info.value)
    monkeypatch.setenv(SERVING_ENV, str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError) as info:
        build(config, GatewayMetrics())
    assert "missing.json" in str(info.value) and "cannot read" in str(info.value)
    bad = write_serving(tmp_path, serving_with("candidates[0].cluster", ""))
    monkeypatch.setenv(SERVING_ENV, str(bad))
    with pytest.raises(ConfigError) as info:
        build(config, GatewayMetrics())
    assert str(bad) in str(info.value) and "candidates[0].cluster" in str(info.value)
    monkeypatch.setenv(SERVING_ENV, str(write_serving(tmp_path, "{not json")))
    with pytest.raises(ConfigError) as info:
        build(config, GatewayMetrics())
    assert "invalid JSON/YAML" in str(info.value)


def test_a_candidate_on_an_undeclared_cluster_is_skipped_and_logged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = serving_doc()
    extra = copy.deepcopy(doc["candidates"][0])
    extra.update(site="site-c", cluster="site-c-pool")
    doc["candidates"].append(extra)
    monkeypatch.setenv(SERVING_ENV, str(write_serving(tmp_path, doc)))
    with Lines("agn.gateway.site_route") as lines:
        built = build(parse_config(base()), GatewayMetrics())
    (route,) = built.site_routes
    assert isinstance(route, GridSiteRouteFilter)
    assert [(c.site, c.cluster) for c in route.runtime.candidates] == [("site-a", "site-a-pool"),
                                                                       ("site-b", "site-b-pool")]
    messages = lines.messages
    assert any("serving candidate skipped" in m and "cluster=site-c-pool" in m for m in messages), messages
    assert any("serving config loaded" in m and "skipped=1" in m for m in messages), messages
