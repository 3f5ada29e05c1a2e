"""Provider scoring and metrics ingestion, judged through the order the operator publishes.

Candidates carry no score, so every expectation here is an exact order under scoreFirst (all providers at
one site, no geography) with values chosen so that a wrong rule yields a different order. Cluster names are
picked so the deterministic tie-break gives the opposite of the expected order: an operator that ignores
scores cannot pass by accident.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from harness import producer_oracle, resources
from harness.producer_support import Scenario
from harness.timeouts import timeouts
from harness.waiting import poll_until, wait_until_elapsed

ORDERING = "routing-architecture-and-overlay-contract#candidate-scoring-and-ordering"
SCORING_NO_METRICS = "provider-scoring#no-metrics-default"
SCORING_QUEUE = "provider-scoring#queue-depth"
SCORING_KV = "provider-scoring#kv-cache-pressure"
NORMALIZATION = "routing-architecture-and-overlay-contract#metrics-normalization-contract"
MISSING_DEFAULTS = "routing-architecture-and-overlay-contract#missing-value-defaults"
NAN = "routing-architecture-and-overlay-contract#nan-and-infinity"
STALE = "routing-architecture-and-overlay-contract#stale-metrics-grace-period"
METRICS_CONFIG = "provider-scoring#metrics-configuration"
MISSING_STALE = "provider-scoring#missing-and-stale-metrics"
TLS_FAILS_CLOSED = (f"{STALE}: \"When spec.tls or a metricsConfig.tls override is configured, a TLS resolution or "
                    "scrape failure with no unexpired successful sample instead marks the provider unhealthy, "
                    "excluding it from routing.\"")
NAN_HEALTH = (f"{NAN}: \"Prometheus scraping drops NaN and \u00b1Inf values at parse time.\"; {MISSING_DEFAULTS}: "
              "\"scored signals default to neutral values and health/error signals default to no evidence of "
              "failure\"; provider-scoring#missing-and-stale-metrics: \"NaN and infinite samples are "
              "discarded.\"")

#: A second plaintext metrics backend, so one backend's /metrics can fail while comparison providers keep theirs.
OTHER_BACKEND = "provider-b"
#: Slack for comparing the harness clock with the operator's: both read the host's monotonic clock.
CLOCK_SLACK = 0.25


def order(scenario: Scenario, envelope: dict[str, Any]) -> list[str]:
    return producer_oracle.names(envelope, scenario.model)


def first_render(scenario: Scenario) -> dict[str, Any]:
    """The first overlay of the test's network (apply providers before the network, so it holds them all).

    It is settled (its reconcile has written status too), so the next forced reconcile is the one judged.
    """
    return scenario.settled(scenario.envelope(what="a first overlay"))


def assert_order(scenario: Scenario, envelope: dict[str, Any], expected: list[str], why: str) -> None:
    seen = order(scenario, envelope)
    assert seen == expected, f"{why}: expected candidate order {expected}, got {seen}"


def next_order(scenario: Scenario, expected: list[str], why: str) -> dict[str, Any]:
    """The first reconcile after a metric change must already publish `expected`.

    The bound is one reconcile, not a deadline: every reconcile scrapes each configured endpoint ("During
    reconciliation, AGN ... Scrapes each configured metrics endpoint"), so the first one forced after the
    fake backend answers with the new sample reads it. Waiting through several reconciles would let an
    operator that rescrapes only now and then pass.
    """
    envelope = scenario.reconcile()
    assert_order(scenario, envelope, expected, f"the first reconcile after {why}")
    return envelope


def other_backend_metrics(scenario: Scenario, **options: Any) -> dict[str, Any]:
    """metricsConfig options that scrape this provider's pool on the second plaintext backend."""
    return {"url": scenario.site.backend(OTHER_BACKEND).url, **options}


def set_other(scenario: Scenario, pools: Mapping[str, Mapping[str, float | str | None]]) -> None:
    scenario.set_pools(pools, OTHER_BACKEND)


def fail_metrics(scenario: Scenario, backend: str) -> float:
    """Make `backend`'s /metrics answer 503 (until the test ends); returns when it was certainly failing."""
    scenario.fail_metrics(backend)
    return time.monotonic()


# ------------------------------------------------------------------------------------------- scoring


@pytest.mark.conformance(id="PROD-SCORE-NO-METRICS-NEUTRAL", profile="producer", level="core", feature="scoring",
                         spec=SCORING_NO_METRICS,
                         statements=["PS-NOMETRICS-ZERO-SCORE", "PS-NOMETRICS-OMITTED-SAME",
                                     "PS-CONFIG-DEFAULT-NO-METRICS", "RG-NOTMEAN-NOMETRICS-DISABLES-SCORING",
                                     "OC-ORDERING-SCORE-FIRST-KEYS"])
@pytest.mark.parametrize("strategy", ["noMetrics", "omitted"])
def test_no_metrics_orders_by_tie_break_only(scenario: Scenario, strategy: str) -> None:
    """noMetrics (or no scoringPolicy) gives every admitted candidate score 0: live queues change nothing.

    Fails if the operator scores queues anyway (order c, b, a) or defaults to a metrics strategy.
    """
    scenario.set_pools({short: {"queueDepth": queue, "kvCacheUtilization": queue / 10, "healthy": 1}
                         for short, queue in (("a", 8), ("b", 5), ("c", 1))})
    for short in ("a", "b", "c"):
        scenario.provider(short, metrics=True)
    scenario.network(routing="scoreFirst", scoring=None if strategy == "omitted" else strategy)
    envelope = first_render(scenario)
    assert_order(scenario, envelope, ["a", "b", "c"], f"scoring {strategy}: equal scores leave the tie-break")
    states = {c["cluster"]: c["admission_state"] for c in producer_oracle.candidates(envelope)}
    assert set(states.values()) == {"new_and_existing"}, f"all providers are healthy and admitted: {states}"


@pytest.mark.conformance(id="PROD-SCORE-QUEUE-DEPTH", profile="producer", level="core", feature="scoring",
                         spec=SCORING_QUEUE,
                         statements=["PS-QUEUE-PREFERS-SHORTEST", "RG-QUEUE-LOWER-PRESSURE-HIGHER",
                                     "PS-CONFIG-ONE-STRATEGY", "RG-LOADAWARE-STRATEGY-CHANGES-ORDER",
                                     "RG-DYNAMIC-MAINLINE-ORDER", "RG-INTRO-SCORING-ORDER",
                                     "RG-NOTMEAN-SCORES-ORDER", "OC-RENDER-SCORE-ORDER",
                                     "OC-RENDER-CONVERT-CANDIDATES", "PS-BOUNDARY-OPERATOR-BEFORE-REQUEST",
                                     "PS-QUEUE-FORMULA", "PS-COMBINE-SINGLE-SIGNAL", "OC-ORDERING-TWO-PHASES",
                                     "RG-LOADAWARE-SEPARATE-DIMENSION", "RG-LOADAWARE-STRATEGIES",
                                     "RG-QUEUE-FORMULA"])
@pytest.mark.parametrize("routing", ["scoreFirst", "geographyFirst"])
def test_queue_depth_score_orders_shortest_queue_first(scenario: Scenario, routing: str) -> None:
    """score = 1 - queue/queueCapacity, ordered descending (same site, so both policies reduce to score).

    Fails if scores are ignored (tie-break a, b, c), inverted (a, b, c) or the strategy reads another signal
    (the KV values given rank the opposite way).
    """
    scenario.set_pools({short: {"queueDepth": queue, "kvCacheUtilization": kv, "healthy": 1}
                         for short, queue, kv in (("a", 7, 0.1), ("b", 3, 0.5), ("c", 0, 0.8))})
    for short in ("a", "b", "c"):
        scenario.provider(short, metrics=True)
    scenario.network(routing=routing, scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["c", "b", "a"], "queues 0, 3 and 7 of 10")


@pytest.mark.conformance(id="PROD-SCORE-QUEUE-CLAMP", profile="producer", level="core", feature="scoring",
                         spec=NORMALIZATION,
                         statements=["PS-QUEUE-NORMALIZE-CLAMP", "OC-NORMALIZE-QUEUE-CAPACITY",
                                     "OC-RERANKING-NORMALIZE"])
def test_queue_ratio_is_clamped(scenario: Scenario) -> None:
    """queue/queueCapacity is clamped to [0, 1]: 25 and 12 of 10 both score 0, -5 and 0 both score 1.

    Fails if the ratio is not clamped (12 of 10 would outrank 25 of 10; -5 would outrank 0) — equal clamped
    scores must fall through to the tie-break.
    """
    queues = {"a": 25, "b": 12, "c": 5, "m": 0, "n": -5}
    scenario.set_pools({short: {"queueDepth": queue, "healthy": 1} for short, queue in queues.items()})
    for short in queues:
        scenario.provider(short, metrics=True)
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    envelope = first_render(scenario)
    # m, n score 1 (tie); c 0.5; a, b are over the admission threshold (existing_only) and score 0 (tie).
    assert_order(scenario, envelope, ["m", "n", "c", "a", "b"], "clamped queue ratios tie")
    states = {c["cluster"]: c["admission_state"] for c in producer_oracle.candidates(envelope)}
    assert states["a"] == states["b"] == "existing_only", f"queues over capacity are pressured: {states}"


@pytest.mark.conformance(id="PROD-SCORE-QUEUE-CAPACITY", profile="producer", level="core", feature="scoring",
                         spec=NORMALIZATION,
                         statements=["PS-LIMITS-QUEUE-CAPACITY", "RG-ADMISSION-QUEUE-CAPACITY", "PS-QUEUE-FORMULA",
                                     "OC-RERANKING-NORMALIZE", "RG-QUEUE-FORMULA"])
def test_queue_is_normalised_by_each_providers_capacity(scenario: Scenario) -> None:
    """Each provider's raw queue is divided by its own queueCapacity: 10 of 40 (0.75) beats 4 of 10 (0.6).

    Fails if raw queues are compared (4 < 10 would put p first) or one capacity is used for every provider
    (10 of 10 would even be pressured).
    """
    scenario.set_pools({"p": {"queueDepth": 4, "healthy": 1}, "q": {"queueDepth": 10, "healthy": 1}})
    scenario.provider("p", metrics=True)
    scenario.provider("q", metrics={"queue_capacity": 40})
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    envelope = first_render(scenario)
    assert_order(scenario, envelope, ["q", "p"], "normalised queues 0.25 (q) and 0.4 (p)")
    states = {c["cluster"]: c["admission_state"] for c in producer_oracle.candidates(envelope)}
    assert states == {"p": "new_and_existing", "q": "new_and_existing"}, f"neither pool is pressured: {states}"


@pytest.mark.conformance(id="PROD-SCORE-QUEUE-RERANK", profile="producer", level="core", feature="scoring",
                         spec=SCORING_QUEUE,
                         statements=["OC-RERANKING-SCRAPE", "OC-RERANK-ON-RECONCILE", "RG-NEED-QUEUE-DEPTH",
                                     "PS-INTRO-SCORED-AT-RENDER", "PS-BOUNDARY-OPERATOR-BEFORE-REQUEST",
                                     "OC-REGEN-ON-RECONCILE", "OC-REGEN-CURRENT-STATE", "OC-REGEN-RECONCILE-DRIVEN",
                                     "RG-DETERMINISTIC-AGN-RANKS", "RG-RELOAD-AGN-PUBLISHES"])
def test_queue_change_reorders(scenario: Scenario) -> None:
    """A new queue sample reorders the candidates at the first reconcile after it.

    Fails if the operator scrapes only once, caches scores across reconciles, or ignores scores.
    """
    scenario.set_pools({short: {"queueDepth": queue, "healthy": 1} for short, queue in (("a", 8), ("b", 5), ("c", 1))})
    for short in ("a", "b", "c"):
        scenario.provider(short, metrics=True)
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["c", "b", "a"], "queues a=8, b=5, c=1")
    scenario.set_pools({"a": {"queueDepth": 1}, "c": {"queueDepth": 8}})
    next_order(scenario, ["a", "b", "c"], "queues a=1, b=5, c=8")


