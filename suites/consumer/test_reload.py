"""Revision and hot-reload semantics: unchanged revisions do not swap, new ones serve promptly."""

from __future__ import annotations

import copy
import time

import pytest

from harness import contract
from harness.grid import Gateway, Site
from harness.suite_support import ReloadProbe

SPEC = "intelligent-route-filter: Hot reload; overlay contract: Revision lifecycle"
RELOAD_DEADLINE_S = 5.0


@pytest.mark.conformance(id="CONS-REV-UNCHANGED-NO-SWAP", profile="consumer", level="core", feature="hotReload",
                         spec=SPEC + ": an unchanged semantic revision causes no replacement")
def test_rerender_with_same_revision_keeps_round_robin_state(gw: Gateway, site: Site, model: str,
                                                            reloads: ReloadProbe) -> None:
    doc = site.envelope([site.candidate(p, model, selection_group=0) for p in ("provider-a", "provider-b",
                                                                               "provider-c")], mode="roundRobin")
    gw.publish(doc, model)
    before_sequence = [gw.request(model).backend for _ in range(2)]
    rerendered = copy.deepcopy(doc)
    rerendered["provenance"]["rendered_at"] = "2099-01-01T00:00:00Z"
    rerendered["provenance"]["source_generation"] += 100
    assert contract.revision_of(rerendered) == contract.revision_of(doc)
    before = reloads.snapshot()
    gw.write_overlay(rerendered)
    reloads.wait(before, "unchanged")
    after = [gw.request(model).backend for _ in range(4)]
    sequence = [b or "<none>" for b in before_sequence + after]
    from harness.stats import assert_round_robin

    assert_round_robin(sequence, {"provider-a", "provider-b", "provider-c"})


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
