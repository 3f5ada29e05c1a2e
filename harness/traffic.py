"""Load generation and tallies by served backend.

Requests go through aiohttp with keep-alive; every fake backend names itself in `x-agn-backend`, so a
tally is simply a count per header value (plus status codes for anything that was not a 200).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

BACKEND_HEADER = "x-agn-backend"


@dataclass
class Tally:
    """What answered a batch of requests, in order of completion."""

    backends: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    sequence: list[str] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    def describe(self) -> str:
        return f"statuses={dict(self.statuses)} backends={dict(self.backends)}"


HeadersFn = Callable[[int], Mapping[str, str]]


async def _send_all(url: str, model: str, n: int, concurrency: int, headers_fn: HeadersFn | None,
                    timeout: float, path: str) -> Tally:
    tally = Tally()
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    next_index = 0
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    client_timeout = aiohttp.ClientTimeout(total=timeout)

    async with aiohttp.ClientSession(connector=connector, timeout=client_timeout) as session:

        async def worker() -> None:
            nonlocal next_index
            while next_index < n:
                index = next_index
                next_index += 1
                headers = dict(headers_fn(index)) if headers_fn else {}
                started = time.perf_counter()
                async with session.post(url + path, json=body, headers=headers) as resp:
                    await resp.read()
                    tally.latencies_s.append(time.perf_counter() - started)
                    tally.statuses[resp.status] += 1
                    backend = resp.headers.get(BACKEND_HEADER, f"<status {resp.status}>")
                    if resp.status == 200:
                        tally.backends[backend] += 1
                    tally.sequence.append(backend)

        await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, n)))))
    return tally


def send(url: str, model: str, n: int, *, concurrency: int = 8, headers_fn: HeadersFn | None = None,
         timeout: float = 30.0, path: str = "/v1/chat/completions") -> Tally:
    """Send `n` chat requests for `model`; concurrency 1 keeps `sequence` in request order."""
    return asyncio.run(_send_all(url, model, n, concurrency, headers_fn, timeout, path))


def chat_body(model: str | None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hello"}]}
    if model is not None:
        body["model"] = model
    body.update(extra)
    return body
