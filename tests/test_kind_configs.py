"""The kind cluster configs: one per site, distinct subnets, distinct loopback host ports.

Clusters of one grid share the `kind` Docker network, so their pod and service ranges must not overlap,
and each cluster publishes the same NodePorts on its own host ports so the harness can reach every site.
"""

from __future__ import annotations

import ipaddress
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
KIND_DIR = ROOT / "clusters" / "kind"
CONFIGS = sorted(KIND_DIR.glob("*.yaml"))
SITES = {"site-a", "site-b", "site-c", "west", "central", "east",
         "east-edge", "west-edge", "east-provider", "west-provider"}
MAPPED = {(30080, "TCP"), (30443, "TCP"), (30901, "TCP"), (30946, "UDP")}
NODE_PORT_RANGE = range(30000, 32768)
# Docker's default bridge and the range `kind` usually picks for its network.
DOCKER_RANGES = [ipaddress.ip_network("172.17.0.0/16"), ipaddress.ip_network("172.18.0.0/16")]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict), f"{path.name} is not a mapping"
    return doc


@pytest.fixture(scope="module")
def configs() -> dict[str, dict[str, Any]]:
    return {p.stem: _load(p) for p in CONFIGS}


def _mappings(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for node in config["nodes"] for m in node.get("extraPortMappings", [])]


def _subnets(configs: dict[str, dict[str, Any]]) -> list[tuple[str, Network]]:
    return [(f"{site}.{field}", ipaddress.ip_network(config["networking"][field], strict=True))
            for site, config in configs.items() for field in ("podSubnet", "serviceSubnet")]


def test_one_config_per_site(configs: dict[str, dict[str, Any]]) -> None:
    assert set(configs) == SITES


