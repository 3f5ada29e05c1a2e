"""`agn-operator`: the reference grid operator.

`agn-operator render --manifests DIR [--metrics FILE] [--gateway NAME] [--configmap]` renders overlays
offline to stdout (golden overlays without a cluster). `agn-operator run --manifests DIR --out DIR [--once]`
runs the reconcile loop with the `dir` source and sink, scraping each provider's configured metrics;
`agn-operator run --kubernetes [--namespace NS] [--kubeconfig PATH] [--context NAME]` runs the same loop
against a cluster (the grid CRDs watched, ConfigMaps applied, status patched; in-cluster configuration
unless a kubeconfig or context is given). Bad input exits 2 with the offending file, option or key named.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import signal
import ssl
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import yaml

from reference.operator.core.admission import AdmissionMemory
from reference.operator.core.model import Clock, FixedClock, MetricSample, ResourceError, SystemClock
from reference.operator.core.render import Rendered, render
from reference.operator.scrape import SIGNALS, Scraper, targets_from_objects
from reference.operator.sinks import DirSink, OverlaySink
from reference.operator.sources import DirSource, Loaded, resource_files
from reference.operator.triggers import Triggers, fingerprint, force_tokens, refresh_interval

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


class ResourceSource(Protocol):
    """Where the loop reads grid resources from; `fingerprint` changes whenever `load` may differ."""

    def ready(self) -> bool: ...

    def fingerprint(self) -> str: ...

    def load(self) -> Loaded: ...


class WatchedDir(DirSource):
    """The `dir` source for the loop: always ready, fingerprinted by its files' names, times and contents."""

    def ready(self) -> bool:
        return True

    def fingerprint(self) -> str:
        return fingerprint(resource_files(self.directory))


class Operator:
    """The reconcile loop: source -> scrape -> render -> sink, whenever a trigger fires."""

    def __init__(
        self,
        source: ResourceSource,
        sink: OverlaySink,
        clock: Clock,
        poll: float = 0.5,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.source = source
        self.sink = sink
        self.clock = clock
        self.poll = poll
        self.scraper = Scraper(clock, ssl_context)
        self.triggers = Triggers(clock)
        self.memory = AdmissionMemory()
        self._loaded: tuple[str, Loaded] | None = None
        self._reported: tuple[str, ...] = ()

    @classmethod
    def for_directories(
        cls, manifests: Path, out: Path, clock: Clock, poll: float = 0.5, ssl_context: ssl.SSLContext | None = None
    ) -> Operator:
        """The loop over a resource directory, writing into an output directory."""
        return cls(WatchedDir(manifests), DirSink(out), clock, poll, ssl_context)

    def observe(self) -> tuple[str, Loaded]:
        current = self.source.fingerprint()
        if self._loaded is None or self._loaded[0] != current:
            loaded = self.source.load()
            reported = tuple(str(issue) for issue in loaded.issues)
            if reported != self._reported:
                for line in reported:
                    log.error("skipped invalid resource: %s", line)
            self._reported = reported
            self._loaded = (current, loaded)
        return self._loaded

    async def reconcile(self, loaded: Loaded) -> bool:
        """Scrape, render and publish once; False when rendering failed (status records why)."""
        samples = await self.scraper.scrape(targets_from_objects(loaded.objects))
        for provider, problem in sorted(self.scraper.last_errors.items()):
            log.warning("metrics scrape of %s failed: %s", provider, problem)
        error: str | None = None
        rendered: list[Rendered] = []
        try:
            rendered = render(loaded.resources, samples, [], self.clock, self.memory)
        except Exception as exc:  # a bad policy must not stop the loop; status says why
            error = f"{type(exc).__name__}: {exc}"
            log.error("render failed: %s", error)
        self.sink.publish(loaded.resources.networks, rendered, self.clock.wall(), error)
        return error is None

    async def run(self, stop: asyncio.Event, once: bool = False) -> int:
        while not stop.is_set():
            if not self.source.ready():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.poll)
                continue
            current, loaded = self.observe()
            tokens = force_tokens(loaded.objects)
            interval = refresh_interval(loaded.objects)
            reasons = self.triggers.due(interval, current, tokens)
            if reasons:
                log.info("reconcile (%s)", ", ".join(reasons))
                ok = await self.reconcile(loaded)
                self.triggers.ran(current, tokens)
                if once:
                    return 0 if ok else 1
            wait = min(self.poll, self.triggers.wait_time(interval))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(wait, 0.01))
        return 0


async def _run_async(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    context = ssl.create_default_context(cafile=str(args.metrics_ca)) if args.metrics_ca else None
    if not args.kubernetes:
        operator = Operator.for_directories(args.manifests, args.out, SystemClock(), args.poll, context)
        return await operator.run(stop, once=args.once)
    from reference.operator.kube import KubeSink, KubeSource  # the kubernetes client loads slowly: only here

    source = KubeSource(args.api, args.namespace)
    sink = KubeSink(args.api, network_namespace=source.network_namespace)
    operator = Operator(source, sink, SystemClock(), args.poll, context)
    source.start()
    try:
        return await operator.run(stop, once=args.once)
    finally:
        await asyncio.to_thread(source.stop)
        args.api.close()


def _check_mode(args: argparse.Namespace) -> None:
    """--manifests/--out (files) or --kubernetes (a cluster), never both; the cluster options need the latter."""
    if args.kubernetes:
        from reference.operator.kube import KubeConfigError, api_client, check_namespace

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
    if args.metrics_ca is not None:
        try:
            ssl.create_default_context(cafile=str(args.metrics_ca))
        except (OSError, ssl.SSLError) as exc:
            raise InputError(f"--metrics-ca: {args.metrics_ca}: not a readable PEM CA bundle ({exc})") from exc
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
    loop.add_argument("--namespace", help="with --kubernetes: watch namespaced grid kinds only in this namespace")
    loop.add_argument("--kubeconfig", type=Path, help="with --kubernetes: kubeconfig file (default: in-cluster)")
    loop.add_argument("--context", help="with --kubernetes: kubeconfig context (default: its current context)")
    loop.add_argument("--once", action="store_true", help="reconcile once and exit")
    loop.add_argument(
        "--metrics-ca", type=Path, help="PEM CA bundle trusted for TLS metrics endpoints (default: system CAs)"
    )
    loop.add_argument("--poll", type=float, default=0.5, help="seconds between resource-change checks")
    loop.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
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
