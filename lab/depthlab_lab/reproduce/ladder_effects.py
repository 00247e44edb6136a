"""The scale ladder's effect sizes, read back from its study store: per claim, effect and width, the
per-seed values, their mean and 95% t-interval, the result against the registered bounds, and which
way the effect moves with width.

A run's final loss is its validation loss; a diverged run (whatever loss it still reported) or one that
ended without a finite loss counts as ln V, the loss of a uniform prediction, as the claims count it
(:func:`depthlab_lab.reproduce.lm_runs.final_loss`).
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass

from depthlab.fit import loglog_slope
from depthlab.intervals import INCONCLUSIVE, Interval, decide, mean_interval
from depthlab.report import load
from depthlab.study import Store
from depthlab.study.sensitivity import Curve, Point
from depthlab_lab.reproduce.ladder import LADDER, Effect
from depthlab_lab.reproduce.ladder_run import Rung, finite

TOWARD, AWAY, FLAT = "toward the claim", "away from the claim", "no change beyond the intervals"


@dataclass(frozen=True)
class Measured:
    """One effect at one width: per-seed values (nan where a seed gave none), the interval (None with
    fewer than two finite values) and the result against the effect's bounds."""

    width: int
    values: tuple[float, ...]
    interval: Interval | None
    result: str


def final_loss(run: dict) -> float:
    """Validation loss; ln V for a diverged run or one without a finite loss."""
    v = run.get("val_loss")
    if run.get("outcome") != "diverged" and finite(v):
        return float(v)
    return math.log(run["config"]["model"].get("vocab_size", 256))


def _unigram(run: dict) -> float:
    u = run.get("unigram_loss")
    return float(u) if finite(u) else math.nan


def update_slope(run: dict) -> float:
    """Log-log slope of the update ratio against the layer index at the run's last logged telemetry
    step (nan without telemetry)."""
    layers = run.get("layers") or []
    if not layers:
        return math.nan
    last = max(x["step"] for x in layers)
    rows = sorted((x["layer"], x.get("update_ratio")) for x in layers if x["step"] == last)
    pts = [(i, v) for i, v in rows if i > 0 and finite(v) and v > 0]
    slope = loglog_slope([i for i, _ in pts], [v for _, v in pts])
    return math.nan if slope is None else slope


def by_setting(rung: Rung, runs: list[dict]) -> dict[str, dict[int, dict]]:
    """{label: {seed: run}} of a rung's stored runs that are done, matched on their setting's fields."""
    want = {
        label: {
            **{f"model.{k}": v for k, v in s["model"].items()},
            **{f"train.{k}": v for k, v in s["train"].items()},
        }
        for label, s in rung.settings.items()
    }
    out: dict[str, dict[int, dict]] = {label: {} for label in want}
    for r in runs:
        if r.get("status") != "done":
            continue
        axes = r.get("axes") or {}
        for label, fields in want.items():
            if axes.get("setting") == fields:
                out[label][r["config"]["train"]["seed"]] = r
    return out


def _per_seed(effect: Effect, runs: dict[str, dict[int, dict]], seeds) -> list[float]:
    a, b = runs.get(effect.a, {}), runs.get(effect.b, {})
    out = []
    for s in seeds:
        x, y = a.get(s), b.get(s)
        if effect.kind == "nats":
            out.append(final_loss(x) - _unigram(x) if x else math.nan)
        elif effect.kind == "level":
            out.append(final_loss(x) / _unigram(x) - 1 if x else math.nan)
        elif effect.kind == "gap":
            out.append(final_loss(x) - final_loss(y) if x and y else math.nan)
        elif effect.kind == "train_gap":
            out.append(_train_gap(x) - _train_gap(y) if x and y else math.nan)
        elif effect.kind == "slope":
            out.append(update_slope(x) if x else math.nan)
        else:
            raise ValueError(f"effect kind {effect.kind!r} is not one the ladder computes")
    return out


def _train_gap(run: dict) -> float:
    v, t = run.get("val_loss"), run.get("final_train_loss")
    return float(v) - float(t) if finite(v) and finite(t) else math.nan


