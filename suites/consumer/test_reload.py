"""Revision and hot-reload semantics: unchanged revisions do not swap, new ones serve promptly."""

from __future__ import annotations

import copy
import time

import pytest

from harness import contract
from harness.grid import Gateway, Site
from harness.stats import assert_round_robin
from harness.suite_support import ReloadProbe

SPEC = "intelligent-route-filter: Hot reload; overlay contract: Revision lifecycle"
RELOAD_DEADLINE_S = 5.0


@pytest.mark.conformance(id="CONS-REV-UNCHANGED-NO-SWAP", profile="consumer", level="core", feature="roundRobin",
                         spec=SPEC + ": an unchanged semantic revision causes no replacement")
def test_rerender_with_same_revision_keeps_round_robin_state(gw: Gateway, site: Site, model: str,
                                                            reloads: ReloadProbe) -> None:
    """Round-robin state belongs to the snapshot, so a re-render must continue the cycle where it was.

    The re-render happens at two consecutive positions of the cycle: a gateway that swaps (and so restarts
    its cursor at some fixed position) breaks the cycle at one of them at least.
    """
    members = ("provider-a", "provider-b", "provider-c")
    doc = site.envelope([site.candidate(p, model, selection_group=0) for p in members], mode="roundRobin")
    gw.publish(doc, model)
    sequence = [gw.request(model).backend or "<none>" for _ in range(len(members))]
    for phase in range(2):
        sequence += [gw.request(model).backend or "<none>" for _ in range(phase)]
        rerendered = copy.deepcopy(doc)
        rerendered["provenance"]["rendered_at"] = f"2099-01-0{phase + 1}T00:00:00Z"
        rerendered["provenance"]["source_generation"] += 100 + phase
        assert contract.revision_of(rerendered) == contract.revision_of(doc)
        before = reloads.snapshot()
        gw.write_overlay(rerendered)
        reloads.wait(before, "unchanged")
        sequence += [gw.request(model).backend or "<none>" for _ in range(len(members))]
    assert_round_robin(sequence, set(members))


@pytest.mark.conformance(id="CONS-RELOAD-DEADLINE", profile="consumer", level="core", feature="hotReload",
                         spec=SPEC + ": a new revision serves after a ..data symlink swap")
def test_new_revision_serves_within_deadline(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    newer = site.envelope([site.candidate("provider-b", model)])
    started = time.monotonic()
    gw.write_overlay(newer)
    gw.wait_serving(contract.revision_of(newer), model, timeout=RELOAD_DEADLINE_S)
    print(f"new revision served {time.monotonic() - started:.3f}s after the projection swap")
    assert gw.request(model).backend == "provider-b"


@pytest.mark.conformance(id="CONS-RELOAD-SEQUENCE", profile="consumer", level="core", feature="hotReload",
                         spec=SPEC + ": every accepted revision replaces the previous snapshot")
def test_successive_revisions_each_serve(gw: Gateway, site: Site, model: str) -> None:
    for provider in ("provider-a", "provider-b", "provider-c", "provider-a"):
        doc = site.envelope([site.candidate(provider, model), site.candidate("provider-d", model)])
        gw.publish(doc, model)
        assert gw.request(model).backend == provider
