"""The fake backend's EPP-style load: slots its model API requests take, and the series they publish.

With the runtime config key ``epp`` set, a fake backend behaves like a pool of `endpoints` model servers that
each run `concurrency` requests at once: every model API request takes one of endpoints*concurrency slots
(first come, first served), counts as waiting while no slot is free and as running while it holds one for
`service_ms`. /metrics then publishes what llm-d's EPP publishes for a pool, labelled ``name="<pool>"``:

- ``llm_d_epp_average_running_requests``: running requests per ready endpoint
- ``llm_d_epp_average_queue_size``: waiting requests per ready endpoint
- ``llm_d_epp_ready_endpoints``: ready endpoints
- ``llm_d_epp_flow_control_queue_size``: what flow control holds (not modelled: 0)

Per-endpoint values are 0 when no endpoint is ready, and with no ready endpoint a request is answered 503 at
once. ``set`` publishes the given values (any of running, waiting, ready, held) instead of the measured ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "EPP_KEYS",
    "HELD",
    "LEGACY_NAMES",
    "READY",
    "RUNNING",
    "SERIES",
    "SET_KEYS",
    "WAITING",
    "EppConfig",
    "Slots",
    "parse_epp",
    "series",
]

RUNNING = "llm_d_epp_average_running_requests"
WAITING = "llm_d_epp_average_queue_size"
READY = "llm_d_epp_ready_endpoints"
HELD = "llm_d_epp_flow_control_queue_size"
#: The EPP series by the key `set` overrides them with.
SERIES: Mapping[str, str] = MappingProxyType({"running": RUNNING, "waiting": WAITING, "ready": READY, "held": HELD})
#: Older names of the same series (the inference_pool_* of the Gateway API inference extension).
LEGACY_NAMES: Mapping[str, str] = MappingProxyType({
    RUNNING: "inference_pool_average_running_requests",
    WAITING: "inference_pool_average_queue_size",
    READY: "inference_pool_ready_pods",
})
EPP_KEYS = ("endpoints", "concurrency", "service_ms", "set")
SET_KEYS = tuple(SERIES)
MAX_SERVICE_MS = 600_000.0


class EppConfigError(ValueError):
    """An invalid `epp` value; the message names the key (server.ConfigError wraps it)."""


@dataclass(frozen=True)
class EppConfig:
    """The load model of the `epp` config key (see the module docstring); defaults as documented."""

    endpoints: int = 1
    concurrency: int = 4
    service_ms: float = 200.0
    set: Mapping[str, float] | None = None  # values published instead of the measured ones

    @property
    def slots(self) -> int:
        return self.endpoints * self.concurrency

    def to_json(self, value_to_json: Callable[[float], float | str]) -> dict[str, Any]:
        shown = None if self.set is None else {key: value_to_json(v) for key, v in self.set.items()}
        return {"endpoints": self.endpoints, "concurrency": self.concurrency, "service_ms": self.service_ms,
                "set": shown}


def _integer(value: object, where: str, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise EppConfigError(f"{where}: expected an integer >= {least}, got {json.dumps(value, allow_nan=True)}")
    return value


def _service(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)) \
            or not 0.0 <= float(value) <= MAX_SERVICE_MS:
        shown = json.dumps(value, allow_nan=True)
        raise EppConfigError(f"epp.service_ms: expected a number 0..{MAX_SERVICE_MS:g}, got {shown}")
    return float(value)


def parse_epp(value: object, sample_value: Callable[[object, str], float]) -> EppConfig | None:
    """The `epp` value: null (no load model) or an object of EPP_KEYS, each optional.

    `sample_value` checks one published value of `set` (a number, or a string standing for NaN or an
    infinity) and raises with the key it is given. Raises EppConfigError naming the offending key.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise EppConfigError(f"epp: expected null or an object of {', '.join(EPP_KEYS)}, got "
                             f"{json.dumps(value, allow_nan=True)}")
    unknown = sorted(set(value) - set(EPP_KEYS))
    if unknown:
        raise EppConfigError(f"epp: unknown key {unknown[0]!r} (allowed: {', '.join(EPP_KEYS)})")
    defaults = EppConfig()
    endpoints = _integer(value["endpoints"], "epp.endpoints", 0) if "endpoints" in value else defaults.endpoints
    concurrency = _integer(value["concurrency"], "epp.concurrency", 1) if "concurrency" in value \
        else defaults.concurrency
    service_ms = _service(value["service_ms"]) if "service_ms" in value else defaults.service_ms
    overrides = value.get("set")
    published: dict[str, float] | None = None
    if overrides is not None:
        if not isinstance(overrides, dict):
            raise EppConfigError(f"epp.set: expected null or an object of {', '.join(SET_KEYS)}, got "
                                 f"{json.dumps(overrides, allow_nan=True)}")
        unknown = sorted(set(overrides) - set(SET_KEYS))
        if unknown:
            raise EppConfigError(f"epp.set: unknown key {unknown[0]!r} (allowed: {', '.join(SET_KEYS)})")
        published = {key: sample_value(overrides[key], f"epp.set.{key}") for key in SET_KEYS if key in overrides}
    return EppConfig(endpoints, concurrency, service_ms, published)


class Slots:
    """endpoints*concurrency slots taken first come, first served; `capacity` None lets every request through.

    `running` counts the slots held, `waiting` the requests queued for one. A capacity of 0 (no ready
    endpoint) turns every request away, those already waiting included.
    """

    def __init__(self) -> None:
        self.capacity: int | None = None
        self.running = 0
        self._queue: deque[asyncio.Future[bool]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def configure(self, capacity: int | None) -> None:
        """A new capacity (None: unlimited); waiting requests get the slots it frees, or are turned away at 0."""
        self.capacity = capacity
        self._admit()

    async def acquire(self) -> bool:
        """Wait for a slot; False (at once, or when the capacity drops to 0 meanwhile) when none will come."""
        if self.capacity == 0:
            return False
        if not self._queue and self._free():
            self.running += 1
            return True
        ticket: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append(ticket)
        try:
            return await ticket
        except asyncio.CancelledError:
            if ticket.done() and not ticket.cancelled() and ticket.result():
                self.release()  # granted just before the cancellation arrived: give the slot back
            else:
                with contextlib.suppress(ValueError):
                    self._queue.remove(ticket)
            raise

    def release(self) -> None:
        self.running -= 1
        self._admit()

    def _free(self) -> bool:
        return self.capacity is None or self.running < self.capacity

    def _admit(self) -> None:
        while self._queue and (self.capacity == 0 or self._free()):
            ticket = self._queue.popleft()
            if ticket.done():
                continue
            if self.capacity == 0:
                ticket.set_result(False)
            else:
                self.running += 1
                ticket.set_result(True)


def series(config: EppConfig, slots: Slots) -> dict[str, float]:
    """The four published values by metric name: measured from `slots`, then `config.set` over them."""
    endpoints = config.endpoints
    values = {
        RUNNING: slots.running / endpoints if endpoints else 0.0,
        WAITING: slots.waiting / endpoints if endpoints else 0.0,
        READY: float(endpoints),
        HELD: 0.0,
    }
    for key, value in (config.set or {}).items():
        values[SERIES[key]] = value
    return values
