"""Several seeds, one number: the mean, an interval around it, and a three-way result against a threshold.

One training run is an anecdote: its seed decides the initial weights and the order of the batches, and
at small scale that can move a final loss by a few hundredths of a nat or turn "stalled" into "trained".
A claim is decided here on the mean over seeds with an interval, and the result has three values:

- ``agree``: the whole interval lies on the expected side of the threshold;
- ``MISMATCH``: the whole interval lies on the other side;
- ``inconclusive``: the interval straddles the threshold. That is a result too: more seeds (or a larger
  effect) would be needed to decide.

The interval is Student's t-interval for the mean, mean +- t_{n-1, (1+level)/2} * s / sqrt(n), with s the
sample standard deviation over seeds. Why t and not a bootstrap: with 3 to 5 seeds a percentile bootstrap
has only a handful of distinct resampled means (10 for 3 seeds) and its interval is too narrow (it omits
the sqrt(n / (n - 1)) small-sample correction and the t quantile's heavier tail), so it would declare
"agree" on evidence that does not support it. The t-interval is exact when the seed-to-seed values are
normally distributed and is the standard, conservative choice at small n; its price is width: with 3
seeds the multiplier is t_2 = 4.30, so many claims end "inconclusive", which is the honest outcome.

A positive multiplicative quantity (a ratio, a mean squared value, a gradient norm) spreads over seeds by
factors, not by steps: one seed at 7.75 and one at 0.725 make a raw-scale interval reach below zero, a
value such a quantity cannot take. :func:`log_interval` computes the t-interval on the log10 values and
shows it back on the original scale (the geometric mean and its interval); which scale a check uses is
registered with the check. :func:`p_value` gives the two-sided p-value of a check's decision (the
interval excludes the threshold exactly when it is below 1 - level), and :func:`holm` applies Holm's
step-down rule to a family of them.

Values must be finite: what a failed measurement (a diverged run's NaN loss) counts as is the caller's
decision, stated where the caller makes it. This module knows nothing about training or reproductions;
anything with seeds (learning-rate curves, probes at init) can use it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

AGREE, MISMATCH, INCONCLUSIVE = "agree", "MISMATCH", "inconclusive"
RESULTS = (AGREE, MISMATCH, INCONCLUSIVE)
METHOD = "Student's t-interval for the mean over seeds"
LOG_METHOD = "Student's t-interval for the mean of log10 over seeds, shown on the original scale"
SCALES = ("linear", "log")


@dataclass(frozen=True)
class Interval:
    """The mean of ``values`` and a two-sided ``level`` interval around it (``method`` says which)."""

    mean: float
    low: float
    high: float
    level: float
    values: tuple[float, ...]
    method: str = METHOD
    scale: str = "linear"

    @property
    def n(self) -> int:
        return len(self.values)

    def format(self, fmt: str = ".3g") -> str:
        """e.g. '2.45 [2.40, 2.50]'; one value alone: '2.45 (one seed: no interval)'."""
        if self.n == 1:
            return f"{self.mean:{fmt}} (one seed: no interval)"
        return f"{self.mean:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"

    def to_dict(self) -> dict:
        """JSON-able: mean, low, high, level, n, values, method (an infinite bound becomes None)."""

        def num(v):
            return v if math.isfinite(v) else None

        return {
            "mean": self.mean,
            "low": num(self.low),
            "high": num(self.high),
            "level": self.level,
            "n": self.n,
            "values": list(self.values),
            "method": self.method,
            "scale": self.scale,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Interval:
        """The interval :meth:`to_dict` wrote: a bound written as None is the infinite one on its side
        (one seed's interval, -inf to inf; on a log scale, 0 to inf)."""
        low, high = d["low"], d["high"]
        return cls(
            float(d["mean"]),
            -math.inf if low is None else float(low),
            math.inf if high is None else float(high),
            float(d["level"]),
            tuple(float(v) for v in d["values"]),
            d.get("method", METHOD),
            d.get("scale", "linear"),
        )


def mean_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """Student's t-interval for the mean of ``values`` (one per seed); see the module docstring.

    One value gives the interval (-inf, inf): nothing can be decided from it. Identical values give a
    zero-width interval. Raises ValueError on an empty list, a non-finite value or a level outside (0, 1).
    """
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("mean_interval needs at least one value")
    if not all(math.isfinite(v) for v in xs):
        raise ValueError(f"mean_interval needs finite values, got {xs}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    mean = statistics.fmean(xs)
    if len(xs) == 1:
        return Interval(mean, -math.inf, math.inf, level, tuple(xs))
    half = t_quantile((1 + level) / 2, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return Interval(mean, mean - half, mean + half, level, tuple(xs))


def log_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """The t-interval of log10 ``values`` (all > 0), shown back on the original scale: ``mean`` is the
    geometric mean, ``low`` and ``high`` 10 ** the log-scale bounds; ``values`` stay as given.

    Raises ValueError on an empty list or a value that is not finite and positive.
    """
    xs = [float(v) for v in values]
    if not xs or not all(math.isfinite(v) and v > 0 for v in xs):
        raise ValueError(f"log_interval needs finite positive values, got {xs}")
    on_log = mean_interval([math.log10(v) for v in xs], level)
    return Interval(10**on_log.mean, 10**on_log.low, 10**on_log.high, level, tuple(xs), LOG_METHOD, "log")


def p_value(values: Sequence[float], *, at_least=None, at_most=None, scale: str = "linear") -> float:
    """The two-sided p-value of the decision of "value >= at_least" and/or "<= at_most" on ``values``.

    Against the bound the interval is decided on: p <= 1 - level exactly when the level interval lies
    wholly on one side of it. Both bounds: when the mean lies inside, agreeing needs both sides, so p is
    the larger of the two (an intersection-union test); outside, the bound it lies beyond. On the log
    scale the values and bounds are taken in log10. nan for fewer than two values.
    """
    xs = [float(v) for v in values]
    if len(xs) < 2:
        return math.nan
    if scale == "log":
        xs = [math.log10(v) for v in xs]
        at_least = None if at_least is None else math.log10(at_least) if at_least > 0 else -math.inf
        at_most = None if at_most is None else math.log10(at_most) if at_most > 0 else -math.inf
    mean, df = statistics.fmean(xs), len(xs) - 1
    se = statistics.stdev(xs) / math.sqrt(len(xs))

    def p(bound: float) -> float:
        if not math.isfinite(bound):
            return 0.0
        if se == 0:
            return 0.0 if mean != bound else 1.0
        return 2 * (1 - t_cdf(abs(mean - bound) / se, df))

    bounds = [b for b in (at_least, at_most) if b is not None]
    if not bounds:
        raise ValueError("p_value needs at_least, at_most or both")
    if at_least is not None and mean < at_least:
        return p(at_least)
    if at_most is not None and mean > at_most:
        return p(at_most)
    return max(p(b) for b in bounds)


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down rule: for each p-value, whether it is rejected with the family-wise error rate
    at ``alpha`` (the k-th smallest of m is compared with alpha / (m - k + 1), stopping at the first
    that fails). nan is never rejected and does not count in m."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    out, m = [False] * len(pvalues), len(order)
    for k, (p, i) in enumerate(order):
        if p > alpha / (m - k):
            break
        out[i] = True
    return out


def decide(interval: Interval, *, at_least: float | None = None, at_most: float | None = None) -> str:
    """The result of an expectation "value >= at_least" and/or "value <= at_most" on ``interval``.

    agree: every value of the interval satisfies the expectation; MISMATCH: none does; inconclusive:
    the interval straddles a bound. Both bounds together express "within [at_least, at_most]".
    """
    if at_least is None and at_most is None:
        raise ValueError("decide needs at_least, at_most or both")
    lo, hi = interval.low, interval.high
    if (at_least is not None and hi < at_least) or (at_most is not None and lo > at_most):
        return MISMATCH
    if (at_least is None or lo >= at_least) and (at_most is None or hi <= at_most):
        return AGREE
    return INCONCLUSIVE


def t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with ``df`` degrees of freedom (via the regularised incomplete beta)."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if x == 0:
        return 0.5
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + x * x))  # P(T > |x|)
    return 1 - tail if x > 0 else tail


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b) (continued fraction, Numerical Recipes 6.4)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1 - math.exp(log_front) * _betacf(b, a, 1 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def wilson_interval(hits: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval (low, high) for a proportion ``hits`` / ``n`` (recall, precision): unlike
    the normal approximation it stays inside [0, 1] and is not zero-width at 0 or n hits. (0, 1) for
    n = 0. Raises ValueError unless 0 <= hits <= n and 0 < level < 1."""
    if not 0 <= hits <= n or not 0.0 < level < 1.0:
        raise ValueError(
            f"wilson_interval needs 0 <= hits <= n and a level in (0, 1), got {hits}, {n}, {level}"
        )
    if n == 0:
        return 0.0, 1.0
    z = statistics.NormalDist().inv_cdf((1 + level) / 2)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (0.0 if hits == 0 else centre - half), (1.0 if hits == n else centre + half)


def paired_counts(first: Sequence[bool], second: Sequence[bool]) -> tuple[int, int, int, int]:
    """(both, only first, only second, neither): how two predictors' hits on the same items pair up,
    the cells :func:`paired_difference_interval` takes."""
    if len(first) != len(second):
        raise ValueError(f"paired_counts needs hits on the same items, got {len(first)} and {len(second)}")
    pairs = list(zip(first, second))
    return (sum(a and b for a, b in pairs), sum(a and not b for a, b in pairs),
            sum(b and not a for a, b in pairs), sum(not a and not b for a, b in pairs))  # fmt: skip


def paired_difference_interval(
    both: int, only_first: int, only_second: int, neither: int, level: float = 0.95
) -> tuple[float, float, float]:
    """(difference, low, high) of two proportions measured on the same items (two predictors scored on
    the same runs): ``both`` items hit by both, ``only_first`` / ``only_second`` by one, ``neither``.
    Newcombe's (1998) method 10: each proportion's Wilson interval, combined with the correlation phi of
    the paired hits (its cross product ad - bc lessened by n / 2 when positive, as Newcombe corrects
    it); it stays inside [-1, 1] and accounts for the pairing, which two independent
    intervals side by side ignore. Raises ValueError on a negative count or no items."""
    counts = (both, only_first, only_second, neither)
    n = sum(counts)
    if min(counts) < 0 or n == 0:
        raise ValueError(f"paired_difference_interval needs non-negative counts and an item, got {counts}")
    p1, p2 = (both + only_first) / n, (both + only_second) / n
    l1, u1 = wilson_interval(both + only_first, n, level)
    l2, u2 = wilson_interval(both + only_second, n, level)
    margins = (both + only_first) * (only_second + neither) * (both + only_second) * (only_first + neither)
    cross = both * neither - only_first * only_second
    if cross > 0:  # Newcombe's correction of phi: the cross product less n / 2, not below 0
        cross = max(cross - n / 2, 0.0)
    phi = cross / math.sqrt(margins) if margins else 0.0
    d = p1 - p2
    low = d - math.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    high = d + math.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    return d, max(low, -1.0), min(high, 1.0)
