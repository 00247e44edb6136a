"""The predictor behind ``depthlab advise``: its form chosen by cross-validation on the measured runs,
then fitted on all of them and written into the doctor's record ("predictor").

The examples are the atlas's runs that were probed, have both skips and the standard parametrization
(the doctor's limits were fitted on such stacks): each with its :class:`~depthlab.doctor.limit.LrLimit`
taken from its probe's quantities under the current record, and its label (trained or not). Each form
is a logistic regression per family of stacks (renormalising, gated, free), or per wrapping where the
wrapping has at least ``MIN_WRAP`` runs of its family holding both outcomes (its family's otherwise:
also for a query of the wrapping in another family), on some of
:data:`depthlab.doctor.predict.FEATURES`, with a small ridge penalty; the atlas feature of a run is read
from the other runs only (the run itself left out; in a fold, the fold's runs too).

Cross-validation leaves out one width at a time, then one depth at a time: a form must tell runs of a
width (or depth) it never saw. Each form and each lookup (:mod:`depthlab_lab.calibrate.lookups`) is
scored on the same left-out runs: accuracy, log loss and Brier score. The form kept is the one with the
lowest log loss among those whose accuracy is at least every lookup's on both kinds of fold; where none
is, the record says so and advise falls back on the nearest runs.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from depthlab.doctor.atlas import Atlas, MeasuredRun
from depthlab.doctor.limit import LrLimit
from depthlab.doctor.lr_limit import Stack, limit_from
from depthlab.doctor.predict import FEATURES, SCALES, TIE, K, Query, features
from depthlab.doctor.predict import wrapping_model as chosen
from depthlab.doctor.recipe import same_recipe
from depthlab_lab.calibrate.lookups import LOOKUPS

SHAPE = ("ln_steps", "ln_depth", "ln_width", "ln_1_warmup")
FORMS = {
    "limit": ("const", "margin"),
    "limit+shape": ("const", "margin", *SHAPE),
    "limit+shape+atlas": ("const", "margin", *SHAPE, "atlas"),
    "window+shape+atlas": ("const", "margin", "margin_sq", *SHAPE, "atlas"),
    "atlas": ("const", "atlas"),
}
FAMILIES = ("renormalising", "gated", "free")
BY_WRAPPING = " by wrapping"  # a form fitted per wrapping (where it has MIN_WRAP runs), per family else
CANDIDATES = {**{f: (names, "family") for f, names in FORMS.items()},
              **{f + BY_WRAPPING: (names, "wrapping") for f, names in FORMS.items() if "margin" in names}}  # fmt: skip
MIN_WRAP = 40
RIDGE = 1e-2


@dataclass(frozen=True)
class Example:
    run: MeasuredRun
    limit: LrLimit

    @property
    def label(self) -> int:
        return int(self.run.trained)


def examples(atlas: Atlas, record: dict) -> list[Example]:
    """The atlas's probed runs of full-skip standard-parametrization stacks, with their limits."""
    out = []
    for r in atlas.runs:
        if r.update_gain is None or r.param != "sp" or not {"attn", "ffn"} <= set(r.residual.split(",")):
            continue
        share = (
            r.renormalised_share if r.renormalised_share is not None else float(r.family == "renormalising")
        )
        stack = Stack(r.wrap, share, r.update_gain, r.relative_update_per_lr, r.d_model, r.n_layers)
        out.append(Example(r, limit_from(stack, r.lr, r.warmup, record)[0]))
    return out