@pytest.mark.conformance(id="PROD-SCORE-KV-RERANK", profile="producer", level="extended", feature="kvCachePressure",
                         spec=SCORING_KV,
                         statements=["PS-KV-PREFERS-MOST-AVAILABLE", "PS-KV-LOWER-UTILIZATION-HIGHER",
                                     "RG-NEED-KV-CACHE", "PS-CONFIG-ONE-STRATEGY", "OC-RERANKING-SCRAPE",
                                     "PS-COMBINE-SINGLE-SIGNAL", "OC-RERANKING-NORMALIZE",
                                     "OC-KVAFFINITY-SIGNAL-SCORING-ONLY", "RG-LOADAWARE-SEPARATE-DIMENSION",
                                     "RG-LOADAWARE-STRATEGIES", "RG-KV-FORMULA"])
def test_kv_cache_pressure_orders_and_reorders(scenario: Scenario) -> None:
    """kvCachePressure scores 1 - kv_cache_utilization; a new sample reorders at the next reconcile.

    Fails if the strategy reads the queue (queues are set to rank the opposite way), ignores scores, or
    does not rescrape at every reconcile.
    """
    scenario.set_pools({short: {"kvCacheUtilization": kv, "queueDepth": queue, "healthy": 1}
                         for short, kv, queue in (("a", 0.7, 0), ("b", 0.5, 3), ("c", 0.1, 6))})
    for short in ("a", "b", "c"):
        scenario.provider(short, metrics=True)
    scenario.network(routing="scoreFirst", scoring="kvCachePressure")
    assert_order(scenario, first_render(scenario), ["c", "b", "a"], "kv a=0.7, b=0.5, c=0.1")
    scenario.set_pools({"a": {"kvCacheUtilization": 0.1}, "c": {"kvCacheUtilization": 0.7}})
    next_order(scenario, ["a", "b", "c"], "kv a=0.1, b=0.5, c=0.7")


