"""The serving profile's grid: sites whose pools are fake backends with an EPP load model, a signals relay
per site playing its operator, and grid gateways started per test.

A `ServingGrid` wraps a started `harness.grid.Grid` of a serving topology (clusters/serving-*.yaml). It
starts one relay per site (harness.serving.relay) over the run's PKI, sets each site's load model
(`configure`, `publish`), and starts gateways through the backend as every gateway is started, with
GRID_SERVING_CONFIG naming the serving config it renders. A `ServingGateway` sends requests with prompts of
the test's choosing, tells which site served each, and reads the gateway's routing metrics.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.backends.local import ProviderProcess
from harness.fakes.epp import READY, WAITING
from harness.fakes.server import default_metrics
from harness.grid import Gateway, Grid, Reply, Site
from harness.serving import config as serving_config
from harness.serving.config import PeerSite
from harness.serving.load import Batch, LoadRun, PromptFn, Shot, distinct_prompt, send_batch
from harness.serving.metrics import RouteMetrics, parse_route_metrics
from harness.serving.relay import (
    CONCLUSIONS_PREFIX,
    RelayProcess,
    RelaySource,
    select,
    server_name,
    site_spiffe_id,
    start_relay,
)
from harness.timeline import current, record_action
from harness.timeouts import timeouts
from harness.waiting import WaitTimeout, poll_until

__all__ = ["QUIET", "EppSetting", "ServingGateway", "ServingGrid"]

#: The port of a site's signals relay (on an address of the site's own block).
SIGNALS_PORT = 19443
#: Requests of a batch kept on the timeline; the rest are counted in the verdict, not drawn.
TIMELINE_REQUESTS = 1500


@dataclass(frozen=True)
class EppSetting:
    """A site's load model (the fake backend's `epp` config): `endpoints` ready endpoints running
    `concurrency` requests each for `service_ms`; `publish` values published instead of the measured ones
    (running, waiting, ready, held; None: all measured)."""

    endpoints: int = 1
    concurrency: int = 64
    service_ms: float = 0.0
    publish: Mapping[str, float] | None = None

    def as_config(self) -> dict[str, Any]:
        return {"endpoints": self.endpoints, "concurrency": self.concurrency, "service_ms": self.service_ms,
                "set": None if self.publish is None else dict(self.publish)}

    @property
    def plateau(self) -> int:
        """The most requests the pool runs at once (endpoints * concurrency)."""
        return self.endpoints * self.concurrency


#: The quiet pool every test starts from: one endpoint, room for 64 requests, answering at once, every
#: series measured (running and waiting 0 while nothing is sent).
QUIET = EppSetting()


@dataclass(frozen=True)
class ServingSite:
    """One site: its pool's fake backend (its cluster is the backend's name) and its signals relay."""

    name: str
    site: Site
    backend: ProviderProcess
    relay: RelayProcess

    @property
    def cluster(self) -> str:
        return self.backend.spec.cluster

    @property
    def peer(self) -> PeerSite:
        return PeerSite(self.name, self.cluster, self.backend.address, self.relay.address, server_name(self.name))


class ServingGrid:
    """A serving topology's sites with their relays; gateways are started per test (`start_gateway`)."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self.sites: dict[str, ServingSite] = {}
        self._epp: dict[str, EppSetting] = {}
        self._gateways: list[ServingGateway] = []
        backend: Any = grid.backend  # the local backend: its address plan and supervisor start the relays
        try:
            for name, site in grid.sites.items():
                provider = next(iter(site.providers.values()))
                host, port = backend.plan.allocate(site.index, SIGNALS_PORT)
                files = backend.pki.server(f"relay-{name}", host, server_name(name), uris=(site_spiffe_id(name),))
                relay = start_relay(backend.supervisor, name=f"relay-{name}", site=name, listen=f"{host}:{port}",
                                    sources=[RelaySource(provider.spec.cluster, provider.address, provider.spec.name)],
                                    cert=files.cert, key=files.key, client_ca=backend.pki.ca_path)
                self.sites[name] = ServingSite(name, site, provider, relay)
            self.reset()
        except BaseException:
            self.close()
            raise

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.sites)

    @property
    def local_site(self) -> str:
        """The site the gateway under test runs at (the topology's first)."""
        return self.names[0]

    def cluster(self, site: str) -> str:
        return self.sites[site].cluster

    # -------------------------------------------------------------------------------------- load model

    def configure(self, site: str, setting: EppSetting) -> None:
        """Give `site`'s pool this load model (the fake backend's `epp` config), at once."""
        self.sites[site].site._admin(self.sites[site].backend.spec.name, {"epp": setting.as_config()})
        self._epp[site] = setting
        if current() is not None:
            published = "" if setting.publish is None else f", publishing {dict(setting.publish)}"
            record_action(f"{site}'s pool: {setting.endpoints} endpoint(s) x {setting.concurrency}, "
                          f"{setting.service_ms:g} ms per request{published}", site=site)

    def publish(self, site: str, **values: float) -> None:
        """Publish these EPP values for `site` (running, waiting, ready, held) instead of the measured ones;
        no values publishes what the pool measures again. The rest of its load model stays."""
        setting = self._epp.get(site, QUIET)
        self.configure(site, EppSetting(setting.endpoints, setting.concurrency, setting.service_ms,
                                        dict(values) or None))

    def reset(self) -> None:
        """Every pool quiet (QUIET), its requests neither held nor delayed; every gateway stopped."""
        self.stop_gateways()
        for name, site in self.sites.items():
            site.site._admin(site.backend.spec.name, {"epp": QUIET.as_config(), "hold": False, "latency_ms": 0,
                                                      "error_status": None,
                                                      "metrics": _default_metrics(site.backend.spec.name)})
            self._epp[name] = QUIET

    def conclude(self, site: str, **values: float) -> None:
        """Make `site`'s pool publish operator-style conclusions (grid_provider_<name>), which its relay
        passes on beside the EPP series; none restores the pool's default samples."""
        pool = self.sites[site].backend.spec.name
        samples = _default_metrics(pool) + [{"name": f"{CONCLUSIONS_PREFIX}{name}", "labels": {"name": pool},
                                             "value": value} for name, value in values.items()]
        self.sites[site].site._admin(pool, {"metrics": samples})
        if current() is not None:
            record_action(f"{site}'s relay also carries {CONCLUSIONS_PREFIX}* {values}", site=site)

    def hold(self, site: str, held: bool) -> None:
        """Hold `site`'s model API requests at its fake backend (after their slot) until released."""
        self.sites[site].site.set_backend_hold(self.sites[site].backend.spec.name, held)

    def backend_url(self, site: str) -> str:
        """The plain URL of `site`'s pool (for load sent straight to it, past any gateway)."""
        return self.sites[site].backend.url

    def backend_requests(self, site: str) -> int:
        return self.sites[site].site.backend_requests(self.sites[site].backend.spec.name)

    def pool_series(self, site: str) -> dict[str, float]:
        """What `site`'s pool publishes now (its EPP series by name), read from its /metrics."""
        resp = self.sites[site].site._admin_http().get(f"{self.backend_url(site)}/metrics")
        return select(resp.text, self.sites[site].backend.spec.name)

    def queued(self, site: str) -> float:
        """Requests waiting at `site`'s pool now (waiting per endpoint times ready endpoints)."""
        series = self.pool_series(site)
        return series.get(WAITING, 0.0) * series.get(READY, 0.0)

    # ---------------------------------------------------------------------------------------- gateways

    def start_gateway(self, models: str | Mapping[str, Sequence[str]], *, sites: Sequence[str] | None = None,
                      availability: Mapping[str, Any] | None = None,
                      prefix_affinity: Mapping[str, Any] | None = None,
                      interval_ms: int | Mapping[str, int] = serving_config.DEFAULT_INTERVAL_MS,
                      label: str = "serving") -> ServingGateway:
        """Start a grid gateway at the local site choosing among `sites` (default: all).

        `models` is one model served at every one of `sites`, or a mapping of model to the sites serving
        it. `availability` and `prefix_affinity` are the grid_site_route blocks (None: left out).
        """
        chosen = tuple(sites or self.names)
        by_model = {models: chosen} if isinstance(models, str) else {m: tuple(s) for m, s in models.items()}
        peers = [self.sites[name].peer for name in chosen]
        local = self.sites[self.local_site].site
        backend = self.grid.backend
        listen, admin, workdir = backend.allocate_gateway(local.index)
        client = backend.pki.client(f"{workdir.name}-serving-client")
        client = _owned_copies(client, workdir, backend.gateway_user())
        document = serving_config.serving_config(local_site=self.local_site, models=by_model, sites=peers,
                                                 ca_path=backend.pki.ca_path, client=client, interval_ms=interval_ms)
        path = workdir / "serving.json"
        path.write_text(serving_config.render_serving_config(document))
        text = serving_config.render_praxis_config(listen=listen, admin=admin, sites=peers,
                                                   availability=availability, prefix_affinity=prefix_affinity)
        overlay_dir = workdir / "overlay"  # unused by a grid gateway; the backend gives every gateway one
        overlay_dir.mkdir(parents=True, exist_ok=True)
        proc = backend.start_gateway(f"gateway-{label}-{workdir.name}", listen, admin, workdir, text, overlay_dir,
                                     env={serving_config.ENV: str(path)})
        gateway = Gateway(local, "serving", proc)
        self.grid.track(gateway)
        serving = ServingGateway(self, gateway, chosen, by_model, document, availability)
        self._gateways.append(serving)
        if current() is not None:
            record_action(f"gateway {proc.name} started: sites {', '.join(chosen)}, availability "
                          f"{json.dumps(availability)}", gateway=proc.name)
        return serving

    def stop_gateway(self, gateway: ServingGateway) -> None:
        if gateway in self._gateways:
            self._gateways.remove(gateway)
            self.sites[self.local_site].site.stop_gateway(gateway.gateway)

    def stop_gateways(self) -> None:
        for gateway in list(self._gateways):
            self.stop_gateway(gateway)

    def close(self) -> None:
        self.stop_gateways()
        for site in self.sites.values():
            site.relay.stop()


