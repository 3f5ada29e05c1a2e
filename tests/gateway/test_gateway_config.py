"""Config parsing: strict keys, bounds, cross-checks, and the public example configs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from gateway_support import candidate, envelope
from multidict import CIMultiDict
from prometheus_client import generate_latest

from reference.gateway.build import build
from reference.gateway.config import load_config, parse_config, parse_config_text
from reference.gateway.context import RequestContext
from reference.gateway.filters.intelligent_route_config import DEFAULT_SKIP_PATHS, IntelligentRouteConfig
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.schema import ConfigError

PRAXIS_CONFIGS = Path(__file__).resolve().parents[3] / "shared" / "praxis-configs"


def base() -> dict[str, Any]:
    return {
        "listeners": [{"name": "proxy", "address": "127.0.0.1:8080", "filter_chains": ["main"]}],
        "filter_chains": [
            {
                "name": "main",
                "filters": [
                    {"filter": "json_body_field", "field": "model", "header": "X-Model"},
                    {
                        "filter": "intelligent_route",
                        "local_site": "site-a",
                        "model_header": "X-Model",
                        "candidates": [
                            {"kind": "inference_model", "name": "m", "site": "site-a", "cluster": "a"},
                            {"kind": "inference_model", "name": "m", "site": "site-b", "cluster": "b"},
                        ],
                    },
                    {
                        "filter": "load_balancer",
                        "clusters": [
                            {"name": "a", "endpoints": ["127.0.0.1:8001"]},
                            {"name": "b", "endpoints": ["127.0.0.1:8002"]},
                        ],
                    },
                ],
            }
        ],
        "admin": {"address": "127.0.0.1:9901"},
        "shutdown_timeout_secs": 5,
        "insecure_options": {"allow_private_endpoints": True},
    }


def route(config: dict[str, Any]) -> dict[str, Any]:
    return config["filter_chains"][0]["filters"][1]  # type: ignore[no-any-return]


def error_of(config: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(config)
    return info.value


def test_valid_static_config_parses_with_defaults() -> None:
    config = parse_config(base())
    assert config.admin == ("127.0.0.1", 9901)
    assert config.shutdown_timeout_secs == 5
    (listener,) = config.listeners
    assert (listener.name, listener.host, listener.port, listener.chains) == (
        "proxy",
        "127.0.0.1",
        8080,
        ("main",),
    )
    options = config.chains["main"].filters[1].options
    assert isinstance(options, IntelligentRouteConfig)
    assert options.skip_paths == DEFAULT_SKIP_PATHS
    assert options.static is not None and len(options.static.candidates) == 2
    assert options.affinity is None


def test_shutdown_timeout_defaults_to_thirty_seconds() -> None:
    raw = base()
    del raw["shutdown_timeout_secs"]
    assert parse_config(raw).shutdown_timeout_secs == 30


def test_praxis_compatibility_keys_are_accepted() -> None:
    raw = base()
    raw["runtime"] = {"threads": 2, "work_stealing": False}
    raw["body_limits"] = {"max_request_bytes": 1024, "max_response_bytes": 4096}
    raw["insecure_options"] = {
        "allow_private_endpoints": True,
        "allow_root": False,
        "allow_public_admin": True,
    }
    raw["admin"]["verbose"] = True
    cluster = raw["filter_chains"][0]["filters"][2]["clusters"][0]
    cluster.update(
        connection_timeout_ms=100,
        read_timeout_ms=200,
        write_timeout_ms=300,
        idle_timeout_ms=400,
        total_connection_timeout_ms=50,
        load_balancer_strategy="round_robin",
    )
    config = parse_config(raw)
    assert (config.max_request_bytes, config.max_response_bytes) == (1024, 4096)
    assert config.insecure_options == frozenset({"allow_private_endpoints", "allow_public_admin"})
    lb = config.chains["main"].filters[2].options
    assert lb.clusters[0].total_connection_timeout_ms == 50 and lb.clusters[0].idle_timeout_ms == 400


@pytest.mark.parametrize(
    ("mutate", "path", "fragment"),
    [
        (lambda c: c.update(bogus=1), "bogus", "unknown key"),
        (lambda c: c["listeners"][0].update(port=1), "listeners[0].port", "unknown key"),
        (lambda c: c["listeners"][0].pop("address"), "listeners[0].address", "is required"),
        (lambda c: c["listeners"][0].update(address="nohost"), "listeners[0].address", "host:port"),
        (lambda c: c["listeners"][0].update(address="127.0.0.1:70000"), "listeners[0].address", "port"),
        (
            lambda c: c["listeners"][0].update(filter_chains=["nope"]),
            "listeners[0].filter_chains[0]",
            "unknown",
        ),
        (
            lambda c: c["listeners"][0].update(tls={"certificates": []}),
            "listeners[0].tls",
            "tls is not supported",
        ),
        (lambda c: c.update(shutdown_timeout_secs="5"), "shutdown_timeout_secs", "integer"),
        (lambda c: c.update(admin={"address": "127.0.0.1:9901", "x": 1}), "admin.x", "unknown key"),
        (
            lambda c: c.update(insecure_options={"allow_private_endpoints": "yes"}),
            "insecure_options.allow_private_endpoints",
            "true or false",
        ),
        (
            lambda c: c.update(insecure_options={"allow_everything": True}),
            "insecure_options.allow_everything",
            "unknown key",
        ),
        (lambda c: c.update(runtime={"threads": -1}), "runtime.threads", "integer"),
        (
            lambda c: c.update(body_limits={"max_request_bytes": 0}),
            "body_limits.max_request_bytes",
            "integer",
        ),
        (
            lambda c: c["filter_chains"][0]["filters"][2]["clusters"][0].update(
                load_balancer_strategy="least_connections"
            ),
            "filter_chains[0].filters[2].clusters[0].load_balancer_strategy",
            "not supported",
        ),
        (
            lambda c: c["filter_chains"][0]["filters"][2]["clusters"][0].update(
                load_balancer_strategy={"consistent_hash": {"header": "x"}}
            ),
            "filter_chains[0].filters[2].clusters[0].load_balancer_strategy",
            "'consistent_hash' is not supported",
        ),
        (
            lambda c: c["filter_chains"][0]["filters"][0].update(header="bad header"),
            "filter_chains[0].filters[0].header",
            "header name",
        ),
        (
            lambda c: c["filter_chains"][0]["filters"][0].pop("field"),
            "filter_chains[0].filters[0].field",
            "required",
        ),
        (
            lambda c: c["filter_chains"][0]["filters"].insert(0, {"filter": "rate_limit"}),
            "filter_chains[0].filters[0].filter",
            "unknown filter type 'rate_limit'",
        ),
        (
            lambda c: c["filter_chains"][0]["filters"][2]["clusters"][0].update(weight=2),
            "filter_chains[0].filters[2].clusters[0].weight",
            "unknown key",
        ),
        (
            lambda c: c["filter_chains"][0]["filters"][2]["clusters"][0].update(endpoints=["h:0"]),
            "filter_chains[0].filters[2].clusters[0].endpoints[0]",
            "1..65535",
        ),
        (
            lambda c: c["filter_chains"][0]["filters"][2]["clusters"][1].update(name="a"),
            "filter_chains[0].filters[2].clusters[1].name",
            "duplicate",
        ),
        (
            lambda c: c["filter_chains"][0]["filters"][2]["clusters"][0].update(tls={}),
            "filter_chains[0].filters[2].clusters[0].tls",
            "tls is not supported",
        ),
        (
            lambda c: c["filter_chains"].append(copy.deepcopy(c["filter_chains"][0])),
            "filter_chains[1].name",
            "duplicate",
        ),
        (
            lambda c: c["listeners"].append({"name": "two", "address": "127.0.0.1:8080"}),
            "listeners[1].address",
            "already used",
        ),
    ],
)
def test_errors_name_the_key_path(mutate: Any, path: str, fragment: str) -> None:
    raw = base()
    mutate(raw)
    error = error_of(raw)
    assert error.path == path, str(error)
    assert fragment in error.message, str(error)


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        ({"debounce": 1}, "filter_chains[0].filters[1].debounce", "unknown key"),
        ({"model_header": "x-praxis-model"}, "filter_chains[0].filters[1].model_header", "reserved"),
        ({"model_header": ""}, "filter_chains[0].filters[1].model_header", "non-empty"),
        ({"local_site": None}, "filter_chains[0].filters[1].local_site", "is required"),
        ({"local_site": "  "}, "filter_chains[0].filters[1].local_site", "non-empty"),
        ({"reload": {"enabled": True}}, "filter_chains[0].filters[1].reload", "not valid with static"),
        ({"overlay_file": "/x.json"}, "filter_chains[0].filters[1]", "cannot set both"),
        (
            {"expected_overlay_scope": {"network": "n"}},
            "filter_chains[0].filters[1].expected_overlay_scope",
            "overlay_file",
        ),
        (
            {"expected_overlay_scope": {}, "candidates": None, "local_site": None, "overlay_file": "/o.json"},
            "filter_chains[0].filters[1].expected_overlay_scope",
            "at least one of",
        ),
        ({"skip_paths": ["v1/models"]}, "filter_chains[0].filters[1].skip_paths[0]", "start with '/'"),
        ({"skip_paths": ["/a b"]}, "filter_chains[0].filters[1].skip_paths[0]", "whitespace"),
        ({"skip_paths": ["/p"] * 65}, "filter_chains[0].filters[1].skip_paths", "at most 64"),
        (
            {"skip_paths": [], "management_cluster": "a"},
            "filter_chains[0].filters[1].management_cluster",
            "skip_paths",
        ),
        ({"management_cluster": "mgmt"}, "filter_chains[0].filters[1].management_cluster", "'mgmt'"),
        (
            {"provider_hop_clusters": ["a", "a"]},
            "filter_chains[0].filters[1].provider_hop_clusters[1]",
            "duplicate",
        ),
        ({"provider_hop_clusters": ["zz"]}, "filter_chains[0].filters[1].provider_hop_clusters[0]", "'zz'"),
        ({"clusters": ["a"]}, "filter_chains[0].filters[1].candidates", "unknown_cluster"),
        ({"clusters": ["a", "b", "c"]}, "filter_chains[0].filters[1].clusters[2]", "not declared"),
        (
            {"session_affinity": {"enabled": True}},
            "filter_chains[0].filters[1].session_affinity",
            "header or cookie",
        ),
        (
            {"session_affinity": {"enabled": True, "header": "x-s", "ttl_secs": 0}},
            "filter_chains[0].filters[1].session_affinity.ttl_secs",
            "1..86400",
        ),
        (
            {"session_affinity": {"enabled": True, "header": "x-s", "ttl_secs": 86401}},
            "filter_chains[0].filters[1].session_affinity.ttl_secs",
            "1..86400",
        ),
        (
            {"session_affinity": {"enabled": True, "header": "x-s", "max_entries": 0}},
            "filter_chains[0].filters[1].session_affinity.max_entries",
            "integer",
        ),
        (
            {"session_affinity": {"enabled": True, "header": "x-s", "sticky": True}},
            "filter_chains[0].filters[1].session_affinity.sticky",
            "unknown key",
        ),
    ],
)
def test_intelligent_route_errors_name_the_key_path(
    changes: dict[str, Any], path: str, fragment: str
) -> None:
    raw = base()
    for name, value in changes.items():
        if value is None:
            route(raw).pop(name)
        else:
            route(raw)[name] = value
    error = error_of(raw)
    assert error.path == path, str(error)
    assert fragment in error.message, str(error)


@pytest.mark.parametrize(
    ("index", "changes", "path", "fragment"),
    [
        (0, {"kind": "tool"}, "filter_chains[0].filters[1].candidates[0].kind", "must be one of"),
        (1, {"color": "red"}, "filter_chains[0].filters[1].candidates[1]", "unknown field 'color'"),
        (
            1,
            {"traffic_weight": 5},
            "filter_chains[0].filters[1].candidates[1]",
            "unknown field 'traffic_weight'",
        ),
        (
            1,
            {"site": "site-a", "cluster": "a"},
            "filter_chains[0].filters[1].candidates[1]",
            "duplicate_candidate",
        ),
        (0, {"cluster": "nope"}, "filter_chains[0].filters[1].candidates[0].cluster", "not declared"),
    ],
)
def test_static_candidate_errors_name_the_candidate(
    index: int, changes: dict[str, Any], path: str, fragment: str
) -> None:
    raw = base()
    route(raw)["candidates"][index].update(changes)
    error = error_of(raw)
    assert error.path == path, str(error)
    assert fragment in error.message, str(error)


def test_empty_static_candidate_list_is_rejected() -> None:
    raw = base()
    route(raw)["candidates"] = []
    error = error_of(raw)
    assert error.path == "filter_chains[0].filters[1].candidates" and "empty" in error.message


def test_intelligent_route_needs_a_later_load_balancer() -> None:
    raw = base()
    filters = raw["filter_chains"][0]["filters"]
    filters.insert(0, filters.pop(2))
    error = error_of(raw)
    assert error.path == "filter_chains[0].filters[2]" and "load_balancer after it" in error.message


def test_load_balancer_in_a_later_chain_counts() -> None:
    raw = base()
    lb = raw["filter_chains"][0]["filters"].pop(2)
    raw["filter_chains"].append({"name": "lb", "filters": [lb]})
    raw["listeners"][0]["filter_chains"] = ["main", "lb"]
    config = parse_config(raw)
    assert [s.type for s in config.pipeline(config.listeners[0])] == [
        "json_body_field",
        "intelligent_route",
        "load_balancer",
    ]


def test_overlay_mode_keys_and_defaults(tmp_path: Path) -> None:
    raw = base()
    route(raw).clear()
    route(raw).update(
        {
            "filter": "intelligent_route",
            "overlay_file": str(tmp_path / "routing-overlay.json"),
            "expected_overlay_scope": {"network": "n", "gateway": "g", "namespace": "ns", "local_site": "s"},
            "session_affinity": {"enabled": True, "cookie": "agn-session", "ttl_secs": 60},
            "skip_paths": ["/v1/models/", "/internal", "/internal"],
            "management_cluster": "a",
            "clusters": ["a", "b"],
            "provider_hop_clusters": ["b"],
        }
    )
    options = parse_config(raw).chains["main"].filters[1].options
    assert options.model_header == "X-Model"
    assert options.reload_enabled is True and options.debounce_ms == 500
    assert options.expected_scope == {"network": "n", "gateway": "g", "namespace": "ns", "local_site": "s"}
    assert options.affinity.cookie == "agn-session" and options.affinity.header is None
    assert options.affinity.max_entries == 10_000
    assert options.skip_paths == ("/v1/models", "/internal")
    assert options.provider_hop_clusters == frozenset({"b"})


@pytest.mark.parametrize(
    ("reload", "path", "fragment"),
    [
        ({"debounce_ms": 60001}, "reload.debounce_ms", "must be an integer 0..60000"),
        ({"debounce_ms": -1}, "reload.debounce_ms", "must be an integer 0..60000"),
        ({"enabled": "true"}, "reload.enabled", "true or false"),
        ({"interval_ms": 5}, "reload.interval_ms", "unknown key"),
    ],
)
def test_reload_block_bounds(reload: dict[str, Any], path: str, fragment: str) -> None:
    raw = base()
    route(raw).pop("candidates")
    route(raw).pop("local_site")
    route(raw)["overlay_file"] = "/etc/praxis/routing/routing-overlay.json"
    route(raw)["reload"] = reload
    error = error_of(raw)
    assert error.path == "filter_chains[0].filters[1]." + path
    assert fragment in error.message


def test_disabled_affinity_needs_no_key() -> None:
    raw = base()
    route(raw)["session_affinity"] = {"enabled": False}
    assert parse_config(raw).chains["main"].filters[1].options.affinity is None


def test_mcp_filter_on_invalid_values() -> None:
    raw = base()
    raw["filter_chains"][0]["filters"].insert(0, {"filter": "mcp", "on_invalid": "explode"})
    error = error_of(raw)
    assert error.path == "filter_chains[0].filters[0].on_invalid"


def test_yaml_errors_are_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "praxis.yaml"
    path.write_text("listeners: [\n  - name: x\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "invalid YAML" in str(info.value) and "\n" not in str(info.value)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        load_config(empty)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError) as info:
        parse_config_text("- 1\n- 2\n")
    assert "must be a mapping" in str(info.value)


def test_cold_start_overlay_problems_fail_the_build(tmp_path: Path) -> None:
    overlay = tmp_path / "routing-overlay.json"
    raw = base()
    route(raw).pop("candidates")
    route(raw).pop("local_site")
    route(raw)["overlay_file"] = str(overlay)
    route(raw)["clusters"] = ["a", "b"]
    config = parse_config(raw)
    with pytest.raises(ConfigError) as info:
        build(config, GatewayMetrics())
    assert (
        info.value.path == "filter_chains[0].filters[1].overlay_file" and "cannot read" in info.value.message
    )
    overlay.write_text("{not json")
    with pytest.raises(ConfigError, match=r"overlay rejected \(invalid_json\)"):
        build(config, GatewayMetrics())
    overlay.write_bytes(envelope([candidate("m", "site-x", "elsewhere")]))
    with pytest.raises(ConfigError, match=r"overlay rejected \(unknown_cluster\)"):
        build(config, GatewayMetrics())
    overlay.write_bytes(envelope([candidate("m", "site-b", "b")]))
    built = build(config, GatewayMetrics())
    assert built.routes[0].store.current.candidate_count == 1


def test_expected_scope_refuses_legacy_cold_start(tmp_path: Path) -> None:
    overlay = tmp_path / "routing-overlay.json"
    overlay.write_text(json.dumps({"local_site": "site-a", "candidates": [candidate("m", "site-a", "a")]}))
    raw = base()
    route(raw).pop("candidates")
    route(raw).pop("local_site")
    route(raw)["overlay_file"] = str(overlay)
    route(raw)["expected_overlay_scope"] = {"network": "net-1"}
    with pytest.raises(ConfigError, match="legacy_not_allowed"):
        build(parse_config(raw), GatewayMetrics())


SUPPORTED_EXAMPLES = [
    "intelligent-route-all-capabilities.yaml",
    "intelligent-route-inference.yaml",
    "intelligent-route-mcp.yaml",
    "intelligent-route-overlay.yaml",
]


@pytest.mark.parametrize("name", SUPPORTED_EXAMPLES)
def test_public_examples_with_supported_filters_parse(name: str) -> None:
    path = PRAXIS_CONFIGS / name
    if not path.exists():
        pytest.skip(f"{path} is not available")
    config = load_config(path)
    assert config.listeners and config.admin == ("127.0.0.1", 9901)
    types = {spec.type for chain in config.chains.values() for spec in chain.filters}
    assert "intelligent_route" in types and "load_balancer" in types


@pytest.mark.parametrize(
    ("name", "path", "filter_type"),
    [
        ("credential-injection.yaml", "filter_chains[0].filters[0].filter", "ip_acl"),
    ],
)
def test_public_examples_with_unsupported_filters_name_the_filter(
    name: str, path: str, filter_type: str
) -> None:
    source = PRAXIS_CONFIGS / name
    if not source.exists():
        pytest.skip(f"{source} is not available")
    with pytest.raises(ConfigError) as info:
        load_config(source)
    assert info.value.path == path and f"unknown filter type {filter_type!r}" in info.value.message


def test_public_provider_example_parses_up_to_its_credential_file() -> None:
    """The provider example is understood in full; only its mounted credential file is missing here."""
    source = PRAXIS_CONFIGS / "provider-route.yaml"
    if not source.exists():
        pytest.skip(f"{source} is not available")
    with pytest.raises(ConfigError) as info:
        load_config(source)
    assert info.value.path == "filter_chains[0].filters[3].credentials[0].file"
    assert "cannot read credential file" in info.value.message


def test_example_static_config_builds_and_routes_in_configured_order() -> None:
    path = PRAXIS_CONFIGS / "intelligent-route-all-capabilities.yaml"
    if not path.exists():
        pytest.skip(f"{path} is not available")
    built = build(load_config(path), GatewayMetrics())
    snapshot = built.routes[0].store.current
    plan = snapshot.plan("mcp_tool", "code-search")
    assert plan is not None and plan.group is not None
    assert plan.group.members[0].cluster == "tools-site-a"


def test_yaml_round_trip_of_base_config() -> None:
    text = yaml.safe_dump(base())
    assert parse_config_text(text).listeners[0].name == "proxy"


def test_filter_duration_histogram_follows_the_metrics_key() -> None:
    """metrics.filter_duration: true times every filter into praxis_filter_duration_seconds{filter}; without
    the key no such series exists, and a value that is not a boolean names the key."""

    def exported(raw: dict[str, Any]) -> str:
        metrics = GatewayMetrics()
        built = build(parse_config(raw), metrics)
        try:
            path = "/v1/chat/completions"
            ctx = RequestContext("POST", path, path, CIMultiDict(), json.dumps({"model": "m"}).encode())
            assert built.pipelines["proxy"].run(ctx) is None and ctx.cluster == "a"
        finally:
            for instance in built.routes:
                instance.close()
        return generate_latest(metrics.registry).decode()

    timed = base()
    timed["metrics"] = {"filter_duration": True}
    text = exported(timed)
    for kind in ("json_body_field", "intelligent_route", "load_balancer"):
        assert f'praxis_filter_duration_seconds_count{{filter="{kind}"}} 1.0' in text, text
    assert "praxis_filter_duration_seconds" not in exported(base())
    timed["metrics"] = {"filter_duration": "yes"}
    assert error_of(timed).path == "metrics.filter_duration"


def test_router_sets_the_cluster_of_the_first_matching_prefix() -> None:
    """The core router: first path_prefix match wins, no match leaves the cluster unset; a route's cluster
    must be declared by a later load_balancer."""
    raw = base()
    raw["filter_chains"][0]["filters"].insert(0, {"filter": "router", "routes": [
        {"path_prefix": "/pinned/", "cluster": "b"}, {"path_prefix": "/pinned/x", "cluster": "a"}]})
    built = build(parse_config(raw), GatewayMetrics())
    try:
        for path, cluster in (("/pinned/x/v1", "b"), ("/v1/chat/completions", "a")):
            ctx = RequestContext("POST", path, path, CIMultiDict(), json.dumps({"model": "m"}).encode())
            assert built.pipelines["proxy"].run(ctx) is None and ctx.cluster == cluster, path
    finally:
        for instance in built.routes:
            instance.close()
    raw["filter_chains"][0]["filters"][0]["routes"][0]["cluster"] = "undeclared"
    assert error_of(raw).path == "filter_chains[0].filters[0].routes[0].cluster"
