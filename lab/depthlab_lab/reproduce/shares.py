"""A yes/no outcome per seed, decided on the share of seeds that show it, with an exact interval.

Some measurements are discrete: whether a run diverged, the deepest depth at which a run trained. A
t-interval over such values treats them as normally distributed, which they are not (three seeds that
all say "yes" have a zero-width t-interval), and unanimity ("every seed") is no interval at all. Here the
per-seed outcome is a hit or a miss, and the claim is about the share of hits: the Clopper-Pearson
interval (the exact binomial interval, the inversion of two one-sided binomial tests at 2.5% each) is
decided against a registered share like any other interval (:func:`depthlab.intervals.decide`), and the
p-value is the exact two-sided binomial one, so the two agree.

Its price is the number of seeds: with every seed a hit, the interval's low end is above 1/2 only from
six seeds (three give [0.29, 1], five [0.48, 1]), so with three seeds such a check is always
inconclusive. That is what three coin-like outcomes can say.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from depthlab.intervals import INCONCLUSIVE, Interval, decide
from depthlab_lab.reproduce.reproduction import Check

SHARE_METHOD = "Clopper-Pearson exact interval for the share of seeds"


def _at_least(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


def _solve(f, target: float) -> float:
    """The p in [0, 1] with f(p) = target, for f increasing in p (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return (lo + hi) / 2


def share_interval(hits: Sequence[bool], level: float = 0.95) -> Interval:
    """The share of true ``hits`` (one per seed) with its two-sided Clopper-Pearson interval.

    Returns an :class:`Interval` whose values are the hits as 0/1. Raises ValueError on no hits or a
    level outside (0, 1).
    """
    xs = tuple(1.0 if h else 0.0 for h in hits)
    if not xs or not 0.0 < level < 1.0:
        raise ValueError(
            f"share_interval needs at least one outcome and a level in (0, 1), got {xs}, {level}"
        )
    n, k, tail = len(xs), int(sum(xs)), (1 - level) / 2
    low = 0.0 if k == 0 else _solve(lambda p: _at_least(k, n, p), tail)
    high = 1.0 if k == n else _solve(lambda p: _at_least(k + 1, n, p), 1 - tail)
    return Interval(k / n, low, high, level, xs, SHARE_METHOD)


def share_p_value(hits: Sequence[bool], *, at_least=None, at_most=None) -> float:
    """The exact two-sided binomial p-value of the decision of :func:`share_check` (below 0.05 exactly
    when the 95% interval excludes the bound on the side the share lies)."""
    n, k = len(hits), sum(1 for h in hits if h)
    bounds = [b for b in (at_least, at_most) if b is not None]
    if not bounds or n == 0:
        raise ValueError("share_p_value needs outcomes and at_least, at_most or both")

    def p(bound: float) -> float:
        if k / n >= bound:
            return min(1.0, 2 * _at_least(k, n, bound)) if bound > 0 else 1.0
        return min(1.0, 2 * (1 - _at_least(k + 1, n, bound))) if bound < 1 else 1.0

    if at_least is not None and k / n < at_least:
        return p(at_least)
    if at_most is not None and k / n > at_most:
        return p(at_most)
    return max(p(b) for b in bounds)


def share_check(
    claim: str,
    stated: str,
    hits: Sequence[bool],
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    context: str = "",
    sanity: str = "",
) -> Check:
    """A check decided on the share of seeds whose outcome is a hit, with its exact 95% interval: agree
    when the interval lies on the expected side of the bound(s), MISMATCH when on the other, else
    inconclusive (no outcome at all: inconclusive). ``measured`` shows k of n, the interval, then
    ``context``."""
    tail = f"; {context}" if context else ""
    if not hits:
        return Check(claim, stated, f"no seed gave an outcome{tail}", INCONCLUSIVE, sanity)
    interval = share_interval(hits)
    result = decide(interval, at_least=at_least, at_most=at_most)
    p = share_p_value(hits, at_least=at_least, at_most=at_most)
    k, n = int(sum(interval.values)), interval.n
    measured = f"{k} of {n} seeds, share {interval.format('.2f')} (exact interval){tail}"
    bounds = {"at_least": at_least, "at_most": at_most, "scale": "share"}
    return Check(claim, stated, measured, result, sanity, interval, p, bounds=bounds)
