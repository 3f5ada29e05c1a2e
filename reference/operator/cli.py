"""`agn-operator`: the reference grid operator.

`agn-operator render --manifests DIR [--metrics FILE] [--gateway NAME] [--configmap]` renders overlays
offline to stdout (golden overlays without a cluster). `agn-operator run --manifests DIR --out DIR [--once]`
runs the reconcile loop with the `dir` source and sink, scraping each provider's configured metrics;
`agn-operator run --kubernetes [--namespace NS] [--kubeconfig PATH] [--context NAME]` runs the same loop
against a cluster (the grid CRDs watched, ConfigMaps applied, status patched; in-cluster configuration
unless a kubeconfig or context is given). Bad input exits 2 with the offending file, option or key named.

`--mesh-site NAME --mesh-bind HOST:PORT [--mesh-advertise HOST:PORT] [--mesh-seeds A:P,B:P]
[--mesh-gateway HOST:PORT]` makes the operator a member of the site mesh (either mode): it gossips its
providers to the other sites' operators over SWIM (`--swim-*` tune the timing), learns theirs, keeps a
GridSite per discovered site that becomes Active only once the site's gateway certificate matches the pins
an admin put in a GridSite of that name, and renders eligible remote providers into the overlay,
reconciling promptly whenever the mesh changes. Peers are told `--mesh-advertise` as this member's address
(default: the bound one; required when binding a wildcard address, e.g. the node address and NodePort in
front of a pod). In dir mode the discovered GridSites (`<name>.gridsite.yaml`) and `mesh.state.yaml` are
written to --out; in --kubernetes mode the same YAML goes to the ConfigMap `agn-mesh-state` in
--namespace (default agn-system) and the GridSites are server-side applied (name, labels and
spec.gridNetworkRef only, so an admin's trust pins on the same object stay) with their status patched,
and deleted when their site or network goes away. SIGTERM leaves the mesh gracefully.

`--signals-address HOST:PORT --signals-cert PEM --signals-key PEM --signals-client-ca PEM [--signals-site NAME]`
serves GET /v1/site/signals over mutual TLS: the EPP series of every provider whose metrics it scrapes,
relayed raw with grid_site (the mesh site, or --signals-site) and grid_provider (the provider's cluster)
labels (reference.operator.signals).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import logging
import math
import signal
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from reference.operator.core.model import Clock, FixedClock, MetricSample, ResourceError, SystemClock
from reference.operator.core.render import Rendered, render
from reference.operator.loop import DEFAULT_WATCH_STEP_MS, Operator
from reference.operator.mesh.codec import Address
from reference.operator.mesh.runtime import MeshRuntime, MeshSettings
from reference.operator.mesh.sites import client_context, split_address
from reference.operator.mesh.swim import SwimConfig
from reference.operator.scrape import SIGNALS
from reference.operator.sources import DirSource, Loaded

if TYPE_CHECKING:  # the signals endpoint's server (aiohttp) is imported only by an operator that serves it
    from reference.operator.signals import SignalsSettings

PROG = "agn-operator"
log = logging.getLogger(PROG)


class InputError(ValueError):
    """Bad user input; the message names the file and key."""


def load_metrics(path: Path, providers: set[str]) -> list[MetricSample]:
    """A YAML/JSON map provider -> {queueDepth, kvCacheUtilization, healthy} as one sample per provider."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read metrics file: {exc}") from exc
    if doc is None:
        return []
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected a map of provider name to signal values")
    samples = []
    for index, (name, values) in enumerate(sorted(doc.items(), key=lambda kv: str(kv[0]))):
        if name not in providers:
            raise InputError(f"{path}: {name}: no InferenceProvider of that name in the manifests")
        if not isinstance(values, dict):
            raise InputError(f"{path}: {name}: expected a map of signal name to value")
        fields: dict[str, Any] = {}
        for signal_name, value in values.items():
            key = f"{name}.{signal_name}"
            if signal_name not in SIGNALS:
                raise InputError(f"{path}: {key}: unknown signal (known: {', '.join(SIGNALS)})")
            if signal_name == "healthy":
                if not isinstance(value, bool):
                    raise InputError(f"{path}: {key}: expected true or false")
                fields["healthy"] = value
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(f"{path}: {key}: expected a number, got {value!r}")
            if not math.isfinite(float(value)):
                raise InputError(f"{path}: {key}: must be a finite number")
            fields["queue_depth" if signal_name == "queueDepth" else "kv_cache_utilization"] = float(value)
        samples.append(MetricSample(provider=str(name), revision=index + 1, **fields))
    return samples


