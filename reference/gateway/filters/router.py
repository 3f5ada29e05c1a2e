"""router: the Praxis core filter that sends a request to a cluster by path prefix.

Routes are tried in order and the first whose `path_prefix` the request path starts with sets
``ctx.cluster``; a request no route matches continues with the cluster unset. Placed ahead of
intelligent_route it pins requests the overlay must not re-route (the filter then preserves the cluster).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference.gateway.context import Reject, RequestContext
from reference.gateway.schema import ConfigError, item, key, mapping, sequence, string

TYPE = "router"
MAX_ROUTES = 256


@dataclass(frozen=True)
class Route:
    path_prefix: str
    cluster: str
    where: str  # the key path of its cluster, for errors


@dataclass(frozen=True)
class RouterConfig:
    routes: tuple[Route, ...]

    @property
    def reported(self) -> tuple[tuple[str, str], ...]:
        """(key path, cluster) of every route, for pipeline validation against the load balancer."""
        return tuple((r.where, r.cluster) for r in self.routes)


def parse(raw: dict[str, Any], path: str) -> RouterConfig:
    mapping(raw, path, required=("filter", "routes"))
    where = key(path, "routes")
    routes = []
    for index, entry in enumerate(sequence(raw["routes"], where, max_items=MAX_ROUTES, min_items=1)):
        at = item(where, index)
        mapping(entry, at, required=("path_prefix", "cluster"))
        prefix = string(entry["path_prefix"], key(at, "path_prefix"))
        if not prefix.startswith("/"):
            raise ConfigError(key(at, "path_prefix"), "must start with /")
        routes.append(Route(prefix, string(entry["cluster"], key(at, "cluster")), key(at, "cluster")))
    return RouterConfig(tuple(routes))


class RouterFilter:
    needs_body = False

    def __init__(self, config: RouterConfig) -> None:
        self.routes = config.routes

    def on_request(self, ctx: RequestContext) -> Reject | None:
        for route in self.routes:
            if ctx.path.startswith(route.path_prefix):
                ctx.cluster = route.cluster
                break
        return None
