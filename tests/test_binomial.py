"""harness.binomial against scipy.stats' binomial distribution, the reference it replaces in the suites (scipy.stats
computes with Boost, harness.binomial with the Cephes functions of scipy.special: they agree to about 1e-12)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import binom

from harness import binomial

SIZES = (1, 7, 16, 100, 1333, 4737, 20000)
SHARES = (0.001, 0.05, 0.1, 0.25, 1 / 3, 0.5, 0.7, 0.9, 0.999)
TAILS = (1e-9, 1e-7, 1e-6 / 6, 0.01, 0.3)


@pytest.mark.parametrize("n", SIZES)
def test_tails_match_scipy_stats_including_outside_the_support(n: int) -> None:
    counts = np.arange(-2, n + 3)
    for p in SHARES:
        np.testing.assert_allclose(binomial.cdf(counts, n, p), binom.cdf(counts, n, p), rtol=1e-9, atol=1e-300)
        np.testing.assert_allclose(binomial.sf(counts, n, p), binom.sf(counts, n, p), rtol=1e-9, atol=1e-300)


@pytest.mark.parametrize(("n", "q"), list(itertools.product(SIZES, TAILS)))
def test_quantiles_match_scipy_stats_and_meet_their_tails(n: int, q: float) -> None:
    shares = np.array(SHARES)
    low, high = binomial.ppf(q, n, shares), binomial.isf(q, n, shares)
    np.testing.assert_array_equal(low, binom.ppf(q, n, shares).astype(np.int64))
    np.testing.assert_array_equal(high, binom.isf(q, n, shares).astype(np.int64))
    # the defining properties, so the match is not a shared rounding error
    assert np.all(binomial.cdf(low, n, shares) >= q)
    assert np.all((low == 0) | (binomial.cdf(low - 1, n, shares) < q))
    assert np.all(binomial.sf(high, n, shares) <= q)
    assert np.all((high == 0) | (binomial.sf(high - 1, n, shares) > q))


def test_quantiles_refuse_shares_without_a_spread() -> None:
    assert binomial.ppf(0.01, 10, [0.5]).tolist() == [int(binom.ppf(0.01, 10, 0.5))]  # a share inside is answered
    for share in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            binomial.ppf(0.01, 10, [share])
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            binomial.isf(0.01, 10, [share])