def test_topology_sites_have_a_kind_config(configs: dict[str, dict[str, Any]]) -> None:
    topologies = sorted((ROOT / "clusters").glob("*.yaml"))
    assert topologies, "no topology files found"
    for path in topologies:
        sites = {site["name"] for site in _load(path)["sites"]}
        assert sites <= set(configs), f"{path.name}: no kind config for {sorted(sites - set(configs))}"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_shape(path: Path) -> None:
    config = _load(path)
    assert config["kind"] == "Cluster"
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert set(config) <= {"kind", "apiVersion", "name", "networking", "nodes"}
    assert config["name"] == f"agn-{path.stem}"
    roles = [node["role"] for node in config["nodes"]]
    assert roles.count("control-plane") == 1
    assert set(config["networking"]) == {"podSubnet", "serviceSubnet"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_port_mappings(path: Path) -> None:
    mappings = _mappings(_load(path))
    assert {(m["containerPort"], m["protocol"]) for m in mappings} == MAPPED
    assert len(mappings) == len(MAPPED)
    for mapping in mappings:
        assert set(mapping) == {"containerPort", "hostPort", "listenAddress", "protocol"}
        assert mapping["listenAddress"] == "127.0.0.1", mapping
        assert mapping["containerPort"] in NODE_PORT_RANGE, mapping
        assert 1024 < mapping["hostPort"] < 65536, mapping


def test_host_ports_distinct_across_sites(configs: dict[str, dict[str, Any]]) -> None:
    ports = [(site, m["hostPort"]) for site, config in configs.items() for m in _mappings(config)]
    seen: dict[int, str] = {}
    for site, port in ports:
        assert port not in seen, f"host port {port} used by {seen[port]} and {site}"
        seen[port] = site
    assert len(seen) == len(SITES) * len(MAPPED)


def test_host_ports_follow_the_site_pattern(configs: dict[str, dict[str, Any]]) -> None:
    """Each site publishes its NodePorts on one thousand of its own (3Nxxx), keeping the NodePort's last digits."""
    blocks = {}
    for site, config in configs.items():
        mappings = _mappings(config)
        assert all(m["hostPort"] % 1000 == m["containerPort"] % 1000 for m in mappings), (site, mappings)
        assert len({m["hostPort"] // 1000 for m in mappings}) == 1, (site, mappings)
        blocks[site] = mappings[0]["hostPort"] // 1000
    assert len(set(blocks.values())) == len(blocks), blocks


def test_subnets_distinct_and_non_overlapping(configs: dict[str, dict[str, Any]]) -> None:
    subnets = _subnets(configs)
    assert len(subnets) == 2 * len(SITES)
    for (name_a, a), (name_b, b) in itertools.combinations(subnets, 2):
        assert not a.overlaps(b), f"{name_a} {a} overlaps {name_b} {b}"
    for name, net in subnets:
        assert net.is_private, f"{name} {net} is not a private range"
        assert net.num_addresses >= 2**16, f"{name} {net} is too small for a cluster"
        for docker in DOCKER_RANGES:
            assert not net.overlaps(docker), f"{name} {net} overlaps Docker's {docker}"


def test_overlap_check_catches_a_clash(configs: dict[str, dict[str, Any]]) -> None:
    clashing = {site: {**config, "networking": dict(config["networking"])} for site, config in configs.items()}
    clashing["site-b"]["networking"]["podSubnet"] = "10.11.128.0/17"
    pairs = itertools.combinations(_subnets(clashing), 2)
    assert [(a[0], b[0]) for a, b in pairs if a[1].overlaps(b[1])] == [("site-a.podSubnet", "site-b.podSubnet")]


def test_manifest_node_ports_are_published(configs: dict[str, dict[str, Any]]) -> None:
    published = {port for port, _ in MAPPED}
    node_ports = set()
    for path in (ROOT / "manifests" / "base").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "Service" and doc["spec"].get("type") == "NodePort":
                node_ports |= {p["nodePort"] for p in doc["spec"]["ports"]}
    assert node_ports == published, "every NodePort Service port (SWIM included) is mapped, and only those"
    for config in configs.values():
        assert node_ports <= {m["containerPort"] for m in _mappings(config)}


# --- the configs through kind's own loader ------------------------------------------------------------

_DOCKER_STAND_IN = """#!/bin/sh
# Answers what kind asks before it provisions, refuses everything after: nothing is ever created.
echo "$*" >> "$(dirname "$0")/docker.log"
case "$1" in
  -v) echo "Docker version 28.0.0, build stand-in"; exit 0;;
  ps) exit 0;;
  inspect) exit 0;;
  info) printf '%s%s\n' '{"CgroupDriver":"systemd","CgroupVersion":"2","MemoryLimit":true,"PidsLimit":true,' \
    '"CPUShares":true,"SecurityOptions":["name=seccomp,profile=builtin","name=cgroupns"],"OSType":"linux"}'
    exit 0;;
esac
echo "stand-in: no Docker engine for: $*" >&2
exit 1
"""


def _kind_create(kind: str, config: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """`kind create cluster --config` with a Docker stand-in first on PATH: kind decodes and validates the
    config, finds the node image "present", then fails at the first real Docker step (its network)."""
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    docker = bin_dir / "docker"
    docker.write_text(_DOCKER_STAND_IN)
    docker.chmod(0o755)
    log = bin_dir / "docker.log"
    log.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIND_", "DOCKER_"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run([kind, "create", "cluster", "--config", str(config), "--name", "agn-config-check"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode != 0, "the stand-in cannot have created a cluster"
    return done.stderr, log.read_text().splitlines() if log.exists() else []


@pytest.fixture(scope="module")
def kind_binary() -> str:
    import shutil

    found = shutil.which("kind")
    if found is None:
        pytest.skip("kind is not on PATH: the configs are checked by the schema tests above only")
    return found


def test_kind_itself_accepts_every_site_config_and_the_run_copies(kind_binary: str, tmp_path: Path) -> None:
    """Each config (as shipped, and as a run rewrites it with its name and host ports) gets through kind's
    strict decoding and validation to creating the `kind` network, the first step that needs Docker."""
    from harness.backends.kube.kind import KindBackend
    from harness.topology import load_topology

    backend = KindBackend(tmp_path / "work", load_topology("three-node-mesh"), None, run_id="t1")
    run_copies = [backend.kind_config(site)[0] for site in backend.topology.sites]
    for config in [*CONFIGS, *run_copies]:
        stderr, docker = _kind_create(kind_binary, config, tmp_path)
        assert "failed to ensure docker network" in stderr, f"{config}: kind refused it before provisioning:\n{stderr}"
        assert any(line.startswith("inspect --type=image kindest/node:") for line in docker), docker


@pytest.mark.parametrize(("change", "complaint"), [
    (lambda c: c["networking"].update(podSubnett="10.0.0.0/16"), "field podSubnett not found"),
    (lambda c: c["networking"].update(podSubnet="10.0.0.0/33"), "invalid pod subnet"),
])
def test_kind_itself_refuses_a_broken_config(kind_binary: str, tmp_path: Path, change: Any, complaint: str) -> None:
    """The check above can fail: kind names what is wrong before touching Docker's images."""
    config = _load(KIND_DIR / "site-a.yaml")
    change(config)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(config))
    stderr, docker = _kind_create(kind_binary, path, tmp_path)
    assert complaint in stderr, stderr
    assert not any(line.startswith("network") for line in docker), docker
