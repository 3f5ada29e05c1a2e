"""What a grid gateway under test reads: its Praxis config with the `grid_site_route` filter, and the grid
serving config (the routing data a site's operator writes; the gateway finds it through GRID_SERVING_CONFIG).

The Praxis config promotes the body's model into X-Model (`json_body_field`, as the consumer configs do),
chooses a site with `grid_site_route` (its `availability` and `prefix_affinity` blocks as the test asks) and
reaches the chosen site's pool through a `load_balancer` cluster per site. The serving config names one
candidate per (model, site) and one peer per site: the site's signals relay, reached over the grid's mutual
TLS with the harness's client certificate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.gateway_config import MODEL_HEADER
from harness.pki import ClientFiles

__all__ = ["ENV", "SIGNALS_PATH", "PeerSite", "render_praxis_config", "render_serving_config", "serving_config"]

#: The environment variable naming the serving config file the gateway reads.
ENV = "GRID_SERVING_CONFIG"
#: Where a site's operator serves its signals (the path the gateway polls).
SIGNALS_PATH = "/v1/site/signals"
#: How often the gateway polls each peer, unless a test says otherwise: small, so a change a test makes
#: reaches the gateway within a fraction of a second (the value is routing data the operator writes).
DEFAULT_INTERVAL_MS = 100
#: How long the gateway keeps samples, and the freshness window selection reads (the public defaults'
#: order of magnitude; no test judges them).
WINDOW_SECS = 60
LOAD_WINDOW_MS = 2000
#: Connect and request timeouts of a poll: a relay answers in milliseconds on this machine.
POLL_TIMEOUT_MS = 2000
_CHAIN = "serving-chain"


@dataclass(frozen=True)
class PeerSite:
    """One site as the gateway sees it: its pool's cluster and endpoint, and its signals relay."""

    site: str
    cluster: str  # the load_balancer cluster of the site's pool (the relay's grid_provider)
    endpoint: str  # host:port of the pool's fake backend
    relay: str  # host:port of the site's signals relay
    server_name: str  # the name on the relay's certificate, sent as SNI and authority


def render_praxis_config(*, listen: str, admin: str, sites: Sequence[PeerSite],
                         availability: Mapping[str, Any] | None = None,
                         prefix_affinity: Mapping[str, Any] | None = None,
                         model_header: str = MODEL_HEADER) -> str:
    """The gateway's Praxis YAML: json_body_field, grid_site_route and a load_balancer cluster per site.

    `availability` and `prefix_affinity` are the filter's blocks as given (None leaves the key out, so the
    gateway's defaults apply; an empty mapping writes an empty block).
    """
    route: dict[str, Any] = {"filter": "grid_site_route", "model_header": model_header}
    if availability is not None:
        route["availability"] = dict(availability)
    if prefix_affinity is not None:
        route["prefix_affinity"] = dict(prefix_affinity)
    filters = [
        {"filter": "json_body_field", "field": "model", "header": model_header},
        route,
        {"filter": "load_balancer", "clusters": [{"name": s.cluster, "endpoints": [s.endpoint]} for s in sites]},
    ]
    config = {
        "listeners": [{"name": "grid", "address": listen, "filter_chains": [_CHAIN]}],
        "filter_chains": [{"name": _CHAIN, "filters": filters}],
        "admin": {"address": admin},
        "shutdown_timeout_secs": 5,
        "insecure_options": {"allow_private_endpoints": True},
    }
    return yaml.safe_dump(config, sort_keys=False)


def serving_config(*, local_site: str, models: Mapping[str, Sequence[str]], sites: Sequence[PeerSite],
                   ca_path: Path, client: ClientFiles, interval_ms: int | Mapping[str, int] = DEFAULT_INTERVAL_MS,
                   ) -> dict[str, Any]:
    """The grid serving config: a candidate for each model at each of its sites (`models` maps a model to
    its sites) and a peer for every site; `interval_ms` is one poll interval or one per site."""
    by_site = {s.site: s for s in sites}
    unknown = sorted({name for names in models.values() for name in names} - set(by_site))
    if unknown:
        raise ValueError(f"models name sites the gateway has no peer for: {unknown}")
    candidates = [{"kind": "inference_model", "name": model, "site": site, "cluster": by_site[site].cluster,
                   "fresh": True}
                  for model, names in models.items() for site in names]
    peers = [{"site": s.site, "addr": s.relay, "server_name": s.server_name, "authority": s.server_name,
              "path": SIGNALS_PATH,
              "interval_ms": int(interval_ms if isinstance(interval_ms, int) else interval_ms[s.site]),
              "connect_timeout_ms": POLL_TIMEOUT_MS, "request_timeout_ms": POLL_TIMEOUT_MS,
              "grid_ca_path": str(ca_path), "client_cert_path": str(client.cert), "client_key_path": str(client.key)}
             for s in sites]
    return {"local_site": local_site, "window_secs": WINDOW_SECS, "load_window_ms": LOAD_WINDOW_MS,
            "candidates": candidates, "peers": peers}


def render_serving_config(config: Mapping[str, Any]) -> str:
    return json.dumps(config, indent=1) + "\n"
