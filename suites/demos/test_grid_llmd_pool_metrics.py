"""grid-llmd-pool-metrics: EPP pool metrics re-rank two provider pools and move gateway-routed traffic.

Each test judges one claim of the demo README's "What It Proves" list (praxis-proxy/demos,
demos/grid-llmd-pool-metrics/README.md), or the routing guide's and architecture document's words about this
demo, on pool-a (west) and pool-b (central) in a scoreFirst network scored by queueDepth (or, in its second
configuration, kvCachePressure). The demo generates load into pool-a; here pool-a's EPP metric is set, which
is what the operator reads, and every served request says which pool answered. Claims outside AGN routing
(the model server's and EPP's own behaviour, the demo's live table and scorecard, TLS stages that change
nothing routing sees) are listed at the end as not applicable.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from harness import contract
from harness.timeouts import timeouts
from suites.demos.claims import not_applicable
from suites.demos.llmd_pools import IDLE, KV_PRESSURED, LIGHT, PRESSURED, README, TLS_STALE_SECONDS, LlmdPools
from suites.demos.serving import revision_of

DEMO = "grid-llmd-pool-metrics"
MAP = "routing guide 12: \"grid-llmd-pool-metrics demos queueDepth, kvCachePressure, scoreFirst, dynamic provider " \
      "re-ranking, pressure and recovery.\""
RANK_CHANGES = "routing guide 6: \"The demo has both queueDepth and kvCachePressure configurations with " \
               "routingPolicy: scoreFirst and shows provider rank changing as pressure changes.\""
REQUESTS = 12
#: Margin for comparing the harness clock with the operator's (both read the host's monotonic clock).
CLOCK_SLACK = 0.5


def _claim(words: str) -> str:
    return f"{README}, What It Proves: \"{words}\"; {MAP}"


def _pressure(words: str) -> str:
    return f"{README}, Controlled Pressure: \"{words}\""


def _all(pools: LlmdPools, pool: str, why: str, n: int = REQUESTS) -> None:
    served = pools.served_pools(n)
    assert served == [(200, pool)] * n, f"{why}: every request of west's workload is served by {pool}: {served}"


def _digest_checked(envelope: dict[str, Any]) -> str:
    """The overlay's revision, checked to be the digest of its own routing content (both digest fields)."""
    revision = str((envelope.get("revision") or {}).get("value"))
    recomputed = contract.digest(envelope["overlay"])
    content = (envelope.get("content_digest") or {}).get("value")
    assert revision == recomputed == content, \
        f"a content-addressed overlay: revision {revision}, content_digest {content}, " \
        f"digest of its overlay {recomputed}"
    return revision


@pytest.mark.conformance(id="DEMO-LLMD-POOL-METRICS-OPERATOR-SCORES", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("Grid operator scrapes EPP and scores backends with the production scoring "
                                     "engine") + "; architecture, Candidate scoring and ordering: \"scoreFirst "
                              "additionally allows comparable runtime metrics to move a remote provider ahead of a "
                              "local provider before either reaches an admission threshold.\"",
                         statements=["OC-RERANKING-SCRAPE", "PS-QUEUE-PREFERS-SHORTEST",
                                     "OC-RERANKING-CANDIDATE-SET-REMOTE", "OC-ORDERING-SCORE-FIRST-REMOTE-AHEAD",
                                     "RG-DEMO-LLMD-POOL-METRICS"])
def test_each_sites_operator_scrapes_and_scores_its_pool(llmd_pools: LlmdPools) -> None:
    """west's overlay ranks the pools by the queues their EPPs export, pool-a's scraped at west and pool-b's at
    central (reaching west in its record): pool-a with a light queue (1 of 4) falls behind idle pool-b; once
    pool-b's queue is pressured (3 of 4), pool-a leads again. Fails if scores are ignored or inverted, a pool
    is scraped only once, or a remote pool's metrics are not scored (neutral 0.5 would stay behind pool-a)."""
    llmd_pools.set_signals("west", queueDepth=LIGHT)
    llmd_pools.wait_ranked(llmd_pools.first("central"),
                           what="west's overlay with idle pool-b ahead of pool-a (queue 1 of 4)")
    llmd_pools.set_signals("central", queueDepth=PRESSURED)
    llmd_pools.wait_ranked(llmd_pools.first("west"),
                           what="west's overlay with pool-a (queue 1 of 4) ahead of pool-b (queue 3 of 4)")


