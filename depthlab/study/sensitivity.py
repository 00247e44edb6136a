"""Learning-rate sensitivity: the final loss against the learning rate, per setting and depth, over seeds.

Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer training instabilities", sec. 2.2)
judge a configuration by its whole curve of final loss l(eta) against learning rate eta, summarised as

    LR sensitivity = mean over the swept eta of [min(l(eta), l0) - l*]

with l0 the loss at initialisation and l* = min over the swept eta of l(eta); a diverged run counts as
l0. 0 means every learning rate of the sweep reached the best loss; l0 - l* means only one did.

Here, from the runs of a study (the store's run dicts, see :meth:`depthlab.study.Store.runs`):

- a *curve* is the runs that share every axis value except ``lr``, ``seed`` and ``n_layers``, at one
  depth; its *points* are its learning rates, each holding one final validation loss per seed;
- l0 is the measured loss of the first update (the model at init), averaged over the curve's runs;
- the sensitivity is computed on each seed's curve, then averaged over seeds with a 95% t-interval
  (:func:`mean_interval`);
- the best learning rate is the argmin of the seed-averaged curve, refined by a parabola through the
  three points around it in log10(lr) when it is inside the sweep; its loss is given with the
  interval over seeds;
- the usable range is the widest run of consecutive learning rates around the best whose
  seed-averaged loss is within ``MARGIN`` nats of the best, in decades (log10(hi / lo));
- the slope of the best learning rate against depth is fitted per seed (log10 lr against log10 depth)
  and averaged with its t-interval. For information: Jelassi et al. 2023 derive eta* ~ L^(-3/2) for
  muP ReLU networks (a maximal-update criterion), and depth-wise parametrisations that scale each branch
  by 1/L (CompleteP, Dey et al. 2025) aim for a slope of 0; depthlab's stacks use the standard
  parametrisation, to which neither applies directly.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from depthlab import intervals
from depthlab.fit import loglog_slope

MARGIN = 0.05  # nats: "as good as the best" for the usable learning-rate range
GROUPED_OUT = ("lr", "seed", "n_layers")  # what a curve's runs may differ in


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean of the finite ``values`` and its two-sided 95% t-interval
    (:func:`depthlab.intervals.mean_interval`); low = high = mean for a single value, the way the tables
    show it; NaN for no values."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return math.nan, math.nan, math.nan
    if len(vals) < 2:
        return vals[0], vals[0], vals[0]
    iv = intervals.mean_interval(vals)
    return iv.mean, iv.low, iv.high


@dataclass
class Point:
    """One learning rate of a curve: per seed, the final loss (None when the run diverged or left no
    finite loss) and the outcome."""

    lr: float
    loss: dict[int, float | None] = field(default_factory=dict)
    outcome: dict[int, str] = field(default_factory=dict)

    def capped(self, seed: int, l0: float) -> float:
        """min(l, l0) for ``seed``'s run; a diverged run (or one without a finite loss) counts as l0."""
        v = self.loss.get(seed)
        return l0 if self.diverged(seed) or v is None else min(v, l0)

    def diverged(self, seed: int) -> bool:
        v = self.loss.get(seed)
        return self.outcome.get(seed) == "diverged" or v is None or not math.isfinite(v)


