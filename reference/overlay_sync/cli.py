"""agn-overlay-sync: deliver routing overlays from the ConfigMap into the gateway's overlay directory.

The ConfigMap comes from a YAML file (`--configmap-file PATH`, its directory watched) or from the cluster
(`--configmap NAMESPACE/NAME`, watched through the API; in-cluster configuration unless `--kubeconfig` or
`--context` is given); either way each version goes through the same validate-and-deliver step.

Exit status: 0 after SIGTERM/SIGINT, 2 for bad arguments (one stderr line naming the option), 1 for any
other startup failure such as an admin address already in use. Prints `ADMIN host:port` on stdout once the
admin server is bound, and logs one line per sync attempt on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from reference.overlay_sync.logfmt import configure, kv
from reference.overlay_sync.server import start_admin
from reference.overlay_sync.source import (
    DEFAULT_WATCH_STEP_MS,
    OVERLAY_KEY,
    ConfigMapSource,
    FileConfigMapSource,
)
from reference.overlay_sync.sync import OverlaySyncer

EXIT_USAGE = 2
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
SCOPE_KEYS = ("network", "gateway", "namespace", "local_site")
log = logging.getLogger("agn.overlay_sync")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def parse_scope(text: str) -> dict[str, str]:
    """`network=a,gateway=b,namespace=c,local_site=d` (any subset) -> mapping; ValueError names the key."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"{item.strip()!r} is not key=value")
        if key not in SCOPE_KEYS:
            raise ValueError(f"unknown scope key {key!r} (expected one of {', '.join(SCOPE_KEYS)})")
        if key in out:
            raise ValueError(f"scope key {key!r} given twice")
        if not value.strip():
            raise ValueError(f"scope key {key!r} has an empty value")
        out[key] = value.strip()
    return out