class Neighbourhood:
    """The atlas's runs as arrays per kind of stack, for the atlas feature of many runs at once (the same
    numbers as :func:`depthlab.doctor.predict.nearest` and :func:`~depthlab.doctor.predict.atlas_share`)."""

    def __init__(self, atlas: Atlas):
        self.kinds: dict[tuple, tuple] = {}
        groups: dict[tuple, list[MeasuredRun]] = {}
        for r in atlas.runs:
            groups.setdefault(_kind(r), []).append(r)
        for kind, runs in groups.items():
            self.kinds[kind] = (
                _coords(runs),
                np.array([r.trained for r in runs], dtype=float),
                [r.config_hash for r in runs],
                np.array([r.seed for r in runs]),
                [r.recipe for r in runs],
                np.array([r.steps for r in runs], dtype=float),
                # when each left the plateau for good: its escape step, its budget for one that trained
                # without a recorded escape, never (inf) for one that did not train
                np.array(
                    [
                        (r.escape_step if r.escape_step is not None else r.steps) if r.trained else math.inf
                        for r in runs
                    ],
                    dtype=float,
                ),  # fmt: skip
            )

    def share(self, run: MeasuredRun, exclude: set[str]) -> float | None:
        """The atlas share of the runs nearest ``run`` (itself and ``exclude`` left out; a run of
        another recipe too, where both are known, as :func:`depthlab.doctor.predict.distance` has it),
        each counted as trained by ``run``'s budget (:func:`depthlab.doctor.predict.trained_by`)."""
        found = self.kinds.get(_kind(run))
        if found is None:
            return None
        coords, trained, hashes, seeds, recipes, steps, left = found
        trained = trained * ((steps <= run.steps) | (left <= run.steps))
        keep = np.array([h not in exclude and h != run.config_hash and same_recipe(run.recipe, r)
                         for h, r in zip(hashes, recipes)])  # fmt: skip
        if not keep.any():
            return None
        d = np.sqrt(((coords[keep] - _coords([run])[0]) ** 2).sum(axis=1))
        # as nearest() orders them: distance to TIE, then seed, then the atlas's order
        order = np.lexsort((np.arange(len(d)), seeds[keep], np.round(d / TIE)))[:K]
        w = 1 / (1 + d[order])
        return float((w @ trained[keep][order] + 0.5) / (w.sum() + 1.0))


def _kind(r: MeasuredRun) -> tuple:
    return (r.wrap, r.norm, r.residual, r.param)


def _coords(runs: list[MeasuredRun]) -> np.ndarray:
    return np.array([[math.log(r.lr) / SCALES["lr"], math.log(r.d_model) / SCALES["d_model"],
                      math.log(r.n_layers) / SCALES["n_layers"], math.log1p(r.warmup) / SCALES["warmup"],
                      math.log(r.steps) / SCALES["steps"]] for r in runs])  # fmt: skip


def matrix(
    rows: list[Example], hood: Neighbourhood, names: tuple[str, ...], left_out: set[str]
) -> np.ndarray:
    """The feature matrix of ``rows``; each run's atlas feature read without the runs of ``left_out``
    (config hashes) and without itself."""
    out = []
    for e in rows:
        x = features(e.limit, Query.of(e.run), hood.share(e.run, left_out))
        out.append([x[n] for n in names])
    return np.array(out, dtype=float)


