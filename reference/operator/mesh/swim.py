"""SWIM membership: failure detection by probing, suspicion with refutation, and gossip dissemination.

Each member probes one peer per probe interval (round robin over a shuffled list). No ack within the
probe timeout sends ping-req to `indirect_checks` other members, which probe on its behalf; no ack by
the end of the interval makes the peer *suspect*. Suspicion carries the peer's incarnation number, and
a live peer that hears it is suspected refutes by incrementing its incarnation and announcing itself
alive; otherwise it is declared *dead* once the suspicion timeout passes. A graceful leave announces
*left*. Membership changes and member payloads are piggybacked on every probe message and on gossip
rounds, each retransmitted at most `retransmit_limit(n)` times. Joining sends a full-state exchange
(push-pull) to seed addresses, repeated while no peer is known; the same exchange runs periodically
with a live peer for anti-entropy and with a dead one to heal partitions.

Timing follows hashicorp/memberlist's `DefaultLocalConfig` (config.go, which starts from
`DefaultLANConfig` and overrides the loopback values):

    probe interval          1 s        ProbeInterval
    probe timeout           200 ms     ProbeTimeout
    indirect checks         1          IndirectChecks
    suspicion multiplier    3          SuspicionMult:  timeout = mult * max(1, log10(n)) * interval
    retransmit multiplier   2          RetransmitMult: limit = mult * ceil(log10(n + 1))
    gossip interval         100 ms     GossipInterval
    gossip nodes            3          GossipNodes (from DefaultLANConfig)
    gossip to the dead      15 s       GossipToTheDeadTime
    push-pull interval      15 s       PushPullInterval

The two scaling formulas are memberlist's `suspicionTimeout` and `retransmitLimit` (util.go). Unlike
memberlist, suspicion is not shortened by independent confirmations (Lifeguard), so the timeout is
exactly the formula above, and push-pull runs over the same datagrams instead of a TCP stream.

A member that is probed by, or probes, a member it holds suspect or dead says so in that message, so a
member cut off while its suspicion was gossiped still learns of it and refutes. Full-state exchanges
report dead members as suspect, again so that a live one can refute. State exchange answers any
sender, so the membership port belongs on a trusted network (the mesh's own sites), not the internet.

The core does no I/O of its own: it is given a clock and a transport, reacts to `receive()` and does
its timed work in `tick()`; `next_deadline()` says when `tick()` is next due.
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from reference.operator.mesh.codec import (
    MAX_MESSAGE_BYTES,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_BYTES,
    Address,
    CodecError,
    MemberUpdate,
    Message,
    PayloadUpdate,
    Status,
    Update,
    base_size,
    decode,
    encode,
    update_size,
)
from reference.operator.mesh.transport import Transport

log = logging.getLogger(__name__)

ALIVE: Status = "alive"
SUSPECT: Status = "suspect"
DEAD: Status = "dead"
LEFT: Status = "left"
_LIVE = (ALIVE, SUSPECT)


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...


@dataclass(frozen=True)
class SwimConfig:
    """Timing and sizing of the protocol; the defaults are memberlist's local (loopback) profile."""

    probe_interval: float = 1.0
    probe_timeout: float = 0.2
    indirect_checks: int = 1
    suspicion_mult: int = 3
    retransmit_mult: int = 2
    gossip_interval: float = 0.1
    gossip_nodes: int = 3
    gossip_to_the_dead: float = 15.0
    push_pull_interval: float = 15.0
    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_payload_bytes: int = MAX_PAYLOAD_BYTES

    def __post_init__(self) -> None:
        positive = ("probe_interval", "probe_timeout", "gossip_interval", "push_pull_interval")
        for key in positive:
            if not getattr(self, key) > 0:
                raise ValueError(f"{key} must be positive")
        if self.probe_timeout >= self.probe_interval:
            raise ValueError("probe_timeout must be shorter than probe_interval")
        for key in ("indirect_checks", "suspicion_mult", "retransmit_mult", "gossip_nodes"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be at least 1")
        if self.gossip_to_the_dead < 0:
            raise ValueError("gossip_to_the_dead must not be negative")
        # A message must always have room for one payload update beside its own fields.
        if self.max_payload_bytes * 4 // 3 + 1024 > self.max_message_bytes:
            raise ValueError("max_payload_bytes does not fit in max_message_bytes")
        if self.max_message_bytes > MAX_MESSAGE_BYTES:
            raise ValueError(f"max_message_bytes must be at most {MAX_MESSAGE_BYTES}")

    def suspicion_timeout(self, members: int) -> float:
        """Seconds a member stays suspect before it is declared dead, in a cluster of `members`."""
        return self.suspicion_mult * max(1.0, math.log10(max(1.0, float(members)))) * self.probe_interval

    def retransmit_limit(self, members: int) -> int:
        """How many times each member sends one update, in a cluster of `members`."""
        return self.retransmit_mult * math.ceil(math.log10(members + 1))


LOCAL = SwimConfig()
# memberlist's DefaultLANConfig, for members on a real network.
LAN = SwimConfig(
    probe_timeout=0.5,
    indirect_checks=3,
    suspicion_mult=4,
    retransmit_mult=4,
    gossip_interval=0.2,
    gossip_to_the_dead=30.0,
    push_pull_interval=30.0,
)


def failure_detection_bound(config: SwimConfig, members: int) -> float:
    """Worst-case seconds from a member stopping until every other member holds it dead, on a lossless
    network: a probe of it starts within two round-robin passes (2 * (members - 1) intervals), fails at
    the end of its interval, the suspicion timeout runs, and the dead announcement spreads within one
    more probe interval of gossip rounds."""
    return (2 * (members - 1) + 2) * config.probe_interval + config.suspicion_timeout(members)


@dataclass(frozen=True)
class MemberView:
    """A snapshot of one member. `status_changed_at` is the clock time the member last left alive
    (kept through suspect -> dead, cleared when alive again); `age_secs` is the whole seconds since
    then at snapshot time, 0 when alive."""

    name: str
    address: Address
    incarnation: int
    status: Status
    status_changed_at: float | None
    age_secs: int
    payload_version: int


@dataclass
class NodeStats:
    """Counters for observability and benchmarks (bytes are encoded datagram sizes)."""

    sent_messages: int = 0
    sent_bytes: int = 0
    received_messages: int = 0
    received_bytes: int = 0
    invalid_messages: int = 0
    invalid_reasons: Counter[str] = field(default_factory=Counter)
    ignored_messages: int = 0
    probes: int = 0
    probes_failed: int = 0
    indirect_probes: int = 0
    indirect_acks: int = 0
    refutations: int = 0
    stale_payloads: int = 0
    started_at: float = 0.0


@dataclass
class _Member:
    name: str
    address: Address
    incarnation: int
    status: Status = ALIVE
    status_changed_at: float | None = None
    suspect_deadline: float | None = None
    dead_since: float | None = None
    payload_version: int = 0
    payload: bytes = b""


@dataclass
class _Probe:
    seq: int
    target: str
    address: Address
    indirect_at: float
    acked: bool = False
    indirect_sent: bool = False


@dataclass
class _Broadcast:
    update: Update
    size: int
    order: int
    transmits: int = 0


MemberCallback = Callable[[MemberView], None]
PayloadCallback = Callable[[MemberView, bytes], None]


def _after(deadline: float, interval: float, now: float) -> float:
    """The next periodic deadline, skipping missed periods instead of firing them in a burst."""
    following = deadline + interval
    return following if following > now else now + interval


class SwimNode:
    """One member of the group. Call `start()`, then feed `receive()` and call `tick()` when due."""

    def __init__(
        self,
        name: str,
        address: Address,
        transport: Transport,
        clock: Clock,
        config: SwimConfig = LOCAL,
        *,
        seeds: Iterable[Address] = (),
        rng: random.Random | None = None,
        incarnation: int = 0,
    ) -> None:
        if not name or len(name) > MAX_NAME_CHARS:
            raise ValueError(f"member name must have 1..{MAX_NAME_CHARS} characters")
        self.name = name
        self.address: Address = (address[0], address[1])
        self.config = config
        self.stats = NodeStats()
        self._transport = transport
        self._clock = clock
        self._rng = rng or random.Random()
        self._seeds = [(host, port) for host, port in seeds if (host, port) != self.address]
        self._incarnation = incarnation
        self._payload_version = 0
        self._payload = b""
        self._members: dict[str, _Member] = {}
        self._broadcasts: dict[tuple[str, str], _Broadcast] = {}
        self._broadcast_order = 0
        self._probe: _Probe | None = None
        self._probe_order: list[str] = []
        self._probe_index = 0
        self._relays: dict[int, tuple[Address, int, float]] = {}
        self._seq = 0
        self._started = False
        self._left = False
        self._next_probe_at = math.inf
        self._next_gossip_at = math.inf
        self._next_push_pull_at = math.inf
        self._member_callbacks: list[MemberCallback] = []
        self._payload_callbacks: list[PayloadCallback] = []

    # ----------------------------------------------------------------- public API

    @property
    def incarnation(self) -> int:
        return self._incarnation

    @property
    def payload_version(self) -> int:
        return self._payload_version

    @property
    def left(self) -> bool:
        return self._left

    def start(self) -> None:
        """Begin probing and gossiping from now, and ask the seeds for the group's state."""
        if self._started:
            return
        self._started = True
        now = self._clock.now()
        self.stats.started_at = now
        self._next_probe_at = now + self.config.probe_interval
        self._next_gossip_at = now + self.config.gossip_interval
        self._next_push_pull_at = now + self.config.push_pull_interval
        self._queue(self._self_update())
        self.join(self._seeds)

    def join(self, seeds: Iterable[Address]) -> None:
        """Exchange full state with each seed address; seeds are retried while no peer is known."""
        for host, port in seeds:
            seed = (host, port)
            if seed == self.address:
                continue
            if seed not in self._seeds:
                self._seeds.append(seed)
            self._send_sync(seed, reply=False)

    def leave(self) -> None:
        """Announce a graceful departure to every live peer and stop taking part."""
        if self._left:
            return
        self._left = True
        update = MemberUpdate(self.name, LEFT, self._incarnation, self.address)
        for member in self._live_members():
            self._send(member.address, Message("gossip", self.name, updates=(update,)), piggyback=False)

    def exchange_state(self, limit: int = 8) -> None:
        """Push-pull full state with up to `limit` live members now, outside the periodic schedule.

        A caller that has just seen the membership change uses this so that a member whose arrival news
        was spent elsewhere reaches everyone at once rather than at the next push-pull interval.
        """
        live = self._live_members()
        for member in self._rng.sample(live, min(limit, len(live))):
            self._send_sync(member.address, reply=False)

    def set_local_payload(self, data: bytes) -> int:
        """Publish this member's payload under a new, higher version; returns the version."""
        if len(data) > self.config.max_payload_bytes:
            raise ValueError(f"payload of {len(data)} bytes exceeds {self.config.max_payload_bytes}")
        self._payload_version += 1
        self._payload = bytes(data)
        self._queue(PayloadUpdate(self.name, self._payload_version, self._payload))
        return self._payload_version

    def on_payload(self, callback: PayloadCallback) -> None:
        """Call `callback(member, data)` whenever a newer payload of a remote member arrives."""
        self._payload_callbacks.append(callback)

    def on_member_change(self, callback: MemberCallback) -> None:
        """Call `callback(member)` whenever a remote member is added or changes status."""
        self._member_callbacks.append(callback)

    def members(self) -> list[MemberView]:
        """Every remote member known, in any status, sorted by name."""
        now = self._clock.now()
        return [self._view(self._members[name], now) for name in sorted(self._members)]

    def member(self, name: str) -> MemberView | None:
        found = self._members.get(name)
        return None if found is None else self._view(found, self._clock.now())

    def local(self) -> MemberView:
        status = LEFT if self._left else ALIVE
        return MemberView(self.name, self.address, self._incarnation, status, None, 0, self._payload_version)

    def payload(self, name: str) -> tuple[int, bytes] | None:
        """(version, data) of a member's latest payload, or None when none has arrived."""
        if name == self.name:
            return (self._payload_version, self._payload) if self._payload_version else None
        found = self._members.get(name)
        if found is None or not found.payload_version:
            return None
        return found.payload_version, found.payload

    def cluster_size(self) -> int:
        """Members believed to be in the group (alive or suspect), this one included."""
        return 1 + sum(1 for member in self._members.values() if member.status in _LIVE)

    def pending_broadcasts(self) -> int:
        return len(self._broadcasts)

    def sent_bytes_per_second(self) -> float:
        elapsed = self._clock.now() - self.stats.started_at
        return self.stats.sent_bytes / elapsed if elapsed > 0 else 0.0

    def next_deadline(self) -> float:
        """The clock time at which `tick()` next has work to do."""
        if not self._started or self._left:
            return math.inf
        deadline = min(self._next_probe_at, self._next_gossip_at, self._next_push_pull_at)
        probe = self._probe
        if probe is not None and not probe.acked and not probe.indirect_sent:
            deadline = min(deadline, probe.indirect_at)
        for member in self._members.values():
            if member.suspect_deadline is not None:
                deadline = min(deadline, member.suspect_deadline)
        return deadline

    def tick(self) -> None:
        """Do whatever timed work is due now: suspicion expiry, indirect probes, probe, gossip, push-pull."""
        if not self._started or self._left:
            return
        now = self._clock.now()
        self._expire_suspicions(now)
        probe = self._probe
        if probe is not None and not probe.acked and not probe.indirect_sent and now >= probe.indirect_at:
            self._send_indirect(probe)
        if now >= self._next_probe_at:
            self._next_probe_at = _after(self._next_probe_at, self.config.probe_interval, now)
            self._finish_probe()
            self._start_probe(now)
        if now >= self._next_gossip_at:
            self._next_gossip_at = _after(self._next_gossip_at, self.config.gossip_interval, now)
            self._gossip(now)
        if now >= self._next_push_pull_at:
            self._next_push_pull_at = _after(self._next_push_pull_at, self.config.push_pull_interval, now)
            self._push_pull()

    def receive(self, data: bytes, source: Address) -> None:
        """Handle one datagram. Invalid ones are counted by reason and dropped."""
        self.stats.received_messages += 1
        self.stats.received_bytes += len(data)
        if not self._started or self._left:
            self.stats.ignored_messages += 1
            return
        try:
            message = decode(
                data,
                max_message_bytes=self.config.max_message_bytes,
                max_payload_bytes=self.config.max_payload_bytes,
            )
        except CodecError as exc:
            self.stats.invalid_messages += 1
            self.stats.invalid_reasons[exc.reason] += 1
            log.debug("dropped an invalid membership datagram from %s: %s", source, exc)
            return
        if message.sender == self.name:
            self.stats.invalid_messages += 1
            self.stats.invalid_reasons["own_name"] += 1
            return
        self._handle(message, source)

    # ----------------------------------------------------------------- message handling

    def _handle(self, message: Message, source: Address) -> None:
        via_sync = message.kind == "sync"
        for update in message.updates:
            if isinstance(update, PayloadUpdate):
                self._apply_payload(update)
            else:
                self._apply_member(update, via_sync=via_sync)
        if message.kind == "ping":
            if message.target and message.target != self.name:
                self.stats.ignored_messages += 1
                return
            sender = self._members.get(message.sender)
            updates = self._accusation(sender) if sender is not None else ()
            self._send(source, Message("ack", self.name, seq=message.seq, updates=updates))
        elif message.kind == "ack":
            self._handle_ack(message, source)
        elif message.kind == "ping_req" and message.target_address is not None:
            seq = self._next_seq()
            expires = self._clock.now() + self.config.probe_interval
            self._relays[seq] = (source, message.seq, expires)
            self._send(message.target_address, Message("ping", self.name, seq=seq, target=message.target))
        elif message.kind == "sync" and not message.reply:
            self._send_sync(source, reply=True)

    def _handle_ack(self, message: Message, source: Address) -> None:
        probe = self._probe
        if probe is not None and message.seq == probe.seq and not probe.acked:
            probe.acked = True
            if source != probe.address:
                self.stats.indirect_acks += 1
            return
        relay = self._relays.pop(message.seq, None)
        if relay is not None:
            requester, original_seq, _ = relay
            self._send(requester, Message("ack", self.name, seq=original_seq))

    def _apply_member(self, update: MemberUpdate, *, via_sync: bool) -> None:
        if update.name == self.name:
            self._about_self(update)
            return
        status = update.status
        # A full-state exchange reports dead members as suspect, so a live one still gets to refute.
        if via_sync and status == DEAD:
            status = SUSPECT
        now = self._clock.now()
        member = self._members.get(update.name)
        if member is None:
            if status not in _LIVE:
                return
            member = _Member(update.name, update.address, update.incarnation)
            self._members[update.name] = member
            position = self._rng.randint(self._probe_index, len(self._probe_order))
            self._probe_order.insert(position, update.name)
            self._set_state(member, status, update.incarnation, now, added=True)
            return
        current, incarnation = member.status, update.incarnation
        if status == ALIVE:
            accept = incarnation > member.incarnation
            if accept:
                member.address = update.address
        elif status == SUSPECT:
            accept = (current == ALIVE and incarnation >= member.incarnation) or (
                current == SUSPECT and incarnation > member.incarnation
            )
        elif status == DEAD:
            accept = (current in _LIVE and incarnation >= member.incarnation) or (
                current == DEAD and incarnation > member.incarnation
            )
        else:
            accept = (current != LEFT and incarnation >= member.incarnation) or incarnation > member.incarnation
        if accept:
            self._set_state(member, status, incarnation, now)

    def _about_self(self, update: MemberUpdate) -> None:
        """Refute any claim that this member is not alive at its current incarnation, and step past any
        alive claim with a higher incarnation (left over from an earlier run under the same name)."""
        if update.status == ALIVE and update.incarnation <= self._incarnation:
            return
        if update.status != ALIVE and update.incarnation < self._incarnation:
            return
        self._incarnation = update.incarnation + 1
        self.stats.refutations += 1
        self._queue(self._self_update())

    def _apply_payload(self, update: PayloadUpdate) -> None:
        if update.name == self.name:
            if update.version > self._payload_version or (
                update.version == self._payload_version and update.data != self._payload
            ):
                # A payload under this name from an earlier run: republish ours above it.
                self._payload_version = update.version + 1
                self._queue(PayloadUpdate(self.name, self._payload_version, self._payload))
            return
        member = self._members.get(update.name)
        if member is None or update.version <= member.payload_version:
            self.stats.stale_payloads += 1
            return
        member.payload_version = update.version
        member.payload = update.data
        self._queue(update)
        view = self._view(member, self._clock.now())
        for callback in self._payload_callbacks:
            callback(view, update.data)

    def _set_state(self, member: _Member, status: Status, incarnation: int, now: float, added: bool = False) -> None:
        changed = added or status != member.status
        member.incarnation = incarnation
        if status != member.status:
            member.status = status
            if status == ALIVE:
                member.status_changed_at = None
            elif member.status_changed_at is None:
                member.status_changed_at = now
            member.suspect_deadline = (
                now + self.config.suspicion_timeout(self.cluster_size()) if status == SUSPECT else None
            )
            member.dead_since = now if status in (DEAD, LEFT) else None
        self._queue(MemberUpdate(member.name, status, incarnation, member.address))
        if changed:
            view = self._view(member, now)
            for callback in self._member_callbacks:
                callback(view)

    # ----------------------------------------------------------------- timed work

    def _expire_suspicions(self, now: float) -> None:
        for member in list(self._members.values()):
            if member.suspect_deadline is not None and now >= member.suspect_deadline:
                self._set_state(member, DEAD, member.incarnation, now)
        for seq in [seq for seq, (_, _, expires) in self._relays.items() if now >= expires]:
            del self._relays[seq]

    def _finish_probe(self) -> None:
        probe, self._probe = self._probe, None
        if probe is None or probe.acked:
            return
        self.stats.probes_failed += 1
        member = self._members.get(probe.target)
        if member is not None and member.status == ALIVE:
            self._set_state(member, SUSPECT, member.incarnation, self._clock.now())

    def _start_probe(self, now: float) -> None:
        target = self._next_probe_target()
        if target is None:
            # Alone (or everyone else is dead): keep knocking on the seeds.
            for seed in self._seeds:
                self._send_sync(seed, reply=False)
            return
        seq = self._next_seq()
        self._probe = _Probe(seq, target.name, target.address, now + self.config.probe_timeout)
        self.stats.probes += 1
        ping = Message("ping", self.name, seq=seq, target=target.name, updates=self._accusation(target))
        self._send(target.address, ping)

    def _next_probe_target(self) -> _Member | None:
        for _ in range(len(self._probe_order) + 1):
            if self._probe_index >= len(self._probe_order):
                self._probe_order = [m.name for m in self._members.values() if m.status in _LIVE]
                self._rng.shuffle(self._probe_order)
                self._probe_index = 0
                if not self._probe_order:
                    return None
            member = self._members.get(self._probe_order[self._probe_index])
            self._probe_index += 1
            if member is not None and member.status in _LIVE:
                return member
        return None

    def _send_indirect(self, probe: _Probe) -> None:
        probe.indirect_sent = True
        helpers = [m for m in self._members.values() if m.status == ALIVE and m.name != probe.target]
        for helper in self._rng.sample(helpers, min(self.config.indirect_checks, len(helpers))):
            self.stats.indirect_probes += 1
            message = Message("ping_req", self.name, seq=probe.seq, target=probe.target, target_address=probe.address)
            self._send(helper.address, message)

    def _gossip(self, now: float) -> None:
        if not self._broadcasts:
            return
        targets = [
            m
            for m in self._members.values()
            if m.status in _LIVE
            or (m.status == DEAD and m.dead_since is not None and now - m.dead_since < self.config.gossip_to_the_dead)
        ]
        for target in self._rng.sample(targets, min(self.config.gossip_nodes, len(targets))):
            if not self._broadcasts:
                return
            self._send(target.address, Message("gossip", self.name))

    def _push_pull(self) -> None:
        live = self._live_members()
        if live:
            self._send_sync(self._rng.choice(live).address, reply=False)
        dead = [m for m in self._members.values() if m.status == DEAD]
        if dead:
            self._send_sync(self._rng.choice(dead).address, reply=False)

    # ----------------------------------------------------------------- sending

    def _send_sync(self, address: Address, *, reply: bool) -> None:
        message = Message("sync", self.name, reply=reply)
        state: list[Update] = [self._self_update()]
        others = list(self._members.values())
        self._rng.shuffle(others)
        state.extend(MemberUpdate(m.name, m.status, m.incarnation, m.address) for m in others)
        if self._payload_version:
            state.append(PayloadUpdate(self.name, self._payload_version, self._payload))
        state.extend(PayloadUpdate(m.name, m.payload_version, m.payload) for m in others if m.payload_version)
        budget = self.config.max_message_bytes - base_size(message)
        chosen: list[Update] = []
        for update in state:
            cost = update_size(update) + (1 if chosen else 0)
            if cost <= budget:
                chosen.append(update)
                budget -= cost
        self._send(address, replace(message, updates=tuple(chosen)), piggyback=False)

    def _send(self, address: Address, message: Message, *, piggyback: bool = True) -> None:
        if piggyback:
            budget = self.config.max_message_bytes - base_size(message)
            destination = next((m.name for m in self._members.values() if m.address == address), None)
            if destination is not None and not any(
                m.status in _LIVE and m.name != destination for m in self._members.values()
            ):
                destination = None  # nobody else to tell: the retransmissions may as well go to it
            updates = self._take_broadcasts(budget, destination)
            message = replace(message, updates=message.updates + tuple(updates))
        data = encode(message)
        self.stats.sent_messages += 1
        self.stats.sent_bytes += len(data)
        self._transport.send(address, data)

    def _take_broadcasts(self, budget: int, destination: str | None = None) -> list[Update]:
        """The least-sent updates that fit in `budget` bytes; each is dropped after its retransmit limit.

        News of the destination's own liveness or payload is not spent on it: in a small cluster the few
        retransmissions would otherwise all go to the member the news is about (a probe and its ack), and
        the others would learn of it only at the next push-pull. Suspicion and death still go to it, so
        that it can refute, and so does everything when it is the only member to send to.
        """
        if not self._broadcasts:
            return []
        limit = self.config.retransmit_limit(self.cluster_size())
        chosen: list[tuple[tuple[str, str], _Broadcast]] = []
        for key, broadcast in sorted(self._broadcasts.items(), key=lambda kv: (kv[1].transmits, -kv[1].order)):
            update = broadcast.update
            if update.name == destination and not (
                isinstance(update, MemberUpdate) and update.status in (SUSPECT, DEAD)
            ):
                continue
            cost = broadcast.size + (1 if chosen else 0)
            if cost <= budget:
                chosen.append((key, broadcast))
                budget -= cost
        for key, broadcast in chosen:
            broadcast.transmits += 1
            if broadcast.transmits >= limit:
                del self._broadcasts[key]
        return [broadcast.update for _, broadcast in chosen]

    def _queue(self, update: Update) -> None:
        """Queue an update for dissemination, replacing any older one about the same subject."""
        kind = "payload" if isinstance(update, PayloadUpdate) else "member"
        self._broadcast_order += 1
        self._broadcasts[(kind, update.name)] = _Broadcast(update, update_size(update), self._broadcast_order)

    # ----------------------------------------------------------------- helpers

    def _self_update(self) -> MemberUpdate:
        return MemberUpdate(self.name, ALIVE, self._incarnation, self.address)

    @staticmethod
    def _accusation(member: _Member) -> tuple[Update, ...]:
        """Tell a member held suspect or dead so directly (on a probe of it, or on the ack to its own
        probe), so it can refute even after the gossip retransmissions were spent while it was cut off."""
        if member.status not in (SUSPECT, DEAD):
            return ()
        return (MemberUpdate(member.name, member.status, member.incarnation, member.address),)

    def _live_members(self) -> list[_Member]:
        return [m for m in self._members.values() if m.status in _LIVE]

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    @staticmethod
    def _view(member: _Member, now: float) -> MemberView:
        since = member.status_changed_at
        age = 0 if since is None or member.status == ALIVE else max(0, int(now - since))
        return MemberView(
            member.name,
            member.address,
            member.incarnation,
            member.status,
            since,
            age,
            member.payload_version,
        )


def live_names(members: Sequence[MemberView]) -> set[str]:
    """Names of the members in `members` that are alive."""
    return {member.name for member in members if member.status == ALIVE}
