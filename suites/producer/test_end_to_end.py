"""From operator to traffic: a rendered revision is distributed, accepted by overlay-sync and served by a gateway.

The chain is the one the spec describes: operator reconcile -> ConfigMap -> overlay-sync -> gateway hot
reload -> next request uses the new ordering. Providers use the topology's echo backends as clusters so the
gateway can reach them and every answer names the backend that served it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from harness import producer_oracle as oracle
from harness.contract import ScopeSpec
from harness.control import Chain
from harness.gateway_config import RELOAD_DEBOUNCE_MS
from harness.producer_support import Scenario
from harness.resources import DEFAULT_GATEWAY, DEFAULT_NAMESPACE
from harness.waiting import poll_until

ARCH = "routing-architecture-and-overlay-contract"
REQUESTS = 12
#: Seconds overlay-sync may take at worst to pick up a ConfigMap change: it reads on every change event of the
#: ConfigMap's directory and, should an event be lost, re-reads at its resync period (the harness starts it with
#: --resync-seconds 5).
OVERLAY_SYNC_RESYNC_S = 5.0
#: The bound from "the ConfigMap holds the new revision" to "a request is served from it": overlay-sync's worst
#: case, then the gateway's reload debounce after the ..data swap, plus one second for the two file watchers and
#: the probe's own polling on a loaded machine. The operator's share of the route change is judged separately,
#: as one reconcile.
DELIVERY_BOUND_S = OVERLAY_SYNC_RESYNC_S + RELOAD_DEBOUNCE_MS / 1000 + 1.0


def _revision(envelope: dict[str, Any]) -> str:
    return str((envelope.get("revision") or {}).get("value"))


def _first_backend(chain: Chain, model: str) -> str | None:
    reply = chain.gateway.request(model)
    return reply.backend if reply.status == 200 else f"<status {reply.status}>"


def _all_served_by(chain: Chain, model: str, backend: str) -> None:
    tally = chain.gateway.send(model, REQUESTS, concurrency=1)
    assert tally.backends == {backend: REQUESTS}, f"expected every request on {backend}: {tally.describe()}"


def _stages(scenario: Scenario, chain: Chain, envelope: dict[str, Any]) -> None:
    """Rendered, distributed, accepted and serving all reach the envelope's revision."""
    revision = _revision(envelope)
    oracle.require(oracle.envelope_problems(envelope, ScopeSpec(scenario.net, DEFAULT_GATEWAY, DEFAULT_NAMESPACE,
                                                                scenario.local)), "the rendered envelope")
    configmap = scenario.control.configmap(scenario.net) or {}
    annotations = (configmap.get("metadata") or {}).get("annotations") or {}
    assert annotations.get(oracle.ANNOTATIONS["revision"]) == revision, f"rendered: annotations {annotations}"
    entry = scenario.control.wait_status(scenario.net, lambda e: e.get("distributedRevision") == revision,
                                         what=f"distributed revision {revision[:12]}")
    assert entry.get("renderedRevision") == revision, f"distributed: status {entry}"
    chain.wait_accepted(revision)
    chain.gateway.wait_serving(revision, scenario.model)


@pytest.mark.conformance(id="PROD-E2E-METRIC-MOVES-TRAFFIC", profile="producer", level="core", feature="metrics",
                         spec=f"{ARCH}#how-re-ranking-updates",
                         statements=["OC-RERANK-ON-RECONCILE", "OC-RERANKING-SCRAPE", "RG-NEED-QUEUE-DEPTH",
                                     "OC-DEMO-ANNOTATION-IMMEDIATE-RECONCILE",
                                     "OC-RERANK-PRAXIS-MOST-RECENT-ACCEPTED", "PS-BOUNDARY-OPERATOR-BEFORE-REQUEST",
                                     "OC-FORWARD-AGN-CHOOSES-SITE", "OC-REGEN-ON-RECONCILE",
                                     "OC-REGEN-RECONCILE-DRIVEN", "RG-INTRO-AGN-ASYNC-PUBLISH",
                                     "RG-DETERMINISTIC-AGN-RANKS", "RG-LOADAWARE-SEPARATE-DIMENSION",
                                     "RG-LOADAWARE-MODE-STILL-PICKS", "RG-RELOAD-AGN-PUBLISHES",
                                     "RG-PROFILES-SCORE-FIRST"])
