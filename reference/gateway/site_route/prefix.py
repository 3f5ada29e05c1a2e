"""Prefix affinity: send a prompt where its beginning was sent before, while that site has room.

The prompt's canonical text (a chat request's messages, role and text, one per line; a completion's
prompt) is cut into blocks of BLOCK_CHARS characters, and each whole block gets a key: a hash of the
model and of all the text up to the end of that block, so a key stands for "this prefix". The index
remembers, for each key, the (site, cluster) it was last sent to (least recently used keys are
forgotten past MAX_KEYS). A request whose keys are held by one site for a share >= threshold goes
there when that site is ready and has room, except an `exploration` share of requests chosen at
random; outcomes: hit, miss (no site holds enough), explore, full (the holder has no room).
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import Any

from reference.gateway.site_route import availability
from reference.gateway.site_route.availability import SiteView
from reference.gateway.site_route.settings import PrefixSettings

BLOCK_CHARS = 64
MAX_KEYS = 100_000
MAX_BLOCKS = 4096  # at most this many keys per request (256 Ki characters of prompt)
HIT, MISS, EXPLORE, FULL = "hit", "miss", "explore", "full"
OUTCOMES = (HIT, MISS, EXPLORE, FULL)

Holder = tuple[str, str]  # (site, cluster)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones, in order
        return "".join(part.get("text", "") if isinstance(part, dict) and isinstance(part.get("text"), str)
                       else part if isinstance(part, str) else "" for part in content)
    return ""


def canonical_prompt(doc: Any) -> str | None:
    """The text a request's prompt caches under, or None when the body carries no prompt."""
    if not isinstance(doc, dict):
        return None
    messages = doc.get("messages")
    if isinstance(messages, list):
        lines = [f"{m.get('role', '')}: {_text(m.get('content'))}" for m in messages if isinstance(m, dict)]
        return "\n".join(lines) if lines else None
    prompt = doc.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)
    return None


def block_keys(model: str, text: str) -> tuple[bytes, ...]:
    """One key per whole block: the hash of the model and the text through that block."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(model.encode("utf-8", "surrogatepass") + b"\x00")
    keys: list[bytes] = []
    for start in range(0, min(len(text), MAX_BLOCKS * BLOCK_CHARS) - BLOCK_CHARS + 1, BLOCK_CHARS):
        digest.update(text[start : start + BLOCK_CHARS].encode("utf-8", "surrogatepass"))
        keys.append(digest.copy().digest())
    return tuple(keys)


class PrefixIndex:
    """Which (site, cluster) each prefix key was last sent to, least recently used forgotten first."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self.max_keys = max_keys
        self._held: OrderedDict[bytes, Holder] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def holder(self, keys: Sequence[bytes]) -> tuple[Holder, float] | None:
        """The holder of most of `keys` and its share of them, or None when no key is held."""
        counts = Counter(h for h in (self._held.get(k) for k in keys) if h is not None)
        if not counts or not keys:
            return None
        holder, count = counts.most_common(1)[0]
        return holder, count / len(keys)

    def record(self, keys: Sequence[bytes], holder: Holder) -> None:
        held = self._held
        for k in keys:
            held[k] = holder
            held.move_to_end(k)
        while len(held) > self.max_keys:
            held.popitem(last=False)


def prefer(index: PrefixIndex, keys: Sequence[bytes], sites: Sequence[SiteView], settings: PrefixSettings,
           rng: random.Random) -> tuple[SiteView | None, str]:
    """The site affinity sends the request to (None: choose as usual) and the outcome to count."""
    found = index.holder(keys)
    if found is None or found[1] < settings.threshold:
        return None, MISS
    holder, _share = found
    site = next((s for s in sites if (s.site, s.cluster) == holder), None)
    if site is None or not availability.has_room(site):
        return None, FULL
    if rng.random() < settings.exploration:
        return None, EXPLORE
    return site, HIT
