"""One-sided judgements with stated error rates, for claims of the form "this site gets at least (or none
of) the traffic": the serving profile's complement to harness.stats, which judges whole distributions.

`plan_at_least` plans a lower bound on one category's count: the sample size and threshold at which an
implementation giving the category `share` fails with probability at most `alpha` (false failure) while one
giving it only `alternative` fails with probability at least `power`. `absence_sample_size` plans the
opposite claim, a category that must get nothing: the sample at which an implementation sending it
`alternative` of the traffic is caught with probability at least 1 - `miss`. Both use exact binomial
probabilities (harness.binomial), and every judgement goes on the running test's timeline like a distribution.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from harness import binomial
from harness.stats import format_table
from harness.timeline import record_distribution

__all__ = ["AtLeastPlan", "absence_sample_size", "assert_at_least", "assert_absent", "plan_at_least"]

MAX_SAMPLE_SIZE = 200_000


@dataclass(frozen=True)
class AtLeastPlan:
    """Judge `category` passes when its count out of `sample_size` is at least `threshold`."""

    category: str
    share: float  # the share a correct implementation gives it (at least)
    alternative: float  # the share of the implementation the test must catch
    alpha: float
    power: float
    sample_size: int
    threshold: int
    false_failure: float  # exact P(count < threshold) at `share`
    exact_power: float  # exact P(count < threshold) at `alternative`

    def describe(self) -> str:
        return (f"n={self.sample_size}: {self.category} needs at least {self.threshold} requests; false-failure "
                f"probability {self.false_failure:.3g} (<= {self.alpha:g}) for a share of {self.share:.4g}, "
                f"power {self.exact_power:.6f} (>= {self.power:g}) against a share of {self.alternative:.4g}")


def _check(name: str, value: float) -> float:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    return value


def _at(n: int, share: float, alternative: float, alpha: float) -> tuple[int, float, float]:
    """(threshold, false failure at `share`, power against `alternative`) for n requests."""
    # the smallest count whose cdf reaches alpha (so the one below stays under it), then past a cdf equal to
    # alpha: a count is refused only where falling below the threshold is at most alpha likely
    threshold = int(binomial.ppf(alpha, n, share)[0])
    while binomial.cdf(threshold, n, share) <= alpha:
        threshold += 1
    return threshold, float(binomial.cdf(threshold - 1, n, share)), float(binomial.cdf(threshold - 1, n, alternative))


def plan_at_least(category: str, share: float, alternative: float, *, alpha: float = 1e-6,
                  power: float = 0.99) -> AtLeastPlan:
    """The smallest sample (doubling, then bisection) whose threshold meets both error rates."""
    _check("share", share)
    _check("alternative", alternative)
    _check("alpha", alpha)
    _check("power", power)
    if not alternative < share:
        raise ValueError(f"the alternative share ({alternative}) must be below the expected one ({share})")

    def good(n: int) -> bool:
        return _at(n, share, alternative, alpha)[2] >= power

    low, high = 0, 16
    while not good(high):
        if high >= MAX_SAMPLE_SIZE:
            raise ValueError(f"no sample up to {MAX_SAMPLE_SIZE} separates {share} from {alternative}")
        low, high = high, min(2 * high, MAX_SAMPLE_SIZE)
    while high - low > 1:
        middle = (low + high) // 2
        if good(middle):
            high = middle
        else:
            low = middle
    threshold, false_failure, exact_power = _at(high, share, alternative, alpha)
    return AtLeastPlan(category, share, alternative, alpha, power, high, threshold, false_failure, exact_power)


def assert_at_least(counts: Mapping[str, int], plan: AtLeastPlan, *, what: str) -> None:
    """Assert that `plan.category` got at least its threshold of exactly `plan.sample_size` requests."""
    total = sum(counts.values())
    if total != plan.sample_size:
        raise ValueError(f"counts add up to {total}, but the plan needs exactly {plan.sample_size}")
    count = int(counts.get(plan.category, 0))
    passed = count >= plan.threshold
    others = total - count
    record_distribution(counts={plan.category: count, "others": others},
                        expected={plan.category: plan.share, "others": 1.0 - plan.share},
                        intervals={plan.category: (plan.threshold, total), "others": (0, total - plan.threshold)},
                        alpha=plan.alpha, n=total, passed=passed, power=plan.power,
                        shift=plan.share - plan.alternative, what=what)
    if not passed:
        rows = [[name, n, f"{n / total:.4f}"] for name, n in sorted(counts.items())]
        raise AssertionError(f"{what}: {plan.category} got {count} of {total} requests, fewer than the "
                             f"{plan.threshold} the judgement needs ({plan.describe()})\n"
                             + format_table(["category", "observed", "share"], rows))


def absence_sample_size(alternative: float, *, miss: float = 1e-6) -> int:
    """Requests that catch, with probability at least 1 - `miss`, an implementation sending a category that
    must get none `alternative` of the traffic (it would get at least one of them)."""
    _check("alternative", alternative)
    _check("miss", miss)
    return math.ceil(math.log(miss) / math.log(1.0 - alternative))


def assert_absent(counts: Mapping[str, int], category: str, *, alternative: float, miss: float, what: str) -> None:
    """Assert that `category` got none of the requests counted (false failure 0 for an implementation that
    never sends it any; `alternative` and `miss` say what the sample size was planned to catch)."""
    total = sum(counts.values())
    count = int(counts.get(category, 0))
    record_distribution(counts={category: count, "others": total - count}, expected={category: 0.0, "others": 1.0},
                        intervals={category: (0, 0), "others": (total, total)}, alpha=miss, n=total,
                        passed=count == 0, power=1.0 - miss, shift=alternative, what=what)
    if count:
        rows = [[name, n, f"{n / total:.4f}"] for name, n in sorted(counts.items())]
        raise AssertionError(f"{what}: {category} got {count} of {total} requests, where it must get none "
                             f"(n planned to catch a share of {alternative:g} with probability >= {1 - miss:g})\n"
                             + format_table(["category", "observed", "share"], rows))
