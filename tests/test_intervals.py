"""depthlab.intervals: the t-interval over seeds and the three-way result, against known values."""

from __future__ import annotations

import math
import statistics

import pytest

from depthlab.intervals import AGREE, INCONCLUSIVE, MISMATCH, decide, mean_interval, t_cdf, t_quantile


@pytest.mark.parametrize(
    ("df", "q975"),  # Student's t table (e.g. Abramowitz & Stegun 26.10)
    [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (9, 2.2622), (30, 2.0423)],
)
def test_t_quantile_matches_the_table(df, q975):
    assert t_quantile(0.975, df) == pytest.approx(q975, abs=1e-4)
    assert t_cdf(q975, df) == pytest.approx(0.975, abs=1e-5)
    assert t_quantile(0.025, df) == pytest.approx(-q975, abs=1e-4)


def test_t_approaches_the_normal_and_cauchy_is_exact():
    assert t_quantile(0.975, 100000) == pytest.approx(1.95996, abs=1e-3)
    assert t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + arctan(1)/pi
    assert t_cdf(0.0, 5) == 0.5


def test_mean_interval_is_the_t_interval():
    xs = [2.40, 2.52, 2.47]
    iv = mean_interval(xs)
    half = 4.302653 * statistics.stdev(xs) / math.sqrt(3)
    assert iv.mean == pytest.approx(statistics.fmean(xs))
    assert (iv.low, iv.high) == pytest.approx((iv.mean - half, iv.mean + half), rel=1e-6)
    assert iv.n == 3 and iv.values == tuple(xs) and "t-interval" in iv.method
    narrower = mean_interval(xs, level=0.5)
    assert narrower.low > iv.low and narrower.high < iv.high


def test_one_value_gives_no_interval_and_equal_values_a_point():
    one = mean_interval([3.0])
    assert one.low == -math.inf and one.high == math.inf and "one seed" in one.format()
    same = mean_interval([1.5, 1.5, 1.5])
    assert same.low == same.high == 1.5
    assert one.to_dict()["low"] is None


@pytest.mark.parametrize("bad", [[], [1.0, math.nan], [math.inf, 1.0]])
def test_mean_interval_refuses_what_it_cannot_average(bad):
    with pytest.raises(ValueError):
        mean_interval(bad)


def test_three_way_verdict():
    iv = mean_interval([0.20, 0.25, 0.30])  # about [0.13, 0.37]
    assert decide(iv, at_least=0.10) == AGREE
    assert decide(iv, at_least=0.50) == MISMATCH
    assert decide(iv, at_least=0.25) == INCONCLUSIVE
    assert decide(iv, at_most=0.50) == AGREE and decide(iv, at_most=0.10) == MISMATCH
    assert decide(iv, at_least=0.0, at_most=0.5) == AGREE
    assert decide(iv, at_least=0.0, at_most=0.3) == INCONCLUSIVE
    assert decide(iv, at_least=0.4, at_most=0.5) == MISMATCH
    assert decide(mean_interval([1.0]), at_least=0.0) == INCONCLUSIVE  # no interval: undecided
    with pytest.raises(ValueError):
        decide(iv)


def test_paired_counts_pair_two_predictors_hits_on_the_same_items():
    from depthlab.intervals import paired_counts

    assert paired_counts([True, True, False, False, True], [True, False, True, False, True]) == (2, 1, 1, 1)
    with pytest.raises(ValueError, match="same items"):
        paired_counts([True], [True, False])
