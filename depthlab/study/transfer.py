"""Learning-rate transfer across depth or width, measured from a study's runs.

From the learning-rate curves of :mod:`depthlab.study.sensitivity` (final loss against lr, per setting
and size, over seeds), for each setting:

- the best lr at each size with a 95% interval over seeds: each seed's best (its own curve's argmin,
  refined by a parabola in log10 lr) averaged in log space, and flagged when the seed-averaged best is
  the smallest or largest lr swept: then the true best may lie beyond the sweep, and the slope through
  it is a bound, not an estimate, when every such best can move the fitted line only one way (else it
  is neither; :func:`reading` is that judgement, which ``depthlab transfer`` and ``advise`` both print);
- the slope of log best lr against log size, fitted per seed, with its t-interval over seeds
  (0 = the best lr transfers; under SP Wortsman et al. 2023 and this package's lr-sensitivity study find
  it negative across depth);
- the best lr extrapolated to a target size: each seed's fitted line evaluated there, averaged in log
  space with its interval;
- the transfer penalty at each size: the loss with the lr tuned at the smallest size (the best swept lr
  there) minus the loss at that size's own best swept lr, per seed, with its interval (0 where the
  proxy's lr is as good as the size's own);
- how many seeds would halve the slope's interval: the t-interval's half-width is t_{n-1} s / sqrt(n),
  so the n' with t_{n'-1} / sqrt(n') <= t_{n-1} / (2 sqrt(n)) at the same seed-to-seed spread s;
- or how many more sizes would, at the same seeds: each seed's slope is a least-squares fit in
  x = log size, whose standard error is sigma / sqrt(sum (x - xbar)^2) for a scatter sigma of the
  seed's best lr about its line, so the seed-to-seed spread s of the slopes, and the interval, halve
  when sum (x - xbar)^2 is four times larger. The added sizes continue the sweep's spacing beyond the
  largest (log-spaced at the sweep's mean ratio between neighbours); the assumption, which the output
  states, is that the best lr scatters as much about a straight line in log-log at the added sizes.
  Neither count is given where a best lr sat at the sweep's edge: more seeds or sizes do not turn a
  bound into an estimate, a wider lr sweep does.

The words (tables, refusals) are :mod:`depthlab.study.transfer_text`'s.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

from depthlab import intervals
from depthlab.model.parametrization import ALPHA, SCALES_WIDTH
from depthlab.study.sensitivity import Curve, curves, seed_best, setting_key, setting_label


@dataclass(frozen=True)
class SizeRow:
    """One size of a setting: its best lr (mean, low, high in lr), whether it sat at the sweep's edge,
    and the transfer penalty (mean, low, high in nats; None at the smallest size's own lr).
    ``best_swept`` is the seed-averaged curve's best swept lr; ``edge`` +1 when that is the largest lr
    swept (the true best may lie above it), -1 when the smallest, 0 inside the sweep."""

    size: int
    seeds: int
    best_lr: tuple[float, float, float]
    at_edge: bool
    penalty: tuple[float, float, float] | None
    best_swept: float | None = None
    edge: int = 0


@dataclass(frozen=True)
class Transfer:
    """One setting's transfer across ``axis`` (see the module docstring)."""

    setting: str
    axis: str
    rows: tuple[SizeRow, ...]
    proxy_lr: float
    slope: tuple[float, float, float] | None
    censored: bool
    target: int | None
    target_lr: tuple[float, float, float] | None
    seeds_to_halve: int | None
    slope_seeds: int = 0
    sizes_to_halve: tuple[int, ...] | None = None
    no_base: str | None = None  # a parametrization that scales the axis, run with no base along it

    def to_dict(self) -> dict:
        """The fields as JSON-able data, with the slope's :func:`reading` under "reading"."""
        d = dict(self.__dict__)
        d["rows"] = [dict(r.__dict__) for r in self.rows]
        d["reading"] = reading(self)
        return d


def _log_interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high) of positive ``values`` averaged in log10 space, back in linear units."""
    logs = [math.log10(v) for v in values]
    if len(logs) == 1:
        return values[0], values[0], values[0]
    iv = intervals.mean_interval(logs)
    return 10**iv.mean, 10**iv.low, 10**iv.high


def _interval(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    iv = intervals.mean_interval(values)
    return iv.mean, iv.low, iv.high


def seeds_to_halve(n: int) -> int | None:
    """The seeds that would halve a t-interval of ``n`` seeds at the same spread (None below 2)."""
    if n < 2:
        return None
    goal = intervals.t_quantile(0.975, n - 1) / math.sqrt(n) / 2
    m = n + 1
    while intervals.t_quantile(0.975, m - 1) / math.sqrt(m) > goal:
        m += 1
    return m


MAX_ADDED = 64  # sizes_to_halve gives up beyond this many added sizes


def spacing(sizes: list[int]) -> float:
    """The sweep's mean ratio between neighbouring sizes, (largest / smallest)^(1 / (n - 1))."""
    return (max(sizes) / min(sizes)) ** (1 / (len(sizes) - 1))


