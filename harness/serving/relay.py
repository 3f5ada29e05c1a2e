"""The harness playing a site's operator for the serving profile: its signals endpoint.

A site's operator relays what its EPP publishes, raw, to the gateways that route to the site
(`GET /v1/site/signals` over mutual TLS). Here a relay process does it for a site of fake backends: on each
GET it scrapes the /metrics of each of the site's backends (plain HTTP), keeps only the EPP series a gateway
reads (harness.fakes.epp: running and waiting per endpoint, ready endpoints, what flow control holds, and the
older inference_pool_* names of the first three), and answers them as Prometheus text, one line per sample:

    llm_d_epp_average_running_requests{grid_site="site-b",grid_provider="site-b-pool"} 3 1796462025550

with `grid_site` the site, `grid_provider` the cluster the gateway routes that backend's candidate to, and
the time of the scrape in milliseconds. A relay serves one site and any number of (cluster, backend)
sources; a source that cannot be scraped gives no rows (every one failing answers 502). The client must
present a certificate the grid CA signed whose organization is the grid's (403 otherwise).

From synchronous harness code:

    relay = start_relay(supervisor, name="relay-site-b", site="site-b", listen="127.0.0.1:0",
                        sources=[RelaySource("site-b-pool", "127.0.0.1:18000")],
                        cert=files.cert, key=files.key, client_ca=pki.ca_path)
    relay.signals_url   # https://127.0.0.1:PORT/v1/site/signals
    relay.stop()        # also stopped with the supervisor (at exit, or with its other processes)

The certificate should name the relay's address and `server_name(site)`. The process is
`python -m harness.serving.relay --site S --listen HOST:PORT --cert F --key F --client-ca F
--source CLUSTER=HOST:PORT[/POOL] ...`; it prints `LISTENING <host>:<port>` once serving (and writes the
address to --ready-file), and SIGTERM or SIGINT stop it (exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import re
import signal
import ssl
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from harness.fakes.cli import load_mtls_context, parse_listen, write_ready_file
from harness.fakes.epp import LEGACY_NAMES, SERIES
from harness.pki import GRID_ORGANIZATION
from harness.process import ManagedProcess, Supervisor
from harness.waiting import WaitTimeout, poll_until

__all__ = ["PATH", "RELAYED", "RelayProcess", "RelaySource", "main", "relay_text", "server_name", "start_relay"]

PROG = "agn-signals-relay"
PATH = "/v1/site/signals"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Every series relayed, in the order of the answer: the EPP's names, then their older names.
RELAYED: tuple[str, ...] = (*SERIES.values(), *LEGACY_NAMES.values())
#: An operator's own conclusions about a provider (grid_provider_*): relayed too when a pool publishes them,
#: so a test can show the gateway does not take them for inputs.
CONCLUSIONS_PREFIX = "grid_provider_"
POOL_LABEL = "name"
DEFAULT_SCRAPE_TIMEOUT = 2.0
STARTUP_TIMEOUT = 20.0
_CLUSTER = re.compile(r"[\x21-\x7e]+")

log = logging.getLogger("agn.signals_relay")


def server_name(site: str) -> str:
    """The DNS name a site's signals certificate carries and gateways verify (their SNI)."""
    return f"{site}.signals"


def site_spiffe_id(site: str) -> str:
    """The SPIFFE ID a site's signals certificate also carries, as a URI name: the public grid gateway's signals
    poller writes a peer's readings only when its certificate names spiffe://grid.internal/site/<site>
    (praxis-proxy/grid, the signals polling docs); the routing guide names no peer identity."""
    return f"spiffe://grid.internal/site/{site}"


@dataclass(frozen=True)
class RelaySource:
    """One cluster of the site and the fake backend (host:port of its plain listener) whose EPP it relays;
    `pool` keeps only the series labelled name=<pool> (None: the first sample of each series)."""

    cluster: str
    backend: str
    pool: str | None = None

    def argument(self) -> str:
        return f"{self.cluster}={self.backend}" + (f"/{self.pool}" if self.pool else "")

    @classmethod
    def parse(cls, text: str) -> RelaySource:
        """CLUSTER=HOST:PORT[/POOL]; ValueError says what is wrong."""
        cluster, sep, rest = text.partition("=")
        if not sep or not _CLUSTER.fullmatch(cluster):
            raise ValueError(f"expected CLUSTER=HOST:PORT[/POOL], got {text!r}")
        backend, _, pool = rest.partition("/")
        host, port = parse_listen(backend)
        if port == 0:
            raise ValueError(f"{text!r}: the backend's port must not be 0")
        return cls(cluster, backend, pool or None)


# ------------------------------------------------------------------------------------------ the answer