@pytest.mark.conformance(id="DEMO-LLMD-POOL-METRICS-PRESSURE-SHIFTS-TRAFFIC", profile="demos", level="demo",
                         feature=DEMO,
                         spec=_claim("Gateway-routed load visibly shifts request attribution from pool-a to pool-b "
                                     "as pressure builds, not just rank changes") + "; " +
                              _pressure("scoring engine flips preference to pool-b. Subsequent requests are routed "
                                        "to pool-b") + "; " + RANK_CHANGES,
                         statements=["RG-SCORES-DEMO-RANK-CHANGES", "OC-RERANK-ON-RECONCILE",
                                     "OC-RERANK-NEXT-REQUEST-NEW-ORDER", "RG-NEED-DETERMINISTIC",
                                     "RG-DEMO-LLMD-POOL-METRICS"])
def test_pressure_on_pool_a_moves_west_traffic_to_pool_b(llmd_pools: LlmdPools) -> None:
    """At idle, pool-a (rank 0 at west) serves west's workload; once pool-a's queue is pressured (3 of 4), west's
    overlay ranks pool-b first and west's gateway sends the workload to pool-b. Both pools stay in the
    overlay: the rank moved, nothing was withdrawn."""
    llmd_pools.consumer("west")
    _all(llmd_pools, "pool-a", "at idle (pool-a rank 0)")
    llmd_pools.set_signals("west", queueDepth=PRESSURED)
    llmd_pools.wait_ranked(llmd_pools.first("central"), what="west's overlay with pool-b ahead of pressured pool-a")
    llmd_pools.wait_served_from("west", ["central"], what="west's workload to be served by pool-b")
    _all(llmd_pools, "pool-b", "under pressure on pool-a (pool-b rank 0)")


@pytest.mark.conformance(id="DEMO-LLMD-POOL-METRICS-RECOVERY", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("Pool A recovers after load is removed: its queue drains, its rank returns to "
                                     "zero, and traffic attribution returns to pool-a") + "; routing guide, "
                              "scoreFirst: \"Scores affect their ordering; locality becomes a tie-breaker rather "
                              "than a group boundary.\"",
                         statements=["RG-SCORES-DEMO-RANK-CHANGES", "RG-SCOREFIRST-LOCALITY-TIE-BREAK",
                                     "OC-RERANK-PRAXIS-MOST-RECENT-ACCEPTED", "RG-DEMO-LLMD-POOL-METRICS"])
def test_pool_a_regains_rank_zero_and_traffic_after_pressure(llmd_pools: LlmdPools) -> None:
    """After pool-a's pressure moved west's workload to pool-b, pool-a's queue drains: both pools idle, west's
    overlay ranks pool-a (west's own pool, the locality tie-break) first again and west's gateway serves the
    workload from pool-a again."""
    llmd_pools.consumer("west")
    llmd_pools.set_signals("west", queueDepth=PRESSURED)
    llmd_pools.wait_ranked(llmd_pools.first("central"), what="west's overlay with pool-b ahead of pressured pool-a")
    llmd_pools.wait_served_from("west", ["central"], what="west's workload to be served by pool-b under pressure")
    llmd_pools.timeline.action("load removed: pool-a's queue drains")
    llmd_pools.set_signals("west", queueDepth=IDLE)
    llmd_pools.wait_ranked(llmd_pools.first("west"), what="west's overlay with drained pool-a at rank 0 again")
    llmd_pools.wait_served_from("west", ["west"], what="west's workload to be served by pool-a again")
    _all(llmd_pools, "pool-a", "after the load is removed (pool-a rank 0)")


@pytest.mark.conformance(id="DEMO-LLMD-POOL-METRICS-HOT-RELOAD", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("A content-addressed overlay is published and hot-reloaded without pod restart"),
                         statements=["OC-REVISION-DIGEST-DEFINITION", "OC-REVISION-VALUES-IDENTICAL",
                                     "OC-REGEN-PRAXIS-INSTALLS-NO-RESTART", "OC-RERANK-PRAXIS-MOST-RECENT-ACCEPTED"])
