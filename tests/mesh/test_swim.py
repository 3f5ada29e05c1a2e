"""SWIM membership: exact timing on the simulated network, wire validation, and three members over UDP."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import socket
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

import pytest

from reference.operator.mesh import codec
from reference.operator.mesh.codec import MemberUpdate, Message, PayloadUpdate
from reference.operator.mesh.runner import UdpMember
from reference.operator.mesh.sim import Simulation
from reference.operator.mesh.swim import LAN, LOCAL, MemberView, SwimConfig, SwimNode, failure_detection_bound

Events = dict[tuple[str, str], list[tuple[float, str]]]


def record(sim: Simulation, nodes: Iterable[SwimNode]) -> Events:
    """Every status change each node observes, as (time, status) per (observer, subject)."""
    events: Events = defaultdict(list)
    for node in nodes:

        def changed(view: MemberView, observer: str = node.name) -> None:
            events[(observer, view.name)].append((sim.now, view.status))

        node.on_member_change(changed)
    return events


def sees_all_alive(sim: Simulation) -> bool:
    running = sim.running()
    names = {node.name for node in running}
    return all({m.name for m in node.members() if m.status == "alive"} >= names - {node.name} for node in running)


def group(names: list[str], *, config: SwimConfig = LOCAL, seed: int = 0) -> Simulation:
    """A converged group; each member after the first joins through the first."""
    sim = Simulation(config, seed=seed)
    sim.add(names[0])
    for name in names[1:]:
        sim.add(name, [names[0]])
    # Gossip usually converges at once; the periodic full-state exchange guarantees it.
    assert sim.run_until(lambda: sees_all_alive(sim), 2 * config.push_pull_interval), "group did not converge"
    return sim


def inject(sim: Simulation, source: str, destination: str, message: Message | bytes) -> None:
    data = message if isinstance(message, bytes) else codec.encode(message)
    sim.network.send(sim.address_of(source), sim.address_of(destination), data)


# ----------------------------------------------------------------------------- parameters


def test_defaults_are_memberlist_local_profile() -> None:
    assert (LOCAL.probe_interval, LOCAL.probe_timeout, LOCAL.indirect_checks) == (1.0, 0.2, 1)
    assert (LOCAL.suspicion_mult, LOCAL.retransmit_mult) == (3, 2)
    assert (LOCAL.gossip_interval, LOCAL.gossip_nodes, LOCAL.gossip_to_the_dead) == (0.1, 3, 15.0)
    assert LOCAL.push_pull_interval == 15.0
    # suspicion = mult * max(1, log10(n)) * interval; retransmits = mult * ceil(log10(n + 1))
    assert LOCAL.suspicion_timeout(3) == 3.0
    assert LOCAL.suspicion_timeout(100) == pytest.approx(6.0)
    assert [LOCAL.retransmit_limit(n) for n in (1, 3, 9, 10, 20, 99, 100)] == [2, 2, 2, 4, 4, 4, 6]
    assert (LAN.probe_timeout, LAN.indirect_checks, LAN.suspicion_mult, LAN.retransmit_mult) == (0.5, 3, 4, 4)
    assert failure_detection_bound(LOCAL, 3) == pytest.approx(9.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("probe_interval", 0.0),
        ("probe_timeout", 1.0),
        ("indirect_checks", 0),
        ("gossip_nodes", 0),
        ("max_payload_bytes", 60 * 1024),
        ("max_message_bytes", 70_000),
    ],
)
def test_config_rejects_bad_values(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        SwimConfig(**{field: value})  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- join


def test_join_through_seeds_is_transitive() -> None:
    sim = Simulation(seed=1)
    a = sim.add("a")
    b = sim.add("b", ["a"])
    c = sim.add("c", ["b"])
    assert sim.run_until(lambda: sees_all_alive(sim), 2.0), [(n.name, n.members()) for n in sim.running()]
    # C was only told about B and A only ever heard from others; both still learn each other.
    assert a.member("c") is not None and c.member("a") is not None
    assert a.member("c").address == sim.address_of("c")  # type: ignore[union-attr]
    assert all(n.stats.invalid_messages == 0 for n in (a, b, c))


def test_join_retries_a_seed_that_starts_later() -> None:
    sim = Simulation(seed=2)
    c = sim.add("c", ["b"])
    sim.run_for(5.0)
    assert c.members() == []
    sim.add("b")
    # C knocks on its seed once per probe interval while alone.
    assert sim.run_until(lambda: sees_all_alive(sim), LOCAL.probe_interval + 0.01)


# ----------------------------------------------------------------------------- failure detection


def test_stopped_member_becomes_suspect_then_dead_within_the_bound() -> None:
    sim = group(["a", "b", "c"], seed=3)
    events = record(sim, sim.running())
    stopped_at = sim.now
    sim.stop("c")
    bound = failure_detection_bound(LOCAL, 3)
    detected = sim.run_until(
        lambda: all(n.member("c").status == "dead" for n in sim.running()),  # type: ignore[union-attr]
        bound,
    )
    assert detected, f"c not dead everywhere within {bound}s: {dict(events)}"
    suspected = [t for obs in ("a", "b") for t, s in events[(obs, "c")] if s == "suspect"]
    dead = [t for obs in ("a", "b") for t, s in events[(obs, "c")] if s == "dead"]
    assert suspected and dead
    # Suspect first (no earlier than one failed probe), dead only after the full suspicion timeout.
    assert min(suspected) >= stopped_at + LOCAL.probe_interval - 1e-9
    assert min(dead) - min(suspected) >= LOCAL.suspicion_timeout(3) - 1e-9
    assert max(dead) - stopped_at <= bound
    for observer in ("a", "b"):
        assert [s for _, s in events[(observer, "c")]][-1] == "dead"


def test_indirect_probe_saves_a_member_whose_direct_link_is_lost() -> None:
    sim = group(["a", "b", "c"], seed=4)
    a, b = sim.nodes["a"], sim.nodes["b"]
    events = record(sim, sim.running())
    sim.network.block(a.address, b.address)
    sim.run_for(60.0)
    assert a.member("b").status == "alive" and b.member("a").status == "alive"  # type: ignore[union-attr]
    assert not events[("a", "b")] and not events[("b", "a")], dict(events)
    assert a.stats.indirect_acks > 0 and b.stats.indirect_acks > 0
    # Without the third member to ask, the same lost link is a failure.
    sim.stop("c")
    assert sim.run_until(lambda: a.member("b").status != "alive", 2 * failure_detection_bound(LOCAL, 3))  # type: ignore[union-attr]


def test_falsely_suspected_member_refutes_and_stays_alive() -> None:
    sim = group(["a", "b", "c"], seed=5)
    a, b, c = (sim.nodes[name] for name in "abc")
    events = record(sim, sim.running())
    rumour = Message("gossip", "c", updates=(MemberUpdate("b", "suspect", b.incarnation, b.address),))
    inject(sim, "c", "a", rumour)
    assert sim.run_until(
        lambda: b.incarnation == 1 and all(n.member("b").incarnation == 1 for n in (a, c)),  # type: ignore[union-attr]
        LOCAL.suspicion_timeout(3),
    )
    sim.run_for(2 * LOCAL.suspicion_timeout(3))
    assert [s for _, s in events[("a", "b")]] == ["suspect", "alive"]
    assert all(s != "dead" for key, seen in events.items() if key[1] == "b" for _, s in seen)
    assert b.stats.refutations == 1
    assert a.member("b").status == c.member("b").status == "alive"  # type: ignore[union-attr]


def test_member_cut_off_briefly_refutes_before_the_suspicion_timeout() -> None:
    sim = group(["a", "b", "c"], seed=6)
    b = sim.nodes["b"]
    events = record(sim, sim.running())
    for other in ("a", "c"):
        sim.network.block(b.address, sim.address_of(other))
    assert sim.run_until(lambda: any(s == "suspect" for _, s in events[("a", "b")] + events[("c", "b")]), 10.0)
    # Let every gossip retransmission of the suspicion be spent while b cannot hear it; the next
    # probe of b still tells b that it is suspected.
    assert sim.run_until(lambda: all(sim.nodes[o].pending_broadcasts() == 0 for o in "ac"), 1.0)
    sim.network.heal()
    sim.run_for(3 * LOCAL.suspicion_timeout(3))
    assert all(s != "dead" for key, seen in events.items() if key[1] == "b" for _, s in seen), dict(events)
    assert b.incarnation >= 1
    assert sees_all_alive(sim)


def test_dead_in_a_full_state_exchange_only_makes_a_live_member_suspect() -> None:
    sim = group(["a", "b", "c"], seed=18)
    a, b = sim.nodes["a"], sim.nodes["b"]
    events = record(sim, sim.running())
    state = Message("sync", "c", reply=True, updates=(MemberUpdate("b", "dead", b.incarnation, b.address),))
    inject(sim, "c", "a", state)
    sim.run_for(2 * LOCAL.suspicion_timeout(3))
    assert [s for _, s in events[("a", "b")]] == ["suspect", "alive"]
    assert b.incarnation == 1 and a.member("b").status == "alive"  # type: ignore[union-attr]


def test_partition_then_heal() -> None:
    sim = group(["a", "b", "c", "d"], seed=7)
    a, b, c, d = (sim.nodes[name] for name in "abcd")
    sim.network.partition([a.address, b.address], [c.address, d.address])

    def split() -> bool:
        return all(
            n.member(o).status == "dead"  # type: ignore[union-attr]
            for n, others in ((a, "cd"), (b, "cd"), (c, "ab"), (d, "ab"))
            for o in others
        )

    assert sim.run_until(split, 2 * failure_detection_bound(LOCAL, 4))
    assert a.member("b").status == "alive" and c.member("d").status == "alive"  # type: ignore[union-attr]
    sim.network.heal()
    healed_at = sim.now
    # Reconnection is the periodic push-pull with a dead member; two rounds bound it.
    assert sim.run_until(lambda: sees_all_alive(sim), 2 * LOCAL.push_pull_interval), [
        (n.name, [(m.name, m.status) for m in n.members()]) for n in sim.running()
    ]
    assert sim.now - healed_at <= 2 * LOCAL.push_pull_interval


def test_graceful_leave_is_seen_as_left_not_failed() -> None:
    sim = group(["a", "b", "c"], seed=8)
    events = record(sim, sim.running())
    sim.stop("c", leave=True)
    assert sim.run_until(
        lambda: all(n.member("c").status == "left" for n in sim.running()),  # type: ignore[union-attr]
        LOCAL.probe_interval,
    )
    sim.run_for(failure_detection_bound(LOCAL, 3))
    assert [s for _, s in events[("a", "c")]] == ["left"] and [s for _, s in events[("b", "c")]] == ["left"]


def test_age_is_kept_from_first_suspicion_through_dead_and_cleared_on_rejoin() -> None:
    sim = group(["a", "b", "c"], seed=9)
    a = sim.nodes["a"]
    sim.stop("c")
    assert sim.run_until(lambda: a.member("c").status == "suspect", failure_detection_bound(LOCAL, 3))  # type: ignore[union-attr]
    suspected_at = sim.now
    view = a.member("c")
    assert view is not None and view.status_changed_at == suspected_at and view.age_secs == 0
    sim.run_for(2.5)
    assert a.member("c").age_secs == 2  # type: ignore[union-attr]
    assert sim.run_until(lambda: a.member("c").status == "dead", LOCAL.suspicion_timeout(3))  # type: ignore[union-attr]
    sim.run_for(4.0)
    view = a.member("c")
    assert view is not None and view.status_changed_at == suspected_at
    assert view.age_secs == math.floor(sim.now - suspected_at)
    # The same name restarting at incarnation 0 refutes its death and comes back alive.
    restarted = sim.add("c", ["a"])
    assert sim.run_until(lambda: sees_all_alive(sim), 2 * LOCAL.probe_interval)
    view = a.member("c")
    assert view is not None and view.status_changed_at is None and view.age_secs == 0
    assert restarted.incarnation > 0


# ----------------------------------------------------------------------------- dissemination


def _disseminate(seed: int) -> tuple[bool, dict[tuple[str, int], int]]:
    """Publish one update in a converged group of ten; return whether gossip alone reached everyone
    within the hop bound, and how many non-sync messages each member sent carrying it."""
    config = LOCAL
    names = [f"n{i}" for i in range(10)]
    sim = group(names, config=config, seed=seed)
    limit = config.retransmit_limit(len(names))
    carried: dict[tuple[str, int], int] = defaultdict(int)
    synced: list[float] = []

    def tap(source: tuple[str, int], _: tuple[str, int], data: bytes) -> None:
        body = json.loads(data)
        if any(u.get("k") == "payload" and u["n"] == "n3" for u in body["u"]):
            if body["t"] == "sync":
                synced.append(sim.now)
            else:
                carried[source] += 1

    sim.network.taps.append(tap)
    sim.nodes["n3"].set_local_payload(b"provider records v1")
    # A holder sends at most `limit` copies, gossip_nodes per round; the update crosses at most n-1 hops.
    bound = (len(names) - 1) * math.ceil(limit / config.gossip_nodes) * config.gossip_interval

    def everyone() -> bool:
        return all(n.payload("n3") == (1, b"provider records v1") for n in sim.running())

    by_gossip = sim.run_until(everyone, bound) and not synced
    # Whatever gossip missed, the periodic full-state exchange delivers within one interval.
    assert sim.run_until(everyone, config.push_pull_interval), f"seed {seed}: update lost"
    assert sim.run_until(lambda: all(n.pending_broadcasts() == 0 for n in sim.running()), 30.0)
    assert max(carried.values()) <= limit, f"seed {seed}: {dict(carried)}"
    return by_gossip, carried


def test_dissemination_respects_the_retransmit_bound_and_reaches_everyone() -> None:
    """Each member sends an update at most retransmit_limit(n) = 4 times (n = 10). Epidemic delivery
    is probabilistic: gossip alone reaches all ten in most runs, anti-entropy covers the rest."""
    assert LOCAL.retransmit_limit(10) == 4
    runs = [_disseminate(seed) for seed in range(20)]
    by_gossip = sum(1 for reached, _ in runs if reached)
    assert by_gossip >= 16, f"gossip alone reached everyone in only {by_gossip} of {len(runs)} runs"
    # The update really spreads member to member, not only from its origin.
    assert all(len(carried) > 3 for _, carried in runs)


def test_payload_versions_newer_replaces_older_is_ignored() -> None:
    sim = group(["a", "b", "c"], seed=13)
    a, b, c = (sim.nodes[name] for name in "abc")
    seen: list[tuple[str, int, bytes]] = []

    def watcher(who: str) -> Callable[[MemberView, bytes], None]:
        return lambda view, data: seen.append((who, view.payload_version, data))

    for node in (b, c):
        node.on_payload(watcher(node.name))
    assert a.set_local_payload(b"first") == 1
    assert sim.run_until(lambda: b.payload("a") == (1, b"first") and c.payload("a") == (1, b"first"), 1.0)
    assert a.set_local_payload(b"second") == 2
    assert sim.run_until(lambda: b.payload("a") == (2, b"second") and c.payload("a") == (2, b"second"), 1.0)
    assert sorted(seen) == [("b", 1, b"first"), ("b", 2, b"second"), ("c", 1, b"first"), ("c", 2, b"second")]
    # A late copy of version 1 changes nothing and notifies nobody.
    stale_before = b.stats.stale_payloads
    inject(sim, "c", "b", Message("gossip", "c", updates=(PayloadUpdate("a", 1, b"first"),)))
    sim.run_for(1.0)
    assert b.payload("a") == (2, b"second") and b.stats.stale_payloads > stale_before
    assert len(seen) == 4
    # A higher version under a's name that a never wrote (an earlier run): a republishes its own above it.
    inject(sim, "c", "a", Message("gossip", "c", updates=(PayloadUpdate("a", 9, b"ghost"),)))
    assert sim.run_until(lambda: all(n.payload("a") == (10, b"second") for n in (a, b, c)), 2.0)


def test_payload_size_is_bounded() -> None:
    sim = group(["a", "b"], seed=14)
    a, b = sim.nodes["a"], sim.nodes["b"]
    with pytest.raises(ValueError, match="exceeds"):
        a.set_local_payload(b"x" * (LOCAL.max_payload_bytes + 1))
    a.set_local_payload(b"x" * LOCAL.max_payload_bytes)
    assert sim.run_until(lambda: b.payload("a") == (1, b"x" * LOCAL.max_payload_bytes), 1.0)


@pytest.mark.parametrize("seed", range(40))
def test_a_chain_joiner_reaches_the_far_member_by_gossip_not_push_pull(seed: int) -> None:
    """c joins through b only; a must hear of c (and c of a), payloads included, within a few probe
    intervals, long before the next push-pull (15 s), whatever order the random choices take."""
    sim = group(["a", "b"], seed=seed)
    sim.nodes["a"].set_local_payload(b"from-a")
    assert sim.run_until(lambda: sim.nodes["a"].pending_broadcasts() == 0, 5.0)
    c = sim.add("c", ["b"])
    c.set_local_payload(b"from-c")

    def converged() -> bool:
        seen_c = sim.nodes["a"].member("c")
        seen_a = c.member("a")
        return (seen_c is not None and seen_c.status == "alive" and seen_a is not None and seen_a.status == "alive"
                and sim.nodes["a"].payload("c") == (1, b"from-c") and c.payload("a") == (1, b"from-a"))

    assert sim.run_until(converged, 3 * LOCAL.probe_interval), "a and c did not learn of each other by gossip"


def test_exchange_state_spreads_a_member_whose_news_was_spent() -> None:
    """b learned of c but its retransmissions went nowhere useful; an explicit exchange tells a at once."""
    sim = group(["a", "b"], seed=3)
    c = sim.add("c", ["b"])
    assert sim.run_until(lambda: sim.nodes["b"].member("c") is not None, 1.0)
    sim.nodes["b"]._broadcasts.clear()  # as if every retransmission of "c alive" had gone to c itself
    sim.nodes["c"]._broadcasts.clear()
    sim.run_for(2 * LOCAL.probe_interval)
    assert sim.nodes["a"].member("c") is None, "only the next push-pull, 15 s away, should tell a of c"
    sim.nodes["b"].exchange_state()

    def a_sees_c() -> bool:
        seen = sim.nodes["a"].member("c")
        return seen is not None and seen.status == "alive"

    assert sim.run_until(a_sees_c, 0.1)
    assert c.member("a") is not None


def test_late_joiner_gets_payloads_by_full_state_exchange() -> None:
    sim = group(["a", "b"], seed=15)
    sim.nodes["a"].set_local_payload(b"records")
    assert sim.run_until(lambda: sim.nodes["a"].pending_broadcasts() == 0, 5.0)
    late = sim.add("late", ["b"])
    assert sim.run_until(lambda: late.payload("a") == (1, b"records"), LOCAL.probe_interval)


# ----------------------------------------------------------------------------- invalid input


def _message(**overrides: object) -> bytes:
    body: dict[str, object] = {"v": 1, "t": "ping", "from": "x", "seq": 1, "to": "", "u": []}
    body.update(overrides)
    return json.dumps(body).encode()


def _payload_update(data: str) -> dict[str, object]:
    return {"k": "payload", "n": "x", "pv": 1, "d": data}


BAD_DATAGRAMS = [
    (b"", "not_json"),
    (b"\xff\xfe\x00garbage", "not_json"),
    (b"[1, 2]", "not_object"),
    (b"[" * 20_000 + b"]" * 20_000, "not_json"),
    (b" " * (codec.MAX_MESSAGE_BYTES + 1), "oversized"),
    (_message(v=2), "unsupported_version"),
    (_message(v=True), "unsupported_version"),
    (_message(t="shout"), "bad_field"),
    (_message(**{"from": ""}), "bad_field"),
    (_message(seq=True), "bad_field"),
    (_message(seq=-1), "bad_field"),
    (_message(u={"k": "member"}), "bad_field"),
    (_message(u=[{"k": "member", "n": "y", "s": "zombie", "i": 0, "a": ["h", 1]}]), "bad_field"),
    (_message(u=[{"k": "member", "n": "y", "s": "alive", "i": 0, "a": ["h", 70000]}]), "bad_field"),
    (_message(u=["alive"]), "bad_update"),
    (_message(u=[_payload_update("not base64!")]), "bad_payload"),
    (_message(u=[_payload_update(base64.b64encode(b"x" * (LOCAL.max_payload_bytes + 1)).decode())]), "bad_payload"),
    (_message(t="ping_req", ta="h:1"), "bad_field"),
]


@pytest.mark.parametrize(("data", "reason"), BAD_DATAGRAMS)
def test_decode_rejects_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(codec.CodecError) as caught:
        codec.decode(data)
    assert caught.value.reason == reason


def test_invalid_datagrams_are_counted_and_ignored() -> None:
    sim = group(["a", "b"], seed=16)
    a, b = sim.nodes["a"], sim.nodes["b"]
    for data, _ in BAD_DATAGRAMS:
        inject(sim, "b", "a", data)
    sim.run_for(0.01)
    expected: dict[str, int] = defaultdict(int)
    for _, reason in BAD_DATAGRAMS:
        expected[reason] += 1
    assert a.stats.invalid_messages == len(BAD_DATAGRAMS)
    assert dict(a.stats.invalid_reasons) == expected
    # Still a working member: b's payload reaches a, nobody was suspected.
    b.set_local_payload(b"after the noise")
    assert sim.run_until(lambda: a.payload("b") == (1, b"after the noise"), 1.0)
    assert a.member("b").status == "alive"  # type: ignore[union-attr]


def test_codec_round_trip_and_exact_sizes() -> None:
    updates = (
        MemberUpdate("a", "suspect", 3, ("a.sim", 7946)),
        PayloadUpdate("a", 2, b"\x00\x01binary"),
    )
    messages = [
        Message("ping", "b", seq=7, target="a", updates=updates),
        Message("ack", "a", seq=7),
        Message("ping_req", "b", seq=8, target="c", target_address=("c.sim", 7946)),
        Message("gossip", "c", updates=updates),
        Message("sync", "c", reply=True, updates=updates),
    ]
    for message in messages:
        data = codec.encode(message)
        assert codec.decode(data) == message
        sizes = [codec.update_size(u) for u in message.updates]
        assert len(data) == codec.base_size(message) + sum(sizes) + max(0, len(sizes) - 1)


def test_sent_bytes_match_the_wire_and_gossip_rate_is_reported() -> None:
    sim = Simulation(seed=17)
    wire: dict[tuple[str, int], int] = defaultdict(int)
    sim.network.taps.append(lambda source, _, data: wire.__setitem__(source, wire[source] + len(data)))
    nodes = [sim.add("a"), sim.add("b", ["a"]), sim.add("c", ["a"])]
    sim.run_for(60.0)
    for node in nodes:
        assert node.stats.sent_bytes == wire[node.address]
        assert node.sent_bytes_per_second() == pytest.approx(wire[node.address] / 60.0)
        assert 0 < node.sent_bytes_per_second() < 10_000


# ----------------------------------------------------------------------------- real UDP


def test_three_members_converge_over_udp_on_loopback() -> None:
    fast = SwimConfig(probe_interval=0.2, probe_timeout=0.05, gossip_interval=0.02, push_pull_interval=1.0)

    async def body() -> list[tuple[str, int]]:
        members: list[UdpMember] = []
        try:
            a = await UdpMember.start("a", "127.0.0.1", 0, config=fast)
            members.append(a)
            b = await UdpMember.start("b", "127.0.0.1", 0, seeds=[a.address], config=fast)
            members.append(b)
            c = await UdpMember.start("c", "127.0.0.1", 0, seeds=[b.address], config=fast)
            members.append(c)
            c.node.set_local_payload(b"from c")
            deadline = time.monotonic() + 5.0
            seen: list[set[str]] = []
            while time.monotonic() < deadline:
                seen = [{v.name for v in m.node.members() if v.status == "alive"} for m in members]
                if seen == [{"b", "c"}, {"a", "c"}, {"a", "b"}] and a.node.payload("c") == (1, b"from c"):
                    break
                await asyncio.sleep(0.01)
            assert seen == [{"b", "c"}, {"a", "c"}, {"a", "b"}], seen
            assert a.node.payload("c") == (1, b"from c")
            # A graceful leave over UDP is seen as left.
            await c.close(leave=True)
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and a.node.member("c").status != "left":  # type: ignore[union-attr]
                await asyncio.sleep(0.01)
            assert a.node.member("c").status == "left"  # type: ignore[union-attr]
            assert all(m.node.stats.invalid_messages == 0 for m in members)
            return [m.address for m in members]
        finally:
            for member in members:
                await member.close(leave=False)

    addresses = asyncio.run(asyncio.wait_for(body(), 30.0))
    # Every port is free again once the members are closed.
    for host, port in addresses:
        assert host == "127.0.0.1"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind((host, port))
