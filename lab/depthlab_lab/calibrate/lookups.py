"""The lookups a prediction from the probe must beat: answers read off the measured runs alone.

Each takes the measured runs it may use (the atlas, or a cross-validation fold of it) and a query
(:class:`depthlab.doctor.predict.Query`), and answers "trains" or "fails" (the majority of the runs it
picks; a tie, or no run of that wrapping, answers "trains"):

- ``wrapping x lr``: the runs of the query's wrapping at the measured lr nearest its own (ln scale),
  pooled over every width, depth, warmup and budget: the baseline of the doctor's earlier grids.
- ``wrapping x width x lr x warmup``: among the runs of its wrapping, those at the measured width
  nearest its own, then at the lr nearest its own among them, then at the warmup nearest its own
  (ln(1 + warmup)) among those.
- ``nearest runs``: the :data:`depthlab.doctor.predict.K` runs of the same kind of stack and recipe nearest it
  in :data:`depthlab.doctor.predict.SCALES` units (lr, width, depth, warmup and budget together), by
  :func:`depthlab.doctor.predict.atlas_share` (each weighted 1 / (1 + distance)).

Their definitions are registered with each held-out grid before its runs.
"""

from __future__ import annotations

import math

from depthlab.doctor.atlas import Atlas, MeasuredRun
from depthlab.doctor.predict import Query, atlas_share, nearest


def _majority(runs: list[MeasuredRun]) -> str:
    trained = sum(r.trained for r in runs)
    return "fails" if runs and trained < len(runs) - trained else "trains"


def _closest(runs: list[MeasuredRun], key, value: float) -> list[MeasuredRun]:
    """The runs whose ``key`` is nearest ``value`` (all of them at that nearest value)."""
    if not runs:
        return []
    best = min(abs(key(r) - value) for r in runs)
    return [r for r in runs if abs(key(r) - value) <= best + 1e-12]


def wrapping_lr(runs: list[MeasuredRun], q: Query) -> str:
    same = [r for r in runs if r.wrap == q.wrap]
    return _majority(_closest(same, lambda r: math.log(r.lr), math.log(q.lr)))


def wrapping_width_lr_warmup(runs: list[MeasuredRun], q: Query) -> str:
    same = [r for r in runs if r.wrap == q.wrap]
    same = _closest(same, lambda r: math.log(r.d_model), math.log(q.d_model))
    same = _closest(same, lambda r: math.log(r.lr), math.log(q.lr))
    return _majority(_closest(same, lambda r: math.log1p(r.warmup), math.log1p(q.warmup)))


def nearest_runs(runs: list[MeasuredRun], q: Query) -> str:
    share = atlas_share(nearest(Atlas(tuple(runs)), q))
    return "trains" if share is None or share >= 0.5 else "fails"


LOOKUPS = {
    "wrapping x lr": wrapping_lr,
    "wrapping x width x lr x warmup": wrapping_width_lr_warmup,
    "nearest runs": nearest_runs,
}