def _sxx(xs: list[float]) -> float:
    mean = sum(xs) / len(xs)
    return sum((x - mean) ** 2 for x in xs)


def sizes_to_halve(sizes: list[int]) -> tuple[int, ...] | None:
    """The sizes to add beyond the largest of ``sizes`` (distinct, at least 2), spaced by the sweep's
    :func:`spacing` and rounded to whole sizes, until sum (x - xbar)^2 of x = log size is four times
    the sweep's: the design that halves a slope's standard error at the same scatter. None with fewer
    than two sizes, or when more than ``MAX_ADDED`` would be needed."""
    sizes = sorted(set(sizes))
    if len(sizes) < 2:
        return None
    ratio, xs = spacing(sizes), [math.log10(v) for v in sizes]
    goal, added = 4 * _sxx(xs), []
    while _sxx(xs) < goal:
        if len(added) == MAX_ADDED:
            return None
        last = added[-1] if added else sizes[-1]
        nxt = max(last + 1, round(sizes[-1] * ratio ** (len(added) + 1)))
        added.append(nxt)
        xs.append(math.log10(nxt))
    return tuple(added)


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of least squares y = a + b x."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def setting_transfer(cs: list[Curve], axis: str, target: int | None = None) -> Transfer:
    """The :class:`Transfer` of one setting's curves (one per size, sorted by size)."""
    cs = sorted(cs, key=lambda c: c.depth)
    seeds = sorted(set.intersection(*(set(c.seeds) for c in cs)))
    proxy = cs[0]
    proxy_best = proxy.best()
    i0 = next(i for i, p in enumerate(proxy.points) if p.lr == proxy_best["lr_swept"])
    rows = []
    for c in cs:
        best = c.best()
        own = next(i for i, p in enumerate(c.points) if p.lr == best["lr_swept"])
        at_proxy = next((p for p in c.points if p.lr == proxy.points[i0].lr), None)
        penalty = None
        if c is not proxy and at_proxy is not None and seeds:
            diffs = [at_proxy.capped(s, c.l0) - c.points[own].capped(s, c.l0) for s in seeds]
            penalty = _interval(diffs)
        per_seed = [seed_best(c, s) for s in c.seeds]
        edge = (1 if own else -1) if best["at_edge"] else 0  # points are sorted by lr
        rows.append(SizeRow(c.depth, len(c.seeds), _log_interval(per_seed), best["at_edge"], penalty,
                            best["lr_swept"], edge))  # fmt: skip
    slope = target_lr = None
    slopes, predicted = [], []
    xs = [math.log10(c.depth) for c in cs]
    for s in seeds if len(cs) >= 2 else []:
        a, b = _fit(xs, [math.log10(seed_best(c, s)) for c in cs])
        slopes.append(b)
        if target is not None:
            predicted.append(10 ** (a + b * math.log10(target)))
    if slopes:
        slope = _interval(slopes)
        target_lr = _log_interval(predicted) if predicted else None
    censored = any(r.at_edge for r in rows)
    more = len(slopes) >= 2 and not censored  # more seeds or sizes do not turn a bound into an estimate
    return Transfer(
        setting=cs[0].label,
        axis=axis,
        rows=tuple(rows),
        proxy_lr=proxy.points[i0].lr,
        slope=slope,
        censored=censored,
        target=target,
        target_lr=target_lr,
        seeds_to_halve=seeds_to_halve(len(slopes)) if more else None,
        slope_seeds=len(slopes),
        sizes_to_halve=sizes_to_halve([c.depth for c in cs]) if more else None,
    )


def transfers(runs: list[dict], axis: str = "depth", target: int | None = None) -> list[Transfer]:
    """Per setting with curves at two or more sizes, its :class:`Transfer` (``axis``: depth or width)."""
    if axis not in ("depth", "width"):
        raise ValueError(f"axis must be 'depth' or 'width', not {axis!r}")
    if target is not None:  # a size: the fit is in log size, so it must be a number above 0
        if isinstance(target, bool) or not isinstance(target, numbers.Real):  # numpy's numbers too
            raise TypeError(f"target must be a {axis} (a number), not {type(target).__name__}")
        if not math.isfinite(target) or target < 1:
            raise ValueError(f"target must be a {axis} >= 1, not {target!r}")
        target = int(target) if float(target).is_integer() else float(target)  # plain, for JSON
    size = "n_layers" if axis == "depth" else "d_model"
    by_setting: dict[str, list[Curve]] = {}
    for c in curves(runs, size):
        if c.seeds:  # a curve with no seed run at every lr (a study cut short) says nothing yet
            by_setting.setdefault(c.label, []).append(c)
    unscaled = no_base(runs, axis)
    return [
        dataclasses.replace(setting_transfer(cs, axis, target), no_base=unscaled.get(label))
        for label, cs in sorted(by_setting.items())
        if len(cs) >= 2
    ]


