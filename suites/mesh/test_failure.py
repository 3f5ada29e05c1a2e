"""A site that crashes, leaves or is cut off: failure detection, degraded candidates, the stale TTL, healing.

Each test gets a mesh of its own, since it stops or isolates a site. Failure detection is bounded by the
SWIM timing the harness gives every operator (probe interval, suspicion multiplier; see
harness.mesh_oracle.SwimTiming) plus the time to re-render.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from harness import mesh_oracle as oracle
from harness.mesh import MeshScenario
from harness.timeouts import timeouts
from harness.waiting import poll_until

ARCH = "routing-architecture-and-overlay-contract"
STALE = f"{ARCH}#stale-candidate-retention-and-expiry"
MEMBERS = 3


def _remote_live(world: MeshScenario, *, ttl: int) -> tuple[str, str]:
    """A network where site-a routes site-c's model (fresh) besides its own; returns (remote, local) models."""
    world.network(ttl=ttl)
    remote, local = world.model("c"), world.model("a")
    world.trust("site-a", "site-c")
    world.provider("site-c", "pc", [remote])
    world.provider("site-a", "pa", [local])
    world.wait_envelope("site-a", lambda e: [r.get("fresh") for r in oracle.from_site(e, remote, "site-c")] == [True],
                        what=f"site-c's fresh candidate for {remote}")
    return remote, local


def _fresh_flags(world: MeshScenario, model: str) -> list[Any]:
    return [r.get("fresh") for r in oracle.from_site(world.envelope("site-a"), model, "site-c")]


@pytest.mark.conformance(id="MESH-FAILURE-DETECTION-BOUNDED", profile="mesh", level="core", feature="gossip",
                         spec=f"{STALE}; SWIM member age; failure detection within the configured timing",
                         statements=["OC-LOCALITY-DEGRADED-STALE", "OC-STALE-RETAINED",
                                     "OC-REGEN-REMOTE-DISAPPEARS", "OC-STALE-OBSERVABILITY",
                                     "OC-REGEN-CURRENT-STATE", "RG-RELOAD-AGN-PUBLISHES",
                                     "RG-NOTMEAN-NOMETRICS-STILL-APPLY"])
@pytest.mark.lasts(8)
def test_crash_is_detected_within_the_swim_bound_and_degrades_candidates(fresh: MeshScenario) -> None:
    remote, _local = _remote_live(fresh, ttl=3600)
    timing = fresh.mesh.timing
    bound = timing.detection_bound(MEMBERS) + oracle.RECONCILE_SLACK
    started = time.monotonic()
    fresh.mesh.kill("site-c")
    a, b = fresh.mesh.site("site-a"), fresh.mesh.site("site-b")
    poll_until(lambda: oracle.member_status(a.mesh_status(), "site-c"), lambda s: s == "dead", timeout=bound + 10,
               what="site-a to hold site-c dead")
    dead_at = time.monotonic() - started
    poll_until(lambda: _fresh_flags(fresh, remote), lambda f: f == [False], timeout=timeouts().failure_detection,
               what=f"site-a's candidate for {remote} to be kept with fresh: false")
    degraded_at = time.monotonic() - started
    poll_until(lambda: oracle.member_status(b.mesh_status(), "site-c"), lambda s: s == "dead",
               timeout=timeouts().failure_detection,
               what="site-b to hold site-c dead")
    print(f"\nfailure detection: dead at site-a after {dead_at:.2f}s, candidate degraded after {degraded_at:.2f}s "
          f"(bound {bound:.2f}s = SWIM {timing.detection_bound(MEMBERS):.2f}s + {oracle.RECONCILE_SLACK:g}s render)")
    assert dead_at <= bound, \
        f"site-c was declared dead after {dead_at:.2f}s; the configured timing bounds it at {bound:.2f}s"
    assert degraded_at <= bound, f"site-c's candidate turned fresh: false after {degraded_at:.2f}s (bound {bound:.2f}s)"


