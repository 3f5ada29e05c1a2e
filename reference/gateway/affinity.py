"""Session affinity: a bounded, TTL-limited table of session key -> bound candidate.

A binding maps the client's session key to the stable_id of the candidate it was bound to. It expires
ttl_secs after it was bound; reusing it does not extend it. Entries are kept in bind order, so the
expired ones are always at the front. A full table first drops expired entries; if it is still full
the request is routed without a new binding.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

MAX_SESSION_KEY_BYTES = 256


class SessionTable:
    """Bindings for one filter instance; `clock` is injectable for tests."""

    def __init__(
        self, ttl_secs: float, max_entries: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = float(ttl_secs)
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def __len__(self) -> int:
        """Entries held, including expired ones not yet evicted."""
        return len(self._entries)

    def lookup(self, key: str) -> str | None:
        """The bound stable_id, or None when there is no live binding (an expired one is dropped)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            del self._entries[key]
            return None
        return entry[0]

    def bind(self, key: str, stable_id: str) -> bool:
        """Record a binding that expires ttl_secs from now; False when the table is full."""
        now = self._clock()
        entries = self._entries
        if key not in entries and len(entries) >= self._max:
            self._evict_expired(now)
            if len(entries) >= self._max:
                return False
        entries[key] = (stable_id, now + self._ttl)
        entries.move_to_end(key)
        return True

    def sweep(self) -> int:
        """Evict every expired entry now; returns how many were removed."""
        before = len(self._entries)
        self._evict_expired(self._clock())
        return before - len(self._entries)

    def _evict_expired(self, now: float) -> None:
        entries = self._entries
        while entries:
            first = next(iter(entries.values()))
            if first[1] > now:
                break
            entries.popitem(last=False)


def session_key(headers: Mapping[str, str], header: str | None, cookie: str | None) -> str | None:
    """The client's session key: the configured header first, then the configured cookie.

    Blank or oversized values give no key (the request is routed without affinity). Header and cookie
    keys live in separate namespaces so one cannot impersonate the other.
    """
    if header is not None:
        value = headers.get(header)
        if value is not None:
            value = value.strip()
            if value and len(value) <= MAX_SESSION_KEY_BYTES:
                return "h:" + value
    if cookie is not None:
        raw = headers.get("Cookie")
        if raw:
            for part in raw.split(";"):
                name, sep, value = part.strip().partition("=")
                if sep and name == cookie:
                    value = value.strip().strip('"')
                    if value and len(value) <= MAX_SESSION_KEY_BYTES:
                        return "c:" + value
                    return None
    return None
