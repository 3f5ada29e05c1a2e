"""agn-gateway: run the reference Praxis-compatible gateway.

Exit status: 0 after a graceful shutdown (SIGTERM/SIGINT), 2 for a configuration error (one stderr line
naming the offending key path), 1 for any other startup failure such as an address already in use.

The config is loaded and the filters built (cold-start overlays validated) before the HTTP server stack
is imported, so a gateway that refuses its cold-start overlay exits before paying for aiohttp (about 0.5 s
instead of 0.85 s on a 2-core machine).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Coroutine
from typing import Any

from prometheus_client import disable_created_metrics

from reference.gateway.build import Built, build
from reference.gateway.config import GatewayConfig, load_config
from reference.gateway.logfmt import LEVELS, configure, kv
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.schema import ConfigError

EXIT_CONFIG = 2
log = logging.getLogger("agn.gateway")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="agn-gateway",
        description="Praxis-compatible AI gateway with intelligent_route overlay routing.",
    )
    parser.add_argument("-c", "--config", required=True, help="path to praxis.yaml")
    parser.add_argument("--log-level", default="info", choices=LEVELS, help="log level (default: info)")
    parser.add_argument(
        "--check", action="store_true", help="validate the config and the cold-start overlays, then exit"
    )
    return parser.parse_args(argv)


async def _serve(config: GatewayConfig, metrics: GatewayMetrics, built: Built) -> int:
    from reference.gateway.server import run  # the HTTP server stack: only once the config holds

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await run(config, stop, metrics, built)
    return 0


def _run_loop(coro: Coroutine[Any, Any, int]) -> int:
    """Run on uvloop when it is installed (it roughly halves per-request loop overhead), else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure(args.log_level)
    disable_created_metrics()
    try:
        config, metrics = load_config(args.config), GatewayMetrics()
        built = build(config, metrics)
        if args.check:
            print("config ok")
            return 0
        return _run_loop(_serve(config, metrics, built))
    except ConfigError as exc:
        print(f"config error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        log.error("startup failed %s", kv(error=str(exc)))
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
