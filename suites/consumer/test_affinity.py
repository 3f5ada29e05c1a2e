"""Session affinity: reuse before selection, existing_only only via a binding, TTL and failover."""

from __future__ import annotations

import time
import uuid

import pytest

from harness.gateway_config import SESSION_COOKIE, SESSION_HEADER
from harness.grid import Gateway, Site
from harness.waiting import wait_until_elapsed

SPEC = "routing-guide 8. Session affinity; intelligent-route-filter: Selection"


def _session() -> str:
    return uuid.uuid4().hex


def _rr(site: Site, model: str, *providers: str) -> dict:
    return site.envelope([site.candidate(p, model, selection_group=0) for p in providers], mode="roundRobin")


@pytest.mark.conformance(id="CONS-AFFINITY-HEADER-REUSE", profile="consumer", level="core", feature="headerAffinity",
                         spec=SPEC)
def test_header_session_sticks_while_new_sessions_rotate(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(_rr(site, model, "provider-a", "provider-b"), model)
    session = _session()
    first = gw.request(model, headers={SESSION_HEADER: session})
    assert first.status == 200, first.describe()
    seen_new: set[str | None] = set()
    for _ in range(6):
        bound = gw.request(model, headers={SESSION_HEADER: session})
        assert bound.backend == first.backend, f"bound session moved from {first.backend} to {bound.backend}"
        seen_new.add(gw.request(model, headers={SESSION_HEADER: _session()}).backend)
    assert seen_new == {"provider-a", "provider-b"}, f"new sessions must still rotate; saw {seen_new}"


@pytest.mark.conformance(id="CONS-AFFINITY-EXISTING-ONLY", profile="consumer", level="core", feature="admission",
                         spec=SPEC + "; existing_only eligible only through an existing binding")
def test_existing_only_reachable_only_through_binding(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model), site.candidate("provider-b", model)]), model)
    session = _session()
    assert gw.request(model, headers={SESSION_HEADER: session}).backend == "provider-a"
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0, admission_state="existing_only"),
        site.candidate("provider-b", model, selection_group=1),
    ], mode="deterministic"), model)
    assert gw.request(model, headers={SESSION_HEADER: session}).backend == "provider-a", "bound session keeps A"
    assert gw.request(model, headers={SESSION_HEADER: _session()}).backend == "provider-b", "new session avoids A"
    assert gw.request(model).backend == "provider-b", "unkeyed request avoids A"


@pytest.mark.conformance(id="CONS-AFFINITY-FAILOVER-GONE", profile="consumer", level="core", feature="headerAffinity",
                         spec=SPEC + "; a binding to a candidate that left the snapshot fails over")
def test_binding_fails_over_when_candidate_disappears(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model), site.candidate("provider-b", model)]), model)
    session = _session()
    assert gw.request(model, headers={SESSION_HEADER: session}).backend == "provider-a"
    gw.publish(site.envelope([site.candidate("provider-c", model), site.candidate("provider-b", model)]), model)
    moved = gw.request(model, headers={SESSION_HEADER: session})
    assert moved.backend == "provider-c", moved.describe()
    gw.publish(site.envelope([site.candidate("provider-b", model), site.candidate("provider-c", model)]), model)
    assert gw.request(model, headers={SESSION_HEADER: session}).backend == "provider-c", "rebound to C"


@pytest.mark.conformance(id="CONS-AFFINITY-FAILOVER-EXCLUDED", profile="consumer", level="core", feature="admission",
                         spec=SPEC + "; affinity cannot override admission none")
def test_binding_to_excluded_candidate_fails_over(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model), site.candidate("provider-b", model)]), model)
    session = _session()
    assert gw.request(model, headers={SESSION_HEADER: session}).backend == "provider-a"
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0, admission_state="none"),
        site.candidate("provider-b", model, selection_group=1),
    ], mode="deterministic"), model)
    assert gw.request(model, headers={SESSION_HEADER: session}).backend == "provider-b"


@pytest.mark.conformance(id="CONS-AFFINITY-TTL", profile="consumer", level="core", feature="headerAffinity",
                         spec=SPEC + "; bindings expire after ttl_secs")
def test_binding_expires_after_ttl(site: Site, model: str) -> None:
    gw = site.gateway("short-ttl")
    ttl = 2.0
    gw.publish(site.envelope([site.candidate("provider-a", model), site.candidate("provider-b", model)]), model)
    session = _session()
    assert gw.request(model, headers={SESSION_HEADER: session}).backend == "provider-a"
    bound_at = time.monotonic()
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0, admission_state="existing_only"),
        site.candidate("provider-b", model, selection_group=1),
    ], mode="deterministic"), model)
    if time.monotonic() - bound_at < ttl - 0.5:
        assert gw.request(model, headers={SESSION_HEADER: session}).backend == "provider-a", "binding still live"
    wait_until_elapsed(bound_at, ttl + 0.3)
    expired = gw.request(model, headers={SESSION_HEADER: session})
    assert expired.backend == "provider-b", f"after {ttl}s the binding must be gone; {expired.describe()}"


@pytest.mark.conformance(id="CONS-AFFINITY-NO-KEY", profile="consumer", level="core", feature="headerAffinity",
                         spec=SPEC + "; requests without a session key are not bound")
def test_requests_without_key_keep_rotating(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(_rr(site, model, "provider-a", "provider-b", "provider-c"), model)
    seen = {gw.request(model).backend for _ in range(6)}
    assert seen == {"provider-a", "provider-b", "provider-c"}, seen


@pytest.mark.conformance(id="CONS-AFFINITY-COOKIE", profile="consumer", level="extended", feature="cookieAffinity",
                         spec=SPEC + "; cookie session keys")
def test_cookie_session_sticks(site: Site, model: str) -> None:
    gw = site.gateway("cookie")
    gw.publish(_rr(site, model, "provider-a", "provider-b"), model)
    session = _session()
    first = gw.request(model, cookies={SESSION_COOKIE: session})
    for _ in range(5):
        assert gw.request(model, cookies={SESSION_COOKIE: session}).backend == first.backend
    seen = {gw.request(model, cookies={SESSION_COOKIE: _session()}).backend for _ in range(4)}
    assert seen == {"provider-a", "provider-b"}, f"new cookie sessions rotate; saw {seen}"