def select(text: str, pool: str | None) -> dict[str, float]:
    """The relayed series of one /metrics page: the first sample of each name (of `pool` when given).

    Raises ValueError when the text is not Prometheus exposition format.
    """
    found: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                relayed = sample.name in RELAYED or sample.name.startswith(CONCLUSIONS_PREFIX)
                if not relayed or sample.name in found:
                    continue
                if pool is not None and sample.labels.get(POOL_LABEL) != pool:
                    continue
                found[sample.name] = float(sample.value)
    except (TypeError, IndexError) as exc:
        raise ValueError(f"unparsable metrics text: {exc}") from exc
    return found


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    """A sample value as Prometheus text: whole numbers without a fraction (3, as the EPP writes them)."""
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return floatToGoString(value)


def relay_text(site: str, rows: Sequence[tuple[str, Mapping[str, float]]], timestamp_ms: int) -> str:
    """The answer: for each (cluster, series) of `rows`, one line per relayed series it holds."""
    lines = []
    for cluster, values in rows:
        labels = f'grid_site="{_label(site)}",grid_provider="{_label(cluster)}"'
        names = [*(n for n in RELAYED if n in values), *sorted(n for n in values if n.startswith(CONCLUSIONS_PREFIX))]
        for name in names:
            lines.append(f"{name}{{{labels}}} {_number(values[name])} {timestamp_ms}\n")
    return "".join(lines)


# ------------------------------------------------------------------------------------------ the server


@dataclass
class Relay:
    """The relay's state: the site, its sources, and who may ask."""

    site: str
    sources: Sequence[RelaySource]
    organization: str | None = GRID_ORGANIZATION
    scrape_timeout: float = DEFAULT_SCRAPE_TIMEOUT
    requests: int = 0
    _session: aiohttp.ClientSession | None = field(default=None, repr=False)

    def build_app(self) -> web.Application:
        app = web.Application()
        app.cleanup_ctx.append(self._client)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    async def _client(self, _app: web.Application) -> AsyncIterator[None]:
        timeout = aiohttp.ClientTimeout(total=self.scrape_timeout)
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
            self._session = session
            yield
        self._session = None

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.path != PATH:
            return web.Response(status=404, text=f"no route {request.path} (the signals are at {PATH})\n")
        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405, text=f"{PATH} answers GET only\n")
        refusal = self._refusal(request)
        if refusal is not None:
            return web.Response(status=403, text=refusal + "\n")
        self.requests += 1
        results = await asyncio.gather(*(self._scrape(source) for source in self.sources))
        stamp = time.time_ns() // 1_000_000
        rows = [(source.cluster, values) for source, values in zip(self.sources, results, strict=True)
                if values is not None]
        if self.sources and not rows:
            return web.Response(status=502, text=f"no EPP of site {self.site} could be scraped\n")
        return web.Response(body=relay_text(self.site, rows, stamp).encode(), headers={"Content-Type": CONTENT_TYPE})

    def _refusal(self, request: web.Request) -> str | None:
        """Why the peer may not read the signals (None: it may); the TLS layer already checked the CA."""
        if self.organization is None:
            return None
        transport = request.transport
        peer = transport.get_extra_info("peercert") if transport is not None else None
        if not peer:
            return "a client certificate is required"
        organizations = {value for rdn in peer.get("subject", ()) for key, value in rdn if key == "organizationName"}
        if self.organization not in organizations:
            return f"client certificate organization {sorted(organizations)} is not {self.organization!r}"
        return None

    async def _scrape(self, source: RelaySource) -> dict[str, float] | None:
        assert self._session is not None
        url = f"http://{source.backend}/metrics"
        try:
            async with self._session.get(url) as response:
                text = await response.text()
                if response.status != 200:
                    raise ValueError(f"HTTP {response.status}")
            return select(text, source.pool)
        except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as exc:
            log.warning("site %s: scraping %s (cluster %s) failed: %s", self.site, url, source.cluster, exc)
            return None


async def start(relay: Relay, host: str, port: int, context: ssl.SSLContext) -> tuple[web.AppRunner, str, int]:
    """Serve `relay` on host:port (0: any free port) over `context`; returns the runner and bound address."""
    runner = web.AppRunner(relay.build_app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=context, reuse_address=True)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound_host, bound_port = runner.addresses[0][:2]
    return runner, str(bound_host), int(bound_port)


# ------------------------------------------------------------------------------------------ the process


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="A site's EPP series relayed over mutual TLS, as the "
                                     "site's operator would serve them to gateways (GET /v1/site/signals).")
    parser.add_argument("--site", required=True, help="the site's name (the grid_site label)")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT", help="address to bind; port 0 picks one")
    parser.add_argument("--cert", required=True, type=Path, metavar="PEM", help="server certificate chain")
    parser.add_argument("--key", required=True, type=Path, metavar="PEM", help="key of --cert")
    parser.add_argument("--client-ca", required=True, type=Path, metavar="PEM",
                        help="CA bundle signing the client certificates accepted")
    parser.add_argument("--client-organization", default=GRID_ORGANIZATION, metavar="O",
                        help=f"organization a client certificate must carry (default {GRID_ORGANIZATION}; "
                        "empty: any)")
    parser.add_argument("--source", action="append", required=True, metavar="CLUSTER=HOST:PORT[/POOL]",
                        help="a cluster of the site and its fake backend's plain listener (repeatable)")
    parser.add_argument("--scrape-timeout", type=float, default=DEFAULT_SCRAPE_TIMEOUT, metavar="SECONDS")
    parser.add_argument("--ready-file", type=Path, default=None, metavar="PATH",
                        help="write the bound host:port here once listening")
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