@pytest.mark.conformance(id="MESH-STALE-TTL-EVICTION", profile="mesh", level="core", feature="staleness",
                         spec=f"{STALE}; Per-GridNetwork TTL: degraded remote candidates removed after the TTL",
                         statements=["OC-TTL-FIELD", "OC-TTL-ONLY-DEGRADED-REMOTE",
                                     "OC-TTL-LOCAL-AVAILABLE-RETAINED", "OC-GC-EVICT-AFTER-TTL-ONLY",
                                     "OC-GC-NO-HARD-EXCLUSION", "OC-STALE-RETAINED", "OC-LOCALITY-DEGRADED-STALE",
                                     "OC-TTL-AFTER-SWIM-OVERRIDE", "OC-TTL-AT-RENDER-TIME", "OC-TTL-CRDT-NOT-DELETED"])
@pytest.mark.lasts(10)
def test_degraded_candidates_stay_until_the_ttl_then_go(fresh: MeshScenario) -> None:
    ttl = 3
    remote, local = _remote_live(fresh, ttl=ttl)
    bound = fresh.mesh.timing.detection_bound(MEMBERS) + oracle.RECONCILE_SLACK
    a = fresh.mesh.site("site-a")
    down_at: list[float] = []  # when site-a first listed site-c suspect or dead

    def flags() -> list[Any]:
        if not down_at and oracle.member_status(a.mesh_status(), "site-c") in ("suspect", "dead"):
            down_at.append(time.monotonic())
        return _fresh_flags(fresh, remote)

    started = time.monotonic()
    fresh.mesh.kill("site-c")
    poll_until(flags, lambda f: f == [False], timeout=bound + 10,
               what=f"site-a to keep site-c's candidate for {remote} with fresh: false (not drop it at once)",
               describe=lambda f: f"fresh flags of site-c's candidates: {f}")
    poll_until(flags, lambda f: f == [], timeout=bound + ttl + 10,
               what=f"site-a to drop site-c's degraded candidate once the {ttl}s TTL has passed")
    gone_at = time.monotonic()
    gone = gone_at - started
    print(f"\nstale TTL: site-c's candidate removed {gone:.2f}s after the crash, "
          f"{gone_at - down_at[0] if down_at else float('nan'):.2f}s after site-a listed it down (TTL {ttl}s)")
    assert gone >= ttl, f"the degraded candidate was removed {gone:.2f}s after the crash, before the {ttl}s TTL"
    # The age the TTL is compared with started no later than site-a first listed site-c down, so the
    # candidate must be gone within the TTL plus one render of that instant (and one status poll).
    assert down_at, "site-a never listed site-c as suspect or dead while its candidate was degraded"
    late = gone_at - down_at[0]
    assert late <= ttl + oracle.RECONCILE_SLACK + 0.5, \
        f"site-c's candidate was removed {late:.2f}s after site-a listed site-c down; the {ttl}s TTL counted from " \
        f"that transition bounds it at {ttl + oracle.RECONCILE_SLACK + 0.5:.1f}s"
    envelope = fresh.mesh.site("site-a").control.reconcile(fresh.net)
    assert [r.get("fresh") for r in oracle.from_site(envelope, local, "site-a")] == [True], \
        f"local candidates are always kept: {oracle.summary(oracle.candidates_for(envelope, local))}"
    # The TTL removes the candidate from the rendered overlay only: site-a still stores site-c's record. Read
    # it from a status written a whole second after site-c's age passed the TTL, so after the render that
    # evicted the candidate (a status read at once may predate that render). How often an operator rewrites
    # members' ages in its status is its own choice (one in a cluster may batch them to spare the API
    # server), so this waits as long as any status write may take.
    def aged(s: Any) -> bool:  # a status no longer listing site-c cannot grow older: take it as it is
        age = oracle.member_age(s, "site-c")
        return age is None or age >= ttl + 1

    status = poll_until(a.mesh_status, aged,
                        timeout=timeouts().status, what=f"site-a to list site-c's age past {ttl + 1}s",
                        describe=lambda s: f"site-c's age: {oracle.member_age(s, 'site-c')}")
    kept = oracle.records_of(status, site="site-c", network=fresh.net, provider=f"{fresh.tag}-pc")
    assert kept, (f"the TTL must not delete site-c's CRDT record of {fresh.tag}-pc from site-a's store; site-a's "
                  f"mesh status lists {oracle.records_of(status, site='site-c')}")