# ------------------------------------------------------------------------------------------- metrics


@pytest.mark.conformance(id="PROD-METRICS-MISSING-NEUTRAL", profile="producer", level="core", feature="metrics",
                         spec=MISSING_DEFAULTS,
                         statements=["OC-ORDERING-NO-METRICS-NEUTRAL", "PS-STALE-NEUTRAL-COMPETITIVE",
                                     "PS-QUEUE-FORMULA", "PS-STALE-NEUTRAL-FALLBACK", "OC-MISSING-NEUTRAL-DEFAULTS",
                                     "RG-QUEUE-FORMULA"])
@pytest.mark.parametrize("missing", ["no-metrics-config", "series-absent"])
def test_missing_metrics_score_neutral(scenario: Scenario, missing: str) -> None:
    """A provider without live metrics scores the neutral 0.5: between a 0.6 and a 0.4 provider, and stays.

    Fails if the neutral value is 0 (order c, a, b), 1 (b, c, a), or the provider is dropped.
    """
    pools: dict[str, dict[str, float | str | None]] = {"c": {"queueDepth": 4, "healthy": 1},
                                                        "a": {"queueDepth": 6, "healthy": 1}}
    if missing == "series-absent":
        pools["b"] = {"queueDepth": None, "kvCacheUtilization": None, "healthy": 1}
    scenario.set_pools(pools)
    for short in pools:
        scenario.provider(short, metrics=True)
    if missing == "no-metrics-config":
        scenario.provider("b")
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    envelope = first_render(scenario)
    assert_order(scenario, envelope, ["c", "b", "a"], f"{missing}: neutral 0.5 between 0.6 and 0.4")
    state = producer_oracle.by_cluster(envelope)["b"]["admission_state"]
    assert state == "new_and_existing", f"a provider without telemetry is healthy and admitted; got {state}"


@pytest.mark.conformance(id="PROD-METRICS-NAN-DISCARDED", profile="producer", level="core", feature="metrics",
                         spec=NAN,
                         statements=["OC-NAN-SCRAPE-DROPS", "PS-STALE-NAN-DISCARDED"])
def test_non_finite_samples_are_discarded(scenario: Scenario) -> None:
    """NaN, +Inf and -Inf samples are dropped and the signal is neutral (0.5) instead.

    Fails if +Inf is clamped to a full queue (c last and pressured), -Inf to an empty one (d first), or NaN
    leaks into the ordering.
    """
    queues: dict[str, float | str] = {"e": 4, "b": "NaN", "c": "+Inf", "d": "-Inf", "a": 6}
    scenario.set_pools({short: {"queueDepth": queue, "healthy": 1} for short, queue in queues.items()})
    for short in queues:
        scenario.provider(short, metrics=True)
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    envelope = first_render(scenario)
    assert_order(scenario, envelope, ["e", "b", "c", "d", "a"], "non-finite queues score neutral 0.5")
    states = {c["cluster"]: c["admission_state"] for c in producer_oracle.candidates(envelope)}
    assert set(states.values()) == {"new_and_existing"}, f"non-finite samples carry no pressure: {states}"


@pytest.mark.conformance(id="PROD-METRICS-NAN-HEALTH-ABSENT", profile="producer", level="core", feature="metrics",
                         spec=NAN_HEALTH,
                         statements=["OC-NAN-SCRAPE-DROPS", "PS-STALE-NAN-DISCARDED", "OC-ORDERING-NONE-REMOVED",
                                     "OC-MISSING-NEUTRAL-DEFAULTS"])
def test_non_finite_health_sample_is_absent(scenario: Scenario) -> None:
    """A NaN or infinite ready-pods sample is dropped: the health signal is absent, so no evidence of failure.

    d, c and b report NaN, +Inf and -Inf ready pods, a reports 1 and e 0 (a real hard failure, with the best
    queue). Every provider but e stays, admitted, in queue order. Fails if a non-finite health sample is read
    as 0 ready pods or compared as a number (NaN > 0 and -Inf > 0 are false: d and b would be excluded like
    e), or if the real 0 does not exclude e.
    """
    pools: dict[str, dict[str, float | str | None]] = {
        "d": {"queueDepth": 1, "healthy": "NaN"}, "c": {"queueDepth": 2, "healthy": "+Inf"},
        "b": {"queueDepth": 3, "healthy": "-Inf"}, "a": {"queueDepth": 4, "healthy": 1},
        "e": {"queueDepth": 0, "healthy": 0}}
    scenario.set_pools(pools)
    for short in pools:
        scenario.provider(short, metrics=True)
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    envelope = first_render(scenario)
    assert_order(scenario, envelope, ["d", "c", "b", "a"],
                 "non-finite ready pods are absent (healthy); 0 ready pods excludes e")
    states = {c["cluster"]: c["admission_state"] for c in producer_oracle.candidates(envelope)}
    assert set(states.values()) == {"new_and_existing"}, f"an absent health signal is no failure: {states}"


