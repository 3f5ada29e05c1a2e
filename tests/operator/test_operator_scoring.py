"""Scoring strategies, normalisation and the neutral defaults."""

from __future__ import annotations

import math

import pytest

from reference.operator.core.scoring import NEUTRAL, Signals, normalise_queue, normalise_ratio, score


def test_no_metrics_scores_every_candidate_zero() -> None:
    assert score("noMetrics", Signals(queue_depth=0.1)) == 0.0
    assert score("noMetrics", None) == 0.0


def test_queue_depth_prefers_shorter_queue() -> None:
    assert score("queueDepth", Signals(queue_depth=0.2)) == pytest.approx(0.8)
    assert score("queueDepth", Signals(queue_depth=0.9)) == pytest.approx(0.1)


def test_kv_cache_pressure_prefers_free_cache() -> None:
    assert score("kvCachePressure", Signals(kv_cache_utilization=0.25)) == pytest.approx(0.75)


@pytest.mark.parametrize("strategy", ["queueDepth", "kvCachePressure"])
def test_missing_metrics_are_neutral(strategy: str) -> None:
    assert score(strategy, None) == pytest.approx(1 - NEUTRAL)
    assert score(strategy, Signals()) == pytest.approx(0.5)


def test_queue_capacity_divides_and_clamps() -> None:
    assert normalise_queue(16, 64) == pytest.approx(0.25)
    assert normalise_queue(640, 64) == 1.0
    assert normalise_queue(-3, 64) == 0.0
    assert normalise_queue(0.4, None) == pytest.approx(0.4)
    assert normalise_queue(7, None) == 1.0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_discarded(bad: float) -> None:
    assert normalise_queue(bad, 64) is None
    assert normalise_ratio(bad) is None
    assert score("queueDepth", Signals(queue_depth=normalise_queue(bad, 64))) == pytest.approx(0.5)


def test_unknown_strategy_is_an_error() -> None:
    with pytest.raises(ValueError, match="prefixAware"):
        score("prefixAware", None)