def logistic(x: np.ndarray, y: np.ndarray, ridge: float = RIDGE) -> np.ndarray:
    """Ridge-penalised logistic regression by Newton's method (the constant not penalised)."""
    w = np.zeros(x.shape[1])
    pen = np.full(x.shape[1], ridge * len(y))
    pen[0] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-np.clip(x @ w, -40, 40)))
        grad = x.T @ (p - y) + pen * w
        hess = (x.T * (p * (1 - p))) @ x + np.diag(pen + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return w


def fit(
    rows: list[Example], hood: Neighbourhood, names: tuple[str, ...], left_out: set[str], by: str = "family"
) -> dict:
    """{"families": {family: model}, "wraps": {wrapping: model}}, each model {"coef": {feature: w},
    "support": {feature: [lo, hi]}, "runs"}: one per family present in ``rows`` and, ``by`` "wrapping",
    one per wrapping fitted on its runs of its most common family, where they number at least
    :data:`MIN_WRAP` and hold both outcomes (a wrapping's model also names that "family": a query of
    the wrapping in another family, post-LN without a norm say, falls back on its family's model)."""
    out = {"families": {}, "wraps": {}}
    for fam in FAMILIES:
        model = _fit_one([e for e in rows if e.limit.family == fam], hood, names, left_out, 10)
        if model:
            out["families"][fam] = model
    if by == "wrapping":
        for wrap in sorted({e.run.wrap for e in rows}):
            fams = Counter(e.limit.family for e in rows if e.run.wrap == wrap)
            fam = max(sorted(fams), key=fams.__getitem__)
            mine = [e for e in rows if e.run.wrap == wrap and e.limit.family == fam]
            model = _fit_one(mine, hood, names, left_out, MIN_WRAP)
            if model:
                out["wraps"][wrap] = {**model, "family": fam}
    return out if out["families"] else {}


def _fit_one(mine: list[Example], hood, names, left_out, least: int) -> dict | None:
    if len(mine) < least or len({e.label for e in mine}) < 2:
        return None
    x = matrix(mine, hood, names, left_out)
    w = logistic(x, np.array([e.label for e in mine], dtype=float))
    support = {n: [float(x[:, i].min()), float(x[:, i].max())] for i, n in enumerate(names) if n != "const"}
    return {"coef": dict(zip(names, map(float, w))), "support": support, "runs": len(mine)}


def predict(
    model: dict, rows: list[Example], hood: Neighbourhood, names: tuple[str, ...], left_out: set[str]
) -> list[float]:
    """P(trains) for each of ``rows`` under a fitted ``model``: its wrapping's fit (where fitted for the
    row's family), else its family's, else the largest family's."""
    families = model["families"]
    fallback = max(families, key=lambda f: families[f]["runs"])
    x = matrix(rows, hood, names, left_out)
    out = []
    for e, xi in zip(rows, x):
        coef = (chosen(model["wraps"], e.run.wrap, e.limit.family) or families.get(e.limit.family)
                or families[fallback])["coef"]  # fmt: skip
        z = sum(coef[n] * v for n, v in zip(names, xi))
        out.append(1 / (1 + math.exp(-max(min(z, 40.0), -40.0))))
    return out


def folds(rows: list[Example], axis: str) -> list[tuple[int, list[Example], list[Example]]]:
    """(value, training rows, left-out rows) leaving out each value of ``axis`` ("d_model" or "n_layers")."""
    values = sorted({getattr(e.run, axis) for e in rows})
    return [(v, [e for e in rows if getattr(e.run, axis) != v], [e for e in rows if getattr(e.run, axis) == v])
            for v in values]  # fmt: skip


def reliability(p: list[float], y: list[int], edges=(0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)) -> list[dict]:
    """Per probability band: the runs in it, their mean predicted probability and the share that trained
    (what a calibrated predictor calls 6% happens about 6% of the time)."""
    out = []
    for lo, hi in zip(edges, edges[1:]):
        inside = [(pi, yi) for pi, yi in zip(p, y) if lo <= pi < hi or (hi == 1.0 and pi == 1.0)]
        if inside:
            out.append({"band": [lo, hi], "runs": len(inside), "predicted": sum(pi for pi, _ in inside) / len(inside),
                        "trained": sum(yi for _, yi in inside) / len(inside)})  # fmt: skip
    return out


def scores(p: list[float], y: list[int]) -> dict:
    """Accuracy, log loss, Brier score and reliability of probabilities ``p`` against labels ``y``."""
    n = len(y)
    eps = 1e-6
    return {
        "reliability": reliability(p, y),
        "runs": n,
        "hits": sum((pi >= 0.5) == bool(yi) for pi, yi in zip(p, y)),
        "accuracy": sum((pi >= 0.5) == bool(yi) for pi, yi in zip(p, y)) / n,
        "log_loss": -sum(
            yi * math.log(max(pi, eps)) + (1 - yi) * math.log(max(1 - pi, eps)) for pi, yi in zip(p, y)
        )
        / n,
        "brier": sum((pi - yi) ** 2 for pi, yi in zip(p, y)) / n,
    }


def cross_validate(rows: list[Example], atlas: Atlas) -> dict:
    """{axis: {candidate: scores}} over the folds leaving out each width, then each depth; candidates
    are the forms and the lookups, scored on the same left-out runs."""
    out = {}
    for axis in ("d_model", "n_layers"):
        preds: dict[str, list[float]] = {name: [] for name in [*CANDIDATES, *LOOKUPS]}
        labels: list[int] = []
        hood = Neighbourhood(atlas)
        for _, train, test in folds(rows, axis):
            left = {e.run.config_hash for e in test}
            fold_atlas = Atlas(tuple(r for r in atlas.runs if r.config_hash not in left))
            labels += [e.label for e in test]
            for name, (names, by) in CANDIDATES.items():
                model = fit(train, hood, names, left, by)
                preds[name] += predict(model, test, hood, names, left) if model else [0.5] * len(test)
            for name, lookup in LOOKUPS.items():
                preds[name] += [
                    float(lookup(list(fold_atlas.runs), Query.of(e.run)) == "trains") for e in test
                ]
        out[axis] = {name: scores(p, labels) for name, p in preds.items()}
    return out


def shape_folds(atlas: Atlas, record: dict, source: str, form: str) -> dict:
    """``form`` (a candidate) on the runs of the study ``source`` (a held-out grid whose runs joined the
    atlas), leaving out one shape (width and depth) at a time, fitted on every other run: how it would have
    called a grid at those shapes had it been fitted without them; each lookup on the same folds (the
    atlas without the shape's runs). Every run of the atlas at the shape is left out, whatever its source:
    a grid that repeats another at another seed must not be called from its twin's runs.
    {"runs", "hits", "by_shape", "lookups": {name: hits}, "differ": {name: runs where the lookup's call is
    not the form's}}."""
    rows = examples(atlas, record)
    mine = [e for e in rows if e.run.source == source]
    names, by = CANDIDATES[form]
    hood, hits, by_shape = Neighbourhood(atlas), 0, {}
    lookups, differ = dict.fromkeys(LOOKUPS, 0), dict.fromkeys(LOOKUPS, 0)
    for shape in sorted({(e.run.d_model, e.run.n_layers) for e in mine}):
        test = [e for e in mine if (e.run.d_model, e.run.n_layers) == shape]
        left = {r.config_hash for r in atlas.runs if (r.d_model, r.n_layers) == shape}
        model = fit([e for e in rows if e.run.config_hash not in left], hood, names, left, by)
        calls = [p >= 0.5 for p in predict(model, test, hood, names, left)]
        right = sum(c == bool(e.label) for c, e in zip(calls, test))
        by_shape[f"{shape[0]} x {shape[1]}"] = [right, len(test)]
        hits += right
        fold = [r for r in atlas.runs if r.config_hash not in left]
        for name, lookup in LOOKUPS.items():
            theirs = [lookup(fold, Query.of(e.run)) == "trains" for e in test]
            lookups[name] += sum(t == bool(e.label) for t, e in zip(theirs, test))
            differ[name] += sum(t != c for t, c in zip(theirs, calls))
    return {"runs": len(mine), "hits": hits, "by_shape": by_shape, "lookups": lookups, "differ": differ}


def choose(cv: dict) -> str | None:
    """The form with the lowest mean log loss among those at least as accurate as every lookup on both
    kinds of fold; None when no form is."""
    ok = [
        f for f in CANDIDATES
        if all(cv[a][f]["accuracy"] >= max(cv[a][lk]["accuracy"] for lk in LOOKUPS) for a in cv)
    ]  # fmt: skip
    return min(ok, key=lambda f: sum(cv[a][f]["log_loss"] for a in cv)) if ok else None


def fitted_predictor(atlas: Atlas, record: dict) -> dict:
    """The record's "predictor" section: the chosen form fitted on every example, with the
    cross-validation that chose it."""
    rows = examples(atlas, record)
    cv = cross_validate(rows, atlas)
    form = choose(cv)
    names, by = CANDIDATES[form or "atlas"]
    fitted = fit(rows, Neighbourhood(atlas), names, set(), by)
    families = fitted["families"]
    return {
        "form": form or "atlas",
        "chosen": form is not None,
        "by": by,
        "features": list(names),
        "families": families,
        "wraps": fitted["wraps"],
        "fallback": max(families, key=lambda f: families[f]["runs"]),
        "examples": len(rows),
        "cv": cv,
    }


if __name__ == "__main__":
    from depthlab.doctor.record import load_record

    section = fitted_predictor(Atlas.load(), load_record())
    print(json.dumps({k: v for k, v in section.items() if k not in ("families", "wraps")}, indent=1))
    assert set(section["features"]) <= set(FEATURES)
