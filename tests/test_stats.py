"""Tests for harness.stats: exact round-robin checks and planned distribution assertions.

The simulations draw selections from a seeded numpy generator and run the real assertion on each draw,
so the stated false-failure probability and power are shown on the code the suites use.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from collections.abc import Iterator, Mapping

import numpy as np
import pytest
from scipy.stats import binom

from harness.stats import (
    DistributionPlan,
    assert_distribution,
    assert_round_robin,
    format_table,
    plan_distribution,
)

PLANS: dict[str, dict[str, float]] = {
    "50/30/20": {"a": 0.5, "b": 0.3, "c": 0.2},
    "70/30": {"a": 0.7, "b": 0.3},
    "thirds": {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3},
    "uniform-2": {"a": 0.5, "b": 0.5},
    "uniform-4": {"a": 0.25, "b": 0.25, "c": 0.25, "d": 0.25},
}


@pytest.fixture(scope="module")
def plans() -> dict[str, DistributionPlan]:
    return {label: plan_distribution(shares) for label, shares in PLANS.items()}


def _fails(counts: Mapping[str, int], plan: DistributionPlan) -> bool:
    try:
        assert_distribution(counts, plan)
    except AssertionError:
        return True
    return False


def _failure_count(draws: np.ndarray, names: list[str], plan: DistributionPlan) -> int:
    """Run the real assertion on every simulated draw and count the failures."""
    return sum(_fails(dict(zip(names, map(int, row), strict=True)), plan) for row in draws)


# ----------------------------------------------------------------------------------------- round robin


def test_round_robin_accepts_repeated_cycle() -> None:
    assert_round_robin(["a", "b", "c"] * 5, {"a", "b", "c"})
    assert_round_robin(["c", "a", "b"] * 4 + ["c"], ["a", "b", "c"])


def test_round_robin_accepts_start_mid_cycle() -> None:
    cycle = ["x", "y", "z", "w"]
    for start in range(len(cycle)):
        sequence = list(itertools.islice(itertools.cycle(cycle), start, start + 17))
        assert_round_robin(sequence, set(cycle))


def test_round_robin_single_member() -> None:
    assert_round_robin(["only"] * 6, ["only"])
    with pytest.raises(AssertionError, match="other"):
        assert_round_robin(["only", "other", "only"], ["only"])


def test_round_robin_rejects_wrong_member_in_later_cycle() -> None:
    sequence = ["a", "b", "c"] * 4
    sequence[8] = "a"  # position 8 should be "c"
    with pytest.raises(AssertionError) as info:
        assert_round_robin(sequence, {"a", "b", "c"})
    message = str(info.value)
    assert "position 8" in message
    assert "expected 'c'" in message and "got 'a'" in message


def test_round_robin_rejects_repeat_within_cycle() -> None:
    with pytest.raises(AssertionError) as info:
        assert_round_robin(["a", "a", "b", "a", "a", "b"], {"a", "b", "c"})
    message = str(info.value)
    assert "'a' served at positions 0 and 1" in message
    assert "['c']" in message


def test_round_robin_rejects_member_set_mismatch() -> None:
    # Serving only two of three members is a cycle of the wrong length: caught within the first cycle.
    with pytest.raises(AssertionError, match="not served in that cycle"):
        assert_round_robin(["a", "b"] * 6, {"a", "b", "c"})


def test_round_robin_rejects_fallback_backend() -> None:
    sequence = ["p1", "p2"] * 10
    sequence[13] = "fallback-1"
    with pytest.raises(AssertionError) as info:
        assert_round_robin(sequence, ["p1", "p2"])
    message = str(info.value)
    assert "fallback-1" in message and "position 13" in message


def test_round_robin_rejects_random_choice() -> None:
    rng = np.random.default_rng(7)
    sequence = [str(x) for x in rng.choice(["a", "b", "c"], size=60)]
    with pytest.raises(AssertionError):
        assert_round_robin(sequence, {"a", "b", "c"})


def test_round_robin_truncates_long_sequence_in_message() -> None:
    sequence = ["a", "b"] * 500
    sequence[901] = "a"
    with pytest.raises(AssertionError) as info:
        assert_round_robin(sequence, {"a", "b"})
    message = str(info.value)
    assert "901:a" in message and "more)" in message
    assert len(message) < 1500


def test_round_robin_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one member"):
        assert_round_robin(["a"], set())
    with pytest.raises(ValueError, match="at least 3"):
        assert_round_robin(["a", "b"], {"a", "b", "c"})
    with pytest.raises(ValueError, match="duplicates"):
        assert_round_robin(["a", "b"], ["a", "a"])


# ------------------------------------------------------------------------------------------------ plans


def test_plan_sample_sizes_and_intervals(plans: dict[str, DistributionPlan]) -> None:
    sizes = {label: plan.sample_size for label, plan in plans.items()}
    print("sample sizes:", sizes)
    for label, plan in plans.items():
        assert 1000 < plan.sample_size < 20000, (label, plan.describe())
        assert plan.alpha == 1e-6 and plan.power == 0.99 and plan.shift == 0.05
        for name, share in plan.expected.items():
            lo, hi = plan.intervals[name]
            assert lo < share * plan.sample_size < hi, (label, name, lo, hi)
    # Symmetric shares give identical intervals; a larger share near 1/2 needs more samples than 70/30.
    assert len(set(plans["thirds"].intervals.values())) == 1
    assert plans["uniform-2"].sample_size > plans["70/30"].sample_size


def test_plan_exact_error_rates_recomputed(plans: dict[str, DistributionPlan]) -> None:
    """Recompute false-failure probability and power from the intervals with scipy, independently."""
    for label, plan in plans.items():
        n = plan.sample_size
        false_failure = 0.0
        worst_power = 1.0
        for name, p in plan.expected.items():
            lo, hi = plan.intervals[name]
            false_failure += binom.cdf(lo - 1, n, p) + binom.sf(hi, n, p)
            for q in (min(1.0, p + plan.shift), max(0.0, p - plan.shift)):
                worst_power = min(worst_power, binom.cdf(lo - 1, n, q) + binom.sf(hi, n, q))
        assert false_failure <= 1e-6, (label, false_failure)
        assert worst_power >= 0.99, (label, worst_power)
        assert math.isclose(false_failure, plan.false_failure, rel_tol=1e-9, abs_tol=1e-15)
        assert math.isclose(worst_power, plan.min_power, rel_tol=1e-9)


def test_plan_sample_size_is_minimal_at_its_boundary(plans: dict[str, DistributionPlan]) -> None:
    """One request fewer no longer buys the stated power (the search did not overshoot)."""
    for label, plan in plans.items():
        smaller = plan.sample_size - 1
        nonzero = sum(1 for p in plan.expected.values() if p > 0)
        tail = plan.alpha / nonzero / 2
        worst = 1.0
        for p in plan.expected.values():
            lo = int(binom.ppf(tail, smaller, p))
            hi = int(binom.isf(tail, smaller, p))
            for q in (p + plan.shift, p - plan.shift):
                worst = min(worst, binom.cdf(lo - 1, smaller, q) + binom.sf(hi, smaller, q))
        assert worst < plan.power, (label, smaller, worst)


def test_plan_intervals_are_tight(plans: dict[str, DistributionPlan]) -> None:
    """Each interval is the narrowest whose tails stay under the Bonferroni-corrected level."""
    for plan in plans.values():
        n = plan.sample_size
        tail = plan.alpha / len(plan.expected) / 2
        for name, p in plan.expected.items():
            lo, hi = plan.intervals[name]
            assert binom.cdf(lo - 1, n, p) <= tail < binom.cdf(lo, n, p)
            assert binom.sf(hi, n, p) <= tail < binom.sf(hi - 1, n, p)


def test_plan_zero_share_must_never_be_seen() -> None:
    plan = plan_distribution({"a": 0.5, "b": 0.5, "fallback": 0.0})
    assert plan.intervals["fallback"] == (0, 0)
    assert plan.sample_size == plan_distribution({"a": 0.5, "b": 0.5}).sample_size
    half = plan.sample_size // 2
    assert_distribution({"a": half, "b": plan.sample_size - half}, plan)
    with pytest.raises(AssertionError) as info:
        assert_distribution({"a": half, "b": plan.sample_size - half - 1, "fallback": 1}, plan)
    assert "'fallback' has share 0 but was seen 1 times" in str(info.value)


def test_plan_single_category() -> None:
    plan = plan_distribution({"only": 1.0})
    assert plan.intervals["only"] == (plan.sample_size, plan.sample_size)
    assert 1 - 0.95 ** plan.sample_size >= 0.99 > 1 - 0.95 ** (plan.sample_size - 1)


def test_plan_bad_inputs() -> None:
    with pytest.raises(ValueError, match="sum to"):
        plan_distribution({"a": 0.5, "b": 0.4})
    with pytest.raises(ValueError, match="empty"):
        plan_distribution({})
    with pytest.raises(ValueError, match="share of 'a'"):
        plan_distribution({"a": float("nan"), "b": 1.0})
    with pytest.raises(ValueError, match="share of 'a'"):
        plan_distribution({"a": -0.1, "b": 1.1})
    with pytest.raises(ValueError, match="alpha"):
        plan_distribution({"a": 1.0}, alpha=0.0)
    with pytest.raises(ValueError, match="power"):
        plan_distribution({"a": 1.0}, power=1.0)
    with pytest.raises(ValueError, match="no sample size up to 200000"):
        plan_distribution({"a": 0.5, "b": 0.5}, shift=0.002)


def test_plan_is_frozen_and_describes_itself(plans: dict[str, DistributionPlan]) -> None:
    plan = plans["70/30"]
    with pytest.raises(AttributeError):
        plan.sample_size = 10  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.intervals["a"] = (0, 0)  # type: ignore[index]
    line = plan.describe()
    assert f"n={plan.sample_size}" in line and "1e-06" in line and "0.99" in line and "5-point" in line


# ------------------------------------------------------------------------------------------- assertion


def test_assert_distribution_accepts_expected_counts(plans: dict[str, DistributionPlan]) -> None:
    plan = plans["50/30/20"]
    n = plan.sample_size
    counts = {"a": round(0.5 * n), "b": round(0.3 * n)}
    counts["c"] = n - sum(counts.values())
    assert_distribution(counts, plan)


def test_assert_distribution_failure_message_is_a_table(plans: dict[str, DistributionPlan]) -> None:
    plan = plans["50/30/20"]
    n = plan.sample_size
    counts = {"a": round(0.4 * n), "b": round(0.4 * n)}
    counts["c"] = n - sum(counts.values())
    with pytest.raises(AssertionError) as info:
        assert_distribution(counts, plan)
    message = str(info.value)
    lo, hi = plan.intervals["a"]
    assert "category" in message and "observed" in message and "exp share" in message
    assert f"[{lo}, {hi}]" in message and "LOW" in message and "HIGH" in message
    assert f"{counts['a'] / n:.4f}" in message and "0.5000" in message
    assert "alpha (false-failure probability) = 1e-06" in message and "power = 0.99" in message


def test_assert_distribution_rejects_unknown_category(plans: dict[str, DistributionPlan]) -> None:
    plan = plans["uniform-2"]
    half = plan.sample_size // 2
    with pytest.raises(AssertionError, match="'stranger' is not an expected category"):
        assert_distribution({"a": half, "b": plan.sample_size - half - 3, "stranger": 3}, plan)


def test_assert_distribution_requires_planned_total(plans: dict[str, DistributionPlan]) -> None:
    plan = plans["uniform-2"]
    with pytest.raises(ValueError, match=f"plan needs exactly {plan.sample_size}"):
        assert_distribution({"a": 10, "b": 10}, plan)
    with pytest.raises(ValueError, match="non-negative integer"):
        assert_distribution({"a": -1, "b": plan.sample_size + 1}, plan)


def test_format_table_aligns_columns() -> None:
    table = format_table(["x", "longer"], [["abc", 1], ["d", 22222222]])
    lines = table.splitlines()
    assert lines[0].index("longer") == lines[2].index("1") == lines[3].index("22222222")
    assert set(lines[1].replace(" ", "")) == {"-"}


# ------------------------------------------------------------------------------------------ simulation


def _shift_scenarios(shares: Mapping[str, float], shift: float) -> Iterator[tuple[str, np.ndarray]]:
    """Every category moved up and down by ``shift``, taking the mass from / giving it to the largest other."""
    names = list(shares)
    base = np.array([shares[name] for name in names])
    for i, name in enumerate(names):
        others = [j for j in range(len(names)) if j != i]
        donor = max(others, key=lambda j: base[j])
        for direction in (1.0, -1.0):
            moved = base.copy()
            moved[i] += direction * shift
            moved[donor] -= direction * shift
            if np.all(moved >= 0.0) and np.all(moved <= 1.0):
                yield f"{name}{'+' if direction > 0 else '-'}{shift:g}", moved


def test_simulated_false_failure_rate_under_null(plans: dict[str, DistributionPlan]) -> None:
    """20000 assertions on correct selections per plan: none may fail (expected failures <= 0.02)."""
    rng = np.random.default_rng(20240611)
    trials = 20000
    for label, plan in plans.items():
        names = list(plan.expected)
        draws = rng.multinomial(plan.sample_size, [plan.expected[n] for n in names], size=trials)
        # The count-in-interval check is vectorised; the real assertion runs on a slice to tie the two.
        lo = np.array([plan.intervals[n][0] for n in names])
        hi = np.array([plan.intervals[n][1] for n in names])
        outside = np.any((draws < lo) | (draws > hi), axis=1)
        assert int(outside.sum()) == 0, f"{label}: {int(outside.sum())} false failures in {trials}"
        assert _failure_count(draws[:2000], names, plan) == 0, label
        assert plan.false_failure <= 1e-6, (label, plan.false_failure)


def _exact_power_lower_bound(plan: DistributionPlan, shifted: Mapping[str, float]) -> float:
    """The assertion fails at least as often as its most-often-failing single category (exact, scipy)."""
    n = plan.sample_size
    best = 0.0
    for name, q in shifted.items():
        lo, hi = plan.intervals[name]
        best = max(best, float(binom.cdf(lo - 1, n, q) + binom.sf(hi, n, q)))
    return best


def test_simulated_power_against_five_point_shifts(plans: dict[str, DistributionPlan]) -> None:
    """Every share moved by 5 points up or down makes the real assertion fail in >= 99% of runs.

    For each shift the exact failure probability of the assertion is bounded below with scipy and must
    be >= 0.99. The simulated failure count must then reach what that power gives with probability
    1 - 1e-6: with two categories the exact power sits just above 0.99, and a finite simulation scatters
    around it, so a bare 99% cut there would be a coin flip rather than a check.
    """
    rng = np.random.default_rng(99)
    trials = 2000
    report: list[list[object]] = []
    total_failures = 0
    for label, plan in plans.items():
        names = list(plan.expected)
        for scenario, shifted in _shift_scenarios(plan.expected, plan.shift):
            exact = _exact_power_lower_bound(plan, dict(zip(names, shifted, strict=True)))
            draws = rng.multinomial(plan.sample_size, shifted, size=trials)
            failures = _failure_count(draws, names, plan)
            total_failures += failures
            floor = int(binom.ppf(1e-6, trials, exact))
            report.append([label, scenario, f"{exact:.4f}", failures, f"{failures / trials:.4f}", floor])
            assert exact >= 0.99, f"{label} {scenario}: exact power {exact}"
            assert failures >= floor, f"{label} {scenario}: only {failures}/{trials} assertions failed"
    print("\n" + format_table(["plan", "shift", "exact power >=", "failed", "rate", "floor"], report))
    assert len(report) == 2 * sum(len(shares) for shares in PLANS.values())
    overall = total_failures / (trials * len(report))
    assert overall >= 0.99, overall


def test_simulation_detects_underpowered_plan() -> None:
    """The power simulation can fail: against a 2-point shift the planned n is far from 99% power."""
    plan = plan_distribution(PLANS["70/30"])
    rng = np.random.default_rng(5)
    trials = 2000
    draws = rng.multinomial(plan.sample_size, [0.68, 0.32], size=trials)
    failures = _failure_count(draws, ["a", "b"], plan)
    assert _exact_power_lower_bound(plan, {"a": 0.68, "b": 0.32}) < 0.99
    assert failures < int(binom.ppf(1e-6, trials, 0.99)), failures


def test_importing_the_module_leaves_numpy_and_scipy_to_the_first_plan() -> None:
    """Every worker imports harness.stats with the suites; only those that plan a distribution pay for numpy and
    scipy. The twin: planning imports them."""
    script = ("import sys; import harness.stats as s; before = {'numpy', 'scipy'} & set(sys.modules); "
              "s.plan_distribution({'a': 0.5, 'b': 0.5}); print(sorted(before), 'scipy.special' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["[]", "True"], done.stdout + done.stderr