@pytest.mark.conformance(id="PROD-METRICS-STALE-WINDOW", profile="producer", level="core", feature="metrics",
                         spec=STALE,
                         statements=["PS-STALE-REUSE-WITHIN-WINDOW", "OC-GRACE-CACHE",
                                     "OC-GRACE-CACHED-WITHIN-WINDOW", "OC-GRACE-EXPIRED-NEUTRAL",
                                     "OC-RERANKING-NORMALIZE", "OC-GRACE-ONLY-EXTENDS"])
@pytest.mark.lasts(5)
def test_stale_sample_reused_only_within_window(scenario: Scenario) -> None:
    """A failed plaintext scrape reuses the last good sample for staleMetricsSeconds, then falls back to neutral.

    Provider c (q=1, 0.9) leads b (0.6) and a (0.4), whose metrics live on another backend. c's endpoint
    starts failing a second after its last good scrape. Every reconcile finishing inside the window still
    ranks c first; the first reconcile after the window, counted from the last good scrape, ranks it
    neutral, between b and a, although the failure began less than a window before. Fails if the stale
    sample is never reused, reused past its window, or the window is counted from the failure.
    """
    # the window holds a reconcile of an operator that writes only on change, seen a moment after its scrape
    window, gap = 5.0, 1.0
    scenario.set_pools({"c": {"queueDepth": 1, "healthy": 1}})
    scenario.provider("c", metrics={"stale_seconds": int(window)})
    set_other(scenario, {"b": {"queueDepth": 4, "healthy": 1}, "a": {"queueDepth": 6, "healthy": 1}})
    scenario.provider("b", metrics=other_backend_metrics(scenario))
    scenario.provider("a", metrics=other_backend_metrics(scenario))
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["c", "b", "a"], "fresh samples 0.9, 0.6, 0.4")

    # The last good scrape happens during this reconcile: the window starts no earlier than `started` and
    # no later than `scraped`. The network refreshes every 300 s, so only forced reconciles scrape.
    started = time.monotonic()
    assert_order(scenario, scenario.reconcile(), ["c", "b", "a"], "a good scrape just before the failure")
    scraped = time.monotonic()
    wait_until_elapsed(scraped, gap)  # the failure begins well after the last success
    fail_metrics(scenario, scenario.metrics_backend)

    reused = 0
    while True:
        envelope = scenario.reconcile()
        finished = time.monotonic()
        if finished >= started + window - CLOCK_SLACK:
            break
        assert_order(scenario, envelope, ["c", "b", "a"],
                     f"{finished - started:.2f}s after the last good scrape, inside the {window:.0f}s window")
        reused += 1
    if reused == 0:  # the harness's round trip, not the operator's answer: nothing inside the window was seen
        pytest.skip(f"no reconcile of this backend finished inside the {window:.0f}s stale window (the last took "
                    f"{finished - started:.2f}s from the good scrape): reuse inside the window could not be observed")

    # The window started at the last good scrape, a second before the failure: it is over before a window
    # has passed since the failure.
    wait_until_elapsed(scraped, window + CLOCK_SLACK)
    envelope = scenario.reconcile()
    assert_order(scenario, envelope, ["b", "c", "a"],
                 f"{window + CLOCK_SLACK:.2f}s after the last good scrape ({window + CLOCK_SLACK - gap:.2f}s after the "
                 "failure began), a failed plaintext scrape scores neutral 0.5")
    state = producer_oracle.by_cluster(envelope)["c"]["admission_state"]
    assert state == "new_and_existing", f"plaintext scrape failure keeps the provider admitted; got {state}"


@pytest.mark.conformance(id="PROD-METRICS-STALE-CACHE-PER-PROCESS", profile="producer", level="core",
                         feature="metrics",
                         spec=f"{STALE}: \"The cache is per-operator-process; restarting the operator clears all "
                              "cached samples.\"",
                         statements=["OC-GRACE-CACHE-PER-PROCESS"])
def test_restart_clears_the_stale_sample_cache(scenario: Scenario) -> None:
    """Inside a long staleMetricsSeconds window a failing plaintext endpoint still ranks on its cached sample,
    until the operator restarts: the first reconcile of the new process scores it neutral.

    c (q=1, 0.9) leads b (0.6) and a (0.4); c's endpoint fails; a reconcile still ranks c first (the cache is
    in use, well inside its 600 s window). After the restart, with c still failing, c ranks between b and a
    (neutral 0.5). Fails if the operator keeps its cache across restarts (in a file, its status or an
    annotation) and goes on serving the sample the old process scraped.
    """
    scenario.set_pools({"c": {"queueDepth": 1, "healthy": 1}})
    scenario.provider("c", metrics={"stale_seconds": 600})
    set_other(scenario, {"b": {"queueDepth": 4, "healthy": 1}, "a": {"queueDepth": 6, "healthy": 1}})
    scenario.provider("b", metrics=other_backend_metrics(scenario))
    scenario.provider("a", metrics=other_backend_metrics(scenario))
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["c", "b", "a"], "fresh samples 0.9, 0.6, 0.4")
    assert_order(scenario, scenario.reconcile(), ["c", "b", "a"], "a good scrape just before the failure")
    fail_metrics(scenario, scenario.metrics_backend)
    assert_order(scenario, scenario.reconcile(), ["c", "b", "a"],
                 "a failed scrape inside the 600 s window (the cached sample ranks c)")
    scenario.restart_operator()
    envelope = scenario.reconcile()
    assert_order(scenario, envelope, ["b", "c", "a"],
                 "the first reconcile after the operator restarted, with c's endpoint still failing: the new "
                 "process has no cached sample, so c scores neutral 0.5")


@pytest.mark.conformance(id="PROD-METRICS-POOL-FILTER", profile="producer", level="core", feature="metrics",
                         spec=METRICS_CONFIG,
                         statements=["PS-METRICS-PROMETHEUS-TEXT", "PS-METRICS-ENDPOINT-OVERRIDE",
                                     "PS-METRICS-PROVIDER-IS-POOL", "OC-RENDER-COLLECT-METRICS",
                                     "OC-INPUTS-LOCAL-METRICS"])
def test_samples_are_filtered_by_pool(scenario: Scenario) -> None:
    """Pools sharing one endpoint each get their own series (label name=<poolName>).

    A decoy pool with an empty queue is exposed first. Fails if the operator takes the first series of a
    metric regardless of its pool label (both providers would tie and fall back to the tie-break a, b).
    """
    scenario.set_pools({"decoy": {"queueDepth": 0, "healthy": 1}})
    scenario.set_pools({"a": {"queueDepth": 7, "healthy": 1}, "b": {"queueDepth": 2, "healthy": 1}})
    scenario.provider("a", metrics=True)
    scenario.provider("b", metrics=True)
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["b", "a"], "pool b (q=2) before pool a (q=7)")