def load_source(manifests: Path) -> Loaded:
    try:
        return DirSource(manifests).load()
    except FileNotFoundError as exc:
        raise InputError(str(exc)) from exc


def _render_command(args: argparse.Namespace) -> int:
    loaded = load_source(args.manifests)
    if loaded.issues:
        raise InputError("invalid resources:\n  " + "\n  ".join(str(issue) for issue in loaded.issues))
    providers = {p.name for p in loaded.resources.providers}
    samples = load_metrics(args.metrics, providers) if args.metrics else []
    clock: Clock = SystemClock()
    if args.rendered_at:
        try:
            wall = datetime.fromisoformat(args.rendered_at.replace("Z", "+00:00"))
        except ValueError as exc:
            raise InputError(f"--rendered-at: {args.rendered_at!r} is not an RFC 3339 timestamp") from exc
        if wall.tzinfo is None:
            raise InputError(f"--rendered-at: {args.rendered_at!r} needs a time zone offset")
        clock = FixedClock(wall_time=wall)
    try:
        rendered = render(loaded.resources, samples, [], clock)
    except ResourceError as exc:
        raise InputError(f"{args.manifests}: {exc}") from exc
    if args.gateway:
        known = sorted({r.gateway for r in rendered})
        rendered = [r for r in rendered if r.gateway == args.gateway]
        if not rendered:
            raise InputError(f"--gateway: no gateway reference named {args.gateway!r} (known: {', '.join(known)})")
    if not rendered:
        raise InputError(f"{args.manifests}: no GridNetwork with gatewayRefs to render")
    sys.stdout.write(_format(rendered, args.configmap))
    return 0


def _format(rendered: list[Rendered], configmap: bool) -> str:
    if configmap:
        return yaml.safe_dump_all([r.configmap for r in rendered], sort_keys=True)
    documents: Any = rendered[0].envelope if len(rendered) == 1 else [r.envelope for r in rendered]
    return json.dumps(documents, sort_keys=True, indent=2, ensure_ascii=False) + "\n"




