"""`agn-fake-backend`: run one provider's fake model server and metrics exporter.

After binding it prints `LISTENING <host>:<port>` (and writes the same address to --ready-file), so a
supervisor can start it on port 0 and learn the real port. SIGTERM or SIGINT stop it cleanly (exit 0).
With --tls-cert and --tls-key it serves the same routes over HTTPS only (the LISTENING line is unchanged).
With --mtls-listen and --client-ca as well, --listen stays plain HTTP and a second listener serves the same
routes over TLS with that certificate, requiring a client certificate signed by --client-ca; its address
is printed as `LISTENING-MTLS <host>:<port>` before the LISTENING line.
Bad arguments, a bad --config file or unloadable TLS files exit 2 with the offending option or key named.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import logging
import re
import signal
import ssl
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.fakes.server import (
    ConfigError,
    FakeBackend,
    RunningServer,
    RuntimeConfig,
    default_metrics,
    parse_config_update,
    start_server,
)
from harness.projection import write_atomic

PROG = "agn-fake-backend"
log = logging.getLogger("agn.fake_backend")
_IDENTITY = re.compile(r"[\x21-\x7e]+")  # goes into response headers: visible ASCII, no spaces


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Fake provider backend: echo model server (OpenAI-shaped) plus EPP-style /metrics "
        "and a runtime /admin API on one listening address, optionally also served to verified TLS clients.",
    )
    parser.add_argument("--name", required=True, help="backend name, echoed in x-agn-backend")
    parser.add_argument("--site", required=True, help="site name, echoed in x-agn-site")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT",
                        help="address to bind; port 0 picks a free port (IPv6 as [::1]:0)")
    parser.add_argument("--model", action="append", default=None, metavar="M",
                        help="model served by /v1/models (repeatable; overrides models in --config)")
    parser.add_argument("--pool", default=None,
                        help="pool name label of the default metric samples and of the epp load model's series "
                        "(default: --name)")
    parser.add_argument("--config", type=Path, default=None, metavar="FILE.json",
                        help="initial runtime config, the same object POST /admin/config accepts")
    parser.add_argument("--ready-file", type=Path, default=None, metavar="PATH",
                        help="write the bound host:port here (atomically) once listening")
    parser.add_argument("--tls-cert", type=Path, default=None, metavar="FILE",
                        help="PEM certificate chain; with --tls-key, serve HTTPS only (with --mtls-listen: the "
                        "certificate of the mTLS listener, and --listen stays plain HTTP)")
    parser.add_argument("--tls-key", type=Path, default=None, metavar="FILE",
                        help="PEM private key of --tls-cert")
    parser.add_argument("--mtls-listen", default=None, metavar="HOST:PORT",
                        help="also serve over TLS here, requiring a client certificate signed by --client-ca")
    parser.add_argument("--client-ca", type=Path, default=None, metavar="FILE",
                        help="PEM CA bundle that signs the client certificates --mtls-listen accepts")
    parser.add_argument("--log-level", default="WARNING",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="stderr log level")
    return parser


def parse_listen(text: str) -> tuple[str, int]:
    """Split HOST:PORT (or [V6]:PORT) and check both parts."""
    match = re.fullmatch(r"\[([^\]]+)\]:(\d+)|([^:\[\]]+):(\d+)", text)
    if match is None:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is outside 0..65535")
    if match.group(1) is not None:
        try:
            ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise ValueError(f"bad IPv6 host {host!r}") from exc
    return host, port


def load_config(path: Path | None, pool: str) -> RuntimeConfig:
    """The startup config: defaults with the pool's metric samples, then the file's fields."""
    config = RuntimeConfig(metrics=default_metrics(pool))
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read: {exc}") from exc
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"not valid JSON: {exc}") from exc
        config = config.updated(parse_config_update(document))
    return config



class _EncryptedKey(Exception):
    """The private key asked for a password."""


def _no_password() -> bytes:
    raise _EncryptedKey


def load_tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context for the certificate chain and key; ValueError names the option at fault."""
    texts: dict[str, str] = {}
    for option, path, marker, what in (("--tls-cert", cert, "-----BEGIN CERTIFICATE-----", "PEM certificate"),
                                       ("--tls-key", key, "PRIVATE KEY-----", "PEM private key")):
        try:
            texts[option] = path.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{option} {path}: cannot read: {exc}") from exc
        if marker not in texts[option]:
            raise ValueError(f"{option} {path}: no {what} found")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key, password=_no_password)  # never prompt on a terminal
    except _EncryptedKey as exc:
        raise ValueError(f"--tls-key {key}: encrypted private keys are not supported") from exc
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"--tls-cert {cert} / --tls-key {key}: cannot load certificate chain and key: {exc}") \
            from exc
    return context


def load_mtls_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    """load_tls_context that also requires client certificates signed by `client_ca`."""
    context = load_tls_context(cert, key)
    try:
        text = client_ca.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--client-ca {client_ca}: cannot read: {exc}") from exc
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError(f"--client-ca {client_ca}: no PEM certificate found")
    try:
        context.load_verify_locations(cadata=text)
    except (ValueError, ssl.SSLError) as exc:
        raise ValueError(f"--client-ca {client_ca}: cannot load CA certificates: {exc}") from exc
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def write_ready_file(path: Path, address: str) -> None:
    """Write the address so a reader never sees a partial file."""
    write_atomic(path, address)