@pytest.fixture
def custom_metric(scenario: Scenario) -> Iterator[str]:
    """A test-unique metric name on the metrics backend, removed again when the test ends."""
    name = f"{scenario.tag}_waiting_requests"
    try:
        yield name
    finally:
        scenario.site.remove_series(scenario.metrics_backend, name)


@pytest.mark.conformance(id="PROD-METRICS-SIGNAL-NAMES", profile="producer", level="core", feature="metrics",
                         spec=METRICS_CONFIG,
                         statements=["OC-INPUTS-LOCAL-METRICS"])
def test_signal_names_select_the_metric(scenario: Scenario, custom_metric: str) -> None:
    """metricsConfig.signalNames.queueDepth names the series to read, not a fixed default name.

    Provider b maps queueDepth to a custom metric (q=1); its pool also exposes the usual queue series with
    q=8. Fails if the operator reads the default name (b would score 0.2) or cannot find the custom one
    (neutral 0.5): either puts a (0.6) first.
    """
    pool_b = scenario.name("b")
    scenario.set_pools({"a": {"queueDepth": 4, "healthy": 1}, "b": {"queueDepth": 8, "healthy": 1}},
              extra=[{"name": custom_metric, "labels": {"name": pool_b}, "value": 1}])
    scenario.provider("a", metrics=True)
    provider_b = resources.inference_provider(
        pool_b, scenario.net, site=scenario.local, cluster="b", models=(scenario.model,),
        metrics=resources.metrics_config(scenario.metrics_url(), pool_b))
    provider_b["spec"]["metricsConfig"]["signalNames"]["queueDepth"] = custom_metric
    scenario.apply(provider_b)
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["b", "a"], f"b's queue is read from {custom_metric} (q=1)")


@pytest.mark.conformance(id="PROD-METRICS-PLAINTEXT-FAILURE-NEUTRAL", profile="producer", level="core",
                         feature="metrics", spec=STALE,
                         statements=["PS-STALE-NEUTRAL-COMPETITIVE", "OC-GRACE-OPTIONAL",
                                     "PS-STALE-NEUTRAL-FALLBACK", "OC-MISSING-NEUTRAL-DEFAULTS",
                                     "OC-GRACE-PLAINTEXT-NEUTRAL", "OC-GRACE-ABSENT-DEFAULT"])
def test_plaintext_scrape_failure_scores_neutral(scenario: Scenario) -> None:
    """Without TLS and without staleMetricsSeconds a failed scrape scores neutral 0.5 at the next reconcile.

    Fails if the provider keeps its last sample (c stays first), is dropped or restricted (fail closed is
    for TLS only), or the failure scores 0 (c last).
    """
    scenario.set_pools({"c": {"queueDepth": 1, "healthy": 1}})
    scenario.provider("c", metrics=True)
    set_other(scenario, {"b": {"queueDepth": 4, "healthy": 1}, "a": {"queueDepth": 6, "healthy": 1}})
    scenario.provider("b", metrics=other_backend_metrics(scenario))
    scenario.provider("a", metrics=other_backend_metrics(scenario))
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["c", "b", "a"], "fresh samples 0.9, 0.6, 0.4")
    fail_metrics(scenario, scenario.metrics_backend)
    envelope = scenario.reconcile()
    assert_order(scenario, envelope, ["b", "c", "a"], "the reconcile after a plaintext scrape failure")
    state = producer_oracle.by_cluster(envelope)["c"]["admission_state"]
    assert state == "new_and_existing", f"plaintext scrape failure keeps the provider admitted; got {state}"


#: The two ways a provider configures metrics TLS: a metricsConfig.tls override, or the provider's own spec.tls
#: ("Trust material for the provider endpoints; also applies to health checks, metrics and model discovery
#: unless they override it", InferenceProvider CRD).
TLS_WAYS = ["metrics-config", "spec-tls"]


def tls_provider(scenario: Scenario, short: str, url: str, way: str, **options: Any) -> str:
    """A provider scraping `url` (HTTPS) with TLS configured the given way; `options` go to its metricsConfig."""
    if way == "metrics-config":
        return scenario.provider(short, metrics={"url": url, "tls": True, **options})
    trust = {"caSecretRef": {"name": "metrics-ca", "namespace": resources.DEFAULT_NAMESPACE}}
    return scenario.provider(short, metrics={"url": url, **options}, tls=trust)


@pytest.mark.conformance(id="PROD-METRICS-TLS-SCRAPED", profile="producer", level="extended", feature="tlsMetrics",
                         spec=MISSING_STALE,
                         statements=["OC-RERANKING-SCRAPE"])
def test_tls_metrics_are_scraped(scenario: Scenario) -> None:
    """A metricsConfig.tls endpoint is scraped over HTTPS and its values score like any other.

    Fails if the TLS endpoint is not scraped (the provider would be excluded or neutral) or its values are
    read once and never again (the first reconcile after the sample changed must reorder).
    """
    tls = scenario.site.tls_metrics()
    scenario.metrics_backend = tls.spec.name
    scenario.set_metrics("c", queueDepth=1, healthy=1)
    scenario.provider("c", metrics={"url": tls.url, "tls": True})
    set_other(scenario, {"b": {"queueDepth": 4, "healthy": 1}})
    scenario.provider("b", metrics=other_backend_metrics(scenario))
    scenario.provider("a")  # no metrics: neutral 0.5
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["c", "b", "a"], "TLS sample q=1 scores 0.9")
    scenario.set_metrics("c", queueDepth=8)
    next_order(scenario, ["b", "a", "c"], "the TLS sample became q=8 (0.2)")


@pytest.mark.conformance(id="PROD-METRICS-TLS-NO-SAMPLE-EXCLUDED", profile="producer", level="extended",
                         feature="tlsMetrics", spec=TLS_FAILS_CLOSED,
                         statements=["OC-RERANKING-SCRAPE", "OC-GRACE-TLS-UNHEALTHY", "OC-GRACE-ABSENT-DEFAULT"])
