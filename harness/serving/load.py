"""Traffic for the serving profile: chat requests with prompts of the test's choosing, sent as a batch or as
a closed loop running in the background, each answer kept with when it was sent and which site served it.

Statistical tests send a distinct prompt per request, so the gateway's prefix affinity has nothing to hold
on to; the prefix affinity tests send one long prompt again and again. A fake backend names its site in
`x-agn-site` and itself in `x-agn-backend`; the gateway names the site it chose in `x-grid-site`.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import aiohttp

__all__ = ["Batch", "LoadRun", "Shot", "distinct_prompt", "long_prompt", "send_batch"]

SITE_HEADER = "x-agn-site"
BACKEND_HEADER = "x-agn-backend"
GRID_SITE_HEADER = "x-grid-site"
#: How long one request may take before the generator gives up on it (a queued request at a slow fake
#: backend answers within a few seconds; anything longer is a hang worth reporting, not waiting out).
REQUEST_TIMEOUT_S = 30.0
_PATH = "/v1/chat/completions"
_WORDS = ("grid", "site", "ceiling", "queue", "prefill", "token", "route", "model", "cache", "block",
          "saturation", "choice", "weight", "drain", "pool", "endpoint")

PromptFn = Callable[[int], str]


def distinct_prompt(tag: str) -> PromptFn:
    """Prompts that share nothing with each other (nor with another test's, by `tag`): request i's is a
    digest of (tag, i) with a few words, so no two requests hold a common block of text."""
    def prompt(index: int) -> str:
        digest = hashlib.sha256(f"{tag}/{index}".encode()).hexdigest()
        return f"{digest} what is request {digest[:12]} about?"
    return prompt


def long_prompt(tag: str, words: int = 600) -> str:
    """One long prompt (about `words` words, several kilobytes): long enough that a prefix index cuts it into
    many blocks. The same `tag` gives the same text."""
    seed = hashlib.sha256(tag.encode()).digest()
    picked = (_WORDS[(seed[i % len(seed)] + i * 7) % len(_WORDS)] for i in range(words))
    return f"[{tag}] " + " ".join(picked)


@dataclass(frozen=True)
class Shot:
    """One request: when it was sent and answered (monotonic seconds), the status and who served it."""

    index: int
    sent: float
    done: float
    status: int
    site: str | None  # x-agn-site: the site whose fake backend answered (None when none did)
    grid_site: str | None  # x-grid-site: the site the gateway says it chose
    retry_after: str | None

    @property
    def served(self) -> bool:
        return self.status == 200 and self.site is not None


@dataclass
class Batch:
    """What answered a set of requests, in the order they completed."""

    shots: list[Shot] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.shots)

    def statuses(self) -> Counter[int]:
        return Counter(shot.status for shot in self.shots)

    def by_site(self, shots: Iterable[Shot] | None = None) -> Counter[str]:
        """Served requests per site (200 answers from a fake backend)."""
        return Counter(shot.site for shot in (self.shots if shots is None else shots)
                       if shot.served and shot.site is not None)

    def sent_between(self, start: float, end: float) -> list[Shot]:
        """The requests sent in [start, end) (monotonic seconds), answered whenever."""
        return [shot for shot in self.shots if start <= shot.sent < end]

    def describe(self, shots: Iterable[Shot] | None = None) -> str:
        chosen = list(self.shots if shots is None else shots)
        statuses = dict(Counter(shot.status for shot in chosen))
        return f"{len(chosen)} requests: statuses={statuses} served by site={dict(self.by_site(chosen))}"


def _body(model: str, prompt: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}]}


async def _one(session: aiohttp.ClientSession, url: str, model: str, prompt: str, index: int) -> Shot:
    sent = time.monotonic()
    try:
        async with session.post(url + _PATH, json=_body(model, prompt)) as resp:
            await resp.read()
            return Shot(index, sent, time.monotonic(), resp.status, resp.headers.get(SITE_HEADER),
                        resp.headers.get(GRID_SITE_HEADER), resp.headers.get("retry-after"))
    except (aiohttp.ClientError, TimeoutError) as exc:
        # a request that failed outright: status 0, so a tally shows it rather than the run crashing
        return Shot(index, sent, time.monotonic(), 0, None, None, f"{type(exc).__name__}: {exc}")


async def _closed_loop(url: str, model: str, prompt: PromptFn, concurrency: int, count: int | None,
                       stop: threading.Event | None, batch: Batch,
                       on_shot: Callable[[Shot], None] | None = None) -> Batch:
    """`concurrency` clients, each sending its next request as soon as the last is answered, until `count`
    requests were sent or `stop` is set; `on_shot` is told of each answer as it comes."""
    numbers = itertools.count()
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def client() -> None:
            while stop is None or not stop.is_set():
                index = next(numbers)
                if count is not None and index >= count:
                    return
                shot = await _one(session, url, model, prompt(index), index)
                batch.shots.append(shot)
                if on_shot is not None:
                    on_shot(shot)

        await asyncio.gather(*(client() for _ in range(max(1, concurrency if count is None
                                                                 else min(concurrency, count)))))
    return batch


def send_batch(url: str, model: str, n: int, *, prompt: PromptFn, concurrency: int = 16,
               on_shot: Callable[[Shot], None] | None = None) -> Batch:
    """Send `n` chat requests for `model` with `concurrency` clients; returns once every one is answered
    (`on_shot` is told of each as it comes)."""
    return asyncio.run(_closed_loop(url, model, prompt, concurrency, n, None, Batch(), on_shot))


class LoadRun:
    """A closed loop of `concurrency` clients in a background thread, until `stop`.

    `batch` fills as requests complete (read it from the test's thread at any time: shots are appended
    whole); `on_shot` is told of each answer as it comes (from that thread). Use it as a context manager so
    the load stops, pass or fail.
    """

    def __init__(self, url: str, model: str, *, prompt: PromptFn, concurrency: int,
                 on_shot: Callable[[Shot], None] | None = None) -> None:
        self.batch = Batch()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.started = time.monotonic()
        self.stopped: float | None = None

        def run() -> None:
            try:
                asyncio.run(_closed_loop(url, model, prompt, concurrency, None, self._stop, self.batch, on_shot))
            except BaseException as exc:  # surfaced by stop()
                self._error = exc

        self._thread = threading.Thread(target=run, name=f"serving-load-{model}", daemon=True)
        self._thread.start()

    def stop(self) -> Batch:
        """Stop sending and wait for the requests in flight to be answered; returns everything sent."""
        if self.stopped is None:
            self.stopped = time.monotonic()
        self._stop.set()
        self._thread.join(REQUEST_TIMEOUT_S + 5)
        if self._error is not None:
            raise RuntimeError(f"the load generator failed: {self._error!r}") from self._error
        return self.batch

    def __enter__(self) -> LoadRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