def sensitivity_growth(effect: Effect, runs: dict[str, dict[int, dict]], seeds) -> list[float]:
    """Per seed: (LR sensitivity of ``a`` at the deepest curve - at the shallowest) - the same of ``b``,
    the curves built from the settings named "WRAP DL lr X" (Wortsman et al.'s sensitivity, a diverged
    run at l0, the mean first logged loss)."""
    growth = {}
    for wrap in (effect.a, effect.b):
        curves: dict[int, dict[float, Point]] = {}
        firsts: dict[int, list[float]] = {}
        for label, by_seed in runs.items():
            w, depth, _, lr = label.split(" ")
            if w != wrap:
                continue
            d = int(depth[:-1])
            point = curves.setdefault(d, {}).setdefault(float(lr), Point(float(lr)))
            for s, r in by_seed.items():
                v = r.get("val_loss")
                point.loss[s] = float(v) if finite(v) else None
                point.outcome[s] = r.get("outcome") or "failed"
                first = next((m.get("loss") for m in r.get("metrics") or [] if m.get("step") == 1), None)
                if finite(first):
                    firsts.setdefault(d, []).append(first)
        per_depth = {
            d: Curve(
                {"wrap": wrap},
                d,
                [p[k] for k in sorted(p)],
                statistics.fmean(firsts.get(d) or [math.log(256)]),
            )
            for d, p in curves.items()
        }
        if len(per_depth) < 2:
            return [math.nan for _ in seeds]
        lo, hi = per_depth[min(per_depth)], per_depth[max(per_depth)]
        a, b = hi.per_seed_sensitivity(), lo.per_seed_sensitivity()
        growth[wrap] = {s: a[s] - b[s] for s in set(a) & set(b)}
    return [growth[effect.a].get(s, math.nan) - growth[effect.b].get(s, math.nan) for s in seeds]


def capped_runs(runs: dict[str, dict[int, dict]]) -> dict[str, dict[int, dict]]:
    """``runs`` with each finite validation loss above ln V counted as ln V, the revised rule (a model
    worse than a uniform guess learned nothing, as the claims count it); the stored runs are unchanged."""

    def cap(r: dict) -> dict:
        v, ln_v = r.get("val_loss"), math.log(r["config"]["model"].get("vocab_size", 256))
        return {**r, "val_loss": min(float(v), ln_v)} if finite(v) else r

    return {label: {s: cap(r) for s, r in by_seed.items()} for label, by_seed in runs.items()}


def measure_capped(effect: Effect, width: int, runs: dict[str, dict[int, dict]], seeds) -> Measured:
    """:func:`measure` under the revised rule (:func:`capped_runs`), shown beside the first registration's
    effect, which decides; a train gap (the same run's validation minus training loss) is read as stored."""
    return measure(effect, width, runs if effect.kind == "train_gap" else capped_runs(runs), seeds)


def measure(effect: Effect, width: int, runs: dict[str, dict[int, dict]], seeds) -> Measured:
    """The effect at ``width`` from a rung's runs by setting."""
    if effect.kind == "sensitivity_growth":
        values = sensitivity_growth(effect, runs, seeds)
    else:
        values = _per_seed(effect, runs, seeds)
    good = [v for v in values if math.isfinite(v)]
    if len(good) < 2 or len(good) < len(values):
        return Measured(width, tuple(values), None, INCONCLUSIVE)
    interval = mean_interval(good)
    return Measured(
        width, tuple(values), interval, decide(interval, at_least=effect.at_least, at_most=effect.at_most)
    )


def trend(effect: Effect, measured: list[Measured]) -> str:
    """Which way the effect moves from the narrowest to the widest width measured: toward the claim's
    side of its bounds, away from it, or no change beyond the intervals (they overlap)."""
    done = [m for m in measured if m.interval is not None]
    if len(done) < 2:
        return "not measured at two widths"
    first, last = done[0].interval, done[-1].interval
    if not (last.low > first.high or last.high < first.low):
        return FLAT
    if effect.at_least is not None and effect.at_most is not None:
        centre = (effect.at_least + effect.at_most) / 2
        closer = abs(last.mean - centre) < abs(first.mean - centre)
    elif effect.at_least is not None:
        closer = last.mean > first.mean
    else:
        closer = last.mean < first.mean
    return TOWARD if closer else AWAY


def ladder_effects(db: str, todo: list[Rung]) -> dict[str, list[dict]]:
    """{claim: [{"effect", "measured": [Measured per width], "trend"}]} from the store ``db``; a rung not
    yet in the store (or no store at all) counts as unmeasured."""
    present = set()
    if os.path.isfile(db) and os.path.getsize(db) > 0:  # no store yet: nothing measured
        with Store(db, create=False) as store:
            present = {s["name"] for s in store.studies()}
    per_claim: dict[str, dict[int, tuple[Rung, dict]]] = {}
    for r in todo:
        runs = load(db, r.study.name).runs if r.study.name in present else []
        per_claim.setdefault(r.claim, {})[r.width] = (r, by_setting(r, runs))
    out = {}
    for claim, widths in per_claim.items():
        rows = []
        for effect in LADDER[claim].effects:
            at = [
                (w, r, runs)
                for w, (r, runs) in sorted(widths.items())
                if not effect.first_rung_only or w == min(widths)
            ]
            measured = [measure(effect, w, runs, r.seeds) for w, r, runs in at]
            capped = [measure_capped(effect, w, runs, r.seeds) for w, r, runs in at]
            rows.append(
                {
                    "effect": effect,
                    "measured": measured,
                    "trend": trend(effect, measured),
                    "capped": capped,  # the revised rule: a loss above ln V counts as ln V
                    "capped_trend": trend(effect, capped),
                }
            )
        out[claim] = rows
    return out