@pytest.mark.parametrize("way", TLS_WAYS)
def test_tls_scrape_failure_without_a_sample_excludes(scenario: Scenario, way: str) -> None:
    """A TLS-configured provider whose scrape fails with no earlier sample is excluded; once it answers, it is in.

    Both ways of configuring TLS count (metricsConfig.tls, or spec.tls alone). The endpoint fails before the
    provider is ever scraped, so no successful sample exists. Fails if a TLS failure falls back to neutral
    like a plaintext one (c would rank with a), if spec.tls is not taken as TLS, or if the provider stays out
    after a successful scrape (the first reconcile after the endpoint recovers).
    """
    tls = scenario.site.tls_metrics()
    scenario.metrics_backend = tls.spec.name
    scenario.set_metrics("c", queueDepth=1, healthy=1)
    fail_metrics(scenario, tls.spec.name)
    tls_provider(scenario, "c", tls.url, way)
    set_other(scenario, {"b": {"queueDepth": 4, "healthy": 1}})
    scenario.provider("b", metrics=other_backend_metrics(scenario))
    scenario.provider("a")  # no metrics: neutral 0.5
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["b", "a"], f"{way}: a failing TLS scrape and no earlier sample")

    scenario.restore_metrics(tls.spec.name)
    next_order(scenario, ["c", "b", "a"], f"{way}: the TLS endpoint answered again (q=1 scores 0.9)")


@pytest.mark.conformance(id="PROD-METRICS-TLS-FAILS-CLOSED", profile="producer", level="extended",
                         feature="tlsMetrics", spec=TLS_FAILS_CLOSED,
                         statements=["PS-STALE-TLS-UNHEALTHY", "OC-GRACE-CACHED-WITHIN-WINDOW",
                                     "OC-GRACE-TLS-UNHEALTHY", "OC-GRACE-ONLY-EXTENDS"])
@pytest.mark.parametrize("way", TLS_WAYS)
@pytest.mark.lasts(3.5)
def test_tls_scrape_failure_fails_closed_after_window(scenario: Scenario, way: str) -> None:
    """A failing TLS metrics endpoint reuses its last good sample within staleMetricsSeconds, then is excluded.

    Both ways of configuring TLS count (metricsConfig.tls, or spec.tls alone). Fails if the provider falls
    back to neutral like a plaintext one (it must disappear), disappears while a good sample is still within
    the window, or stays past it.
    """
    window = 3.0
    tls = scenario.site.tls_metrics()
    scenario.metrics_backend = tls.spec.name
    scenario.set_metrics("c", queueDepth=1, healthy=1)
    tls_provider(scenario, "c", tls.url, way, stale_seconds=int(window))
    set_other(scenario, {"b": {"queueDepth": 4, "healthy": 1}})
    scenario.provider("b", metrics=other_backend_metrics(scenario))
    scenario.provider("a")  # no metrics: neutral 0.5
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["c", "b", "a"], "TLS sample q=1 scores 0.9")

    started = time.monotonic()
    assert_order(scenario, scenario.reconcile(), ["c", "b", "a"], "a good TLS scrape just before the failure")
    failing_since = fail_metrics(scenario, tls.spec.name)
    envelope = scenario.reconcile()
    took = time.monotonic() - started
    if took >= window - CLOCK_SLACK:  # the harness's round trip, not the operator's answer
        pytest.skip(f"this backend's reconciles took {took:.2f}s from the good TLS scrape, past the {window:.0f}s "
                    "stale window less clock slack: reuse inside the window could not be observed")
    assert_order(scenario, envelope, ["c", "b", "a"], "inside the stale window the last TLS sample is reused")

    wait_until_elapsed(failing_since, window + CLOCK_SLACK)
    envelope = scenario.reconcile()
    assert_order(scenario, envelope, ["b", "a"], "past the stale window a failing TLS endpoint is excluded")


# ------------------------------------------------------------------------ fresh samples, strategy, ratios


@pytest.mark.conformance(id="PROD-METRICS-STALE-FRESH-WINS", profile="producer", level="core", feature="metrics",
                         spec=f"{STALE}: \"staleMetricsSeconds has no effect on successful scrapes: fresh scraped "
                              "values always win.\"",
                         statements=["OC-GRACE-FRESH-WINS"])
def test_fresh_sample_wins_over_the_stale_cache(scenario: Scenario) -> None:
    """With staleMetricsSeconds 60, a changed value on a scrape that succeeds ranks at the next reconcile.

    c (q=1, 0.9) leads b (0.6) and a (0.4, on another backend); c's queue rises to 8 (0.2) while its endpoint
    keeps answering. Fails if the cached sample is served while it is younger than the window.
    """
    scenario.set_pools({"c": {"queueDepth": 1, "healthy": 1}})
    scenario.provider("c", metrics={"stale_seconds": 60})
    set_other(scenario, {"b": {"queueDepth": 4, "healthy": 1}, "a": {"queueDepth": 6, "healthy": 1}})
    scenario.provider("b", metrics=other_backend_metrics(scenario))
    scenario.provider("a", metrics=other_backend_metrics(scenario))
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["c", "b", "a"], "fresh samples 0.9, 0.6, 0.4")
    scenario.set_pools({"c": {"queueDepth": 8}})
    next_order(scenario, ["b", "a", "c"], "c's queue rose to 8 of 10 on a scrape that succeeds")


#: How long the changed strategy may take to show, with a reconcile forced every second: the apply itself
#: reaches the operator by a watch, so "the next successful reconciliation" is bounded, not counted.
STRATEGY_CHANGE_TIMEOUT = 10.0


@pytest.mark.conformance(id="PROD-SCORE-STRATEGY-CHANGE", profile="producer", level="core", feature="scoring",
                         spec="provider-scoring, Current limits: \"Strategy changes alter the overlay on the next "
                              "successful reconciliation.\"",
                         statements=["PS-LIMITS-STRATEGY-CHANGE-NEXT-RECONCILE"])