@dataclass
class Curve:
    """The final loss against learning rate of one setting (``key``: the other axis values) at ``depth``."""

    key: dict
    depth: int
    points: list[Point]
    l0: float

    @property
    def label(self) -> str:
        """The setting as the report's rows name it: ``pre``, ``pre qk_norm=True z_loss=0.0001``."""
        return setting_label(self.key)

    @property
    def seeds(self) -> list[int]:
        """The seeds that have a run at every learning rate of the curve."""
        common = set.intersection(*(set(p.loss) for p in self.points)) if self.points else set()
        return sorted(common)

    def mean_curve(self) -> list[float]:
        """Per learning rate, the seed average of min(l, l0) (diverged = l0)."""
        return [statistics.fmean(p.capped(s, self.l0) for s in self.seeds) for p in self.points]

    def per_seed_sensitivity(self) -> dict[int, float]:
        """Wortsman et al.'s LR sensitivity of each seed's curve."""
        out = {}
        for s in self.seeds:
            vals = [p.capped(s, self.l0) for p in self.points]
            out[s] = statistics.fmean(v - min(vals) for v in vals)
        return out

    def sensitivity(self) -> tuple[float, float, float]:
        """Wortsman et al.'s LR sensitivity, per seed, as (mean, low, high) over seeds."""
        return mean_interval(list(self.per_seed_sensitivity().values()))

    def best(self) -> dict:
        """{"lr": the refined best learning rate, "lr_swept": the best swept one, "at_edge": whether it is
        the smallest or largest swept, "loss": (mean, low, high) over seeds at the best swept lr}."""
        mean = self.mean_curve()
        i = min(range(len(mean)), key=mean.__getitem__)
        p = self.points[i]
        return {
            "lr": _refine(self.points, mean, i),
            "lr_swept": p.lr,
            "at_edge": i in (0, len(mean) - 1),
            "loss": mean_interval([p.capped(s, self.l0) for s in self.seeds]),
        }

    def usable_range(self, margin: float = MARGIN) -> tuple[float, float, float]:
        """(low lr, high lr, width in decades) of the consecutive learning rates around the best whose
        seed-averaged loss is within ``margin`` of the best."""
        mean = self.mean_curve()
        i = min(range(len(mean)), key=mean.__getitem__)
        lo = hi = i
        while lo > 0 and mean[lo - 1] <= mean[i] + margin:
            lo -= 1
        while hi < len(mean) - 1 and mean[hi + 1] <= mean[i] + margin:
            hi += 1
        a, b = self.points[lo].lr, self.points[hi].lr
        return a, b, math.log10(b / a)

    def trainable_range(self) -> tuple[float | None, float | None, float]:
        """(low lr, high lr, width in decades) of the widest run of consecutive learning rates where most
        seeds trained; (None, None, 0) if none did. A single learning rate has width 0."""
        ok = [
            sum(p.outcome.get(s) == "trained" for s in self.seeds) * 2 > len(self.seeds) for p in self.points
        ]
        best, start = None, None
        for j, good in enumerate([*ok, False]):
            if good and start is None:
                start = j
            if not good and start is not None:
                span = (start, j - 1)
                width = math.log10(self.points[span[1]].lr / self.points[span[0]].lr)
                if best is None or width > best[2]:
                    best = (self.points[span[0]].lr, self.points[span[1]].lr, width)
                start = None
        return best if best is not None else (None, None, 0.0)


def _refine(points: list[Point], mean: list[float], i: int) -> float:
    """The vertex of the parabola through points i-1, i, i+1 in log10(lr) (the swept lr at an edge or
    when the three points are not convex)."""
    if i in (0, len(points) - 1):
        return points[i].lr
    xs = [math.log10(points[j].lr) for j in (i - 1, i, i + 1)]
    ys = [mean[j] for j in (i - 1, i, i + 1)]
    denom = (xs[0] - xs[1]) * (xs[0] - xs[2]) * (xs[1] - xs[2])
    a = (xs[2] * (ys[1] - ys[0]) + xs[1] * (ys[0] - ys[2]) + xs[0] * (ys[2] - ys[1])) / denom
    b = (xs[2] ** 2 * (ys[0] - ys[1]) + xs[1] ** 2 * (ys[2] - ys[0]) + xs[0] ** 2 * (ys[1] - ys[2])) / denom
    if a <= 0:
        return points[i].lr
    return 10 ** min(max(-b / (2 * a), xs[0]), xs[2])


def curves(runs: list[dict], size: str = "n_layers") -> list[Curve]:
    """The learning-rate curves of a study's runs (store run dicts with "config", "axes", "outcome",
    "val_loss" and, for l0, "metrics"); curves with fewer than two learning rates are left out.
    ``size``: the model field a curve is at (``Curve.depth`` holds it): n_layers, or d_model for
    curves across width."""
    groups: dict[tuple, dict] = {}
    for r in runs:
        if r.get("status", "done") != "done":
            continue
        m, t = r["config"]["model"], r["config"]["train"]
        key = setting_key(r.get("axes") or {}, size)
        g = groups.setdefault((tuple(key.items()), m[size]), {"key": key, "points": {}, "l0": []})
        point = g["points"].setdefault(t["lr"], Point(t["lr"]))
        loss = r.get("val_loss")
        point.loss[t["seed"]] = loss if isinstance(loss, (int, float)) and math.isfinite(loss) else None
        point.outcome[t["seed"]] = r.get("outcome") or "failed"
        first = next((x.get("loss") for x in r.get("metrics") or [] if x.get("step") == 1), None)
        if first is not None and math.isfinite(first):
            g["l0"].append(first)
    out = []
    for (_, depth), g in groups.items():
        pts = [g["points"][lr] for lr in sorted(g["points"])]
        if len(pts) < 2:
            continue
        l0 = statistics.fmean(g["l0"]) if g["l0"] else math.log(256)
        out.append(Curve(g["key"], depth, pts, l0))
    return sorted(out, key=lambda c: (c.label, c.depth))