def test_metric_change_moves_traffic(scenario: Scenario) -> None:
    """With scoreFirst + queueDepth + deterministic, swapping the queues moves every new request to the other pool.

    Fails if the operator does not re-scrape on reconcile, scores the queue the wrong way round, or
    publishes the new order without a new revision (the gateway then keeps the old snapshot).
    """
    scenario.set_metrics("pa", queueDepth=1, kvCacheUtilization=0.1, healthy=1)
    scenario.set_metrics("pb", queueDepth=6, kvCacheUtilization=0.1, healthy=1)
    scenario.provider("pa", cluster="provider-a", metrics=True)
    scenario.provider("pb", cluster="provider-b", metrics=True)
    scenario.network(routing="scoreFirst", scoring="queueDepth", selection="deterministic")
    before = scenario.settled(scenario.envelope(lambda env: oracle.names(env) == ["provider-a", "provider-b"],
                                                what="provider-a (queue 1) before provider-b (queue 6)"))
    chain = scenario.connect()
    chain.wait_accepted(_revision(before))
    chain.gateway.wait_serving(_revision(before), scenario.model)
    _all_served_by(chain, scenario.model, "provider-a")

    changed = time.monotonic()
    scenario.set_pools({"pa": {"queueDepth": 6}, "pb": {"queueDepth": 1}})
    # One reconcile, not a deadline: each reconcile scrapes every endpoint, so the first after the swap re-ranks.
    after = scenario.reconcile()
    assert oracle.names(after) == ["provider-b", "provider-a"], (
        f"the first reconcile after the queue swap: expected provider-b (queue 1) before provider-a (queue 6), "
        f"got {oracle.names(after)}")
    assert _revision(after) != _revision(before)
    poll_until(lambda: _first_backend(chain, scenario.model), lambda b: b == "provider-b", timeout=DELIVERY_BOUND_S,
               what="a request served by provider-b after the re-ranked revision was distributed")
    latency = time.monotonic() - changed
    print(f"route change: metric change -> first request on provider-b in {latency:.3f}s")
    chain.gateway.wait_serving(_revision(after), scenario.model)
    _all_served_by(chain, scenario.model, "provider-b")


@pytest.mark.conformance(id="PROD-E2E-REVISION-STAGES", profile="producer", level="core", feature="status",
                         spec=f"{ARCH}#revision-lifecycle",
                         statements=["IR-ENVELOPE-LIFECYCLE-RENDERED", "IR-ENVELOPE-LIFECYCLE-DISTRIBUTED",
                                     "OC-LIFECYCLE-FOUR-STAGES", "OC-LIFECYCLE-SUCCESS-MATCH",
                                     "OC-RENDER-REPORT-REVISIONS", "OC-RERANKING-APPLY-RECORD-STATUS",
                                     "OC-MULTI-CLUSTER-NAME", "OC-OVERVIEW-AGN-WRITES-OVERLAY",
                                     "OC-INTRO-OPERATOR-RENDERS", "OC-REGEN-DISTRIBUTED-NOT-ACCEPTED",
                                     "RG-INTRO-AGN-ASYNC-PUBLISH"])
def test_revision_moves_through_all_four_stages(scenario: Scenario) -> None:
    """rendered (ConfigMap annotation), distributed (status), accepted (overlay-sync), serving (gateway header).

    Fails if status reports a distributed revision the ConfigMap does not hold, if the annotation lags the
    data, or if the rendered envelope is one overlay-sync refuses (wrong digest or scope), so it never serves.
    """
    scenario.provider("pa", cluster="provider-a")
    scenario.network(selection="deterministic")
    first = scenario.envelope(lambda env: oracle.names(env) == ["provider-a"], what="candidate provider-a")
    chain = scenario.connect()
    _stages(scenario, chain, first)
    _all_served_by(chain, scenario.model, "provider-a")

    scenario.delete("InferenceProvider", "pa")
    scenario.provider("pb", cluster="provider-b")
    second = scenario.envelope(lambda env: oracle.names(env) == ["provider-b"], what="candidate provider-b",
                               force=True)
    assert _revision(second) != _revision(first)
    _stages(scenario, chain, second)
    _all_served_by(chain, scenario.model, "provider-b")