def test_strategy_change_reorders_the_published_overlay(scenario: Scenario) -> None:
    """noMetrics, then queueDepth, then noMetrics again on one live network: each change reorders the overlay.

    Queues 8, 5 and 1 of 10 for a, b and c: the tie-break order a, b, c without metrics, c, b, a by queue.
    Fails if the strategy a network started with is kept (cached per network), in either direction.
    """
    scenario.set_pools({"a": {"queueDepth": 8, "healthy": 1}, "b": {"queueDepth": 5, "healthy": 1},
                        "c": {"queueDepth": 1, "healthy": 1}})
    for short in ("a", "b", "c"):
        scenario.provider(short, metrics=True)
    scenario.network(routing="scoreFirst", scoring="noMetrics")
    assert_order(scenario, first_render(scenario), ["a", "b", "c"], "noMetrics: the tie-break order")
    for strategy, expected in (("queueDepth", ["c", "b", "a"]), ("noMetrics", ["a", "b", "c"])):
        scenario.network(routing="scoreFirst", scoring=strategy)

        def reordered(env: dict[str, Any], want: list[str] = expected) -> bool:
            return order(scenario, env) == want

        scenario.envelope(reordered, force=True, timeout=STRATEGY_CHANGE_TIMEOUT,
                          what=f"the order {expected} after the strategy changed to {strategy}")


@pytest.mark.conformance(id="PROD-METRICS-DESTINATION-RATIO", profile="producer", level="core", feature="metrics",
                         spec=f"{NORMALIZATION}: \"the Prometheus exporter (or a recording rule on the destination) "
                              "converts raw queue depths to a [0.0, 1.0] ratio\"; \"When an llm-d EPP exposes an "
                              "absolute average queue size, set metricsConfig.queueCapacity\"",
                         statements=["OC-NORMALIZE-DESTINATION-RATIO"])
def test_queue_ratio_without_capacity_is_used_as_published(scenario: Scenario) -> None:
    """Without queueCapacity the series is the destination's own ratio: 0.5 and 0.2 score 0.5 and 0.8.

    p and r publish ratios (no capacity); q publishes a raw 3 with capacity 10 (0.3, score 0.7). Fails if a
    capacity is assumed where none is set (every value divided again) or the ratio is ignored (neutral).
    """
    scenario.set_pools({"p": {"queueDepth": 0.5, "healthy": 1}, "q": {"queueDepth": 3, "healthy": 1},
                        "r": {"queueDepth": 0.2, "healthy": 1}})
    scenario.provider("p", metrics={"queue_capacity": None})
    scenario.provider("q", metrics=True)
    scenario.provider("r", metrics={"queue_capacity": None})
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["r", "q", "p"], "ratios 0.2 and 0.5, raw 3 of 10")


#: metricsRefreshInterval values of the periodic test and the seconds each means: the shortest the spec allows
#: ("seconds or millisecond durations of at least one second"), in both spellings.
PERIODIC_INTERVALS = {"1s": 1.0, "1500ms": 1.5}


@pytest.mark.conformance(id="PROD-RECONCILE-PERIODIC", profile="producer", level="core", feature="metrics",
                         spec="routing-architecture-and-overlay-contract, Reconcile triggers: \"The periodic "
                              "interval is important for live metrics: a changing EPP queue does not itself change "
                              "a Kubernetes resource, so it normally waits for the next GridNetwork reconcile.\"",
                         statements=["OC-RECONCILE-PERIODIC-FOR-METRICS", "OC-RECONCILE-TWO-TRIGGERS",
                                     "OC-RECONCILE-INTERVAL-FORMAT"])
@pytest.mark.parametrize("interval", sorted(PERIODIC_INTERVALS))
def test_metric_change_alone_is_published_by_the_periodic_reconcile(scenario: Scenario, interval: str) -> None:
    """metricsRefreshInterval 1s or 1500ms: swapped queues reorder the overlay, no resource change, nothing forced.

    a (q=1) leads b (q=6); the fake EPP then swaps them. The overlay must show b first within two intervals
    plus a second: one for the periodic reconcile to come due, one more and the second for it to scrape,
    render and write (the harness never forces a reconcile here). Fails if only resource changes or forced
    refreshes trigger a reconcile, if the interval is not honoured, or if a millisecond duration is refused
    or misread.
    """
    seconds = PERIODIC_INTERVALS[interval]
    scenario.set_pools({"a": {"queueDepth": 1, "healthy": 1}, "b": {"queueDepth": 6, "healthy": 1}})
    scenario.provider("a", metrics=True)
    scenario.provider("b", metrics=True)
    scenario.network(routing="scoreFirst", scoring="queueDepth", refresh=interval)
    assert_order(scenario, first_render(scenario), ["a", "b"], "queues 1 and 6 of 10")
    scenario.set_pools({"a": {"queueDepth": 6}, "b": {"queueDepth": 1}})
    scenario.envelope(lambda env: order(scenario, env) == ["b", "a"], timeout=2 * seconds + 1.0,
                      what=f"b first by the periodic reconcile ({interval} interval), unforced")


#: What a periodic reconcile may take past its period to be seen: the scrape, the render, the write and the
#: harness's polling of the ConfigMap.
CADENCE_SLACK = 10.0
CADENCE = ("routing-architecture-and-overlay-contract, What causes a reconcile: \"An absent value uses the safe "
           "default of 300 seconds for plaintext metrics. A network with TLS metric credentials defaults to 60 seconds "
           "and never permits a custom interval longer than that bound, so certificate rotation detection is not "
           "delayed.\"")


def _tls_and_plaintext(scenario: Scenario, way: str) -> None:
    """a (q=1) scraped over TLS the given way, b (q=6) in plaintext on the other backend."""
    tls = scenario.site.tls_metrics()
    scenario.metrics_backend = tls.spec.name
    scenario.set_metrics("a", queueDepth=1, healthy=1)
    tls_provider(scenario, "a", tls.url, way)
    set_other(scenario, {"b": {"queueDepth": 6, "healthy": 1}})
    scenario.provider("b", metrics=other_backend_metrics(scenario))


def _swap_is_published_within(scenario: Scenario, period: float, why: str) -> None:
    """a leads b; the fake EPPs then swap their queues, with no resource write and nothing forced: b must lead
    within `period` (plus the slack) of the settled first overlay, which follows the last reconcile, so the
    deadline is never shorter than the period. Reconciling sooner is not asserted against: the sentences
    bound the cadence, and an operator may reconcile for other reasons too."""
    assert_order(scenario, first_render(scenario), ["a", "b"], "queues 1 and 6 of 10")
    scenario.set_metrics("a", queueDepth=6)
    set_other(scenario, {"b": {"queueDepth": 1}})
    scenario.envelope(lambda env: order(scenario, env) == ["b", "a"], timeout=period + CADENCE_SLACK,
                      what=f"b first by a periodic reconcile within {period:.0f} s ({why}), nothing forced")


