"""Learning-rate transfer across depth or width, measured from a study's runs.

From the learning-rate curves of :mod:`depthlab.study.sensitivity` (final loss against lr, per setting
and size, over seeds), for each setting:

- the best lr at each size with a 95% interval over seeds: each seed's best (its own curve's argmin,
  refined by a parabola in log10 lr) averaged in log space, and flagged when the seed-averaged best is
  the smallest or largest lr swept: then the true best lies beyond the sweep, and every slope through
  it is a bound, not an estimate;
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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from depthlab import intervals
from depthlab.study.sensitivity import Curve, curves, seed_best


@dataclass(frozen=True)
class SizeRow:
    """One size of a setting: its best lr (mean, low, high in lr), whether it sat at the sweep's edge,
    and the transfer penalty (mean, low, high in nats; None at the smallest size's own lr)."""

    size: int
    seeds: int
    best_lr: tuple[float, float, float]
    at_edge: bool
    penalty: tuple[float, float, float] | None


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

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["rows"] = [dict(r.__dict__) for r in self.rows]
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
        rows.append(SizeRow(c.depth, len(c.seeds), _log_interval(per_seed), best["at_edge"], penalty))
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
    return Transfer(
        setting=cs[0].label,
        axis=axis,
        rows=tuple(rows),
        proxy_lr=proxy.points[i0].lr,
        slope=slope,
        censored=any(r.at_edge for r in rows),
        target=target,
        target_lr=target_lr,
        seeds_to_halve=seeds_to_halve(len(slopes)),
        slope_seeds=len(slopes),
        sizes_to_halve=sizes_to_halve([c.depth for c in cs]) if len(slopes) >= 2 else None,
    )


def transfers(runs: list[dict], axis: str = "depth", target: int | None = None) -> list[Transfer]:
    """Per setting with curves at two or more sizes, its :class:`Transfer` (``axis``: depth or width)."""
    size = "n_layers" if axis == "depth" else "d_model"
    by_setting: dict[str, list[Curve]] = {}
    for c in curves(runs, size):
        if c.seeds:  # a curve with no seed run at every lr (a study cut short) says nothing yet
            by_setting.setdefault(c.label, []).append(c)
    return [setting_transfer(cs, axis, target) for _, cs in sorted(by_setting.items()) if len(cs) >= 2]


def study_shape(runs: list[dict]) -> dict:
    """What a transfer study held fixed and what it swept: {"widths", "depths", "steps", "batch_size",
    "seq_len"}, each the sorted values its finished runs had."""

    def values(side: str, key: str) -> list:
        return sorted({r["config"][side][key] for r in runs if r.get("config")})

    return {"widths": values("model", "d_model"), "depths": values("model", "n_layers"),
            "steps": values("train", "steps"), "batch_size": values("train", "batch_size"),
            "seq_len": values("train", "seq_len")}  # fmt: skip


def shape_line(name: str, shape: dict) -> str:
    """'study depth-transfer-quick: width 32, depths 2-8, 100 steps of 16 x 32': what its answer is for."""

    def span(v: list) -> str:
        return str(v[0]) if len(v) == 1 else f"{v[0]}-{v[-1]}"

    w, d = shape["widths"], shape["depths"]
    return (f"study {name}: width{'s' if len(w) > 1 else ''} {span(w)}, depth{'s' if len(d) > 1 else ''} {span(d)}, "
            f"{span(shape['steps'])} steps of {span(shape['batch_size'])} x {span(shape['seq_len'])}")  # fmt: skip


def mismatch(axis: str, shape: dict, width: int | None, depth: int | None) -> str | None:
    """Why the study cannot answer for the user's own width (a depth transfer) or depth (a width
    transfer), in one line; None when it can (or when the user did not say theirs)."""
    fixed, mine, name = ("widths", width, "width") if axis == "depth" else ("depths", depth, "depth")
    have = shape[fixed]
    if mine is None or have == [mine]:
        return None
    return (
        f"the study ran at {name} {', '.join(map(str, have))}, not {mine}: its best lr is for that {name} "
        f"(under the standard parametrization the best lr moves with width, about 1/width); run the "
        f"transfer preset at yours (depthlab study --preset {axis}-transfer-quick --{name} {mine})"
    )


def _lr(v: tuple[float, float, float]) -> str:
    m, lo, hi = v
    return f"{m:.3g}" if lo == hi else f"{m:.3g} [{lo:.3g}, {hi:.3g}]"


def format_transfer(t: Transfer) -> str:
    """The text of one setting: the per-size table, the slope, the extrapolation, the seeds to halve."""
    head = f"  {t.axis:>6}  {'seeds':>5}  {'best lr [95%]':30} {'edge':5} penalty at lr {t.proxy_lr:g} [95%]"
    lines = [t.setting, head]
    for r in t.rows:
        pen = "(the proxy)" if r is t.rows[0] else "-"
        if r.penalty is not None:
            pen = f"{r.penalty[0]:+.3f} [{r.penalty[1]:+.3f}, {r.penalty[2]:+.3f}]"
        lines.append(
            f"  {r.size:>6}  {r.seeds:>5}  {_lr(r.best_lr):30} {'EDGE' if r.at_edge else '':5} {pen}"
        )
    if t.slope is None:
        lines.append("  slope: needs a seed with a run at every size")
        return "\n".join(lines)
    m, lo, hi = t.slope
    bound = ""
    if t.censored:
        bound = " (a bound, not an estimate: a best lr at the sweep's edge, marked EDGE, lies beyond it)"
    lines.append(f"  slope of log best lr against log {t.axis}: {m:+.2f} [{lo:+.2f}, {hi:+.2f}]{bound}")
    if t.target_lr is not None:
        sizes = [r.size for r in t.rows]
        where = "within" if min(sizes) <= t.target <= max(sizes) else "extrapolated beyond"
        lines.append(f"  best lr at {t.axis} {t.target}: {_lr(t.target_lr)} ({where} the sizes swept)")
    if t.seeds_to_halve is not None:
        lines.append(
            f"  {t.seeds_to_halve} seeds (now {t.slope_seeds}) would halve the slope's interval at the same spread"
        )
    if t.sizes_to_halve is not None:
        lines.append("  " + _sizes_line(t))
    return "\n".join(lines)


def _sizes_line(t: Transfer) -> str:
    """ "or 2 more depths (16, 32) ... would halve it ...", with the spacing and the assumption."""
    sizes, added = [r.size for r in t.rows], t.sizes_to_halve
    return (
        f"or {len(added)} more {t.axis}s ({', '.join(str(v) for v in added)}: x{spacing(sizes):.3g} apart "
        f"beyond the largest, as the sweep is spaced) would halve it at the same {t.slope_seeds} seeds,\n"
        f"  if each seed's best lr scatters as much about a straight log-log line there as at the sizes swept"
    )