def test_each_reranked_overlay_is_content_addressed_and_hot_reloaded(llmd_pools: LlmdPools) -> None:
    """The overlays west publishes under pressure and after recovery each carry the digest of their own routing
    content as revision and content digest (recomputed by the harness's oracle), and the gateway process that
    served the baseline accepts and serves each of them in turn, without a restart."""
    previous = _digest_checked(llmd_pools.world.envelope("west") or {})
    gateway = llmd_pools.consumer("west")
    pid = gateway.proc.process.pid
    chain = llmd_pools.world.chain_of(gateway)
    for queue, leader, stage in ((PRESSURED, "central", "pool-a pressured"), (IDLE, "west", "pool-a drained")):
        llmd_pools.set_signals("west", queueDepth=queue)
        envelope = llmd_pools.wait_ranked(llmd_pools.first(leader),
                                          what=f"west's overlay with {llmd_pools.short[leader]} first ({stage})")
        revision = _digest_checked(envelope)
        assert revision != previous, f"{stage}: the re-ranked overlay is a new revision, not {previous}"
        chain.wait_accepted(revision)
        llmd_pools.timeline.revision("accepted", revision, site="west")
        gateway.wait_serving(revision, llmd_pools.model, timeout=timeouts().remote_route)
        llmd_pools.timeline.revision("serving", revision, site="west")
        assert gateway.running() and gateway.proc.process.pid == pid, \
            f"{stage}: the gateway that serves revision {revision[:12]} is the process that served the baseline"
        _all(llmd_pools, llmd_pools.short[leader], f"{stage}, revision {revision[:12]} serving")
        previous = revision


@pytest.mark.conformance(id="DEMO-LLMD-POOL-METRICS-KV-CACHE-PRESSURE", profile="demos", level="demo", feature=DEMO,
                         spec=f"{RANK_CHANGES}; {README}, Scoring and Routing Policy: \"kvCachePressure | Prefers the "
                              "provider with the most available KV-cache capacity.\" and \"Grid selects one "
                              "provider-level metric strategy at a time\"; provider scoring, KV-cache pressure: "
                              "\"score = 1 - kv_cache_utilization\"",
                         statements=["RG-SCORES-DEMO-RANK-CHANGES", "PS-KV-PREFERS-MOST-AVAILABLE",
                                     "PS-COMBINE-SINGLE-SIGNAL", "RG-NEED-KV-CACHE", "RG-DEMO-LLMD-POOL-METRICS"])
def test_kv_cache_pressure_configuration_moves_traffic_the_same_way(llmd_pools_kv: LlmdPools) -> None:
    """In the kvCachePressure configuration, pool-a's KV cache filling (0.8) ranks pool-b first at west and
    west's workload moves to pool-b, although pool-b's queue (3 of 4) is the longer one: an operator scoring
    this network by queue depth would keep pool-a first."""
    pools = llmd_pools_kv
    pools.consumer("west")
    _all(pools, "pool-a", "both KV caches empty (pool-a rank 0)")
    pools.set_signals("west", kvCacheUtilization=KV_PRESSURED)
    pools.wait_ranked(pools.first("central"), what="west's overlay with pool-b ahead of pool-a (KV cache 0.8 used)")
    pools.wait_served_from("west", ["central"], what="west's workload to be served by pool-b")
    _all(pools, "pool-b", "pool-a's KV cache 0.8 used (pool-b rank 0)")


@pytest.mark.conformance(id="DEMO-LLMD-POOL-METRICS-FORCED-REFRESH", profile="demos", level="demo", feature=DEMO,
                         spec="architecture, Demo-specific forced refresh: \"The LLM-D pool metrics demo deliberately "
                              "annotates the GridNetwork after a pressure or recovery transition. That annotation "
                              "creates an immediate watch event and bypasses the normal 300-second periodic requeue, "
                              "allowing the demo to show the queue change, re-ranking, overlay revision, and routed "
                              "request in one controlled flow. This is orchestration behavior for the demo; it is not "
                              "a different AGN scoring algorithm.\"; architecture, Revision semantics: \"Re-rendering "
                              "identical routing state therefore produces the same revision.\"",
                         statements=["OC-DEMO-FORCED-REFRESH-ANNOTATES", "OC-DEMO-ANNOTATION-IMMEDIATE-RECONCILE",
                                     "OC-DEMO-NOT-DIFFERENT-ALGORITHM", "OC-REVISION-IDEMPOTENT"])
