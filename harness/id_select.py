"""Selecting conformance tests by their ids, as the report and `agn-conformance list` name them.

A pattern is an exact id with its case (``CONS-SEL-WEIGHTED[70-30]``), an id without one (every case of it:
``CONS-SEL-WEIGHTED``), or either with ``*`` as the only wildcard (``CONS-SEL-*``); brackets are literal, so a
case never has to be escaped. A pattern that matches nothing is an error naming the nearest ids.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

__all__ = ["item_id", "matches", "nearest", "unmatched"]


def item_id(base: str, item: object) -> str:
    """A collected pytest item's conformance id as the report names it: `base` (its marker's id), with the
    item's parameter case in brackets when it has one."""
    callspec = getattr(item, "callspec", None)
    return base if callspec is None else f"{base}[{callspec.id}]"


def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def matches(pattern: str, test_id: str) -> bool:
    """Whether `test_id` (``ID`` or ``ID[case]``) is selected by `pattern`."""
    if "*" not in pattern:
        return test_id == pattern or ("[" not in pattern and test_id.startswith(pattern + "["))
    base = test_id.split("[", 1)[0]
    regex = _regex(pattern)
    return bool(regex.fullmatch(test_id) or ("[" not in pattern and regex.fullmatch(base)))


def unmatched(patterns: Iterable[str], ids: Sequence[str]) -> list[str]:
    """The patterns that select none of `ids`."""
    return [p for p in patterns if not any(matches(p, test_id) for test_id in ids)]


def nearest(pattern: str, ids: Sequence[str], count: int = 3) -> list[str]:
    """The ids (cases folded into their id) closest to `pattern`, for a "did you mean"."""
    bases = sorted({test_id.split("[", 1)[0] for test_id in ids})
    return difflib.get_close_matches(pattern.split("[", 1)[0].replace("*", ""), bases, n=count, cutoff=0.5)
