"""Revision and hot-reload semantics: unchanged revisions do not swap, new ones serve promptly."""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from harness import contract
from harness.grid import Gateway, Site
from harness.stats import assert_round_robin
from harness.suite_support import ReloadProbe
from harness.timeouts import timeouts
from harness.waiting import WaitTimeout, poll_until

SPEC = "intelligent-route-filter: Hot reload; overlay contract: Revision lifecycle"
RELOAD_DEADLINE_S = 5.0
#: How long provider-a holds the in-flight request: longer than any reload that meets CONS-RELOAD-DEADLINE, and
#: within the 10 s the harness waits for an answer.
LKG_AND_UNCHANGED = ("overlay contract, Revision lifecycle: \"An invalid update retains the same-process "
                     "last-known-good snapshot, and an unchanged semantic revision does not cause a replacement.\"")
#: Not JSON: every gateway rejects it.
INVALID_OVERLAY = b'{"schema_version": "1.0.0", "overlay": '


def _rerender(doc: dict[str, Any], tag: int) -> dict[str, Any]:
    """The same routing state rendered again: new rendered_at and source_generation, the same revision."""
    rerendered = copy.deepcopy(doc)
    rerendered["provenance"]["rendered_at"] = f"2099-01-{tag + 1:02d}T00:00:00Z"
    rerendered["provenance"]["source_generation"] += 100 + tag
    assert contract.revision_of(rerendered) == contract.revision_of(doc)
    return rerendered


def _cycle_across_rerenders(gw: Gateway, site: Site, model: str,
                            rerender: Callable[[dict[str, Any], int], None]) -> None:
    """A round-robin cycle that must run unbroken across `rerender(doc, phase)` at two consecutive positions:
    a gateway that swaps there (and so restarts its cursor at some fixed position) breaks it at one at least."""
    members = ("provider-a", "provider-b", "provider-c")
    doc = site.envelope([site.candidate(p, model, selection_group=0) for p in members], mode="roundRobin")
    gw.publish(doc, model)
    sequence = [gw.request(model).backend or "<none>" for _ in range(len(members))]
    for phase in range(2):
        sequence += [gw.request(model).backend or "<none>" for _ in range(phase)]
        rerender(doc, phase)
        sequence += [gw.request(model).backend or "<none>" for _ in range(len(members))]
    assert_round_robin(sequence, set(members))


def _wait_processed(reloads: ReloadProbe, before: dict[str, float]) -> None:
    """Wait until a write of valid bytes was processed, whether counted unchanged or (by a gateway that swaps)
    accepted: what the requests see afterwards judges which it was."""
    if not reloads.has_metrics:
        reloads.wait(before, "unchanged")  # observes for a window of several debounce periods
        return
    try:
        poll_until(reloads.snapshot, lambda now: any(now[r] > before[r] for r in ("unchanged", "accepted")),
                   what=f"a reload counted as 'unchanged' or 'accepted' (counts before: {before})",
                   timeout=timeouts().reload)
    except WaitTimeout as exc:
        raise WaitTimeout(f"{exc}\n{reloads.gateway.overlay_log()}") from None


@pytest.mark.conformance(id="CONS-REV-UNCHANGED-NO-SWAP", profile="consumer", level="core", feature="roundRobin",
                         spec=SPEC + ": an unchanged semantic revision causes no replacement",
                         statements=["OC-LIFECYCLE-UNCHANGED-NO-REPLACE", "IR-RELOAD-SWAP-ON-REVISION-CHANGE"])
def test_rerender_with_same_revision_keeps_round_robin_state(gw: Gateway, site: Site, model: str,
                                                            reloads: ReloadProbe) -> None:
    """Round-robin state belongs to the snapshot, so a re-render must continue the cycle where it was."""
    def rerender(doc: dict[str, Any], phase: int) -> None:
        before = reloads.snapshot()
        gw.write_overlay(_rerender(doc, phase))
        reloads.wait(before, "unchanged")

    _cycle_across_rerenders(gw, site, model, rerender)


