"""lr-sensitivity's readings as first registered, restored beside the rules a review changed them to.

The review of 2026-11-30 17:56 UTC (made after the claim's first documented run had started) changed two
readings: Wortsman et al.'s formula counts a diverged run as the loss at init l0 whatever finite loss it
stopped at (before: a run stopped as diverged at a finite loss counted at min(l, l0), like any run; only
a run without a finite loss counted as l0), and the attention values are read at the last step where
every attention layer is finite, two runs read at different steps not compared (before: at the last
logged step with finite values, any rows, compared whatever their steps). Under the project's rule the
first registration's readings decide and the reviewed ones are the revised column; these are the first.
"""

from __future__ import annotations

import math
import statistics

from depthlab.study.sensitivity import Curve, Point

# The outcome a run stopped as diverged at a finite loss gets under the first reading: not "diverged", so
# Point.capped counts it at min(l, l0) as the formula did before the review (not "trained" either).
FINITE_DIVERGED = "diverged at a finite loss"


def first_rule_curves(curve_list: list[Curve]) -> list[Curve]:
    """The curves as the first registration's formula reads them: a run stopped as diverged at a finite
    loss counts at min(l, l0) (its outcome renamed :data:`FINITE_DIVERGED`); the rest is unchanged."""

    def outcome(p: Point, seed: int, o: str) -> str:
        v = p.loss.get(seed)
        return FINITE_DIVERGED if o == "diverged" and v is not None and math.isfinite(v) else o

    return [
        Curve(
            c.key,
            c.depth,
            [
                Point(p.lr, dict(p.loss), {s: outcome(p, s, o) for s, o in p.outcome.items()})
                for p in c.points
            ],
            c.l0,
        )
        for c in curve_list
    ]


def first_attention(run: dict) -> tuple[float, float, None]:
    """(largest attention logit over layers, mean attention entropy over layers, None) at the run's last
    logged step with finite values, as first registered: the rows of any stream, and no step returned,
    so two runs are compared whatever step each was read at."""
    rows = [
        x
        for x in run.get("layers") or []
        if _finite(x.get("attn_logit_max")) and _finite(x.get("attn_entropy"))
    ]
    if not rows:
        return math.nan, math.nan, None
    last = max(x["step"] for x in rows)
    at = [x for x in rows if x["step"] == last]
    return max(x["attn_logit_max"] for x in at), statistics.fmean(x["attn_entropy"] for x in at), None


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)
