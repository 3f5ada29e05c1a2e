"""Where a provider is hosted, said the way the operator under test reads it.

No spec sentence names a field for a provider's hosting site, yet every case needs one. The public grid
operator (both versions) takes it from the network's GridSites its `spec.siteSelector` matches; the reference
also reads a plain `spec.site`. The harness builds resources with `spec.site` and, by default
(`operator.provider_site: siteSelector`), writes each hosted resource with a siteSelector matching only the
GridSite of that name instead, giving every GridSite the label it is matched by and adding a GridSite (of
the provider's network) for a hosting site the test did not declare; a descriptor whose operator reads
`spec.site` says `operator.provider_site: site` and gets the resources as they are built.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from harness.resources import grid_site

__all__ = ["HOSTED_KINDS", "PROVIDER_SITE_MODES", "SITE_LABEL", "SiteInventory", "as_operator_reads"]

#: How a descriptor says its operator learns a provider's hosting site: the public mechanism first (default).
PROVIDER_SITE_MODES: tuple[str, ...] = ("siteSelector", "site")
#: The label each GridSite carries with its own name, what a provider's siteSelector matches.
SITE_LABEL = "agn-conformance/site"
#: The resources hosted at a site.
HOSTED_KINDS = frozenset({"InferenceProvider", "AgentToolProvider"})


def _hosting_site(obj: Mapping[str, Any]) -> str | None:
    site = (obj.get("spec") or {}).get("site") if obj.get("kind") in HOSTED_KINDS else None
    return site if isinstance(site, str) and site else None


def as_operator_reads(obj: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """`obj` as written for an operator reading hosting sites per `mode`: under siteSelector a hosted
    resource's `spec.site` becomes a siteSelector of that site's label, and a GridSite carries its label."""
    if mode not in PROVIDER_SITE_MODES:
        raise ValueError(f"unknown provider site mode {mode!r} (known: {', '.join(PROVIDER_SITE_MODES)})")
    if mode == "site":
        return dict(obj)
    site = _hosting_site(obj)
    if obj.get("kind") == "GridSite":
        out = copy.deepcopy(dict(obj))
        metadata = out.setdefault("metadata", {})
        metadata["labels"] = {SITE_LABEL: metadata.get("name"), **(metadata.get("labels") or {})}
        return out
    if site is None:
        return dict(obj)
    out = copy.deepcopy(dict(obj))
    del out["spec"]["site"]
    out["spec"]["siteSelector"] = {"matchLabels": {SITE_LABEL: site}}
    return out


class SiteInventory:
    """The GridSites the harness adds so each hosting site can be selected, per control plane.

    A GridSite belongs to one network and its name is unique, while two networks of one test may host
    providers at the same site: the harness adds, per (network, site), a GridSite named after the site (or,
    when another network's GridSite has that name, after the site and the network) labelled with the site, so
    each network's providers select a GridSite of their own network. A GridSite the test declares itself is
    the test's (never replaced, never removed here); one the harness added is removed with its network.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.have: dict[tuple[str, str], str] = {}  # (network, site) -> the GridSite's name
        self.added: dict[str, str] = {}  # name of a GridSite the harness added -> its network

    def sites_for(self, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The GridSites to write before `obj`: for a provider, a GridSite of its network for its hosting site
        when there is none yet (already as the operator reads it)."""
        if self.mode != "siteSelector":
            return []
        network = str((obj.get("spec") or {}).get("gridNetworkRef") or "")
        if obj.get("kind") == "GridSite":
            name = str((obj.get("metadata") or {}).get("name"))
            self.added.pop(name, None)
            self.have = {key: site for key, site in self.have.items() if site != name}
            self.have[(network, name)] = name
            return []
        site = _hosting_site(obj)
        if site is None or (network, site) in self.have:
            return []
        taken = set(self.have.values())
        name = site if site not in taken else f"{site}-{network}"
        self.have[(network, site)] = name
        self.added[name] = network
        made = grid_site(name, network)
        made["metadata"]["labels"] = {SITE_LABEL: site}
        return [made]

    def released(self, kind: str, name: str) -> list[str]:
        """The harness-added GridSites to delete now that `kind`/`name` is deleted (those of a network)."""
        if kind == "GridSite":
            self.have = {key: site for key, site in self.have.items() if site != name}
            return []
        if kind != "GridNetwork":
            return []
        gone = [site for site, network in self.added.items() if network == name]
        for site in gone:
            del self.added[site]
        self.have = {key: site for key, site in self.have.items() if site not in gone}
        return gone