async def _serve(relay: Relay, host: str, port: int, context: ssl.SSLContext, ready_file: Path | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        runner, bound_host, bound_port = await start(relay, host, port, context)
    except OSError as exc:
        print(f"{PROG}: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    address = f"[{bound_host}]:{bound_port}" if ":" in bound_host else f"{bound_host}:{bound_port}"
    try:
        if ready_file is not None:
            write_ready_file(ready_file, address)
        print(f"LISTENING {address}", flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()
        if ready_file is not None:
            with contextlib.suppress(OSError):
                ready_file.unlink()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        host, port = parse_listen(args.listen)
    except ValueError as exc:
        parser.error(f"--listen: {exc}")
    sources: list[RelaySource] = []
    for text in args.source:
        try:
            sources.append(RelaySource.parse(text))
        except ValueError as exc:
            parser.error(f"--source: {exc}")
    clusters = [source.cluster for source in sources]
    repeated = sorted({cluster for cluster in clusters if clusters.count(cluster) > 1})
    if repeated:
        parser.error(f"--source: a cluster is relayed once; repeated: {', '.join(repeated)}")
    if not args.scrape_timeout > 0:
        parser.error("--scrape-timeout: must be a positive number of seconds")
    try:
        context = load_mtls_context(args.cert, args.key, args.client_ca)
    except ValueError as exc:  # its messages name the fake backend's options: say which of ours is meant
        message = str(exc).replace("--tls-cert", "--cert").replace("--tls-key", "--key")
        parser.error(message)
    logging.basicConfig(stream=sys.stderr, level=args.log_level,
                        format=f"%(asctime)s {PROG}[{args.site}] %(levelname)s %(message)s")
    relay = Relay(args.site, sources, args.client_organization or None, args.scrape_timeout)
    try:
        return asyncio.run(_serve(relay, host, port, context, args.ready_file))
    except KeyboardInterrupt:
        return 0


# ------------------------------------------------------------------------------------ harness side


@dataclass
class RelayProcess:
    """A running relay: `address` is host:port of its mTLS listener."""

    site: str
    sources: tuple[RelaySource, ...]
    address: str
    process: ManagedProcess
    supervisor: Supervisor

    @property
    def url(self) -> str:
        return f"https://{self.address}"

    @property
    def signals_url(self) -> str:
        return f"{self.url}{PATH}"

    def stop(self) -> int | None:
        """Stop the process (SIGTERM, then SIGKILL after a grace period); its port is free afterwards."""
        return self.supervisor.stop(self.process)


def start_relay(supervisor: Supervisor, *, name: str, site: str, listen: str, sources: Sequence[RelaySource],
                cert: Path, key: Path, client_ca: Path, prefix: Sequence[str] = (),
                organization: str | None = GRID_ORGANIZATION, timeout: float = STARTUP_TIMEOUT) -> RelayProcess:
    """Start a relay process under `supervisor` and return once it listens.

    `listen` is HOST:PORT (port 0: any free one, read back from the process); `prefix` goes before the
    command (e.g. entering a site's network namespace). Raises RuntimeError with the log tail when the
    process exits or does not listen within `timeout` seconds.
    """
    ready = supervisor.log_dir / f"{name}.{time.monotonic_ns()}.address"
    argv = [*prefix, sys.executable, "-m", "harness.serving.relay", "--site", site, "--listen", listen,
            "--cert", str(cert), "--key", str(key), "--client-ca", str(client_ca),
            "--client-organization", organization or "", "--ready-file", str(ready)]
    for source in sources:
        argv += ["--source", source.argument()]
    process = supervisor.start(name, argv)

    def probe() -> str | None:
        if not process.running():
            return f"exited with {process.returncode}"
        with contextlib.suppress(OSError):
            return ready.read_text().strip() or None
        return None

    try:
        seen = poll_until(probe, lambda text: text is not None, what=f"signals relay {name} to listen",
                          timeout=timeout)
    except WaitTimeout as exc:
        supervisor.stop(process)
        raise RuntimeError(f"{exc}\n--- relay log (tail) ---\n{process.log_tail()}") from None
    if seen is None or seen.startswith("exited"):
        supervisor.stop(process)
        raise RuntimeError(f"signals relay {name} {seen}\n--- relay log (tail) ---\n{process.log_tail()}")
    return RelayProcess(site, tuple(sources), seen, process, supervisor)


if __name__ == "__main__":
    sys.exit(main())