@pytest.mark.conformance(id="CONS-REV-UNCHANGED-AFTER-REJECT", profile="consumer", level="core", feature="roundRobin",
                         spec=LKG_AND_UNCHANGED,
                         statements=["OC-LIFECYCLE-UNCHANGED-NO-REPLACE", "IR-RELOAD-SWAP-ON-REVISION-CHANGE",
                                     "IR-RELOAD-INVALID-RETAINS", "IR-ENVELOPE-RELOAD-RETAINS-LKG",
                                     "OC-LIFECYCLE-INVALID-UPDATE-LKG", "OC-DELIVERY-INVALID-LKG",
                                     "RG-RELOAD-INVALID-LKG"])
def test_rerender_after_rejected_update_keeps_round_robin_state(gw: Gateway, site: Site, model: str,
                                                               reloads: ReloadProbe) -> None:
    """An unchanged revision is judged against the serving snapshot, not the last file read (a rejected one).

    After an invalid update, a re-render of the serving overlay must still cause no replacement, so the
    round-robin cycle continues.
    """
    def reject_then_rerender(doc: dict[str, Any], phase: int) -> None:
        before = reloads.snapshot()
        gw.write_overlay(INVALID_OVERLAY)
        reloads.wait(before, "rejected")
        before = reloads.snapshot()
        gw.write_overlay(_rerender(doc, phase))
        _wait_processed(reloads, before)

    _cycle_across_rerenders(gw, site, model, reject_then_rerender)


@pytest.mark.conformance(id="CONS-RELOAD-DEFAULT-ENABLED", profile="consumer", level="core", feature="hotReload",
                         spec="intelligent-route-filter, Hot reload: \"when reload.enabled is true (the default in "
                              "overlay mode), the filter watches the overlay file's parent directory for filesystem "
                              "events.\"",
                         statements=["IR-RELOAD-DEFAULT-ENABLED-WATCH-DIR"])
def test_overlay_mode_reloads_without_a_reload_block(site: Site, fresh_gateway: Any, model: str) -> None:
    """A gateway whose overlay-mode config has no `reload` key serves a new revision written after it started.

    The filter's default debounce applies (the public code's is 500 ms), well inside the deadline. Fails if
    reload is off unless enabled explicitly.
    """
    gateway = fresh_gateway("default-reload", contract.encode(site.envelope([site.candidate("provider-a", model)])))
    assert gateway.request(model).backend == "provider-a", "the cold-start overlay serves"
    newer = site.envelope([site.candidate("provider-b", model)])
    gateway.write_overlay(newer)
    gateway.wait_serving(contract.revision_of(newer), model, timeout=RELOAD_DEADLINE_S)


@pytest.mark.conformance(id="CONS-RELOAD-DEADLINE", profile="consumer", level="core", feature="hotReload",
                         spec=SPEC + ": a new revision serves after a ..data symlink swap",
                         statements=["IR-MODES-OVERLAY", "IR-RELOAD-SYMLINK-SWAP-DETECTED",
                                     "IR-RELOAD-SWAP-ON-REVISION-CHANGE", "RG-RELOAD-NEW-AFTER-VALIDATION",
                                     "RG-RELOAD-CONFIG", "OC-REGEN-PRAXIS-INSTALLS-NO-RESTART",
                                     "OC-DELIVERY-DIRECT-MOUNT", "OC-EDGE-SAME-PATH",
                                     "RG-INTRO-PRAXIS-LOCAL-CHOICE"])
