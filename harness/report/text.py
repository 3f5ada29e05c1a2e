"""Text helpers the YAML report and the HTML pages share: shortened messages, failures by feature, atomic
writes, and reading a loaded report defensively (a hand-edited report may hold anything) and escaping it."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from harness.projection import write_atomic


def escape_html(value: Any) -> str:
    """Any value as HTML text, quotes included: report text routinely holds markup-like text."""
    return escape(str(value), quote=True)


def as_mapping(value: Any) -> Mapping[str, Any]:
    """A report node that should be a mapping, or an empty one."""
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    """A report node that should be a list, or an empty one."""
    return value if isinstance(value, list) else []

#: Failure messages in the YAML report are cut to about this many characters (head and tail kept).
MESSAGE_LIMIT = 2000


def truncate_message(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """Shorten ``message`` to about ``limit`` characters, keeping its start and its end.

    Both ends matter: the start names what was checked and the end (for a pytest traceback) holds the
    assertion that failed.
    """
    if len(message) <= limit:
        return message
    keep = max(limit // 2 - 40, 1)
    omitted = len(message) - 2 * keep
    return f"{message[:keep]}\n... [{omitted} characters omitted] ...\n{message[-keep:]}"


def failures_by_feature(level_section: Mapping[str, Any]) -> dict[str, list[str]]:
    """The failed test ids of one level section keyed by feature, also from reports written before
    ``failuresByFeature`` existed (their ids are grouped under ``?``: the feature was not recorded)."""
    grouped = level_section.get("failuresByFeature")
    if isinstance(grouped, Mapping):
        return {str(feature): [str(i) for i in ids] for feature, ids in grouped.items() if isinstance(ids, list)}
    failed = level_section.get("failedTests")
    if not isinstance(failed, list) or not failed:
        return {}
    features = {str(entry.get("id")): str(entry["feature"]) for entry in level_section.get("failures") or []
                if isinstance(entry, Mapping) and entry.get("feature")}
    out: dict[str, list[str]] = {}
    for test_id in map(str, failed):
        out.setdefault(features.get(test_id, "?"), []).append(test_id)
    return out


def write_text_atomic(target: Path, text: str) -> None:
    """Write a report through a temporary file and a rename, readable by everyone (it is published)."""
    write_atomic(target, text, mode=0o644)
