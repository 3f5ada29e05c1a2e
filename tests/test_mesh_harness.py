"""The harness side of the mesh profile: the oracle's naming and bounds, topology seeds, the descriptor's
mesh arguments, per-site addresses and processes started inside a site's namespace."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import mesh_oracle
from harness.addresses import SiteHostPlan
from harness.impl import ImplError, load_impl, parse_impl
from harness.topology import TopologyError, load_topology, parse_topology
from reference.operator.mesh.sites import discovered_site_k8s_name
from reference.operator.mesh.swim import SwimConfig, failure_detection_bound

OPERATOR: dict[str, Any] = {"command": ["op", "{manifests}", "{out}"]}
VALID: dict[str, Any] = {
    "implementation": {"organization": "o", "project": "p", "version": "1", "contact": ["c"]},
    "gateway": {"command": ["gw", "{config}"]},
}

# ------------------------------------------------------------------------------------------- oracle


@pytest.mark.parametrize(("network", "site", "expected"), [
    ("mesh-net", "site-c", "mesh-net-site-c"),
    ("Prod_Net", "EU West/1", "prod-net-eu-west-1"),
    ("--", "site", "site"),
    ("net", "", "net"),
    ("", "", "discovered-site"),
    ("ñet", "sïte", "et-s-te"),
])
def test_discovered_site_name_examples(network: str, site: str, expected: str) -> None:
    assert mesh_oracle.discovered_site_name(network, site) == expected


def test_discovered_site_name_is_cut_at_253() -> None:
    assert len(mesh_oracle.discovered_site_name("n" * 200, "s" * 200)) == 253


@given(st.text(max_size=80), st.text(max_size=80))
def test_oracle_and_reference_name_sites_alike(network: str, site: str) -> None:
    """Two implementations of one rule, written apart, so a bug in either shows here."""
    assert mesh_oracle.discovered_site_name(network, site) == discovered_site_k8s_name(network, site)


def test_detection_bound_matches_the_reference_membership_formula() -> None:
    timing = mesh_oracle.SwimTiming()
    config = SwimConfig(probe_interval=timing.probe_interval, probe_timeout=timing.probe_timeout,
                        suspicion_mult=timing.suspicion_mult)
    for members in (2, 3, 10, 20):
        assert timing.detection_bound(members) == pytest.approx(failure_detection_bound(config, members))
    assert timing.as_placeholders() == {"probe_interval": "1", "probe_timeout": "0.4", "suspicion_mult": "3"}


def test_overlay_and_status_readers() -> None:
    envelope = {"overlay": {"candidates": [
        {"name": "m", "site": "a", "cluster": "x", "fresh": True},
        {"name": "m", "site": "c", "cluster": "y", "fresh": False},
        {"name": "t", "kind": "mcp_tool", "site": "c", "cluster": "y"},
    ]}}
    assert [c["cluster"] for c in mesh_oracle.from_site(envelope, "m", "c")] == ["y"]
    assert mesh_oracle.models_in(envelope) == {"m", "t"}
    assert mesh_oracle.candidates_for(None, "m") == []
    status = {"members": [{"name": "site-c", "status": "Dead"}],
              "records": [{"network": "n", "site": "site-c", "provider": "p"}, {"network": "o", "site": "site-c"}]}
    assert mesh_oracle.member_status(status, "site-c") == "dead"
    assert mesh_oracle.member_status(status, "site-b") is None
    assert len(mesh_oracle.records_of(status, site="site-c")) == 2
    assert mesh_oracle.records_of(status, site="site-c", network="n", provider="p") == [status["records"][0]]


# ----------------------------------------------------------------------------------------- topology


def test_three_node_mesh_topology_chains_its_seeds() -> None:
    topology = load_topology("three-node-mesh")
    assert [(s.name, s.seeds) for s in topology.sites] == [
        ("site-a", ()), ("site-b", ("site-a",)), ("site-c", ("site-b",))]
    assert all(s.provider_gateway for s in topology.sites)


@pytest.mark.parametrize(("seeds", "message"), [
    ("site-a", "seeds must be a list"),
    (["nowhere"], "nowhere is not another site"),
    (["site-b"], "site-b is not another site"),
])
def test_bad_seeds_are_named(seeds: Any, message: str) -> None:
    raw = {"name": "t", "network": "n", "sites": [
        {"name": "site-a", "providers": [{"name": "p"}]},
        {"name": "site-b", "providers": [{"name": "q"}], "seeds": seeds},
    ]}
    with pytest.raises(TopologyError, match=message):
        parse_topology(raw, "t.yaml")


# ------------------------------------------------------------------------------------------ descriptor


def _with_operator(**operator: Any) -> dict[str, Any]:
    data = copy.deepcopy(VALID)
    data["operator"] = {**OPERATOR, **operator}
    return data


def test_reference_descriptor_joins_a_mesh() -> None:
    operator = load_impl("reference").operator
    assert operator is not None and operator.mesh_args is not None
    values = {"site": "site-a", "mesh_bind": "127.0.0.1:7946", "mesh_advertise": "127.0.0.1:7946", "mesh_seeds": "",
              "gateway_address": "127.0.0.1:1",
              "routing_cluster": "site-a-pg", "client_cert": "c.pem", "client_key": "k.pem",
              **mesh_oracle.SwimTiming().as_placeholders()}
    argv, _ = operator.render(Path("/m"), Path("/o"), Path("/w"), Path("/ca"), values)
    assert argv[argv.index("--mesh-site") + 1] == "site-a"
    assert argv[argv.index("--mesh-seeds") + 1] == ""
    assert argv[argv.index("--swim-probe-interval") + 1] == "1"
    plain, _ = operator.render(Path("/m"), Path("/o"), Path("/w"), Path("/ca"))
    assert "--mesh-site" not in plain


def test_operator_without_mesh_args_cannot_join() -> None:
    operator = parse_impl(_with_operator()).operator
    assert operator is not None and operator.mesh_args is None
    with pytest.raises(ValueError, match="mesh_args"):
        operator.render(Path("/m"), Path("/o"), Path("/w"), Path("/ca"), {"site": "a"})


@pytest.mark.parametrize(("mesh_args", "expected"), [
    ("--site {site}", "operator.mesh_args: must be a non-empty list"),
    ([], "operator.mesh_args: must be a non-empty list"),
    (["--site", "{site}", "--bind", "{mesh_bind}"], "operator.mesh_args: must contain {mesh_seeds}"),
    (["{site}", "{mesh_bind}", "{mesh_seeds}", "{port}"], "operator.mesh_args[3]: unknown placeholder {port}"),
    (["{site}", "{mesh_bind}", "{mesh_seeds}", 7], "operator.mesh_args[3]: must be a string"),
])
def test_bad_mesh_args_name_the_key(mesh_args: Any, expected: str) -> None:
    with pytest.raises(ImplError) as caught:
        parse_impl(_with_operator(mesh_args=mesh_args))
    assert str(caught.value).startswith(expected), str(caught.value)


def test_an_operator_may_take_its_mesh_settings_from_the_environment() -> None:
    """operator.mesh_env: the mesh placeholders as environment variables (an operator reading its SWIM
    settings from the environment); the required ones may be spread over mesh_args and mesh_env."""
    env = {"SWIM_SITE": "{site}", "SWIM_BIND": "{mesh_bind}", "SWIM_SEEDS": "{mesh_seeds}",
           "SWIM_PROBE_INTERVAL": "{probe_interval}"}
    operator = parse_impl(_with_operator(mesh_env=env)).operator
    assert operator is not None and operator.joins_mesh and operator.mesh_args is None
    values = {"site": "site-a", "mesh_bind": "127.0.0.1:7946", "mesh_seeds": "", "probe_interval": "1"}
    argv, rendered = operator.render(Path("/m"), Path("/o"), Path("/w"), Path("/ca"), values)
    assert rendered["SWIM_SITE"] == "site-a" and rendered["SWIM_SEEDS"] == "" and rendered["SWIM_BIND"] == \
        "127.0.0.1:7946"
    plain_argv, plain_env = operator.render(Path("/m"), Path("/o"), Path("/w"), Path("/ca"))
    assert plain_argv == argv and "SWIM_SITE" not in plain_env  # outside a mesh: not set
    both = parse_impl(_with_operator(mesh_args=["--site", "{site}"],
                                     mesh_env={"SWIM_BIND": "{mesh_bind}", "SWIM_SEEDS": "{mesh_seeds}"})).operator
    assert both is not None and both.joins_mesh
    with pytest.raises(ImplError, match=r"^operator.mesh_args or operator.mesh_env: must contain \{mesh_seeds\}"):
        parse_impl(_with_operator(mesh_env={"SWIM_SITE": "{site}", "SWIM_BIND": "{mesh_bind}"}))
    with pytest.raises(ImplError, match=r"^operator.mesh_env.SWIM_PORT: unknown placeholder \{port\}"):
        parse_impl(_with_operator(mesh_env={**env, "SWIM_PORT": "{port}"}))


# ----------------------------------------------------------------------------------------- addresses


def test_site_host_plan_gives_each_component_its_own_port() -> None:
    plan = SiteHostPlan(("198.18.7.10", "198.18.7.11"))
    first = [plan.allocate(0, 18080) for _ in range(3)]
    assert first == [("198.18.7.10", 18080), ("198.18.7.10", 18081), ("198.18.7.10", 18082)]
    assert plan.allocate(1, 18080) == ("198.18.7.11", 18080)
    plan.close()


def test_processes_of_a_fabric_site_start_inside_its_namespace(tmp_path: Path) -> None:
    from harness.backends.local import LocalBackend
    from harness.process import Supervisor

    class FakeFabric:
        def exec_prefix(self, index: int) -> list[str]:
            return ["ip", "netns", "exec", f"ns-{index}"]

    plan = SiteHostPlan(("198.18.7.10", "198.18.7.11"))
    backend = LocalBackend(tmp_path, Supervisor(tmp_path / "logs"), plan, load_impl("reference"),
                           fabric=FakeFabric())  # type: ignore[arg-type]
    assert backend._inside(1, ["python"]) == ["ip", "netns", "exec", "ns-1", "python"]
    assert backend._site_of("198.18.7.11") == 1
    assert backend._site_of("127.0.0.1") is None
    plain = LocalBackend(tmp_path, Supervisor(tmp_path / "logs2"), plan, load_impl("reference"))
    assert plain._inside(1, ["python"]) == ["python"]


def test_a_local_mesh_member_is_reached_where_it_binds(tmp_path: Path) -> None:
    """On the local backend a site's mesh member advertises the address it binds, and other sites dial a
    provider gateway at the address the harness knows it by (one machine, or a fabric routing them)."""
    from harness.backends.local import MESH_PORT, LocalBackend
    from harness.process import Supervisor

    plan = SiteHostPlan(("198.18.7.10", "198.18.7.11"))
    backend = LocalBackend(tmp_path, Supervisor(tmp_path / "logs"), plan, load_impl("reference"))
    assert backend.mesh_addresses(1) == (f"198.18.7.11:{MESH_PORT}", f"198.18.7.11:{MESH_PORT}")
    assert backend.mesh_addresses(1) == (f"198.18.7.11:{MESH_PORT + 1}", f"198.18.7.11:{MESH_PORT + 1}")
    assert backend.peer_address("198.18.7.10:18080") == "198.18.7.10:18080"


def test_local_control_plane_reads_the_dir_sinks_mesh_outputs(tmp_path: Path) -> None:
    from harness.control import ControlPlane

    out = tmp_path / "out"
    out.mkdir()
    plane = ControlPlane(None, None, tmp_path, out)  # type: ignore[arg-type]
    assert plane.mesh_state() is None and plane.gridsite("n-site-c") is None
    (out / "mesh.state.yaml").write_text("site: site-a\nmembers: [{name: site-b, status: alive}]\n")
    (out / "n-site-c.gridsite.yaml").write_text("kind: GridSite\nstatus: {phase: Active}\n")
    assert plane.mesh_state() == {"site": "site-a", "members": [{"name": "site-b", "status": "alive"}]}
    assert plane.gridsite("n-site-c") == {"kind": "GridSite", "status": {"phase": "Active"}}
    (out / "mesh.state.yaml").write_text("- not a mapping\n")
    assert plane.mesh_state() is None
