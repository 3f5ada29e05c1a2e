"""The two-site topology and the provider-hop configs the harness renders (structure only, no processes)."""

from __future__ import annotations

import pytest
import yaml

from harness.contract import ScopeSpec
from harness.gateway_config import (
    PROVIDER_FILTER_ORDER,
    VARIANTS,
    CredentialRef,
    CredentialSource,
    ListenerTls,
    ProviderRoute,
    TrustedPeer,
    UpstreamTls,
    render_gateway_config,
    render_hop_consumer_config,
    render_provider_gateway_config,
)
from harness.topology import TopologyError, load_topology, parse_topology

REF = CredentialRef("provider-token", "grid-b")
ROUTES = [ProviderRoute("cand-1", "m-1", "model-b1", credential=REF),
          ProviderRoute("cand-2", "m-2", "model-b2", paths=("/v1/chat/completions", "/v1/responses"))]


def _provider(**overrides: object) -> dict:
    kwargs: dict = dict(
        listen="127.0.0.2:18080", admin="127.0.0.2:19901",
        tls=ListenerTls("/pki/pg.crt", "/pki/pg.key", "/pki/ca.pem"),
        trusted_peers=[TrustedPeer(organization="ai-grid"), TrustedPeer(cert_digest="a" * 64)],
        provider_id="site-b-provider-gateway", routes=ROUTES,
        credentials=[CredentialSource(REF, file="/creds/provider-token/token")],
        clusters={"model-b1": "127.0.0.3:18000", "model-b2": "127.0.0.3:18001"},
    )
    kwargs.update(overrides)
    return yaml.safe_load(render_provider_gateway_config(**kwargs))


def test_two_site_topology() -> None:
    topo = load_topology("two-site")
    assert [s.name for s in topo.sites] == ["site-a", "site-b"]
    assert [s.name for s in topo.provider_sites] == ["site-b"]
    b = topo.site("site-b")
    assert b.provider_gateway_cluster == "site-b-provider-gateway"
    assert [p.name for p in b.model_providers] == ["model-b1", "model-b2"]
    with pytest.raises(KeyError):
        _ = topo.site("site-a").provider_gateway_cluster


def test_single_site_topology_unchanged() -> None:
    topo = load_topology("single-site")
    assert topo.provider_sites == () and topo.sites[0].provider_gateway is None


def test_blank_provider_gateway_is_rejected() -> None:
    raw = {"name": "t", "network": "n", "sites": [{"name": "s", "providers": [], "provider_gateway": " "}]}
    with pytest.raises(TopologyError, match="provider_gateway"):
        parse_topology(raw, "t.yaml")


def test_provider_gateway_config_structure() -> None:
    config = _provider()
    listener = config["listeners"][0]
    assert listener["tls"] == {"certificates": [{"cert_path": "/pki/pg.crt", "key_path": "/pki/pg.key"}],
                               "client_ca": {"ca_path": "/pki/ca.pem"}, "client_cert_mode": "require"}
    filters = config["filter_chains"][0]["filters"]
    assert [f["filter"] for f in filters] == list(PROVIDER_FILTER_ORDER)
    assert listener["filter_chains"] == [config["filter_chains"][0]["name"]]
    assert filters[0]["trusted_peers"] == [{"organization": "ai-grid"}, {"cert_digest": "a" * 64}]
    assert filters[1] == {"filter": "json_body_field", "field": "model", "header": "X-Model"}
    route = filters[2]
    assert route["provider_id"] == "site-b-provider-gateway" and route["model_header"] == "X-Model"
    assert route["routes"][0] == {"candidate_id": "cand-1", "model": "m-1", "paths": ["/v1/chat/completions"],
                                  "cluster": "model-b1", "credential": {
                                      "strategy": "bearer_token",
                                      "secretRef": {"name": "provider-token", "namespace": "grid-b", "key": "token"}}}
    assert "credential" not in route["routes"][1]
    assert filters[3]["credentials"] == [{"strategy": "bearer_token", "name": "provider-token",
                                          "namespace": "grid-b", "key": "token",
                                          "file": "/creds/provider-token/token"}]
    assert {c["name"] for c in filters[4]["clusters"]} == {"model-b1", "model-b2"}


def test_provider_config_variants_for_start_failures() -> None:
    assert "tls" not in _provider(tls=None)["listeners"][0]
    no_mode = _provider(tls=ListenerTls("/c", "/k", "/ca", None))["listeners"][0]["tls"]
    assert "client_cert_mode" not in no_mode
    order = ("json_body_field", "peer_identity_trust", "provider_route", "credential_inject", "load_balancer")
    names = [f["filter"] for f in _provider(filter_order=order)["filter_chains"][0]["filters"]]
    assert names == list(order)
    without = [f["filter"] for f in _provider(trusted_peers=None)["filter_chains"][0]["filters"]]
    assert "peer_identity_trust" not in without
    assert _provider(insecure_options={"skip_pipeline_validation": True})["insecure_options"] == {
        "allow_private_endpoints": True, "skip_pipeline_validation": True}


