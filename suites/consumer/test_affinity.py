"""Session affinity: reuse before selection, existing_only only via a binding, TTL and failover.

Affinity is seen without any selection mode: a binding made on a policy-free overlay survives a reorder
that sends new sessions elsewhere. Only the case that combines affinity with round robin needs a mode,
and it sits under that mode's feature.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from harness.gateway_config import SESSION_COOKIE, SESSION_HEADER
from harness.grid import Gateway, Site
from harness.waiting import wait_until_elapsed

SPEC = ("routing-guide 8. Session affinity: \"Existing permitted binding: reuse the provider. No binding: run normal "
        "group + selection-mode logic and record the successful binding.\"")
ADMISSION = ("intelligent-route-filter, Selection: \"existing_only is eligible only through an already-bound session "
             "affinity entry.\"")


def _session() -> str:
    return uuid.uuid4().hex


def _ordered(site: Site, model: str, *providers: str) -> dict:
    """A policy-free, group-free overlay: deterministic first-admitted selection in this order."""
    return site.envelope([site.candidate(p, model) for p in providers])


def _bind(gw: Gateway, model: str, expected: str, **key: Any) -> None:
    reply = gw.request(model, **key)
    assert reply.status == 200 and reply.backend == expected, f"the first request must bind {expected}: " \
        f"{reply.describe()}"


@pytest.mark.conformance(id="CONS-AFFINITY-HEADER-REUSE", profile="consumer", level="core", feature="headerAffinity",
                         spec=SPEC,
                         statements=["RG-AFFINITY-REUSE-BINDING", "RG-AFFINITY-NO-BINDING-RECORD",
                                     "IR-SELECTION-AFFINITY-FIRST", "RG-AFFINITY-BEFORE-SELECTION",
                                     "RG-NEED-SESSION-AFFINITY", "RG-INTRO-STEP-AFFINITY",
                                     "RG-AFFINITY-HEADER-CONFIG", "RG-AFFINITY-PRAXIS-CONFIG",
                                     "RG-ADMISSION-NEW-AND-EXISTING"])
def test_header_session_survives_a_reorder(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(_ordered(site, model, "provider-a", "provider-b"), model)
    session = _session()
    _bind(gw, model, "provider-a", headers={SESSION_HEADER: session})
    gw.publish(_ordered(site, model, "provider-b", "provider-a"), model)
    for _ in range(3):
        bound = gw.request(model, headers={SESSION_HEADER: session})
        assert bound.backend == "provider-a", f"the bound session moved to {bound.backend} after a reorder"
    fresh = gw.request(model, headers={SESSION_HEADER: _session()})
    assert fresh.backend == "provider-b", f"a new session follows the new order: {fresh.describe()}"


@pytest.mark.conformance(id="CONS-AFFINITY-PER-CAPABILITY", profile="consumer", level="core",
                         feature="headerAffinity",
                         spec=SPEC + "; \"Provider becomes excluded/ineligible: affinity cannot override the hard "
                              "boundary; a fresh selection is required.\" A binding serves only a request whose "
                              "capability it is an eligible candidate of",
                         statements=["RG-AFFINITY-REUSE-BINDING", "RG-AFFINITY-NO-BINDING-RECORD"])
def test_binding_never_serves_another_capability_outside_its_candidates(gw: Gateway, site: Site, model: str) -> None:
    """One session key bound for `model` to provider-a; `other` is served by provider-c alone. A request for
    `other` with the key goes to provider-c, and the key's next request for `model` to one of its own candidates.

    The guide leaves open how bindings are kept: one per (capability, key), or one per key that is replaced or
    reused when another capability asks (reused only where the bound provider is also that capability's
    eligible candidate). Every such design passes; a gateway that sends a key's requests to its bound provider
    whatever the capability does not.
    """
    other = model + "-other"
    gw.publish(site.envelope([site.candidate("provider-a", model), site.candidate("provider-b", model),
                              site.candidate("provider-c", other)]), model)
    session = _session()
    _bind(gw, model, "provider-a", headers={SESSION_HEADER: session})
    first_other = gw.request(other, headers={SESSION_HEADER: session})
    assert first_other.status == 200 and first_other.backend == "provider-c", \
        f"{other}'s only candidate is provider-c; {first_other.describe()} (a binding made for {model} served a " \
        "capability it is no candidate of)"
    again = gw.request(model, headers={SESSION_HEADER: session})
    assert again.status == 200 and again.backend in ("provider-a", "provider-b"), \
        f"{model} is served by provider-a or provider-b; {again.describe()} (a binding made for {other} served " \
        f"{model})"


@pytest.mark.conformance(id="CONS-AFFINITY-WITH-ROUND-ROBIN", profile="consumer", level="core", feature="roundRobin",
                         spec="routing guide 3. Round-robin: \"Session affinity is checked first, so established "
                         "sessions can make observed traffic less than perfectly even.\"",
                         statements=["RG-RR-AFFINITY-FIRST", "IR-SELECTION-AFFINITY-FIRST",
                                     "RG-AFFINITY-BEFORE-SELECTION", "RG-AFFINITY-UNEVEN-TRAFFIC",
                                     "RG-AFFINITY-REUSE-BINDING"])
def test_header_session_sticks_while_new_sessions_rotate(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate(p, model, selection_group=0) for p in ("provider-a", "provider-b")],
                             mode="roundRobin"), model)
    session = _session()
    first = gw.request(model, headers={SESSION_HEADER: session})
    assert first.status == 200, first.describe()
    seen_new: set[str | None] = set()
    for _ in range(6):
        bound = gw.request(model, headers={SESSION_HEADER: session})
        assert bound.backend == first.backend, f"bound session moved from {first.backend} to {bound.backend}"
        seen_new.add(gw.request(model, headers={SESSION_HEADER: _session()}).backend)
    assert seen_new == {"provider-a", "provider-b"}, f"new sessions must still rotate; saw {seen_new}"


#: Sessions per check. A correct gateway fails `_sticks_while_new_sessions_spread` only if 40 new sessions all
#: draw one of two equally likely providers: probability 2 * 0.5**40, below 1e-11.
NEW_SESSIONS = 40


def _sticks_while_new_sessions_spread(gw: Gateway, site: Site, model: str, mode: str) -> None:
    """A bound session keeps its provider for every request while new sessions still reach both."""
    weight = {"traffic_weight": 500} if mode == "weightedRandom" else {}
    gw.publish(site.envelope([site.candidate(p, model, selection_group=0, **weight)
                              for p in ("provider-a", "provider-b")], mode=mode), model)
    session = _session()
    first = gw.request(model, headers={SESSION_HEADER: session})
    assert first.status == 200, first.describe()
    seen_new: set[str | None] = set()
    for _ in range(NEW_SESSIONS):
        bound = gw.request(model, headers={SESSION_HEADER: session})
        assert bound.backend == first.backend, \
            f"under {mode} the bound session moved from {first.backend} to {bound.backend}"
        seen_new.add(gw.request(model, headers={SESSION_HEADER: _session()}).backend)
    assert seen_new == {"provider-a", "provider-b"}, f"new sessions must still be drawn from both; saw {seen_new}"


@pytest.mark.conformance(id="CONS-AFFINITY-WITH-RANDOM", profile="consumer", level="core", feature="random",
                         spec="routing guide 4. Random: \"Session affinity is checked before random selection.\"",
                         statements=["RG-RANDOM-AFFINITY-FIRST", "RG-PROFILES-ALL-HONOR",
                                     "IR-SELECTION-AFFINITY-FIRST"])
def test_header_session_sticks_under_random(gw: Gateway, site: Site, model: str) -> None:
    _sticks_while_new_sessions_spread(gw, site, model, "random")


@pytest.mark.conformance(id="CONS-AFFINITY-WITH-WEIGHTED", profile="consumer", level="extended",
                         feature="weightedRandom",
                         spec="routing guide 5. Weighted-random: \"Weights do not override eligibility, admission, "
                              "affinity, or selection-group precedence.\"",
                         statements=["RG-WEIGHTED-NO-OVERRIDE", "RG-PROFILES-ALL-HONOR", "IR-SELECTION-AFFINITY-FIRST"])
def test_header_session_sticks_under_weighted_random(gw: Gateway, site: Site, model: str) -> None:
    _sticks_while_new_sessions_spread(gw, site, model, "weightedRandom")


@pytest.mark.conformance(id="CONS-AFFINITY-EXISTING-ONLY", profile="consumer", level="core", feature="admission",
                         spec=SPEC + "; " + ADMISSION,
                         statements=["IR-SELECTION-EXISTING-ONLY-AFFINITY", "RG-AFFINITY-EXISTING-ONLY",
                                     "RG-ADMISSION-EXISTING-ONLY", "RG-AFFINITY-REUSE-BINDING"])
def test_existing_only_reachable_only_through_binding(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(_ordered(site, model, "provider-a", "provider-b"), model)
    session = _session()
    _bind(gw, model, "provider-a", headers={SESSION_HEADER: session})
    gw.publish(site.envelope([site.candidate("provider-a", model, admission_state="existing_only"),
                              site.candidate("provider-b", model)]), model)
    assert gw.request(model, headers={SESSION_HEADER: session}).backend == "provider-a", "bound session keeps A"
    assert gw.request(model, headers={SESSION_HEADER: _session()}).backend == "provider-b", "new session avoids A"
    assert gw.request(model).backend == "provider-b", "unkeyed request avoids A"


@pytest.mark.conformance(id="CONS-AFFINITY-FAILOVER-GONE", profile="consumer", level="core", feature="headerAffinity",
                         spec=SPEC + "; a binding to a candidate that left the snapshot fails over",
                         statements=["RG-AFFINITY-EXCLUDED-FRESH-SELECTION", "RG-AFFINITY-NO-BINDING-RECORD"])
def test_binding_fails_over_when_candidate_disappears(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(_ordered(site, model, "provider-a", "provider-b"), model)
    session = _session()
    _bind(gw, model, "provider-a", headers={SESSION_HEADER: session})
    gw.publish(_ordered(site, model, "provider-c", "provider-b"), model)
    moved = gw.request(model, headers={SESSION_HEADER: session})
    assert moved.backend == "provider-c", moved.describe()
    gw.publish(_ordered(site, model, "provider-b", "provider-c"), model)
    assert gw.request(model, headers={SESSION_HEADER: session}).backend == "provider-c", "rebound to C"


@pytest.mark.conformance(id="CONS-AFFINITY-FAILOVER-EXCLUDED", profile="consumer", level="core", feature="admission",
                         spec="routing guide 8: \"Provider becomes excluded/ineligible: affinity cannot override the "
                         "hard boundary; a fresh selection is required.\"",
                         statements=["RG-AFFINITY-EXCLUDED-FRESH-SELECTION", "IR-SELECTION-NONE-NEVER-ELIGIBLE",
                                     "RG-ADMISSION-NONE"])
def test_binding_to_excluded_candidate_fails_over(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(_ordered(site, model, "provider-a", "provider-b"), model)
    session = _session()
    _bind(gw, model, "provider-a", headers={SESSION_HEADER: session})
    gw.publish(site.envelope([site.candidate("provider-a", model, admission_state="none"),
                              site.candidate("provider-b", model)]), model)
    assert gw.request(model, headers={SESSION_HEADER: session}).backend == "provider-b"


@pytest.mark.conformance(id="CONS-AFFINITY-TTL", profile="consumer", level="core", feature="headerAffinity",
                         spec=SPEC + "; session_affinity ttl_secs: bindings expire after the TTL",
                         statements=["RG-AFFINITY-HEADER-CONFIG"])
@pytest.mark.lasts(2.5)
def test_binding_expires_after_ttl(site: Site, model: str) -> None:
    gw = site.gateway("short-ttl")
    ttl = 2.0
    gw.publish(_ordered(site, model, "provider-a", "provider-b"), model)
    session = _session()
    _bind(gw, model, "provider-a", headers={SESSION_HEADER: session})
    bound_at = time.monotonic()
    gw.publish(site.envelope([site.candidate("provider-a", model, admission_state="existing_only"),
                              site.candidate("provider-b", model)]), model)
    if time.monotonic() - bound_at < ttl - 0.5:
        assert gw.request(model, headers={SESSION_HEADER: session}).backend == "provider-a", "binding still live"
    wait_until_elapsed(bound_at, ttl + 0.3)
    expired = gw.request(model, headers={SESSION_HEADER: session})
    assert expired.backend == "provider-b", f"after {ttl}s the binding must be gone; {expired.describe()}"


@pytest.mark.conformance(id="CONS-AFFINITY-NO-KEY", profile="consumer", level="core", feature="headerAffinity",
                         spec=SPEC + "; a request without a session key has no binding to reuse or record",
                         statements=["RG-AFFINITY-NO-BINDING-RECORD"])
def test_requests_without_key_are_not_bound(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(_ordered(site, model, "provider-a", "provider-b"), model)
    _bind(gw, model, "provider-a")
    gw.publish(_ordered(site, model, "provider-b", "provider-a"), model)
    reply = gw.request(model)
    assert reply.backend == "provider-b", f"an unkeyed request follows the new order: {reply.describe()}"


@pytest.mark.conformance(id="CONS-AFFINITY-COOKIE", profile="consumer", level="extended", feature="cookieAffinity",
                         spec=SPEC + "; session_affinity cookie: the session key from a cookie",
                         statements=["RG-AFFINITY-COOKIE-CONFIG", "RG-AFFINITY-REUSE-BINDING",
                                     "RG-AFFINITY-NO-BINDING-RECORD"])
def test_cookie_session_survives_a_reorder(site: Site, model: str) -> None:
    gw = site.gateway("cookie")
    gw.publish(_ordered(site, model, "provider-a", "provider-b"), model)
    session = _session()
    _bind(gw, model, "provider-a", cookies={SESSION_COOKIE: session})
    gw.publish(_ordered(site, model, "provider-b", "provider-a"), model)
    for _ in range(3):
        assert gw.request(model, cookies={SESSION_COOKIE: session}).backend == "provider-a"
    fresh = gw.request(model, cookies={SESSION_COOKIE: _session()})
    assert fresh.backend == "provider-b", f"a new cookie session follows the new order: {fresh.describe()}"


@pytest.mark.conformance(id="CONS-AFFINITY-COOKIE-AMONG-OTHERS", profile="consumer", level="extended",
                         feature="cookieAffinity",
                         spec=SPEC + "; session_affinity cookie: the session key is the named cookie's value",
                         statements=["RG-AFFINITY-COOKIE-CONFIG"])
def test_cookie_session_is_the_named_cookie_among_others(site: Site, model: str) -> None:
    """The Cookie header carries another cookie first; only the configured cookie's value keys the session.

    A session bound to provider-a keeps it while the other cookie changes value; a new session value with
    the first session's other cookie follows the new order. Fails if the key is taken from the first cookie
    of the header, or from the whole header.
    """
    gw = site.gateway("cookie")
    gw.publish(_ordered(site, model, "provider-a", "provider-b"), model)
    session = _session()
    _bind(gw, model, "provider-a", cookies={"theme": "dark", SESSION_COOKIE: session})
    gw.publish(_ordered(site, model, "provider-b", "provider-a"), model)
    for theme in ("light", "blue"):
        reply = gw.request(model, cookies={"theme": theme, SESSION_COOKIE: session})
        assert reply.backend == "provider-a", f"the bound session with theme={theme}: {reply.describe()}"
    fresh = gw.request(model, cookies={"theme": "dark", SESSION_COOKIE: _session()})
    assert fresh.backend == "provider-b", f"a new session with the first one's other cookie: {fresh.describe()}"
