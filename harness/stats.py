"""Selection judgements with stated error rates.

Round robin is deterministic, so it is checked exactly. Weighted and random selection is judged with a
planned test: the plan fixes the false-failure probability (alpha) and the power against a shift of any
share, derives the number of requests to send from those, and gives each category an acceptance interval
on its count. A failed assertion prints observed against expected so the reader sees what went wrong.

numpy and scipy (through harness.binomial) are imported by the planning functions, on first use: every
pytest worker of a run imports this module with the suites, and most never plan a distribution, while the
import costs each about an eighth of a second of CPU.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from harness.timeline import record_distribution

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DistributionPlan",
    "assert_distribution",
    "assert_round_robin",
    "format_table",
    "plan_distribution",
]

SHARE_SUM_TOLERANCE = 1e-9
MAX_SAMPLE_SIZE = 200_000
_SHOWN_ITEMS = 40


# --------------------------------------------------------------------------------------------- tables


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Render rows as a left-aligned plain-text table (for failure messages and suite output)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------- round robin


def _show_sequence(sequence: Sequence[str], focus: int | None = None) -> str:
    """Show the sequence compactly, keeping the neighbourhood of ``focus`` visible."""
    count = len(sequence)
    if count <= _SHOWN_ITEMS:
        return "[" + ", ".join(sequence) + "]"
    if focus is None or focus < _SHOWN_ITEMS - 5:
        head = ", ".join(sequence[:_SHOWN_ITEMS])
        return f"[{head}, ... ({count - _SHOWN_ITEMS} more)]"
    start = max(0, focus - _SHOWN_ITEMS // 2)
    end = min(count, start + _SHOWN_ITEMS)
    middle = ", ".join(f"{i}:{sequence[i]}" for i in range(start, end))
    tail = f", ... ({count - end} more)" if end < count else ""
    return f"[... ({start} before), {middle}{tail}]"


def assert_round_robin(sequence: Sequence[str], members: Collection[str]) -> None:
    """Assert that ``sequence`` repeats one fixed cycle through exactly ``members``.

    The sequence may start anywhere in the cycle. Every member appears once in each run of
    ``len(members)`` consecutive items and ``sequence[i] == sequence[i + len(members)]`` throughout.
    A name outside ``members`` (for example a fallback-group backend) is a failure that names it.
    """
    member_set = set(members)
    if not member_set:
        raise ValueError("assert_round_robin needs at least one member")
    if len(member_set) != len(members):
        raise ValueError(f"members contain duplicates: {sorted(members)}")
    period = len(member_set)
    if len(sequence) < period:
        raise ValueError(
            f"a sequence of {len(sequence)} cannot show a cycle through {period} members; send at least {period}"
        )
    items = list(sequence)
    strangers = sorted({name for name in items if name not in member_set})
    if strangers:
        first = min(i for i, name in enumerate(items) if name not in member_set)
        raise AssertionError(
            f"round robin over {sorted(member_set)} served outside the member set: {strangers} "
            f"(first at position {first})\nsequence: {_show_sequence(items, first)}"
        )
    cycle = items[:period]
    if len(set(cycle)) != period:
        seen: dict[str, int] = {}
        for i, name in enumerate(cycle):
            if name in seen:
                missing = sorted(member_set - set(cycle))
                raise AssertionError(
                    f"round robin over {sorted(member_set)}: {name!r} served at positions {seen[name]} and {i} "
                    f"within one cycle of {period}; not served in that cycle: {missing}\n"
                    f"sequence: {_show_sequence(items, i)}"
                )
            seen[name] = i
    for i in range(period, len(items)):
        if items[i] != items[i - period]:
            raise AssertionError(
                f"round robin over {sorted(member_set)} broke its cycle at position {i}: expected "
                f"{items[i - period]!r} (the cycle {cycle} repeats every {period}), got {items[i]!r}\n"
                f"sequence: {_show_sequence(items, i)}"
            )


# ------------------------------------------------------------------------------------ distribution plan


@dataclass(frozen=True)
class DistributionPlan:
    """A planned distribution assertion: shares, error rates, sample size and acceptance intervals.

    ``intervals[c] == (lo, hi)`` accepts a count k of category c when ``lo <= k <= hi``.
    ``false_failure`` is the exact probability, summed over categories, that a correct implementation
    lands outside an interval (an upper bound on the assertion's false-failure probability).
    ``min_power`` is the smallest exact per-category probability of failing under a shift of ``shift``.
    """

    expected: Mapping[str, float]
    alpha: float
    power: float
    shift: float
    sample_size: int
    intervals: Mapping[str, tuple[int, int]] = field(repr=False)
    false_failure: float = 0.0
    min_power: float = 1.0

    def describe(self) -> str:
        """One line for suite output: how many requests and which error rates they buy."""
        return (
            f"n={self.sample_size} requests; false-failure probability <= {self.alpha:g} "
            f"(exact bound {self.false_failure:.3g}); power >= {self.power:g} (exact min {self.min_power:.4f}) "
            f"against a {self.shift * 100:g}-point shift of any share"
        )


def _check_probability(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    return float(value)


def _check_shares(expected: Mapping[str, float]) -> dict[str, float]:
    if not expected:
        raise ValueError("expected shares are empty")
    shares: dict[str, float] = {}
    for name, share in expected.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"category names must be non-empty strings, got {name!r}")
        if isinstance(share, bool) or not isinstance(share, int | float) or not math.isfinite(share):
            raise ValueError(f"share of {name!r} must be a finite number, got {share!r}")
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share of {name!r} must lie in [0, 1], got {share!r}")
        shares[name] = float(share)
    total = math.fsum(shares.values())
    if abs(total - 1.0) > SHARE_SUM_TOLERANCE:
        raise ValueError(f"expected shares sum to {total!r}, not 1: {shares}")
    return shares


def _intervals(n: int, shares: np.ndarray, tail: float) -> tuple[np.ndarray, np.ndarray]:
    """Count intervals [lo, hi] with P(X < lo) <= tail and P(X > hi) <= tail under Binomial(n, share)."""
    import numpy as np

    from harness import binomial

    lo = np.zeros(shares.shape, dtype=np.int64)
    hi = np.full(shares.shape, n, dtype=np.int64)
    inner = (shares > 0.0) & (shares < 1.0)
    if np.any(inner):  # the quantiles meet their tails exactly (harness.binomial checks them)
        lo[inner] = binomial.ppf(tail, n, shares[inner])
        hi[inner] = binomial.isf(tail, n, shares[inner])
    hi[shares == 0.0] = 0
    lo[shares == 1.0] = n
    return lo, hi


def _outside(n: int, lo: np.ndarray, hi: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Exact probability that Binomial(n, q) falls outside [lo, hi], element-wise."""
    from harness import binomial

    return binomial.cdf(lo - 1, n, q) + binomial.sf(hi, n, q)


@dataclass(frozen=True)
class _Evaluation:
    lo: np.ndarray
    hi: np.ndarray
    false_failure: float
    min_power: float


def _evaluate(n: int, shares: np.ndarray, alpha: float, shift: float) -> _Evaluation:
    import numpy as np

    nonzero = int(np.count_nonzero(shares))
    lo, hi = _intervals(n, shares, alpha / nonzero / 2.0)
    false_failure = float(np.sum(_outside(n, lo, hi, shares)))
    powers: list[float] = []
    for direction in (1.0, -1.0):
        shifted = np.clip(shares + direction * shift, 0.0, 1.0)
        moved = shifted != shares  # a share already at the edge cannot move further that way
        if np.any(moved):
            powers.extend(_outside(n, lo[moved], hi[moved], shifted[moved]).tolist())
    return _Evaluation(lo, hi, false_failure, min(powers))


def plan_distribution(
    expected: Mapping[str, float], alpha: float = 1e-6, power: float = 0.99, shift: float = 0.05
) -> DistributionPlan:
    """Plan a distribution assertion.

    Each category with a non-zero share gets a two-sided exact binomial test at level
    ``alpha / (number of non-zero categories)`` (Bonferroni), so the whole assertion fails a correct
    implementation with probability at most ``alpha``. A zero share accepts only a count of zero. The
    sample size is the smallest n found by doubling then bisection at which every category, shifted by
    ``shift`` in either direction, falls outside its interval with probability at least ``power``.
    """
    shares_by_name = _check_shares(expected)
    alpha = _check_probability("alpha", alpha)
    power = _check_probability("power", power)
    shift = _check_probability("shift", shift)
    import numpy as np

    names = list(shares_by_name)
    shares = np.array([shares_by_name[name] for name in names], dtype=float)

    def good(n: int) -> bool:
        return _evaluate(n, shares, alpha, shift).min_power >= power

    low, high = 0, 16
    while not good(high):
        if high >= MAX_SAMPLE_SIZE:
            raise ValueError(
                f"no sample size up to {MAX_SAMPLE_SIZE} reaches power {power:g} against a {shift:g} shift "
                f"at alpha {alpha:g} for shares {shares_by_name}"
            )
        low, high = high, min(2 * high, MAX_SAMPLE_SIZE)
    while high - low > 1:
        middle = (low + high) // 2
        if good(middle):
            high = middle
        else:
            low = middle
    result = _evaluate(high, shares, alpha, shift)
    intervals = {name: (int(result.lo[i]), int(result.hi[i])) for i, name in enumerate(names)}
    return DistributionPlan(
        expected=MappingProxyType(dict(shares_by_name)),
        alpha=alpha,
        power=power,
        shift=shift,
        sample_size=high,
        intervals=MappingProxyType(intervals),
        false_failure=result.false_failure,
        min_power=result.min_power,
    )


# ------------------------------------------------------------------------------ distribution assertion


def assert_distribution(counts: Mapping[str, int], plan: DistributionPlan, *, what: str | None = None) -> None:
    """Assert that observed ``counts`` fit ``plan``; on failure show observed against expected.

    The counts must add up to ``plan.sample_size`` (otherwise the stated error rates would not hold,
    so that is a ValueError). A category outside the plan, a zero-share category that was seen, or a
    count outside its acceptance interval fails the assertion. What was judged (counts, expected shares,
    intervals, alpha, n) is recorded on the running test's timeline, pass or fail, so the report can draw
    it; ``what`` names the judgement there when a test makes several.
    """
    for name, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0:
            raise ValueError(f"count of {name!r} must be a non-negative integer, got {count!r}")
    total = int(sum(int(c) for c in counts.values()))
    if total != plan.sample_size:
        raise ValueError(f"counts add up to {total}, but the plan needs exactly {plan.sample_size} ({plan.describe()})")

    problems: list[str] = []
    rows: list[list[object]] = []
    names = list(plan.expected) + sorted(name for name in counts if name not in plan.expected)
    for name in names:
        count = int(counts.get(name, 0))
        share = plan.expected.get(name)
        if share is None:
            verdict = "NOT IN PLAN"
            problems.append(f"{name!r} is not an expected category")
            expected_text, interval_text = "-", "-"
        else:
            lo, hi = plan.intervals[name]
            expected_text, interval_text = f"{share:.4f}", f"[{lo}, {hi}]"
            if lo <= count <= hi:
                verdict = "ok"
            elif share == 0.0:
                verdict = "MUST NOT BE SEEN"
                problems.append(f"{name!r} has share 0 but was seen {count} times")
            else:
                verdict = "LOW" if count < lo else "HIGH"
                problems.append(f"{name!r} count {count} outside [{lo}, {hi}]")
        rows.append([name, count, f"{count / total:.4f}", expected_text, interval_text, verdict])

    record_distribution(counts={name: int(counts.get(name, 0)) for name in names}, expected=plan.expected,
                        intervals=plan.intervals, alpha=plan.alpha, n=plan.sample_size, passed=not problems,
                        power=plan.power, shift=plan.shift, what=what)
    if problems:
        table = format_table(["category", "observed", "obs share", "exp share", "accepted", "verdict"], rows)
        raise AssertionError(
            "selection distribution does not match: " + "; ".join(problems) + "\n" + table + "\n"
            f"alpha (false-failure probability) = {plan.alpha:g}, exact bound {plan.false_failure:.3g}; "
            f"power = {plan.power:g} (exact min {plan.min_power:.4f}) against a {plan.shift * 100:g}-point shift; "
            f"n = {plan.sample_size}"
        )
