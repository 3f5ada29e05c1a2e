"""Strict config-value readers that name the offending key path in every error.

Operators fix a broken praxis.yaml from one stderr line, so every check here reports where the bad
value sits (``filter_chains[0].filters[1].reload.debounce_ms``) and what was expected.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_PORT = 65535


class ConfigError(ValueError):
    """A configuration problem at one key path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def key(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def item(path: str, index: int) -> str:
    return f"{path}[{index}]"


def mapping(
    value: Any, path: str, *, required: Iterable[str] = (), optional: Iterable[str] = ()
) -> dict[str, Any]:
    """A mapping with exactly the allowed keys; unknown keys are errors, missing required keys too."""
    if not isinstance(value, dict):
        raise ConfigError(path, "must be a mapping")
    required = tuple(required)
    allowed = set(required) | set(optional)
    for name in value:
        if not isinstance(name, str):
            raise ConfigError(path, f"keys must be strings, got {name!r}")
        if name not in allowed:
            raise ConfigError(key(path, name), "unknown key")
    for name in required:
        if name not in value:
            raise ConfigError(key(path, name), "is required")
    return value


def string(value: Any, path: str, *, max_len: int = 256) -> str:
    """A non-blank string of at most max_len bytes without control characters."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(path, f"must be a non-empty string of at most {max_len} bytes")
    if len(value.encode("utf-8", "surrogatepass")) > max_len:
        raise ConfigError(path, f"must be at most {max_len} bytes")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise ConfigError(path, "must not contain control characters")
    return value


def integer(value: Any, path: str, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ConfigError(path, f"must be an integer {lo}..{hi}")
    return value


def boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, "must be true or false")
    return value


def sequence(value: Any, path: str, *, max_items: int, min_items: int = 0) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(path, "must be a list")
    if len(value) < min_items:
        raise ConfigError(path, f"must have at least {min_items} entr{'y' if min_items == 1 else 'ies'}")
    if len(value) > max_items:
        raise ConfigError(path, f"must have at most {max_items} entries")
    return value


def string_list(
    value: Any, path: str, *, max_items: int, max_len: int = 256, unique: bool = True
) -> list[str]:
    out: list[str] = []
    for index, entry in enumerate(sequence(value, path, max_items=max_items)):
        text = string(entry, item(path, index), max_len=max_len)
        if unique and text in out:
            raise ConfigError(item(path, index), f"duplicate entry {text!r}")
        out.append(text)
    return out


def address(value: Any, path: str) -> tuple[str, int]:
    """A ``host:port`` string; IPv6 hosts go in brackets. Port 0 asks the OS for a free port."""
    text = string(value, path)
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ConfigError(path, f"must be host:port, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(path, f"IPv6 hosts must be bracketed, got {text!r}")
    if not host or any(ch.isspace() for ch in host):
        raise ConfigError(path, f"must be host:port, got {text!r}")
    port = int(port_text)
    if port > MAX_PORT:
        raise ConfigError(path, f"port must be 0..{MAX_PORT}, got {port}")
    return host, port