async def _run_async(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    context = ssl.create_default_context(cafile=str(args.metrics_ca)) if args.metrics_ca else None
    mesh = await _start_mesh(args.mesh)
    try:
        if not args.kubernetes:
            operator = Operator.for_directories(args.manifests, args.out, SystemClock(), args.poll, context, mesh,
                                                args.watch_step_ms)
            async with _signals(args.signals, operator, context):
                return await operator.run(stop, once=args.once)
        return await _run_kubernetes(args, stop, context, mesh)
    finally:
        if mesh is not None:
            await mesh.close(leave=True)
            log.info("mesh: left as %s", mesh.site)


async def _run_kubernetes(
    args: argparse.Namespace, stop: asyncio.Event, context: ssl.SSLContext | None, mesh: MeshRuntime | None
) -> int:
    # the kubernetes client loads slowly: only here
    from reference.operator.kube import MESH_STATE_NAMESPACE, KubeSink, KubeSource

    source = KubeSource(args.api, args.namespace)
    sites = source.watches.get("GridSite")
    sink = KubeSink(
        args.api,
        network_namespace=source.network_namespace,
        mesh_namespace=args.namespace or MESH_STATE_NAMESPACE,
        gridsites=sites.snapshot if sites is not None else None,
    )
    operator = Operator(source, sink, SystemClock(), args.poll, context, mesh)
    source.start()
    try:
        async with _signals(args.signals, operator, context):
            return await operator.run(stop, once=args.once)
    finally:
        await asyncio.to_thread(source.stop)
        args.api.close()


@asynccontextmanager
async def _signals(settings: SignalsSettings | None, operator: Operator,
                   metrics_context: ssl.SSLContext | None) -> AsyncIterator[None]:
    """The signals endpoint, served while the loop runs (nothing without --signals-address)."""
    if settings is None:
        yield
        return
    from reference.operator.signals import SignalsServer

    server = SignalsServer(settings.site, operator.snapshot, metrics_context)
    try:
        host, port = await server.start(settings.host, settings.port, settings.context)
    except OSError as exc:
        where = _show((settings.host, settings.port))
        raise InputError(f"--signals-address: cannot bind {where}: {exc.strerror or exc}") from exc
    log.info("signals: site %s served on https://%s/v1/site/signals", settings.site, _show((host, port)))
    try:
        yield
    finally:
        await server.close()


async def _start_mesh(settings: MeshSettings | None) -> MeshRuntime | None:
    if settings is None:
        return None
    mesh = MeshRuntime(settings)
    try:
        await mesh.start()
    except OSError as exc:
        raise InputError(f"--mesh-bind: cannot bind {_show(settings.bind)}: {exc.strerror or exc}") from exc
    bound, announced = _show(mesh.bound), _show(mesh.address)
    log.info("mesh: site %s listening on udp %s, announced as %s", settings.site, bound, announced)
    return mesh


# --- mesh options -------------------------------------------------------------------------------

MESH_FLAGS = (
    ("--mesh-bind", "mesh_bind"),
    ("--mesh-advertise", "mesh_advertise"),
    ("--mesh-seeds", "mesh_seeds"),
    ("--mesh-gateway", "mesh_gateway"),
    ("--mesh-routing-cluster", "mesh_routing_cluster"),
    ("--mesh-client-cert", "mesh_client_cert"),
    ("--mesh-client-key", "mesh_client_key"),
    ("--swim-probe-interval", "swim_probe_interval"),
    ("--swim-probe-timeout", "swim_probe_timeout"),
    ("--swim-suspicion-mult", "swim_suspicion_mult"),
)


def _show(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _mesh_name(flag: str, value: str) -> str:
    if not value or len(value) > 253 or not value.isprintable() or any(c.isspace() for c in value):
        raise InputError(f"{flag}: {value!r} must be 1..253 printable characters without spaces")
    return value


def _host_port(flag: str, text: str, *, allow_zero: bool = False) -> tuple[str, int]:
    """HOST:PORT or [V6]:PORT; port 0 (any free port) only where `allow_zero`."""
    head, _, port_text = text.strip().rpartition(":")
    any_port = allow_zero and port_text == "0"
    try:
        host, port = split_address(f"{head}:1" if any_port else text)
    except ValueError as exc:
        raise InputError(f"{flag}: {exc}") from exc
    return host, 0 if any_port else port


def _resolve(flag: str, host: str, port: int, family: int) -> Address:
    """An IP address for a seed, so the membership layer compares addresses, not names."""
    try:
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM)
    except (OSError, UnicodeError) as exc:
        raise InputError(f"{flag}: cannot resolve {host!r}: {exc}") from exc
    return str(infos[0][4][0]), port


def _wildcard(host: str) -> bool:
    """An unspecified address (0.0.0.0, ::): fine to bind, meaningless to tell a peer."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _advertise(args: argparse.Namespace, bind: Address, family: int) -> Address | None:
    """The --mesh-advertise address, resolved; required when the bind host is a wildcard."""
    if args.mesh_advertise is None:
        if _wildcard(bind[0]):
            raise InputError(
                f"--mesh-advertise: required when --mesh-bind is a wildcard address ({_show(bind)}): "
                "give the HOST:PORT peers reach this member at"
            )
        return None
    host, port = _host_port("--mesh-advertise", args.mesh_advertise)
    if _wildcard(host):
        raise InputError(f"--mesh-advertise: {args.mesh_advertise!r} is a wildcard address; peers cannot send to it")
    return _resolve("--mesh-advertise", host, port, family)


def _positive(flag: str, text: str, kind: type[float] | type[int] = float) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise InputError(f"{flag}: {text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{flag}: must be a positive {'integer' if kind is int else 'number'}, got {text!r}")
    return value


def _mesh_settings(args: argparse.Namespace) -> MeshSettings | None:
    """The --mesh-*/--swim-* options checked; None without --mesh-site. InputError names the bad flag."""
    if args.mesh_site is None:
        for flag, attribute in MESH_FLAGS:
            if getattr(args, attribute) is not None:
                raise InputError(f"{flag}: needs --mesh-site")
        return None
    site = _mesh_name("--mesh-site", args.mesh_site)
    if args.mesh_bind is None:
        raise InputError("--mesh-bind: required with --mesh-site")
    bind = _host_port("--mesh-bind", args.mesh_bind, allow_zero=True)
    family = socket.AF_INET6 if ":" in bind[0] else socket.AF_INET
    advertise = _advertise(args, bind, family)
    seeds = tuple(
        _resolve("--mesh-seeds", *_host_port("--mesh-seeds", item), family)
        for item in (args.mesh_seeds or "").split(",")
        if item.strip()
    )
    gateway = None
    if args.mesh_gateway is not None:
        _host_port("--mesh-gateway", args.mesh_gateway)
        gateway = args.mesh_gateway.strip()
    cluster = args.mesh_routing_cluster
    if cluster is not None:
        cluster = _mesh_name("--mesh-routing-cluster", cluster)
    if (args.mesh_client_cert is None) != (args.mesh_client_key is None):
        flag = "--mesh-client-key" if args.mesh_client_key is None else "--mesh-client-cert"
        raise InputError(f"{flag}: --mesh-client-cert and --mesh-client-key go together")
    if args.mesh_client_cert is not None:
        try:
            client_context(certfile=str(args.mesh_client_cert), keyfile=str(args.mesh_client_key))
        except (OSError, ssl.SSLError) as exc:
            raise InputError(f"--mesh-client-cert: {args.mesh_client_cert}: not a usable PEM pair ({exc})") from exc
    interval = _positive("--swim-probe-interval", args.swim_probe_interval or "1.0")
    timeout = _positive("--swim-probe-timeout", args.swim_probe_timeout or "0.2")
    if timeout >= interval:
        raise InputError(f"--swim-probe-timeout: {timeout:g}s must be shorter than --swim-probe-interval {interval:g}s")
    mult = int(_positive("--swim-suspicion-mult", args.swim_suspicion_mult or "3", int))
    try:
        swim = SwimConfig(probe_interval=interval, probe_timeout=timeout, suspicion_mult=mult)
    except ValueError as exc:
        raise InputError(f"--swim-probe-interval: {exc}") from exc
    return MeshSettings(
        site=site,
        bind=bind,
        advertise=advertise,
        seeds=seeds,
        gateway=gateway,
        routing_cluster=cluster,
        client_cert=str(args.mesh_client_cert) if args.mesh_client_cert else None,
        client_key=str(args.mesh_client_key) if args.mesh_client_key else None,
        swim=swim,
    )


SIGNALS_FLAGS = (
    ("--signals-cert", "signals_cert"),
    ("--signals-key", "signals_key"),
    ("--signals-client-ca", "signals_client_ca"),
    ("--signals-site", "signals_site"),
)


def _signals_settings(args: argparse.Namespace) -> SignalsSettings | None:
    """The --signals-* options checked; None without --signals-address. InputError names the bad flag."""
    if args.signals_address is None:
        for flag, attribute in SIGNALS_FLAGS:
            if getattr(args, attribute) is not None:
                raise InputError(f"{flag}: needs --signals-address")
        return None
    host, port = _host_port("--signals-address", args.signals_address, allow_zero=True)
    for flag, attribute in SIGNALS_FLAGS[:3]:
        if getattr(args, attribute) is None:
            raise InputError(f"{flag}: required with --signals-address (the endpoint is served over mutual TLS)")
    site = args.signals_site or args.mesh_site
    if site is None:
        raise InputError("--signals-site: required with --signals-address when the operator is in no mesh "
                         "(--mesh-site names the site otherwise)")
    if args.signals_site is not None and args.mesh_site is not None and args.signals_site != args.mesh_site:
        raise InputError(f"--signals-site: {args.signals_site!r} is not the mesh site {args.mesh_site!r}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(args.signals_cert), str(args.signals_key))
    except (OSError, ssl.SSLError) as exc:
        raise InputError(f"--signals-cert: {args.signals_cert} / --signals-key {args.signals_key}: not a usable PEM "
                         f"certificate and key ({exc})") from exc
    try:
        context.load_verify_locations(cafile=str(args.signals_client_ca))
    except (OSError, ssl.SSLError) as exc:
        raise InputError(f"--signals-client-ca: {args.signals_client_ca}: not a readable PEM CA bundle ({exc})") \
            from exc
    context.verify_mode = ssl.CERT_REQUIRED
    from reference.operator.signals import SignalsSettings

    return SignalsSettings(host, port, _mesh_name("--signals-site", site), context)


def _check_mode(args: argparse.Namespace) -> None:
    """--manifests/--out (files) or --kubernetes (a cluster), never both; the cluster options need the latter."""
    if args.kubernetes:
        from reference.kube_client import KubeConfigError, api_client, check_namespace

        given = [flag for flag, value in (("--manifests", args.manifests), ("--out", args.out)) if value is not None]
        if given:
            raise InputError(f"{'/'.join(given)}: cannot be combined with --kubernetes (the cluster is both)")
        if args.namespace is not None:
            try:
                check_namespace(args.namespace)
            except ValueError as exc:
                raise InputError(f"--namespace: {exc}") from exc
        if args.kubeconfig is not None and not args.kubeconfig.is_file():
            raise InputError(f"--kubeconfig: {args.kubeconfig}: file not found")
        try:
            args.api = api_client(args.kubeconfig, args.context)
        except KubeConfigError as exc:
            raise InputError(f"--kubernetes: {exc}") from exc
        return
    cluster = [
        f
        for f, v in (("--namespace", args.namespace), ("--kubeconfig", args.kubeconfig), ("--context", args.context))
        if v is not None
    ]
    if cluster:
        raise InputError(f"{'/'.join(cluster)}: only meaningful with --kubernetes")
    for flag, value in (("--manifests", args.manifests), ("--out", args.out)):
        if value is None:
            raise InputError(f"{flag}: required (or --kubernetes to reconcile a cluster)")
    if not args.manifests.is_dir():
        raise InputError(f"--manifests: {args.manifests}: directory not found")


def _run_command(args: argparse.Namespace) -> int:
    if args.poll <= 0:
        raise InputError("--poll: must be a positive number of seconds")
    if not 0 <= args.watch_step_ms <= 1000:
        raise InputError("--watch-step-ms: must be 0..1000")
    if args.metrics_ca is not None:
        try:
            ssl.create_default_context(cafile=str(args.metrics_ca))
        except (OSError, ssl.SSLError) as exc:
            raise InputError(f"--metrics-ca: {args.metrics_ca}: not a readable PEM CA bundle ({exc})") from exc
    args.mesh = _mesh_settings(args)
    args.signals = _signals_settings(args)
    _check_mode(args)
    logging.basicConfig(stream=sys.stderr, level=args.log_level, format=f"%(asctime)s {PROG} %(levelname)s %(message)s")
    return asyncio.run(_run_async(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Reference AI Grid Network operator.")
    commands = parser.add_subparsers(dest="command", required=True)
    offline = commands.add_parser("render", help="render overlays offline to stdout")
    offline.add_argument("--manifests", type=Path, required=True, help="directory of grid resource YAML files")
    offline.add_argument("--metrics", type=Path, help="YAML/JSON map provider -> {signal: value}")
    offline.add_argument("--gateway", help="only this gateway reference")
    offline.add_argument("--configmap", action="store_true", help="print the ConfigMap objects as YAML")
    offline.add_argument("--rendered-at", help="RFC 3339 time for provenance.rendered_at (default: now)")
    offline.set_defaults(handler=_render_command)
    loop = commands.add_parser("run", help="reconcile a resource directory (or a cluster) continuously")
    loop.add_argument("--manifests", type=Path, help="directory of grid resource YAML files")
    loop.add_argument("--out", type=Path, help="where ConfigMaps and status are written")
    loop.add_argument(
        "--kubernetes", action="store_true", help="watch the grid resources of a cluster and write to it instead"
    )
    loop.add_argument(
        "--namespace",
        help="with --kubernetes: watch namespaced grid kinds only in this namespace; the mesh status ConfigMap "
        "agn-mesh-state is written here (default agn-system)",
    )
    loop.add_argument("--kubeconfig", type=Path, help="with --kubernetes: kubeconfig file (default: in-cluster)")
    loop.add_argument("--context", help="with --kubernetes: kubeconfig context (default: its current context)")
    loop.add_argument("--once", action="store_true", help="reconcile once and exit")
    loop.add_argument(
        "--metrics-ca", type=Path, help="PEM CA bundle trusted for TLS metrics endpoints (default: system CAs)"
    )
    loop.add_argument("--poll", type=float, default=0.5, help="seconds between resource-change checks")
    loop.add_argument(
        "--watch-step-ms", type=int, default=DEFAULT_WATCH_STEP_MS, metavar="MS",
        help="also watch --manifests for file events, looked for every MS milliseconds, so a change reconciles "
        f"at once instead of at the next poll (default {DEFAULT_WATCH_STEP_MS}; 0: poll only)",
    )
    loop.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    mesh = loop.add_argument_group("mesh", "gossip with other sites' operators (every option needs --mesh-site)")
    mesh.add_argument("--mesh-site", help="this site's name in the mesh; enables the mesh")
    mesh.add_argument("--mesh-bind", metavar="HOST:PORT", help="UDP address for membership gossip (port 0: any)")
    mesh.add_argument(
        "--mesh-advertise",
        metavar="HOST:PORT",
        help="address peers send to, announced as this member's (default: the bound one; required when binding "
        "a wildcard address, e.g. a node address and NodePort)",
    )
    mesh.add_argument("--mesh-seeds", metavar="A:P,B:P", help="members to join through (may be empty)")
    mesh.add_argument("--mesh-gateway", metavar="HOST:PORT", help="this site's provider gateway, told to peers")
    mesh.add_argument("--mesh-routing-cluster", metavar="NAME", help="cluster peers route to this site by")
    mesh.add_argument("--mesh-client-cert", type=Path, metavar="PEM", help="client certificate for gateway probes")
    mesh.add_argument("--mesh-client-key", type=Path, metavar="PEM", help="key of --mesh-client-cert")
    mesh.add_argument("--swim-probe-interval", metavar="SECONDS", help="membership probe interval (default 1.0)")
    mesh.add_argument("--swim-probe-timeout", metavar="SECONDS", help="membership probe timeout (default 0.2)")
    mesh.add_argument("--swim-suspicion-mult", metavar="N", help="suspicion timeout multiplier (default 3)")
    signals = loop.add_argument_group(
        "signals", "serve GET /v1/site/signals over mutual TLS: the providers' EPP series, relayed raw to gateways"
    )
    signals.add_argument("--signals-address", metavar="HOST:PORT", help="where to serve it (port 0: any)")
    signals.add_argument("--signals-cert", type=Path, metavar="PEM", help="server certificate chain")
    signals.add_argument("--signals-key", type=Path, metavar="PEM", help="key of --signals-cert")
    signals.add_argument("--signals-client-ca", type=Path, metavar="PEM",
                         help="CA bundle that signs the client certificates accepted")
    signals.add_argument("--signals-site", metavar="NAME",
                         help="the grid_site label (default: --mesh-site; required without a mesh)")
    loop.set_defaults(handler=_run_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except InputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
