"""Wire format of the membership protocol: compact JSON with a schema version, strictly validated.

Every datagram is one JSON object `{"v": 1, "t": kind, "from": name, ...}`. Decoding never trusts its
input: anything oversized, not UTF-8 JSON, of another schema version or with a field of the wrong shape
raises `CodecError` with a short reason, so the receiver can drop and count it instead of crashing.
Sizes are exact (`ensure_ascii` keeps characters and bytes equal), so senders can pack piggybacked
updates up to the message bound without re-encoding.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

SCHEMA_VERSION = 1
# One message must fit in a single IPv4 UDP datagram (at most 65,507 bytes of payload).
MAX_MESSAGE_BYTES = 60 * 1024
MAX_PAYLOAD_BYTES = 8 * 1024
MAX_NAME_CHARS = 253
MAX_UPDATES = 4096
MAX_INT = 2**63 - 1

Address = tuple[str, int]
Status = Literal["alive", "suspect", "dead", "left"]
Kind = Literal["ping", "ack", "ping_req", "gossip", "sync"]
STATUSES: tuple[str, ...] = get_args(Status)
KINDS: tuple[str, ...] = get_args(Kind)


class CodecError(ValueError):
    """A datagram that is not a valid message; `reason` is a short stable label for counting."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class MemberUpdate:
    """What one member says about another (or itself): status at an incarnation, and where it lives."""

    name: str
    status: Status
    incarnation: int
    address: Address


@dataclass(frozen=True)
class PayloadUpdate:
    """A member's opaque application payload; a higher version from the same member replaces a lower one."""

    name: str
    version: int
    data: bytes


Update = MemberUpdate | PayloadUpdate


@dataclass(frozen=True)
class Message:
    """One datagram. `target` names the intended recipient of a ping (empty when unknown, as on join)
    or the member to probe for a ping_req, whose address is `target_address`."""

    kind: Kind
    sender: str
    seq: int = 0
    target: str = ""
    target_address: Address | None = None
    reply: bool = False
    updates: tuple[Update, ...] = field(default=())


def update_to_json(update: Update) -> dict[str, Any]:
    if isinstance(update, PayloadUpdate):
        return {
            "k": "payload",
            "n": update.name,
            "pv": update.version,
            "d": base64.b64encode(update.data).decode("ascii"),
        }
    return {
        "k": "member",
        "n": update.name,
        "s": update.status,
        "i": update.incarnation,
        "a": [update.address[0], update.address[1]],
    }


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def update_size(update: Update) -> int:
    """Encoded size of one update inside a message's update list (without the separating comma)."""
    return len(_dumps(update_to_json(update)))


def _message_json(message: Message, updates: list[dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {"v": SCHEMA_VERSION, "t": message.kind, "from": message.sender}
    if message.kind in ("ping", "ack", "ping_req"):
        body["seq"] = message.seq
    if message.kind in ("ping", "ping_req"):
        body["to"] = message.target
    if message.kind == "ping_req":
        if message.target_address is None:
            raise ValueError("a ping_req needs the target's address")
        body["ta"] = [message.target_address[0], message.target_address[1]]
    if message.kind == "sync":
        body["reply"] = message.reply
    body["u"] = updates
    return body


def base_size(message: Message) -> int:
    """Encoded size of `message` with an empty update list; each update adds its size plus one comma."""
    return len(_dumps(_message_json(message, [])))


def encode(message: Message) -> bytes:
    return _dumps(_message_json(message, [update_to_json(u) for u in message.updates])).encode("ascii")


def _int(body: dict[str, Any], key: str) -> int:
    value = body.get(key)
    # bool is an int subclass in Python; JSON true/false is not a number here.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_INT:
        raise CodecError("bad_field", key)
    return value


def _name(body: dict[str, Any], key: str, *, allow_empty: bool = False) -> str:
    value = body.get(key)
    if not isinstance(value, str) or len(value) > MAX_NAME_CHARS or (not value and not allow_empty):
        raise CodecError("bad_field", key)
    return value


def _address(value: Any, key: str) -> Address:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not value[0]
        or len(value[0]) > MAX_NAME_CHARS
        or not isinstance(value[1], int)
        or isinstance(value[1], bool)
        or not 0 <= value[1] <= 65535
    ):
        raise CodecError("bad_field", key)
    return (value[0], value[1])


def _update(item: Any, max_payload_bytes: int) -> Update:
    if not isinstance(item, dict):
        raise CodecError("bad_update", "not an object")
    kind = item.get("k")
    name = _name(item, "n")
    if kind == "payload":
        encoded = item.get("d")
        if not isinstance(encoded, str) or len(encoded) > 4 * ((max_payload_bytes + 2) // 3):
            raise CodecError("bad_payload", "d")
        try:
            data = base64.b64decode(encoded.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise CodecError("bad_payload", "d is not base64") from exc
        if len(data) > max_payload_bytes:
            raise CodecError("bad_payload", "too large")
        return PayloadUpdate(name=name, version=_int(item, "pv"), data=data)
    if kind == "member":
        status = item.get("s")
        if status not in STATUSES:
            raise CodecError("bad_field", "s")
        return MemberUpdate(name=name, status=status, incarnation=_int(item, "i"), address=_address(item.get("a"), "a"))
    raise CodecError("bad_update", "unknown kind")


def decode(
    data: bytes, *, max_message_bytes: int = MAX_MESSAGE_BYTES, max_payload_bytes: int = MAX_PAYLOAD_BYTES
) -> Message:
    """Parse and validate one datagram, or raise `CodecError`."""
    if len(data) > max_message_bytes:
        raise CodecError("oversized", f"{len(data)} bytes")
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CodecError("not_json") from exc
    if not isinstance(body, dict):
        raise CodecError("not_object")
    if body.get("v") != SCHEMA_VERSION or isinstance(body.get("v"), bool):
        raise CodecError("unsupported_version", repr(body.get("v"))[:40])
    kind = body.get("t")
    if kind not in KINDS:
        raise CodecError("bad_field", "t")
    sender = _name(body, "from")
    raw_updates = body.get("u", [])
    if not isinstance(raw_updates, list) or len(raw_updates) > MAX_UPDATES:
        raise CodecError("bad_field", "u")
    updates = tuple(_update(item, max_payload_bytes) for item in raw_updates)
    seq = _int(body, "seq") if kind in ("ping", "ack", "ping_req") else 0
    target = _name(body, "to", allow_empty=kind == "ping") if kind in ("ping", "ping_req") else ""
    target_address = _address(body.get("ta"), "ta") if kind == "ping_req" else None
    reply = body.get("reply", False)
    if not isinstance(reply, bool):
        raise CodecError("bad_field", "reply")
    return Message(
        kind=kind,
        sender=sender,
        seq=seq,
        target=target,
        target_address=target_address,
        reply=reply,
        updates=updates,
    )