def setting_label(key: dict) -> str:
    """A setting (:func:`setting_key`) as the report's rows name it, the wrapping first: ``pre``,
    ``pre qk_norm=True``."""
    first = [str(key["wrap"])] if "wrap" in key else []
    return " ".join(first + [f"{k}={v}" for k, v in key.items() if k != "wrap"]) or "all runs"


def setting_key(axes: dict, size: str = "n_layers") -> dict:
    """A run's axis values other than lr, seed and the size (depth, or ``size``), flattened to
    field=value pairs."""
    out = {}
    grouped_out = (*GROUPED_OUT[:2], size)
    for name, value in axes.items():
        if name in grouped_out:
            continue
        if isinstance(value, dict):
            out.update({k: _show(v) for k, v in value.items() if k not in grouped_out})
        else:
            out[name] = _show(value)
    return out


def _show(v):
    return "+".join(map(str, v)) if isinstance(v, (list, tuple)) else v


def best_lr_slope(curve_list: list[Curve], per_seed: bool = False) -> dict:
    """Per setting (label), the slope of log10(best lr) against log10(depth), fitted per seed over the
    setting's depths, as (mean, low, high) over seeds (``per_seed``: the list of the seeds' slopes);
    settings with fewer than two depths are left out."""
    by_label: dict[str, list[Curve]] = {}
    for c in curve_list:
        by_label.setdefault(c.label, []).append(c)
    out = {}
    for label, cs in by_label.items():
        if len(cs) < 2:
            continue
        seeds = sorted(set.intersection(*(set(c.seeds) for c in cs)))
        slopes = []
        for s in seeds:
            best = [seed_best(c, s) for c in cs]
            slope = loglog_slope([c.depth for c in cs], best)
            if slope is not None:
                slopes.append(slope)
        if slopes:
            out[label] = slopes if per_seed else mean_interval(slopes)
    return out


def seed_best(c: Curve, seed: int) -> float:
    """``seed``'s best learning rate on curve ``c`` (its own curve's argmin, refined as :func:`_refine`)."""
    vals = [p.capped(seed, c.l0) for p in c.points]
    return _refine(c.points, vals, min(range(len(vals)), key=vals.__getitem__))


def table(curve_list: list[Curve], margin: float = MARGIN) -> list[dict]:
    """One row per curve: setting, depth, seeds, l0, sensitivity, best lr, its loss, usable and
    trainable ranges (JSON-able; intervals as [mean, low, high])."""
    rows = []
    for c in curve_list:
        best = c.best()
        rows.append(
            {
                "setting": c.label,
                "depth": c.depth,
                "seeds": len(c.seeds),
                "l0": c.l0,
                "sensitivity": list(c.sensitivity()),
                "best_lr": best["lr"],
                "best_lr_swept": best["lr_swept"],
                "best_at_edge": best["at_edge"],
                "best_loss": list(best["loss"]),
                "usable_range": list(c.usable_range(margin)),
                "trainable_range": list(c.trainable_range()),
            }
        )
    return rows


def recommend(curve_list: list[Curve]) -> dict[int, list[dict]]:
    """Per depth, the settings ranked by best loss (mean over seeds), each with the width of its
    trainable learning-rate range; a setting whose interval overlaps the first's is marked tied."""
    out: dict[int, list[dict]] = {}
    for depth in sorted({c.depth for c in curve_list}):
        rows = []
        for c in (c for c in curve_list if c.depth == depth):
            best = c.best()
            rows.append({"setting": c.label, "best_loss": best["loss"], "best_lr": best["lr"],
                         "trainable_decades": c.trainable_range()[2]})  # fmt: skip
        rows.sort(key=lambda r: (r["best_loss"][0], -r["trainable_decades"]))
        for r in rows:
            r["tied_with_first"] = r is rows[0] or r["best_loss"][1] <= rows[0]["best_loss"][2]
        out[depth] = rows
    return out