def test_new_revision_serves_within_deadline(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    newer = site.envelope([site.candidate("provider-b", model)])
    started = time.monotonic()
    gw.write_overlay(newer)
    gw.wait_serving(contract.revision_of(newer), model, timeout=RELOAD_DEADLINE_S)
    print(f"new revision served {time.monotonic() - started:.3f}s after the projection swap")
    assert gw.request(model).backend == "provider-b"


@pytest.mark.conformance(id="CONS-RELOAD-SEQUENCE", profile="consumer", level="core", feature="hotReload",
                         spec=SPEC + ": every accepted revision replaces the previous snapshot",
                         statements=["OC-RERANK-PRAXIS-MOST-RECENT-ACCEPTED", "OC-RERANK-NEXT-REQUEST-NEW-ORDER",
                                     "IR-RELOAD-SWAP-ON-REVISION-CHANGE", "RG-RELOAD-NEW-AFTER-VALIDATION"])
def test_successive_revisions_each_serve(gw: Gateway, site: Site, model: str) -> None:
    for provider in ("provider-a", "provider-b", "provider-c", "provider-a"):
        doc = site.envelope([site.candidate(provider, model), site.candidate("provider-d", model)])
        gw.publish(doc, model)
        assert gw.request(model).backend == provider


SWAPS_LOCAL_SITE = ("intelligent-route-filter, Scope: \"overlay hot reload swaps the candidate list and local_site "
                    "only.\"")


@pytest.mark.conformance(id="CONS-RELOAD-LOCAL-SITE", profile="consumer", level="core", feature="hotReload",
                         spec=SWAPS_LOCAL_SITE, statements=["IR-SCOPE-RELOAD-SWAPS-CANDIDATES-ONLY"])
def test_reload_may_change_the_local_site(site: Site, fresh_gateway: Any, model: str) -> None:
    """A gateway that pins no overlay scope reloads an envelope with the same candidates but another
    local_site (in scope and overlay): its revision serves. A reload just before it, adding a candidate
    under the old local_site, shows that this gateway reloads at all. Fails if the local site is fixed
    when the filter is built and a reload that moves it is rejected or ignored."""
    gateway = fresh_gateway("legacy", contract.encode(site.envelope([site.candidate("provider-a", model)])))
    gateway.publish(site.envelope([site.candidate("provider-a", model), site.candidate("provider-b", model)]), model,
                    timeout=RELOAD_DEADLINE_S * 2)
    moved_scope = dataclasses.replace(site.scope, local_site="site-z")
    moved = contract.envelope([site.candidate("provider-a", model)], moved_scope,
                              generation=site.grid.next_generation())
    assert moved["overlay"]["local_site"] == moved["scope"]["local_site"] == "site-z"
    gateway.publish(moved, model, timeout=RELOAD_DEADLINE_S * 2)
    reply = gateway.request(model)
    assert reply.status == 200 and reply.backend == "provider-a", reply.describe()


@pytest.mark.conformance(id="CONS-RELOAD-IN-FLIGHT", profile="consumer", level="core", feature="hotReload",
                         spec=SPEC + ": \"In-flight requests continue using their previously loaded snapshot.\"",
                         statements=["IR-RELOAD-IN-FLIGHT-KEEP-SNAPSHOT", "RG-RELOAD-IN-FLIGHT"])
def test_in_flight_request_completes_across_a_reload(gw: Gateway, site: Site, model: str) -> None:
    """A request held at provider-a while a new revision (provider-b only) is accepted is answered by
    provider-a with the revision it was routed under; the next request follows the new revision."""
    probe = model + "-probe"
    first = gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    before = site.backend_requests("provider-a")
    held: dict[str, Any] = {}
    site.set_backend_hold("provider-a", True)
    try:
        worker = threading.Thread(target=lambda: held.update(reply=gw.request(model), done=time.monotonic()))
        worker.start()
        poll_until(lambda: site.backend_requests("provider-a"), lambda n: n > before, timeout=timeouts().reload,
                   what="the first request to reach provider-a")
        second_doc = site.envelope([site.candidate("provider-b", model), site.candidate("provider-b", probe)])
        gw.write_overlay(second_doc)
        second = contract.revision_of(second_doc)
        # the probe model exists only in the new revision, so waiting for it never queues behind provider-a
        gw.wait_serving(second, probe, RELOAD_DEADLINE_S)
        swapped = time.monotonic()
    finally:
        site.set_backend_hold("provider-a", False)  # released only now: it was in flight across the reload
    worker.join(timeout=timeouts().request + 30)
    assert "reply" in held, "the held request never completed"
    assert swapped < held["done"], \
        "the new revision served only after the held request finished, so the reload did not happen while it was " \
        "in flight and nothing was judged"
    reply = held["reply"]
    assert reply.status == 200 and reply.backend == "provider-a", \
        f"a request in flight during the reload is answered by the provider it was routed to: {reply.describe()}"
    assert reply.forwarded_headers.get(gw.revision_header) == first, \
        f"it carries the revision it was routed under ({first}): {reply.forwarded_headers.get(gw.revision_header)}"
    after = gw.request(model)
    assert after.backend == "provider-b", f"the next request follows revision {second}: {after.describe()}"


@pytest.mark.conformance(id="CONS-COLD-UNDECLARED-CLUSTER-NOT-VALIDATED", profile="consumer", level="core",
                         feature="hotReload",
                         spec="intelligent-route-filter, Scope: \"Overlay candidates are never reported on their own, "
                              "so an overlay revision the running gateway accepted cannot fail the next restart.\"",
                         statements=["IR-SCOPE-OVERLAY-CANDIDATES-NOT-REPORTED"])
def test_restart_on_an_overlay_naming_an_undeclared_cluster_starts(site: Site, fresh_gateway: Any,
                                                                   model: str) -> None:
    """A gateway without a clusters list starts on the kind of revision it accepts by reload (one candidate on a
    cluster its load_balancer lacks), and serves the rest of it.

    Fails if cold start hands overlay candidates to pipeline validation, so that restarting a gateway on an
    overlay it had accepted while running exits.
    """
    elsewhere = model + "-undeclared"
    doc = site.envelope([site.candidate("provider-a", model),
                         contract.candidate(elsewhere, site.scope.local_site, "cluster-not-declared")])
    gateway = fresh_gateway("core", contract.encode(doc))
    served = gateway.request(model)
    assert served.status == 200 and served.backend == "provider-a", \
        f"the restarted gateway serves {model} from its overlay: {served.describe()}"


@pytest.mark.conformance(id="CONS-RELOAD-FILE-REMOVED", profile="consumer", level="core", feature="hotReload",
                         spec="intelligent-route-filter, Hot reload: \"Unreadable or invalid files retain the previous "
                              "snapshot.\"; overlay contract, Revision lifecycle: \"The request path reads the "
                              "immutable accepted snapshot from memory and does not read Kubernetes, the filesystem, "
                              "SWIM, or AGN APIs.\"",
                         statements=["IR-RELOAD-INVALID-RETAINS", "OC-LIFECYCLE-REQUEST-PATH-MEMORY"])
def test_removed_overlay_file_keeps_the_snapshot_in_memory(gw: Gateway, site: Site, model: str,
                                                           reloads: ReloadProbe) -> None:
    """The overlay file disappears: requests keep being routed by the accepted revision; a new file then serves.

    Fails if a missing file empties or drops the snapshot, or if requests read the overlay file.
    """
    served = gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    before = reloads.snapshot()
    gw.remove_overlay()
    if reloads.has_metrics:
        failed = ("rejected", "read_error")
        poll_until(reloads.snapshot, lambda now: sum(now[r] for r in failed) > sum(before[r] for r in failed),
                   what=f"a reload counted as rejected or read_error (counts before: {before})",
                   timeout=timeouts().reload)
    else:
        reloads.wait(before, "rejected")  # without metrics: a window of several debounce periods
    for _ in range(3):
        reply = gw.request(model)
        assert reply.status == 200 and reply.backend == "provider-a", f"with the file gone: {reply.describe()}"
        assert reply.forwarded_headers.get(gw.revision_header) == served, reply.describe()
    gw.publish(site.envelope([site.candidate("provider-b", model)]), model)


@pytest.mark.conformance(id="CONS-RELOAD-UNDECLARED-CLUSTER-WITHOUT-LIST", profile="consumer", level="core",
                         feature="hotReload",
                         spec="intelligent-route-filter, Scope: without a clusters list \"such a reload is accepted "
                              "and the request fails when the load_balancer cannot resolve the cluster.\"",
                         statements=["IR-SCOPE-NO-CLUSTERS-LIST-RELOAD-ACCEPTED",
                                     "IR-SCOPE-RELOAD-NO-CLUSTER-CHANGES", "RG-RELOAD-NO-NEW-CLUSTERS"])
def test_reload_naming_an_undeclared_cluster_is_accepted_without_a_clusters_list(gw: Gateway, site: Site,
                                                                                  model: str) -> None:
    """The core gateway has no clusters list: a revision with one candidate on a cluster its load_balancer does
    not declare is accepted (the other model serves it), and only the request that needs that cluster fails."""
    elsewhere = model + "-undeclared"
    doc = site.envelope([site.candidate("provider-a", model),
                         contract.candidate(elsewhere, site.scope.local_site, "cluster-not-declared")])
    revision = gw.publish(doc, model)
    served = gw.request(model)
    assert served.status == 200 and served.backend == "provider-a", \
        f"revision {revision} was accepted and routes {model} to provider-a: {served.describe()}"
    failed = gw.request(elsewhere)
    assert not 200 <= failed.status < 300 and failed.backend is None, \
        f"{elsewhere} is routed to a cluster the load_balancer cannot resolve, so the request fails: " \
        f"{failed.describe()}"
