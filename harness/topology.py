"""Topology files (clusters/*.yaml): which sites exist and what runs in each."""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class TopologyError(ValueError):
    pass


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    site: str
    role: str = "model"

    @property
    def cluster(self) -> str:
        return self.name


@dataclass(frozen=True)
class SiteSpec:
    name: str
    namespace: str
    gateway: str
    region: str
    zone: str
    providers: tuple[ProviderSpec, ...]
    provider_gateway: str | None = None  # the name of this site's provider gateway, when it serves peers
    seeds: tuple[str, ...] = ()  # sites whose operators this site's operator joins the mesh through

    @property
    def provider_gateway_cluster(self) -> str:
        """The cluster name other sites' consumer gateways give this site's provider gateway."""
        if self.provider_gateway is None:
            raise KeyError(f"site {self.name} runs no provider gateway")
        return f"{self.name}-{self.provider_gateway}"

    def provider(self, name: str) -> ProviderSpec:
        for p in self.providers:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def model_providers(self) -> tuple[ProviderSpec, ...]:
        return tuple(p for p in self.providers if p.role == "model")


@dataclass(frozen=True)
class Topology:
    name: str
    network: str
    sites: tuple[SiteSpec, ...]

    def site(self, name: str) -> SiteSpec:
        for s in self.sites:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def provider_sites(self) -> tuple[SiteSpec, ...]:
        """Sites that run a provider gateway for peers in other sites."""
        return tuple(s for s in self.sites if s.provider_gateway is not None)


def _topology_dir() -> Path:
    try:
        return Path(str(importlib.resources.files("harness.clusters")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "clusters"


def load_topology(name_or_path: str) -> Topology:
    """Load a bundled topology by name (`single-site`) or a topology file by path."""
    path = Path(name_or_path)
    if not path.exists():
        path = _topology_dir() / f"{name_or_path}.yaml"
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise TopologyError(f"topology {name_or_path!r}: {exc.strerror}") from None
    return parse_topology(raw, str(path))


def parse_topology(raw: Any, source: str) -> Topology:
    def need(obj: Any, key: str, where: str) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            raise TopologyError(f"{source}: {where}{key} is required")
        return obj[key]

    sites = []
    for i, s in enumerate(need(raw, "sites", "")):
        where = f"sites[{i}]."
        providers = tuple(
            ProviderSpec(name=str(need(p, "name", f"{where}providers[{j}].")),
                         site=str(p.get("site", need(s, "name", where))), role=str(p.get("role", "model")))
            for j, p in enumerate(need(s, "providers", where))
        )
        provider_gateway = s.get("provider_gateway")
        if provider_gateway is not None and (not isinstance(provider_gateway, str) or not provider_gateway.strip()):
            raise TopologyError(f"{source}: {where}provider_gateway must be a non-empty name")
        seeds = s.get("seeds", [])
        if not isinstance(seeds, list) or not all(isinstance(x, str) and x for x in seeds):
            raise TopologyError(f"{source}: {where}seeds must be a list of site names")
        sites.append(SiteSpec(
            name=str(need(s, "name", where)), namespace=str(s.get("namespace", "agn-system")),
            gateway=str(s.get("gateway", "edge-gateway")), region=str(s.get("region", "")),
            zone=str(s.get("zone", "")), providers=providers, provider_gateway=provider_gateway,
            seeds=tuple(seeds),
        ))
    names = {site.name for site in sites}
    for i, site in enumerate(sites):
        unknown = [seed for seed in site.seeds if seed not in names or seed == site.name]
        if unknown:
            raise TopologyError(f"{source}: sites[{i}].seeds: {', '.join(unknown)} is not another site")
    return Topology(name=str(need(raw, "name", "")), network=str(need(raw, "network", "")), sites=tuple(sites))