@dataclass(frozen=True)
class Prepared:
    """One fake backend, checked and ready to bind: what `main` serves, and what a group serves several of."""

    backend: FakeBackend
    host: str
    port: int
    ready_file: Path | None
    ssl_context: ssl.SSLContext | None
    mtls: tuple[str, int, ssl.SSLContext] | None
    log_level: str


async def serve(backends: Sequence[Prepared], *, prog: str = PROG, named: bool = False) -> int:
    """Bind each backend in turn and announce it, serve until SIGTERM or SIGINT, then close them all.

    `named` (a group) puts each backend's name in its lines and ends the announcements with ALL-LISTENING.
    A port that cannot be bound or a ready file that cannot be written exits 1 after closing what was bound.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    servers: list[tuple[Prepared, RunningServer]] = []
    try:
        for one in backends:
            who, tag = (f"{one.backend.name}: ", f" {one.backend.name}") if named else ("", "")
            try:
                server = await start_server(one.backend, one.host, one.port, ssl_context=one.ssl_context,
                                            mtls=one.mtls)
            except OSError as exc:
                where = f"{one.host}:{one.port}" + (f" or {one.mtls[0]}:{one.mtls[1]}" if one.mtls is not None else "")
                print(f"{prog}: {who}cannot listen on {where}: {exc}", file=sys.stderr)
                return 1
            servers.append((one, server))
            if server.mtls_address is not None:
                print(f"LISTENING-MTLS{tag} {server.mtls_address}", flush=True)
            if one.ready_file is not None:
                try:
                    write_ready_file(one.ready_file, server.address)
                except OSError as exc:
                    print(f"{prog}: cannot write --ready-file {one.ready_file}: {exc}", file=sys.stderr)
                    return 1
            print(f"LISTENING{tag} {server.address}", flush=True)  # after the ready file: both mean "serving"
            log.info("serving %s%s on %s", server.scheme, tag, server.address)
        if named:
            print("ALL-LISTENING", flush=True)
        await stop.wait()
    finally:
        await asyncio.gather(*(server.close() for _, server in servers), return_exceptions=True)
        for one, _ in servers:
            if one.ready_file is not None:
                with contextlib.suppress(OSError):
                    one.ready_file.unlink()  # a stale address must not outlive the server
    return 0


def prepare(argv: Sequence[str] | None, parser: argparse.ArgumentParser | None = None) -> Prepared:
    """Parse and check one backend's arguments; a mistake exits 2 through `parser.error`, naming the option."""
    parser = parser or build_parser()
    args = parser.parse_args(argv)
    for option, value in (("--name", args.name), ("--site", args.site)):
        if not _IDENTITY.fullmatch(value):
            parser.error(f"{option}: {value!r} must be non-empty visible ASCII without spaces")
    try:
        host, port = parse_listen(args.listen)
    except ValueError as exc:
        parser.error(f"--listen: {exc}")
    if args.ready_file is not None and not args.ready_file.parent.is_dir():
        parser.error(f"--ready-file: directory {str(args.ready_file.parent)!r} does not exist")
    try:
        config = load_config(args.config, args.pool or args.name)
    except ConfigError as exc:
        parser.error(f"--config {args.config}: {exc}")
    if args.model is not None:
        try:
            config = config.updated(parse_config_update({"models": args.model}))
        except ConfigError as exc:
            parser.error(f"--model: {exc}")

    ssl_context: ssl.SSLContext | None = None
    mtls: tuple[str, int, ssl.SSLContext] | None = None
    if (args.tls_cert is None) != (args.tls_key is None):
        given, missing = ("--tls-cert", "--tls-key") if args.tls_key is None else ("--tls-key", "--tls-cert")
        parser.error(f"{missing}: required when {given} is given (pass both or neither)")
    if (args.mtls_listen is None) != (args.client_ca is None):
        given, missing = ("--mtls-listen", "--client-ca") if args.client_ca is None \
            else ("--client-ca", "--mtls-listen")
        parser.error(f"{missing}: required when {given} is given (pass both or neither)")
    if args.mtls_listen is not None and args.tls_cert is None:
        parser.error("--tls-cert: required with --mtls-listen (the certificate of the mTLS listener)")
    if args.mtls_listen is not None and args.tls_cert is not None and args.tls_key is not None:
        try:
            mtls_host, mtls_port = parse_listen(args.mtls_listen)
        except ValueError as exc:
            parser.error(f"--mtls-listen: {exc}")
        try:
            mtls = (mtls_host, mtls_port, load_mtls_context(args.tls_cert, args.tls_key, args.client_ca))
        except ValueError as exc:
            parser.error(str(exc))
    elif args.tls_cert is not None and args.tls_key is not None:
        try:
            ssl_context = load_tls_context(args.tls_cert, args.tls_key)
        except ValueError as exc:
            parser.error(str(exc))
    backend = FakeBackend(args.name, args.site, config, pool=args.pool or args.name)
    return Prepared(backend, host, port, args.ready_file, ssl_context, mtls, args.log_level)


def configure_logging(level: str, name: str) -> None:
    logging.basicConfig(stream=sys.stderr, level=level,
                        format=f"%(asctime)s {PROG}[{name}] %(levelname)s %(message)s")
    logging.getLogger("aiohttp.access").disabled = True


def main(argv: Sequence[str] | None = None) -> int:
    one = prepare(argv)
    configure_logging(one.log_level, one.backend.name)
    try:
        return asyncio.run(serve([one]))
    except KeyboardInterrupt:  # SIGINT before the handler was installed
        return 0


if __name__ == "__main__":
    sys.exit(main())
