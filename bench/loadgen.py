"""A closed-loop HTTP load generator: fixed concurrency over keep-alive connections, bounded in time.

Run as its own process (``python -m bench.loadgen``) so it does not share an interpreter with what it
measures. It signals readiness by creating ``<result>.ready``, waits for a go file holding the
wall-clock start time (so several generators share one measurement window), runs warm-up then the
measured window, and writes its result as JSON. Only requests that complete inside the window count,
so throughput is completions per second of the window; their latencies are kept in microseconds for
the caller to merge.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

GO_WAIT_LIMIT_S = 60.0
MAX_REQUESTS = 2_000_000
REQUEST_TIMEOUT_S = 10.0


def loopback_only(url: str) -> str:
    """Refuse any target that is not on this machine's loopback range."""
    host = urlsplit(url).hostname or ""
    if not (host == "localhost" or host == "::1" or host.startswith("127.")):
        raise ValueError(f"refusing non-loopback target {url!r}")
    return url


async def _wait_go(go_file: Path) -> float:
    """The shared start time, read once the go file appears (bounded wait)."""
    deadline = time.monotonic() + GO_WAIT_LIMIT_S
    while time.monotonic() < deadline:
        try:
            text = go_file.read_text().strip()
        except FileNotFoundError:
            text = ""
        if text:
            return float(text)
        await asyncio.sleep(0.005)
    raise TimeoutError(f"no go file {go_file} after {GO_WAIT_LIMIT_S:.0f}s")


@dataclass
class Tally:
    """What a closed loop saw: requests sent, and in the measuring window statuses and 200 latencies."""

    sent: int = 0
    latencies_us: list[int] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, "ok": len(self.latencies_us),
                "statuses": {str(k): v for k, v in self.statuses.items()}, "errors": dict(self.errors),
                "latencies_us": self.latencies_us}


async def closed_loop(session: aiohttp.ClientSession, url: str, body: bytes,
                      headers: Callable[[], Mapping[str, str]], concurrency: int, window_start: float,
                      window_end: float) -> Tally:
    """`concurrency` workers each send the next request as soon as the last one answered, until the window
    ends; only answers that arrive inside [window_start, window_end] (perf_counter seconds) are counted."""
    tally = Tally()

    async def worker() -> None:
        while tally.sent < MAX_REQUESTS:
            t0 = time.perf_counter()
            if t0 >= window_end:
                return
            tally.sent += 1
            try:
                async with session.post(url, data=body, headers=dict(headers())) as resp:
                    await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                tally.errors[type(exc).__name__] += 1
                continue
            t1 = time.perf_counter()
            if window_start <= t1 <= window_end:
                tally.statuses[status] += 1
                if status == 200:
                    tally.latencies_us.append(int((t1 - t0) * 1e6))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tally


async def generate(url: str, body: bytes, headers: dict[str, str], concurrency: int, warmup_s: float,
                   duration_s: float, ready_file: Path | None, go_file: Path | None) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        if ready_file is not None:
            ready_file.write_text(str(os.getpid()))
        start_wall = await _wait_go(go_file) if go_file is not None else time.time()
        await asyncio.sleep(max(0.0, start_wall - time.time()))
        late_s = max(0.0, time.time() - start_wall)
        began = time.perf_counter()
        window_start = began + warmup_s
        window_end = window_start + duration_s

        tally = await closed_loop(session, url, body, lambda: headers, concurrency, window_start, window_end)
    return {
        "url": url,
        "concurrency": concurrency,
        "warmup_s": warmup_s,
        "window_s": duration_s,
        "late_s": late_s,
        **tally.as_dict(),
    }


def checked_load(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """Refuse a load shape outside the bounds (concurrency, warmup, duration); the loopback URL to load."""
    if not 1 <= args.concurrency <= 1024:
        parser.error("--concurrency must be 1..1024")
    if not (0 <= args.warmup <= 60 and 0 < args.duration <= 120):
        parser.error("--warmup must be 0..60 and --duration 0..120 seconds")
    try:
        return loopback_only(args.url)
    except ValueError as exc:
        parser.error(f"--url: {exc}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__)
    parser.add_argument("--url", required=True, help="loopback URL to POST to")
    parser.add_argument("--model", default="bench-model", help="model named in the JSON body")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before the measured window")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds in the measured window")
    parser.add_argument("--result", type=Path, required=True, help="where to write the JSON result")
    parser.add_argument("--go-file", type=Path, default=None, help="wait for this file's start time")
    args = parser.parse_args(argv)
    url = checked_load(parser, args)
    body = json.dumps({"model": args.model, "messages": [{"role": "user", "content": "hello"}]}).encode()
    headers = {"content-type": "application/json"}
    ready = args.result.with_name(args.result.name + ".ready")
    result = asyncio.run(generate(url, body, headers, args.concurrency, args.warmup, args.duration, ready,
                                  args.go_file))
    tmp = args.result.with_name(args.result.name + ".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