def _owned_copies(client: Any, workdir: Path, user: Any) -> Any:
    """The client certificate as the gateway reads it: copies in its work directory, owned by the user it runs
    as when that is another user (the serving config names them, not the Praxis config the backend reads)."""
    if user is None:
        return client
    from dataclasses import replace

    cert, key = workdir / "serving-client.crt", workdir / "serving-client.key"
    shutil.copyfile(client.cert, cert)
    shutil.copyfile(client.key, key)
    for path in (cert, key):
        os.chown(path, user.uid, user.gid)
    key.chmod(0o600)
    return replace(client, cert=cert, key=key)


class ServingGateway:
    """A running grid gateway under test: requests with chosen prompts, who served them, its metrics."""

    def __init__(self, grid: ServingGrid, gateway: Gateway, sites: tuple[str, ...],
                 models: Mapping[str, Sequence[str]], document: Mapping[str, Any],
                 availability: Mapping[str, Any] | None) -> None:
        self.grid = grid
        self.gateway = gateway
        self.sites = sites
        self.models = dict(models)
        self.document = document
        self.availability = availability
        self._batches = 0

    @property
    def model(self) -> str:
        """The first model it serves (most tests serve one)."""
        return next(iter(self.models))

    @property
    def url(self) -> str:
        return self.gateway.url

    @property
    def name(self) -> str:
        return self.gateway.name

    def interval_s(self, site: str | None = None) -> float:
        """The poll interval of `site`'s peer (the longest of all when None), in seconds."""
        peers = [p for p in self.document["peers"] if site is None or p["site"] == site]
        return max(int(p["interval_ms"]) for p in peers) / 1000.0

    # ---------------------------------------------------------------------------------------- requests

    def request(self, model: str | None = None, *, prompt: str | None = None, body: Any = None,
                omit_model: bool = False) -> Reply:
        """One chat request for `model` (default: the gateway's first) with `prompt` (default: a fresh one)."""
        if body is None:
            body = {"messages": [{"role": "user", "content": prompt or f"{time.monotonic_ns()} hello"}]}
            if not omit_model:
                body["model"] = model or self.model
        reply = self.gateway.request(model, body=body)
        return reply

    def send(self, n: int, *, model: str | None = None, concurrency: int = 16, prompt: PromptFn | None = None,
             record: bool = True) -> Batch:
        """`n` requests (distinct prompts unless `prompt` says otherwise); every one answered on return. With
        `record` they go on the running test's timeline: each as it is answered, or for a batch larger than
        TIMELINE_REQUESTS an even sample of them once all are."""
        self._batches += 1
        prompts = prompt or distinct_prompt(f"{self.name}/{self._batches}")
        live = record and n <= TIMELINE_REQUESTS
        batch = send_batch(self.url, model or self.model, n, prompt=prompts, concurrency=concurrency,
                           on_shot=record_shot if live else None)
        if record and not live:
            record_batch(batch)
        return batch

    def load(self, concurrency: int, *, model: str | None = None, prompt: PromptFn | None = None,
             record: bool = True) -> LoadRun:
        """A closed loop of `concurrency` clients through this gateway until stopped (distinct prompts); each
        answer goes on the running test's timeline as it comes, unless `record` is False."""
        self._batches += 1
        prompts = prompt or distinct_prompt(f"{self.name}/load/{self._batches}")
        return LoadRun(self.url, model or self.model, prompt=prompts, concurrency=concurrency,
                       on_shot=record_shot if record else None)

    # ----------------------------------------------------------------------------------------- metrics

    def metrics(self) -> RouteMetrics:
        return parse_route_metrics(self.gateway.metrics_text())

    def wait_until(self, done: Callable[[RouteMetrics], bool], *, what: str, timeout: float | None = None
                   ) -> RouteMetrics:
        """Poll the gateway's metrics until `done`; a timeout says what they last showed and the log tail."""
        try:
            return poll_until(self.metrics, done, what=what, timeout=timeout or timeouts().serving_signal,
                              describe=lambda m: m.describe(self.sites))
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc}\n--- gateway log (tail) ---\n{self.gateway.log_tail(30)}") from None

    def wait_measured(self, sites: Sequence[str] | None = None) -> RouteMetrics:
        """Wait until the gateway shows a ceiling and a saturation for each of `sites` (default: all)."""
        names = tuple(sites or self.sites)
        return self.wait_until(lambda m: all(m.measured(s) for s in names),
                               what=f"the gateway to measure {', '.join(names)} (a ceiling and a rho for each)")

    def wait_rho(self, site: str, done: Callable[[float], bool], *, what: str, timeout: float | None = None
                 ) -> RouteMetrics:
        """Wait until `site`'s rho satisfies `done` (NaN and absent never do)."""
        return self.wait_until(lambda m: _finite(m.rho.get(site)) and done(m.rho[site]),
                               what=f"{site}'s rho {what}", timeout=timeout)

    def wait_ceiling(self, site: str, done: Callable[[float], bool], *, what: str, timeout: float | None = None
                     ) -> RouteMetrics:
        return self.wait_until(lambda m: _finite(m.ceiling.get(site)) and done(m.ceiling[site]),
                               what=f"{site}'s ceiling {what}", timeout=timeout)

    def log_tail(self, lines: int = 30) -> str:
        return self.gateway.log_tail(lines)


def _finite(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def record_shot(shot: Shot) -> None:
    """Put one answered request on the running test's timeline (the site that served it, or none)."""
    timeline = current()
    if timeline is not None:
        timeline.request(shot.site if shot.served else None, shot.status)


def record_batch(batch: Batch, **where: Any) -> None:
    """Put a batch's requests on the running test's timeline (at most TIMELINE_REQUESTS of them, evenly)."""
    timeline = current()
    if timeline is None or not batch.shots:
        return
    stride = max(1, math.ceil(len(batch.shots) / TIMELINE_REQUESTS))
    for shot in batch.shots[::stride]:
        timeline.request(shot.site if shot.served else None, shot.status, **where)


def _default_metrics(pool: str) -> list[dict[str, Any]]:
    """A pool's default samples, as its /admin/config takes them."""
    return [sample.to_json() for sample in default_metrics(pool)]