def test_credential_sources_take_exactly_one() -> None:
    assert CredentialSource(REF, env_var="TOKEN").as_entry()["env_var"] == "TOKEN"
    assert CredentialSource(REF, value="v").as_entry()["value"] == "v"
    with pytest.raises(ValueError):
        CredentialSource(REF).as_entry()
    with pytest.raises(ValueError):
        CredentialSource(REF, file="/f", value="v").as_entry()
    with pytest.raises(ValueError):
        TrustedPeer().as_entry()


def test_rendered_config_never_holds_a_file_sourced_token() -> None:
    text = render_provider_gateway_config(
        listen="127.0.0.2:1", admin="127.0.0.2:2", tls=None, trusted_peers=[TrustedPeer(organization="o")],
        provider_id="p", routes=ROUTES, credentials=[CredentialSource(REF, file="/creds/x")], clusters={})
    assert "Bearer" not in text and "value" not in text


SCOPE = ScopeSpec("conformance-net", "edge-gateway", "agn-system", "site-a")


def test_hop_consumer_config_adds_upstream_mtls_to_hop_clusters_only() -> None:
    tls = UpstreamTls("/pki/ca.pem", "/pki/a.crt", "/pki/a.key", "provider-gateway.site-b.grid.test")
    clusters = {"local-a": "127.0.0.1:18000", "site-b-provider-gateway": "127.0.0.2:18080"}
    config = yaml.safe_load(render_hop_consumer_config(
        VARIANTS["core"], listen="127.0.0.1:18080", admin="127.0.0.1:19901", overlay_file="/o/routing-overlay.json",
        scope=SCOPE, clusters=clusters, hop_tls={"site-b-provider-gateway": tls}))
    filters = config["filter_chains"][0]["filters"]
    route = next(f for f in filters if f["filter"] == "intelligent_route")
    assert route["provider_hop_clusters"] == ["site-b-provider-gateway"]
    assert route["expected_overlay_scope"] == SCOPE.as_dict()
    lb = {c["name"]: c for c in next(f for f in filters if f["filter"] == "load_balancer")["clusters"]}
    assert lb["site-b-provider-gateway"]["tls"] == {
        "ca": {"ca_path": "/pki/ca.pem"}, "client_cert": {"cert_path": "/pki/a.crt", "key_path": "/pki/a.key"},
        "sni": "provider-gateway.site-b.grid.test", "verify": True}
    assert "tls" not in lb["local-a"]
    with pytest.raises(ValueError, match="without an endpoint"):
        render_hop_consumer_config(VARIANTS["core"], listen="a:1", admin="a:2", overlay_file="/o", scope=SCOPE,
                                   clusters={}, hop_tls={"x": tls})


def test_consumer_renderer_unchanged_for_plain_hops() -> None:
    text = render_gateway_config(VARIANTS["core"], listen="127.0.0.1:1", admin="127.0.0.1:2", overlay_file="/o",
                                 scope=SCOPE, clusters={"p": "127.0.0.1:3"}, hop_clusters=["p"],
                                 management_cluster=None)
    lb = next(f for f in yaml.safe_load(text)["filter_chains"][0]["filters"] if f["filter"] == "load_balancer")
    assert lb["clusters"] == [{"name": "p", "endpoints": ["127.0.0.1:3"]}]


def test_consumer_renderer_gives_hop_clusters_mtls_and_leaves_management_plain() -> None:
    tls = UpstreamTls("/pki/ca.pem", "/pki/gw.crt", "/pki/gw.key", "p.site-a.backend.grid.test")
    text = render_gateway_config(VARIANTS["management"], listen="127.0.0.1:1", admin="127.0.0.1:2",
                                 overlay_file="/o", scope=SCOPE, clusters={"p": "127.0.0.1:3", "mgmt": "127.0.0.1:4"},
                                 hop_clusters=["p"], management_cluster="mgmt", hop_tls={"p": tls})
    filters = yaml.safe_load(text)["filter_chains"][0]["filters"]
    route = next(f for f in filters if f["filter"] == "intelligent_route")
    assert route["provider_hop_clusters"] == ["p"] and route["management_cluster"] == "mgmt"
    lb = next(f for f in filters if f["filter"] == "load_balancer")
    assert lb["clusters"] == [{"name": "p", "endpoints": ["127.0.0.1:3"], "tls": tls.as_block()},
                              {"name": "mgmt", "endpoints": ["127.0.0.1:4"]}]
    with pytest.raises(ValueError, match="without an endpoint"):
        render_gateway_config(VARIANTS["core"], listen="a:1", admin="a:2", overlay_file="/o", scope=SCOPE,
                              clusters={}, hop_clusters=["p"], management_cluster=None, hop_tls={"p": tls})