def test_one_annotation_per_transition_shows_the_whole_flow(llmd_pools: LlmdPools) -> None:
    """On a network refreshed every 300 s, pool-a's queue is set without a refresh and the network annotated
    once: west's overlay re-ranks (pool-b first), the gateway serves that revision and routes to pool-b. The
    same after the recovery transition, whose overlay is the baseline's revision again: the annotated
    reconcile renders the same routing state to the same overlay as the reconcile that rendered the baseline.
    Fails if a forced refresh does not rescrape, or renders by a different rule."""
    gateway = llmd_pools.consumer("west")
    baseline = revision_of(llmd_pools.world.envelope("west"))
    assert baseline is not None
    for queue, leader, stage in ((PRESSURED, "central", "pressure"), (IDLE, "west", "recovery")):
        llmd_pools.set_signals("west", queueDepth=queue, refresh=False)
        llmd_pools.refresh("west")
        envelope = llmd_pools.wait_ranked(llmd_pools.first(leader), force=False,
                                          what=f"west's overlay re-ranked by the one forced refresh after the {stage}")
        revision = str(revision_of(envelope))
        gateway.wait_serving(revision, llmd_pools.model, timeout=timeouts().remote_route)
        llmd_pools.timeline.revision("serving", revision, site="west")
        _all(llmd_pools, llmd_pools.short[leader], f"after the {stage}'s forced refresh")
    assert revision == baseline, \
        f"the recovered routing state is the baseline's, so its overlay is the baseline's revision {baseline[:12]}, " \
        f"not {revision[:12]}"


@pytest.mark.conformance(id="DEMO-LLMD-POOL-METRICS-TLS-STALE-CACHE", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("Optional metrics TLS lifecycle (9 stages): baseline mTLS, ..., valid restore, "
                                     "stale-cache TTL expiry and recovery, ..., and end-to-end routing verification "
                                     "after the full TLS cycle") + "; provider scoring, Missing and Stale Metrics: "
                              "\"For a provider configured with spec.tls or a metricsConfig.tls override, a failed "
                              "scrape can reuse a successful sample only within staleMetricsSeconds; after that, AGN "
                              "marks the provider unhealthy so it is excluded from routing.\"",
                         statements=["PS-STALE-TLS-UNHEALTHY", "PS-STALE-REUSE-WITHIN-WINDOW",
                                     "OC-GRACE-CACHED-WITHIN-WINDOW", "OC-GRACE-TLS-UNHEALTHY",
                                     "RG-DEMO-LLMD-POOL-METRICS"])
def test_failing_tls_metrics_keep_the_cached_rank_then_fail_closed(llmd_pools_tls: LlmdPools) -> None:
    """pool-a's metrics are scraped over TLS (staleMetricsSeconds 10); idle, it leads pressured pool-b and
    serves west. Its TLS endpoint then fails every scrape: inside the window the last good sample keeps pool-a
    at rank 0 and serving; past it pool-a leaves west's overlay and west's workload goes to pool-b (it fails
    closed: scored neutral 0.5 it would still lead pool-b's 0.25). Once the endpoint answers again pool-a is
    back at rank 0 and serves west."""
    pools, window = llmd_pools_tls, float(TLS_STALE_SECONDS)
    control = pools.world.mesh.site("west").control
    pools.consumer("west")
    _all(pools, "pool-a", "baseline: pool-a's TLS-scraped idle queue leads")
    started = time.monotonic()
    pools.timeline.action("forced reconcile: the last good TLS scrape", site="west")
    envelope = control.reconcile(pools.world.net)
    assert pools.first("west")(envelope or {}), f"a good TLS scrape just before the failure: {pools.ranks(envelope)}"
    pools.fail_metrics("west")
    pools.timeline.action("forced reconcile: a failed TLS scrape inside the stale window", site="west")
    envelope = control.reconcile(pools.world.net)
    finished = time.monotonic()
    assert finished < started + window - CLOCK_SLACK, \
        f"the reconcile after the failure finished {finished - started:.1f}s after the last good scrape, not inside " \
        f"the {window:.0f}s window: the cached sample could not be judged"
    assert pools.first("west")(envelope or {}), \
        f"inside staleMetricsSeconds the last good TLS sample keeps pool-a first: {pools.ranks(envelope)}"
    _all(pools, "pool-a", "inside the stale window", n=4)
    pools.timeline.action(f"waiting out the {window:.0f}s stale window of pool-a's last good sample", site="west")
    pools.wait_ranked(pools.without("west"), what="west's overlay without pool-a once its last TLS sample expired",
                      timeout=window + timeouts().mesh_convergence)
    pools.wait_served_from("west", ["central"], what="west's workload to be served by pool-b")
    _all(pools, "pool-b", "pool-a's TLS metrics failing past the window (pool-a excluded)")
    pools.restore_metrics("west")
    pools.wait_ranked(pools.first("west"), what="west's overlay with pool-a first again after a good TLS scrape")
    pools.wait_served_from("west", ["west"], what="west's workload to be served by pool-a again")
    _all(pools, "pool-a", "after the TLS endpoint recovered")


