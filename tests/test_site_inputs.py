"""A provider's hosting site written as the operator reads it: GridSites matched by spec.siteSelector (the
public operator's way, the default) or a plain spec.site."""

from __future__ import annotations

import pytest

from harness import resources
from harness.impl import ImplError, load_impl, parse_impl, reference_document
from harness.site_inputs import SITE_LABEL, SiteInventory, as_operator_reads


def _provider(name: str, network: str, site: str) -> dict[str, object]:
    return resources.inference_provider(name, network, site=site, cluster=name, models=("m",))


def test_a_provider_selects_its_sites_gridsite_and_keeps_no_spec_site() -> None:
    written = as_operator_reads(_provider("p1", "net", "a"), "siteSelector")
    assert "site" not in written["spec"] and written["spec"]["siteSelector"] == {"matchLabels": {SITE_LABEL: "a"}}
    labelled = as_operator_reads(resources.grid_site("b", "net", region="eu", labels={"tier": "gold"}), "siteSelector")
    assert labelled["metadata"]["labels"] == {SITE_LABEL: "b", "tier": "gold"}
    # the twin: an operator reading spec.site gets the resources as built
    assert as_operator_reads(_provider("p1", "net", "a"), "site")["spec"]["site"] == "a"
    with pytest.raises(ValueError, match="unknown provider site mode"):
        as_operator_reads(_provider("p1", "net", "a"), "zone")


def test_a_hosting_site_without_a_gridsite_gets_one_per_network_removed_with_it() -> None:
    sites = SiteInventory("siteSelector")
    (first,) = sites.sites_for(_provider("p1", "net", "a"))
    assert first["metadata"]["name"] == "a" and first["spec"]["gridNetworkRef"] == "net"
    assert first["metadata"]["labels"] == {SITE_LABEL: "a"}
    assert sites.sites_for(_provider("p2", "net", "a")) == []  # one per (network, site)
    # another network hosting at the same site gets a GridSite of its own (names are unique, a GridSite has
    # one network), labelled with the same site
    (second,) = sites.sites_for(_provider("p3", "other", "a"))
    assert second["metadata"]["name"] == "a-other" and second["metadata"]["labels"] == {SITE_LABEL: "a"}
    assert sites.released("InferenceProvider", "p1") == []
    assert sites.released("GridNetwork", "net") == ["a"] and sites.released("GridNetwork", "other") == ["a-other"]


def test_a_gridsite_the_test_declares_is_used_and_never_removed() -> None:
    sites = SiteInventory("siteSelector")
    assert sites.sites_for(resources.grid_site("a", "net", region="eu")) == []
    assert sites.sites_for(_provider("p1", "net", "a")) == []
    assert sites.released("GridNetwork", "net") == []
    assert SiteInventory("site").sites_for(_provider("p1", "net", "a")) == []  # spec.site needs no GridSite


def test_the_descriptor_says_how_its_operator_reads_hosting_sites() -> None:
    assert load_impl("reference").operator.provider_site == "siteSelector"  # type: ignore[union-attr]
    document = reference_document()
    document["operator"]["provider_site"] = "site"
    assert parse_impl(document).operator.provider_site == "site"  # type: ignore[union-attr]
    document["operator"]["provider_site"] = "spec.site"
    with pytest.raises(ImplError, match="^operator.provider_site: must be one of siteSelector, site"):
        parse_impl(document)
