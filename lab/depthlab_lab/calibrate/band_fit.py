"""The limit on one measured quantity that best separates runs that trained from runs that did not, and that limit per width.

The doctor's learning-rate rules call a run expected to fail when a quantity its probe measures at init
(the step size s, the relative update rho) lies above a limit. :func:`best_band` finds, among the limits
between two measured values, the widest band (in ln) that misclassifies the fewest runs; the limit is
the band's geometric midpoint (:func:`band_limit`). :func:`width_bands` gives the same fit on each
width's runs alone: evidence of whether a limit in these units holds across width, never part of the
decision.
"""

from __future__ import annotations

import math

from depthlab.doctor.record import DIGITS


def best_band(rows: list[dict], key: str = "step") -> tuple[float, float, int]:
    """(low, high, errors): the widest interval (in ln) of limits between two measured values of
    ``key`` that misclassifies the fewest rows (a value above the limit predicted to fail; each row has
    ``key`` and "trained"). low is 0 when every limit below the smallest value does as well, high inf
    when every limit above the largest does."""
    values = sorted({r[key] for r in rows})
    cuts = [0.0, *values]  # a limit in [cuts[i], next) calls the values up to cuts[i] trainable
    best = None
    for i, lo in enumerate(cuts):
        hi = values[i] if i < len(values) else math.inf
        errors = sum((r[key] > lo) == r["trained"] for r in rows)
        width = math.log(hi / lo) if 0 < lo and hi < math.inf else math.inf
        if best is None or (errors, -width) < (best[2], -best[3]):
            best = (lo, hi, errors, width)
    return best[0], best[1], best[2]


def band_limit(low: float, high: float) -> float:
    """The band's geometric midpoint; its finite end where the other is open (0 or inf)."""
    if low > 0 and math.isfinite(high):
        return math.sqrt(low * high)
    return low if low > 0 else high


def band_fit(rows: list[dict], key: str) -> dict:
    """{"limit", "band": [low, high or None], "runs", "errors"} of :func:`best_band` on ``rows``,
    rounded to ``DIGITS`` decimals as the calibration record stores them."""
    low, high, errors = best_band(rows, key)
    band = [round(low, DIGITS), round(high, DIGITS) if math.isfinite(high) else None]
    return {"limit": round(band_limit(low, high), DIGITS), "band": band, "runs": len(rows), "errors": errors}


def width_bands(rows: list[dict], key: str) -> list[dict]:
    """Per width (each row's "d_model"), :func:`band_fit` on that width's rows alone, as
    [{"d_model", "limit", "band", "runs", "errors"}] in width order. A width whose runs all trained
    (or all failed) gets a band open at one end: it tells only how far the runs went."""
    out = []
    for d in sorted({r["d_model"] for r in rows}):
        out.append({"d_model": d} | band_fit([r for r in rows if r["d_model"] == d], key))
    return out