_NOT_APPLICABLE = {
    "VLLM-METRICS": (
        "vllm-rs is the HTTP frontend for VCR and exposes vLLM-compatible Prometheus metrics",
        "a property of one model server (vllm-rs in front of vllm-vcr), which fake backends replace here"),
    "EPP-AGGREGATION": (
        "llm-d EPP aggregates per-backend metrics into pool-level summaries",
        "llm-d EPP's work inside a provider (provider scoring, Responsibility Boundary); the fake backends export "
        "the pool-level series an EPP would, and AGN's use of them is DEMO-LLMD-POOL-METRICS-OPERATOR-SCORES"),
    "LIVE-TABLE": (
        "The live metrics table shows queue depth, KV-cache, scores, ranks, per-pool request counts, and last-route "
        "attribution through the full lifecycle",
        "presentation tooling of the demo, not routing behaviour; each test's timeline records the metrics it set, "
        "the ranks and revisions west published and the pool that served every request"),
    "SCORECARD": (
        "The scorecard shows raw metrics, weighted scores, and ranks from the same overlay revision",
        "the overlay publishes each candidate's rank but neither its score nor the metrics it was computed from "
        "(architecture, the overlay payload; Praxis AI \"does not recompute source geography, load, or score\"), so "
        "which sample and score stand behind one revision's ranks is not observable in what AGN publishes: the "
        "scorecard joins the demo's own EPP reads and score arithmetic with the overlay. The ranks each revision "
        "must publish for the metrics in effect are DEMO-LLMD-POOL-METRICS-OPERATOR-SCORES, -PRESSURE-SHIFTS-TRAFFIC "
        "and -RECOVERY"),
    "TLS-FAILURE-MODES": (
        "Optional metrics TLS lifecycle (9 stages): ... handshake rejection, missing client identity, wrong CA, ...",
        "how a TLS scrape fails is between the operator and the demo's nginx in front of EPP; AGN gives every TLS "
        "resolution or scrape failure the same routing consequence (the cached sample within staleMetricsSeconds, "
        "then exclusion), which DEMO-LLMD-POOL-METRICS-TLS-STALE-CACHE judges with a TLS endpoint that fails its "
        "scrapes. The harness's TLS metrics endpoint asks for no client certificate and its CA is the run's, so "
        "these particular ways of failing are not staged"),
    "CERT-ROTATION": (
        "Optional metrics TLS lifecycle (9 stages): ... client cert rotation, server cert rotation with nginx "
        "restart, ...",
        "a rotation during which scrapes keep succeeding leaves every sample, rank and overlay as they were, so "
        "there is no routing behaviour to judge; a rotation that breaks scrapes is a failed TLS scrape "
        "(DEMO-LLMD-POOL-METRICS-TLS-STALE-CACHE)"),
}


@pytest.mark.conformance(id="DEMO-LLMD-POOL-METRICS-NOT-APPLICABLE", profile="demos", level="demo", feature=DEMO,
                         spec=f"{README}, What It Proves")
@pytest.mark.parametrize("claim", sorted(_NOT_APPLICABLE))
def test_claims_outside_agn_routing(claim: str) -> None:
    """Listed in the report as not applicable, with the reason: never silently dropped."""
    not_applicable(_NOT_APPLICABLE, claim)
