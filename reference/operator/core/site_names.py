"""The name of the GridSite that stands for a site of a network: a pure rule the core and the mesh share."""

from __future__ import annotations

MAX_K8S_NAME = 253
FALLBACK_NAME = "discovered-site"


def _sanitise(value: str) -> str:
    """ASCII letters and digits lowercased, everything else a hyphen, outer hyphens stripped."""
    return "".join(c.lower() if c.isascii() and c.isalnum() else "-" for c in value).strip("-")


def discovered_site_k8s_name(network: str, site: str) -> str:
    """The GridSite name for site `site` of network `network`, as the public AGN operator derives it.

    Both parts are sanitised (lowercase ASCII alphanumerics, other characters become `-`, leading and
    trailing `-` stripped) and joined as `{network}-{site}`; an empty part is dropped, both empty gives
    `discovered-site`, and the result is cut at 253 characters. Keying on the pair keeps one peer that
    belongs to several networks from colliding on one GridSite.
    """
    parts = [part for part in (_sanitise(network), _sanitise(site)) if part]
    name = "-".join(parts) if parts else FALLBACK_NAME
    return name[:MAX_K8S_NAME]