@pytest.mark.conformance(id="MESH-LEAVE-REMOVES-AT-ONCE", profile="mesh", level="core", feature="gossip",
                         spec=f"{STALE}; a site that leaves the grid is Left, not a stale peer",
                         statements=["OC-LOCALITY-UNAVAILABLE-EXCLUDED", "OC-REGEN-REMOTE-DISAPPEARS"])
@pytest.mark.lasts(3)
def test_graceful_leave_removes_the_site_without_waiting_for_the_ttl(fresh: MeshScenario) -> None:
    remote, _local = _remote_live(fresh, ttl=3600)
    bound = fresh.mesh.timing.detection_bound(MEMBERS) + oracle.RECONCILE_SLACK
    fresh.mesh.sites["site-c"].control.process.stop()
    fresh.wait_gridsite("site-a", "site-c", lambda phase, _r: phase == "Left", what="Left", timeout=bound)
    poll_until(lambda: _fresh_flags(fresh, remote), lambda f: f == [], timeout=bound,
               what="site-a to drop the candidate of site-c, which left (TTL 3600s must not apply)")


@pytest.mark.conformance(id="MESH-PARTITION-DEGRADE-EVICT-HEAL", profile="mesh", level="core", feature="staleness",
                         spec=f"{STALE}; partition: fresh: false, removal after the TTL, restored on heal",
                         statements=["OC-LOCALITY-DEGRADED-STALE", "OC-STALE-RETAINED",
                                     "OC-GC-EVICT-AFTER-TTL-ONLY", "OC-REGEN-REMOTE-DISAPPEARS",
                                     "OC-STALE-OBSERVABILITY", "OC-TTL-AFTER-SWIM-OVERRIDE",
                                     "OC-TTL-AT-RENDER-TIME"])
@pytest.mark.lasts(9.5)
def test_partition_degrades_then_evicts_and_healing_restores(cut: MeshScenario) -> None:
    ttl = 3
    remote, _local = _remote_live(cut, ttl=ttl)
    bound = cut.mesh.timing.detection_bound(MEMBERS) + oracle.RECONCILE_SLACK
    started = time.monotonic()
    cut.mesh.partition(["site-c"], ["site-a", "site-b"])
    poll_until(lambda: _fresh_flags(cut, remote), lambda f: f == [False], timeout=bound + 10,
               what=f"site-a to mark site-c's candidate for {remote} fresh: false while site-c is cut off")
    poll_until(lambda: _fresh_flags(cut, remote), lambda f: f == [], timeout=bound + ttl + 10,
               what=f"site-a to drop site-c's candidate once the {ttl}s TTL has passed")
    assert time.monotonic() - started >= ttl, "the candidate was removed before the TTL"
    cut.mesh.heal()
    poll_until(lambda: _fresh_flags(cut, remote), lambda f: f == [True], timeout=timeouts().heal,
               what=f"site-a to route site-c's {remote} again, fresh, after the link healed")


@pytest.mark.conformance(id="MESH-MEMBER-AGE-CLEARED-ON-REJOIN", profile="mesh", level="core", feature="gossip",
                         spec=f"{STALE}; SWIM member age: \"When the member rejoins (Alive), the instant is cleared.\"",
                         statements=["OC-SWIM-REJOIN-CLEARED"])