@pytest.mark.slow(300)
@pytest.mark.conformance(id="PROD-RECONCILE-DEFAULT-300", profile="producer", level="core", feature="metrics",
                         spec=CADENCE, statements=["OC-RECONCILE-INTERVAL-DEFAULT-300"])
def test_absent_interval_reconciles_plaintext_metrics_within_300_seconds(scenario: Scenario) -> None:
    """No metricsRefreshInterval and plaintext metrics only: a metric-only change is published within 300 s.

    Fails if an absent interval means no periodic reconcile at all, or a default period longer than 300 s.
    """
    scenario.set_pools({"a": {"queueDepth": 1, "healthy": 1}})
    scenario.provider("a", metrics=True)
    set_other(scenario, {"b": {"queueDepth": 6, "healthy": 1}})
    scenario.provider("b", metrics=other_backend_metrics(scenario))
    scenario.network(routing="scoreFirst", scoring="queueDepth", refresh=None)
    _swap_is_published_within(scenario, 300.0, "the default for plaintext metrics")


@pytest.mark.slow(60)
@pytest.mark.conformance(id="PROD-RECONCILE-TLS-DEFAULT-60", profile="producer", level="extended",
                         feature="tlsMetrics", spec=CADENCE, statements=["OC-RECONCILE-INTERVAL-TLS-DEFAULT-60"])
@pytest.mark.parametrize("way", TLS_WAYS)
def test_tls_metrics_default_to_a_60_second_cadence(scenario: Scenario, way: str) -> None:
    """No metricsRefreshInterval, one provider's metrics over TLS (metricsConfig.tls, or spec.tls alone): a
    metric-only change is published within 60 s. Fails if the TLS network takes the plaintext default of
    300 s, so certificate problems are noticed minutes late, or if spec.tls alone is not taken as TLS.
    """
    _tls_and_plaintext(scenario, way)
    scenario.network(routing="scoreFirst", scoring="queueDepth", refresh=None)
    _swap_is_published_within(scenario, 60.0, f"the default with TLS metric credentials ({way})")


@pytest.mark.slow(60)
@pytest.mark.conformance(id="PROD-RECONCILE-TLS-MAX-60", profile="producer", level="extended",
                         feature="tlsMetrics", spec=CADENCE, statements=["OC-RECONCILE-INTERVAL-TLS-MAX-60"])
@pytest.mark.parametrize("way", TLS_WAYS)
def test_tls_metrics_cap_a_longer_interval_at_60_seconds(scenario: Scenario, way: str) -> None:
    """metricsRefreshInterval 120s on a network with TLS metrics: its changes are published within 60 s all
    the same. "Never permits" is also met by refusing the network: then its status must name
    metricsRefreshInterval, and nothing is judged further. Fails if the custom 120 s is honoured.
    """
    _tls_and_plaintext(scenario, way)
    scenario.network(routing="scoreFirst", scoring="queueDepth", refresh="120s")
    published, refused = poll_until(
        lambda: (scenario.control.envelope(scenario.net) is not None,
                 "metricsRefreshInterval" in json.dumps(scenario.control.status(scenario.net))),
        any, timeout=timeouts().reconcile, what="a first overlay, or a status refusing metricsRefreshInterval 120s")
    if refused and not published:
        return
    _swap_is_published_within(scenario, 60.0, f"120s capped with TLS metric credentials ({way})")


@pytest.mark.conformance(id="PROD-METRICS-SIGNAL-NAME-UNMATCHED", profile="producer", level="core",
                         feature="metrics",
                         spec="routing-guide, Queue depth: \"Names vary between scheduler versions and metric "
                              "adapters; a wrong name can leave AGN without the selected signal.\"; "
                              f"{MISSING_DEFAULTS}: \"scored signals default to neutral values\"",
                         statements=["RG-QUEUE-WRONG-NAME"])
def test_signal_name_matching_no_series_leaves_the_signal_missing(scenario: Scenario) -> None:
    """b maps queueDepth to a name its pool does not export; the usual series says q=1. b scores neutral.

    c (q=3, 0.7) then leads b (0.5) and a (q=6, 0.4). Fails if the operator falls back to the default series
    name (b would lead with 0.9) or treats the missing signal as the worst or best score.
    """
    pool_b = scenario.name("b")
    scenario.set_pools({"a": {"queueDepth": 6, "healthy": 1}, "b": {"queueDepth": 1, "healthy": 1},
                        "c": {"queueDepth": 3, "healthy": 1}})
    scenario.provider("a", metrics=True)
    scenario.provider("c", metrics=True)
    provider_b = resources.inference_provider(
        pool_b, scenario.net, site=scenario.local, cluster="b", models=(scenario.model,),
        metrics=resources.metrics_config(scenario.metrics_url(), pool_b))
    provider_b["spec"]["metricsConfig"]["signalNames"]["queueDepth"] = "agn_conformance_no_such_queue_series"
    scenario.apply(provider_b)
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    assert_order(scenario, first_render(scenario), ["c", "b", "a"], "b's configured queue series is absent")


@pytest.mark.conformance(id="PROD-SCORE-KV-FORMULA", profile="producer", level="extended",
                         feature="kvCachePressure",
                         spec=f"{SCORING_KV}: \"score = 1 - kv_cache_utilization\"; {MISSING_DEFAULTS}: \"scored "
                              "signals default to neutral values\"",
                         statements=["PS-KV-FORMULA", "RG-KV-FORMULA"])
def test_kv_score_is_one_minus_utilization(scenario: Scenario) -> None:
    """KV 0.49 scores 0.51, above a provider without the series (neutral 0.5), and KV 0.51 scores 0.49, below it.

    Fails if KV utilization is scored by another decreasing function (1 - kv^2, 1 / (1 + kv), a percentage),
    each of which puts both measured providers on the same side of the neutral one.
    """
    scenario.set_pools({"lo": {"queueDepth": 1, "kvCacheUtilization": 0.49, "healthy": 1},
                        "hi": {"queueDepth": 1, "kvCacheUtilization": 0.51, "healthy": 1},
                        "n": {"queueDepth": 1, "kvCacheUtilization": None, "healthy": 1}})
    for short in ("hi", "lo", "n"):
        scenario.provider(short, metrics=True)
    scenario.network(routing="scoreFirst", scoring="kvCachePressure")
    assert_order(scenario, first_render(scenario), ["lo", "n", "hi"], "KV 0.49, no KV series, KV 0.51")