def parse_reference(text: str) -> tuple[str, str]:
    """`NAMESPACE/NAME` -> (namespace, name); ValueError says what is wrong."""
    namespace, sep, name = text.partition("/")
    if not sep or "/" in name:
        raise ValueError(f"{text!r} is not NAMESPACE/NAME")
    for part, label in ((namespace, "namespace"), (name, "name")):
        if not part or len(part) > 253 or not _NAME.match(part):
            raise ValueError(f"{text!r}: {label} {part!r} is not a valid Kubernetes name")
    return namespace, name


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"{text!r} is not HOST:PORT with a port 0..65535")
    return host, int(port_text)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="agn-overlay-sync",
        description="Watch the routing-overlay ConfigMap, validate each envelope and atomically deliver "
        "accepted revisions into the gateway's overlay directory.",
    )
    origin = p.add_mutually_exclusive_group()  # one is required: checked first in parse_args
    origin.add_argument("--configmap-file", type=Path, metavar="PATH",
                        help="YAML file holding the ConfigMap object (its directory is watched)")
    origin.add_argument("--configmap", metavar="NAMESPACE/NAME",
                        help="the ConfigMap in the cluster, watched through the Kubernetes API")
    p.add_argument("--kubeconfig", type=Path, metavar="PATH",
                   help="with --configmap: kubeconfig file (default: the pod's in-cluster configuration)")
    p.add_argument("--context", help="with --configmap: kubeconfig context (default: its current context)")
    p.add_argument("--target-dir", type=Path, metavar="DIR",
                   help="the gateway's overlay directory (kubelet-style ..data layout is written there)")
    p.add_argument("--key", default=OVERLAY_KEY,
                   help=f"ConfigMap data key holding the envelope (default {OVERLAY_KEY}; "
                   "routing-config.json is read when it is absent)")
    p.add_argument("--file-name", default=OVERLAY_KEY, help=f"file name in the target dir (default {OVERLAY_KEY})")
    p.add_argument("--expected-scope", metavar="network=..,gateway=..,namespace=..,local_site=..",
                   help="refuse envelopes whose scope differs (any subset of the four keys)")
    p.add_argument("--admin", metavar="HOST:PORT", help="serve /ready, /healthy and /metrics here (port 0 = any)")
    p.add_argument("--debounce-ms", type=int, default=50, help="coalesce file events for this long (default 50)")
    p.add_argument("--watch-step-ms", type=int, default=DEFAULT_WATCH_STEP_MS,
                   help="with --configmap-file: how often the file watcher looks for events, the delay it adds "
                   f"to a delivery (default {DEFAULT_WATCH_STEP_MS}; 1..1000)")
    p.add_argument("--resync-seconds", type=float, default=30.0,
                   help="re-read the ConfigMap this often even without events (default 30)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.configmap_file is None and args.configmap is None:
        parser.error("one of --configmap-file PATH or --configmap NAMESPACE/NAME is required")
    if args.target_dir is None:
        parser.error("the following arguments are required: --target-dir")
    try:
        args.scope = parse_scope(args.expected_scope) if args.expected_scope is not None else None
    except ValueError as exc:
        parser.error(f"--expected-scope: {exc}")
    try:
        args.admin_address = parse_address(args.admin) if args.admin is not None else None
    except ValueError as exc:
        parser.error(f"--admin: {exc}")
    if args.debounce_ms < 1:
        parser.error("--debounce-ms: must be at least 1")
    if not 1 <= args.watch_step_ms <= 1000:
        parser.error("--watch-step-ms: must be 1..1000")
    if not args.resync_seconds > 0:
        parser.error("--resync-seconds: must be positive")
    name = args.file_name
    if not name or "/" in name or name.startswith(".."):
        parser.error(f"--file-name: {name!r} must be a plain file name not starting with '..'")
    if args.target_dir.exists() and not args.target_dir.is_dir():
        parser.error(f"--target-dir: {args.target_dir} exists and is not a directory")
    if args.configmap_file is not None and args.configmap_file.is_dir():
        parser.error(f"--configmap-file: {args.configmap_file} is a directory")
    if args.configmap is None:
        for flag, value in (("--kubeconfig", args.kubeconfig), ("--context", args.context)):
            if value is not None:
                parser.error(f"{flag}: only meaningful with --configmap")
        return args
    try:
        args.configmap_ref = parse_reference(args.configmap)
    except ValueError as exc:
        parser.error(f"--configmap: {exc}")
    if args.kubeconfig is not None and not args.kubeconfig.is_file():
        parser.error(f"--kubeconfig: {args.kubeconfig}: file not found")
    return args


def make_source(args: argparse.Namespace) -> ConfigMapSource:
    """The file source, or the API watch of the named ConfigMap; KubeConfigError when no cluster is usable."""
    if args.configmap is None:
        return FileConfigMapSource(args.configmap_file, key=args.key, debounce_ms=args.debounce_ms,
                                   step_ms=args.watch_step_ms)
    from reference.kube_client import api_client  # the kubernetes client loads slowly: only here
    from reference.overlay_sync.kube_source import KubeConfigMapSource

    namespace, name = args.configmap_ref
    return KubeConfigMapSource(api_client(args.kubeconfig, args.context), namespace, name, key=args.key)


async def run(
    args: argparse.Namespace, scope: Mapping[str, str] | None, source: ConfigMapSource | None = None
) -> int:
    source = source if source is not None else make_source(args)
    syncer = OverlaySyncer(source, args.target_dir, file_name=args.file_name, expected_scope=scope)
    syncer.restore()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    dirty = asyncio.Event()

    def request_stop() -> None:
        stop.set()
        dirty.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, request_stop)
    runner = None
    if args.admin_address is not None:
        host, port = args.admin_address
        try:
            runner, bound_host, bound_port = await start_admin(syncer, host, port)
        except OSError as exc:
            print(f"agn-overlay-sync: --admin {args.admin}: cannot bind: {exc.strerror or exc}", file=sys.stderr)
            return 1
        print(f"ADMIN {bound_host}:{bound_port}", flush=True)

    async def watch() -> None:
        async for _ in source.changes(stop):
            dirty.set()

    async def resync() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=args.resync_seconds)
            dirty.set()

    tasks = [asyncio.create_task(watch()), asyncio.create_task(resync())]
    log.info(kv("started", source=source.describe(), target=str(args.target_dir / args.file_name),
                expected_scope=",".join(f"{k}={v}" for k, v in (scope or {}).items()) or None))
    dirty.set()
    try:
        while True:
            await dirty.wait()
            if stop.is_set():
                break
            dirty.clear()
            await asyncio.to_thread(syncer.sync_once)
    finally:
        stop.set()
        _done, pending = await asyncio.wait(tasks, timeout=2.0)
        for task in pending:
            task.cancel()
        if runner is not None:
            await runner.cleanup()
        log.info(kv("stopped"))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure(args.log_level)
    try:
        args.target_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"agn-overlay-sync: --target-dir: cannot create {args.target_dir}: {exc.strerror or exc}",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        source = make_source(args)
    except ValueError as exc:  # no usable cluster configuration
        print(f"agn-overlay-sync: --configmap: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return asyncio.run(run(args, args.scope, source))


if __name__ == "__main__":
    raise SystemExit(main())
