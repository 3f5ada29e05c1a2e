"""The operator's pure core: resources, metric samples, remote records and a clock in; overlays out.

Nothing here performs I/O. Sources, scrapers and sinks live beside this package and call `render`.
"""

from reference.operator.core.model import (
    Clock,
    FixedClock,
    GatewayRef,
    GridNetworkSpec,
    GridSiteSpec,
    MetricSample,
    ProviderSpec,
    RemoteProviderRecord,
    ResourceError,
    Resources,
    SystemClock,
    ToolProviderSpec,
)
from reference.operator.core.render import Rendered, render

__all__ = [
    "Clock",
    "FixedClock",
    "GatewayRef",
    "GridNetworkSpec",
    "GridSiteSpec",
    "MetricSample",
    "ProviderSpec",
    "RemoteProviderRecord",
    "Rendered",
    "ResourceError",
    "Resources",
    "SystemClock",
    "ToolProviderSpec",
    "render",
]
