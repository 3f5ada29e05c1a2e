"""Locality tiers from GridSite geography, closest first.

Zone names are not globally unique, so a shared zone counts only inside a shared region. Sites
without geography make every comparison `unknown`, leaving the order to score and tie-break.
"""

from __future__ import annotations

from collections.abc import Mapping

from reference.operator.core.model import GridSiteSpec

SAME_SITE = "same_site"
SAME_ZONE = "same_zone"
SAME_REGION = "same_region"
CROSS_REGION = "cross_region"
UNKNOWN = "unknown"

TIER_ORDER: Mapping[str, int] = {SAME_SITE: 0, SAME_ZONE: 1, SAME_REGION: 2, CROSS_REGION: 3, UNKNOWN: 4}


def derive_tier(consumer_site: str, provider_site: str, sites: Mapping[str, GridSiteSpec]) -> str:
    """`sites` maps site name to its GridSite in the rendering network."""
    if consumer_site == provider_site:
        return SAME_SITE
    consumer, provider = sites.get(consumer_site), sites.get(provider_site)
    if consumer is None or provider is None or consumer.region is None or provider.region is None:
        return UNKNOWN
    if consumer.region != provider.region:
        return CROSS_REGION
    if consumer.zone is not None and consumer.zone == provider.zone:
        return SAME_ZONE
    return SAME_REGION
