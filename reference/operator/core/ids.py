"""Short deterministic identifiers: candidate stable ids and hashed ConfigMap name suffixes."""

from __future__ import annotations

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1a_hex8(text: str) -> str:
    """32-bit FNV-1a of the UTF-8 bytes as 8 lowercase hex digits; stable across processes."""
    value = _FNV_OFFSET
    for byte in text.encode("utf-8"):
        value ^= byte
        value = (value * _FNV_PRIME) & 0xFFFFFFFF
    return f"{value:08x}"


def stable_id(kind: str, name: str, site: str, cluster: str) -> str:
    """The id sessions bind to; it depends on the candidate's identity only, never on its rank."""
    return fnv1a_hex8(f"{kind}/{name}/{site}/{cluster}")