@pytest.mark.lasts(10)
def test_member_age_starts_again_after_a_rejoin(cut: MeshScenario) -> None:
    """site-c is cut off until site-a has listed it down for 2 s, then the link heals: once site-a lists it
    alive its age is 0, and when site-c is cut off a second time its age counts from the second suspicion,
    not from the first outage. Fails if the instant of the first transition survives the rejoin."""
    cut.network()
    a = cut.mesh.site("site-a")
    bound = cut.mesh.timing.detection_bound(MEMBERS) + oracle.RECONCILE_SLACK

    def view() -> tuple[float, str | None, int | None]:
        status = a.mesh_status()
        return time.monotonic(), oracle.member_status(status, "site-c"), oracle.member_age(status, "site-c")

    def shown(row: tuple[float, str | None, int | None]) -> str:
        return f"site-a lists site-c {row[1]} with ageSecs {row[2]}"

    poll_until(view, lambda r: r[1] == "alive", timeout=timeouts().member_state, what="site-a to list site-c alive",
               describe=shown)
    first_cut = time.monotonic()
    cut.mesh.partition(["site-c"], ["site-a", "site-b"])
    poll_until(view, lambda r: r[1] in ("suspect", "dead") and (r[2] or 0) >= 2, timeout=bound + 10,
               what="site-a to list site-c down for 2 s", describe=shown)
    cut.mesh.heal()
    poll_until(view, lambda r: r[1] == "alive", timeout=timeouts().heal,
               what="site-a to list site-c alive after the heal", describe=shown)
    for _ in range(3):
        row = view()
        assert row[1] != "alive" or row[2] == 0, f"after the rejoin {shown(row)}: an alive member's age is 0"
    second_cut = time.monotonic()
    cut.mesh.partition(["site-c"], ["site-a", "site-b"])
    down = poll_until(view, lambda r: r[1] in ("suspect", "dead") and r[2] is not None, timeout=bound + 10,
                      what="site-a to list site-c down again", describe=shown)
    limit = down[0] - second_cut + 1
    assert down[2] is not None and down[2] <= limit, (
        f"{shown(down)} {down[0] - second_cut:.1f}s after the second cut ({down[0] - first_cut:.1f}s after the "
        f"first): the age must count from the second suspicion (at most {limit:.1f}s), the rejoin cleared the first")


@pytest.mark.conformance(id="MESH-MEMBER-AGE-MONOTONIC", profile="mesh", level="core", feature="gossip",
                         spec=f"{STALE}; SWIM member age: \"When a member transitions to Dead or Suspect, the instant "
                              "is recorded and preserved monotonically.\"",
                         statements=["OC-SWIM-AGE-SECS", "OC-SWIM-TRANSITION-RECORDED", "OC-SWIM-AGE-COMPUTED",
                                     "OC-SWIM-AGE-ZERO-ALIVE"])
@pytest.mark.lasts(10)
def test_member_age_counts_from_the_first_suspicion_through_death(fresh: MeshScenario) -> None:
    """site-a's view of site-c: age 0 while alive; once site-c crashes its age never goes down, and the move
    from suspect to dead does not restart it (the instant of the first transition is kept)."""
    fresh.network()
    a = fresh.mesh.site("site-a")
    samples: list[tuple[float, str | None, int | None]] = []

    def sample() -> list[tuple[float, str | None, int | None]]:
        status = a.mesh_status()
        samples.append((time.monotonic(), oracle.member_status(status, "site-c"), oracle.member_age(status, "site-c")))
        return samples

    alive = poll_until(sample, lambda rows: rows[-1][1] == "alive", timeout=timeouts().member_state,
                       what="site-a to list site-c alive")[-1]
    assert alive[2] == 0, f"an alive member's ageSecs is 0; site-a lists site-c alive with ageSecs {alive[2]}"
    samples.clear()

    def dead_for(seconds: float) -> Any:
        return lambda rows: any(s == "dead" for _, s, _ in rows) and \
            rows[-1][0] - next(t for t, s, _ in rows if s == "dead") >= seconds

    fresh.mesh.kill("site-c")
    bound = fresh.mesh.timing.detection_bound(MEMBERS) + oracle.RECONCILE_SLACK
    poll_until(sample, dead_for(2.0), timeout=bound + 10, what="site-a to hold site-c dead for 2 s",
               describe=lambda rows: f"last (status, ageSecs): {[(s, age) for _, s, age in rows[-5:]]}")
    down = [(t, s, age) for t, s, age in samples if s in ("suspect", "dead")]
    ages = [age for _, _, age in down if isinstance(age, int)]
    assert len(ages) == len(down), f"a suspect or dead member lists an integer ageSecs: {[r[2] for r in down]}"
    drops = [(before, after) for before, after in zip(ages, ages[1:], strict=False) if after < before]
    assert not drops, f"site-c's ageSecs went down while it was suspect or dead: {drops} in {ages}"
    suspect = [(t, age) for t, s, age in down if s == "suspect"]
    first_dead_at, _, dead_age = next(row for row in down if row[1] == "dead")
    if suspect:
        since = first_dead_at - suspect[0][0]
        assert dead_age is not None and dead_age >= int(since) - 1, \
            f"site-a listed site-c suspect for {since:.1f}s before dead, yet its first dead ageSecs is {dead_age}: " \
            "the age must count from the first transition, not restart at death"