def no_base(runs: list[dict], axis: str) -> dict[str, str]:
    """setting label -> its parametrization, for the settings whose parametrization scales ``axis``
    (mup and the depth rules across width; depth_mup and completep across depth) but whose runs set no
    base along it (base_width, base_depth): each size is then its own base, and the setting is the
    standard parametrization at every size, whatever its name."""
    size, base = ("n_layers", "base_depth") if axis == "depth" else ("d_model", "base_width")
    out = {}
    for r in runs:
        model = (r.get("config") or {}).get("model", {})
        param = model.get("param", "sp")
        scales = ALPHA.get(param) is not None if axis == "depth" else SCALES_WIDTH.get(param, False)
        if scales and model.get(base) is None:
            out[setting_label(setting_key(r.get("axes") or {}, size))] = param
    return out


def study_shape(runs: list[dict]) -> dict:
    """What a transfer study held fixed and what it swept: {"widths", "depths", "steps", "batch_size",
    "seq_len"}, each the sorted values its finished runs had."""

    def values(side: str, key: str) -> list:
        return sorted({r["config"][side][key] for r in runs if r.get("config")})

    return {"widths": values("model", "d_model"), "depths": values("model", "n_layers"),
            "steps": values("train", "steps"), "batch_size": values("train", "batch_size"),
            "seq_len": values("train", "seq_len")}  # fmt: skip


def heads_text(width: int, heads: int, whose: str = "the model's") -> str | None:
    """Why ``width`` names no model with ``heads`` attention heads ('a multiple of the model's 4 heads,
    which split d_model; ask at 128 or 132'), or None where the heads split it."""
    if width % heads == 0:
        return None
    below, above = width // heads * heads, (width // heads + 1) * heads
    near = f"{below} or {above}" if below else f"{above}"
    return f"a multiple of {whose} {heads} heads, which split d_model; ask at {near}"


def runs_at(runs: list[dict], axis: str, width: int | None, depth: int | None) -> list[dict]:
    """The runs at the user's own width (a question across depth) or depth (across width), for a study
    that swept both; every run when the user did not say theirs."""
    key, mine = ("d_model", width) if axis == "depth" else ("n_layers", depth)
    if mine is None:
        return runs
    return [r for r in runs if (r.get("config") or {}).get("model", {}).get(key, mine) == mine]


def _leverage(t: Transfer, at: int | None) -> list[float]:
    """Per size row, how far the line fitted in x = log size moves when that row's log best lr rises by
    1: the slope's (x_i - xbar) / Sxx, or (``at`` given) the fitted value's at x = log ``at``,
    1/n + (x_i - xbar)(x - xbar) / Sxx."""
    xs = [math.log10(r.size) for r in t.rows]
    mx, sxx = sum(xs) / len(xs), _sxx(xs)
    if at is None:
        return [(x - mx) / sxx for x in xs]
    return [1 / len(xs) + (x - mx) * (math.log10(at) - mx) / sxx for x in xs]


def bound_side(t: Transfer, at: int | None = None) -> int | None:
    """How the best lrs at the sweep's edge bound the slope (``at`` None) or the best lr fitted at size
    ``at``. Each such best may only lie beyond its edge, so it can move the fit only one way. None: no
    edge moves it (an estimate); +1: every edge can only raise it (it is a lower bound); -1: only lower
    it (an upper bound); 0: edges move it both ways (neither an estimate nor a bound)."""
    moves = {w * r.edge > 0 for w, r in zip(_leverage(t, at), t.rows) if r.edge and abs(w) > 1e-12}
    if not moves:
        return None
    return 0 if len(moves) == 2 else (1 if moves.pop() else -1)


# A slope of log best lr against log size inside +-BAND is flat: the best lr holds to within the sweep's
# resolution (the transfer claims' registered band; docs/transfer.md reads its tables by the same band).
BAND = 0.25


def reading(t: Transfer) -> str:
    """The one judgement of a setting's slope that ``depthlab transfer`` and ``advise`` both print:
    "no slope" (no seed with a run at every size); "at least" or "at most" (a best lr at the sweep's
    edge makes the slope a bound, not an estimate); "unknown" (edges that move it both ways: not even a
    bound); else, from its interval against +-:data:`BAND`: "flat" (wholly inside: the proxy's best lr
    holds), "moves" (wholly outside) or "not decided" (across an edge of the band)."""
    if t.slope is None:
        return "no slope"
    side = bound_side(t)
    if side is not None:
        return {1: "at least", -1: "at most", 0: "unknown"}[side]
    _, lo, hi = t.slope
    if -BAND <= lo and hi <= BAND:
        return "flat"
    return "moves" if hi < -BAND or lo > BAND else "not decided"
