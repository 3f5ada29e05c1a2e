"""Finding a gateway's revision entry in a GridNetwork status, whatever known shape the operator writes.

The spec says only that the operator "records rendered/distributed revision status" (overlay contract,
Rendering step 7); it gives no field names. The harness therefore accepts every shape it knows: the list
`overlayStatus` (the public grid operator's snapshot, and the reference) or `routingMapStatus` (its newest
release, which renamed the list), each entry naming its gateway by `gatewayName` and its namespace by
`gatewayNamespace` (the reference) or `namespace` (the public operator). The entry found is returned with
the reference's key names added where the operator used another, so suites read one vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ENTRY_LISTS", "NAMESPACE_KEYS", "entries", "find_entry", "missing"]

#: The status lists an operator may record per-gateway revisions in, in the order they are looked for.
ENTRY_LISTS: tuple[str, ...] = ("overlayStatus", "routingMapStatus")
#: The keys an entry may name its gateway's namespace by.
NAMESPACE_KEYS: tuple[str, ...] = ("gatewayNamespace", "namespace")


def entries(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every per-gateway entry of `status`, from whichever known list holds them."""
    out: list[dict[str, Any]] = []
    for name in ENTRY_LISTS:
        listed = status.get(name)
        if isinstance(listed, list):
            out += [entry for entry in listed if isinstance(entry, dict)]
    return out


def find_entry(status: Mapping[str, Any], gateway: str, namespace: str) -> dict[str, Any] | None:
    """The entry of `gateway` in `namespace` (normalised to the reference's keys), or None."""
    for entry in entries(status):
        if entry.get("gatewayName") != gateway:
            continue
        named = next((entry[key] for key in NAMESPACE_KEYS if entry.get(key) is not None), None)
        if named == namespace:
            return {**entry, "gatewayNamespace": named}
    return None


def missing(status: Mapping[str, Any], gateway: str, namespace: str) -> str:
    """Why `find_entry` found nothing, naming every place it looked and what the status holds instead: a
    status the harness cannot read is a named failure, not a bare time-out."""
    keys = " or ".join(f"{key}={namespace}" for key in NAMESPACE_KEYS)
    places = " or ".join(f"status.{name}[gatewayName={gateway}, {keys}]" for name in ENTRY_LISTS)
    if not status:
        held = "no status at all"
    else:
        found = [f"{e.get('gatewayName')!r} in {next((e[k] for k in NAMESPACE_KEYS if k in e), None)!r}"
                 for e in entries(status)]
        held = (f"entries for {', '.join(found)}" if found
                else f"the status has no entry list; its keys: {', '.join(sorted(status)) or 'none'}")
    return f"no rendered revision at {places} ({held})"
