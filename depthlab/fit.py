"""Least-squares fits shared by the probe's verdicts and the reproductions."""

from __future__ import annotations

import math
from collections.abc import Iterable


def loglog_slope(xs: Iterable[float], ys: Iterable[float | None]) -> float | None:
    """The least-squares slope of log y against log x, over the points where x > 0 and y > 0 (a power
    law y ~ x^p gives p). None when fewer than two such points, or all at one x."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y is not None and y > 0]
    if len(pts) < 2:
        return None
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None
