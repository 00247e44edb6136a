"""The probability that a run trains, from the probe's learning-rate limit and the nearest measured runs.

Two kinds of evidence, each alone weaker than together:

- the **limit** (:mod:`depthlab.doctor.lr_limit`): how far the run's step (s, or rho) lies above or
  below the limit fitted for its family of stacks and its warmup, as ``margin`` = ln(value / limit);
- the **atlas** (:mod:`depthlab.doctor.atlas`): the measured runs of the same stack and recipe nearest the run
  (:func:`nearest`, in :data:`SCALES` units: a factor 2 in lr counts as much as a factor 4 in width
  or depth), and the share of them that trained by the run's budget (:func:`trained_by`: a run of 150
  steps that left the unigram plateau at step 110 is no evidence that a 40-step run trains).

The record's "predictor" section (fitted by the lab's ``depthlab_lab.calibrate.predictor_fit``, its
form chosen by cross-validation that leaves out one width and one depth at a time) holds, per family
and, where it was fitted so, per wrapping, the logistic regression's features and coefficients (a
wrapping without its own fit, or asked of another family than the one its fit measured, uses its
family's); :func:`p_trains` applies it. A run whose nearest measured run is farther than ``FAR`` and
whose margin or shape lies outside what the fit saw gets no confident call (:attr:`Prediction.confident` False, with the reason).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from depthlab.doctor.atlas import Atlas, MeasuredRun
from depthlab.doctor.limit import LrLimit
from depthlab.doctor.recipe import recipe, same_recipe

# The nearest-run metric: ln-distance per axis divided by these (a factor 2 in lr, 4 in width, depth or
# steps, 16 in 1 + warmup each count 1). Registered with the held-out grid at depth before its runs.
SCALES = {"lr": math.log(2), "d_model": math.log(4), "n_layers": math.log(4), "warmup": math.log(16),
          "steps": math.log(4)}  # fmt: skip
K = 5  # the nearest runs whose share trained is the atlas's evidence
FAR = 2.0  # farther than this (in SCALES units) a run is no close evidence
TIE = 1e-9  # distances closer than this are equal (two ways of summing the same logs differ in the last bits)
FEATURES = ("const", "margin", "margin_sq", "ln_steps", "ln_depth", "ln_width", "ln_1_warmup", "atlas")


@dataclass(frozen=True)
class Query:
    """One run, as asked: its stack, schedule and budget."""

    wrap: str
    n_layers: int
    d_model: int
    lr: float
    warmup: int
    steps: int
    residual: str = "attn,cross,ffn"
    norm: str = "layernorm"
    param: str = "sp"
    recipe: str | None = ""  # depthlab.doctor.recipe; None: not known, no bar

    @classmethod
    def for_run(cls, model, train, lr: float | None = None) -> Query:
        """The query a run of ``model`` (a ModelConfig) under ``train`` (a TrainConfig) asks; ``lr``
        in place of the run's own."""
        return cls(model.wrap, model.n_layers, model.d_model, train.lr if lr is None else lr, train.warmup,
                   train.steps, ",".join(model.residual), model.norm, model.param, recipe(model, train))  # fmt: skip

    @classmethod
    def of(cls, run: MeasuredRun) -> Query:
        """The query a measured run answers."""
        return cls(run.wrap, run.n_layers, run.d_model, run.lr, run.warmup, run.steps, run.residual,
                   run.norm, run.param, run.recipe)  # fmt: skip


def distance(q: Query, r: MeasuredRun) -> float:
    """How far run ``r`` lies from query ``q`` (:data:`SCALES` units); inf for another kind of stack
    (wrapping, norm, skips or parametrization) or another recipe (where both are known)."""
    if (r.wrap, r.norm, r.residual, r.param) != (q.wrap, q.norm, q.residual, q.param):
        return math.inf
    if not same_recipe(q.recipe, r.recipe):
        return math.inf
    d = [
        math.log(q.lr / r.lr) / SCALES["lr"],
        math.log(q.d_model / r.d_model) / SCALES["d_model"],
        math.log(q.n_layers / r.n_layers) / SCALES["n_layers"],
        math.log((1 + q.warmup) / (1 + r.warmup)) / SCALES["warmup"],
        math.log(q.steps / r.steps) / SCALES["steps"],
    ]
    return math.sqrt(sum(x * x for x in d))


def nearest(
    atlas: Atlas, q: Query, k: int = K, exclude: set[str] = frozenset()
) -> list[tuple[float, MeasuredRun]]:
    """The ``k`` measured runs of the same kind of stack and recipe nearest ``q``, nearest first, as (distance,
    run); ``exclude``: config hashes left out (a run is no evidence about itself). Runs equally far (to
    ``TIE`` in distance: the last bits of a sum of logs) go by seed, then in the atlas's order."""
    found = [(distance(q, r), r) for r in atlas.runs if r.config_hash not in exclude]
    found = [(d, r) for d, r in found if math.isfinite(d)]
    return sorted(found, key=lambda x: (round(x[0] / TIE), x[1].seed))[:k]


def trained_by(r: MeasuredRun, steps: int | None) -> bool:
    """Whether measured run ``r`` had trained by step ``steps``: a run of a longer budget only where it
    left the unigram plateau by then (its escape step; one that trained without a recorded escape left it
    at its budget), since its loss stayed below the band from that step on; a run of a budget no longer
    than ``steps`` (or ``steps`` None) as it ended, what it would have done with more steps not known.
    The longer run's first ``steps`` stand for the shorter run: exact under a constant rate after
    warmup (depthlab's default), an approximation for a schedule that decays over the budget (cosine: the
    shorter run decays sooner; such runs are evidence only for runs of the same recipe)."""
    if steps is None or r.steps <= steps or not r.trained:
        return r.trained
    return r.escape_step is not None and r.escape_step <= steps


def atlas_share(neighbours: list[tuple[float, MeasuredRun]], steps: int | None = None) -> float | None:
    """The share of the neighbours that trained (by step ``steps``: :func:`trained_by`), each weighted
    1 / (1 + distance), shrunk toward one half by one pseudo-run of each outcome (None without
    neighbours)."""
    if not neighbours:
        return None
    w = [1 / (1 + d) for d, _ in neighbours]
    trained = sum(wi for wi, (_, r) in zip(w, neighbours) if trained_by(r, steps))
    return (trained + 0.5) / (sum(w) + 1.0)


@dataclass(frozen=True)
class NearestEscape:
    """When the nearest measured runs left the unigram plateau: the escape steps of those that did
    (ascending; a run that trained without a recorded escape, its last training loss still in the band,
    at its budget) and how many never did within their budgets (stalled, undertrained or diverged)."""

    steps: tuple[int, ...]
    never: int

    @property
    def runs(self) -> int:
        return len(self.steps) + self.never

    @property
    def median(self) -> int | None:
        """The middle run's escape step (the lower middle of an even count), a run that never left
        counted as leaving after every run that did; None where that middle run never left."""
        if not self.runs:
            return None
        i = (self.runs - 1) // 2
        return self.steps[i] if i < len(self.steps) else None

    def to_dict(self) -> dict:
        return {"steps": list(self.steps), "never": self.never, "median": self.median}

    def text(self) -> str:
        """'the 5 nearest measured runs left the unigram plateau around step 50 (4 of 5 left it, at steps
        40-80)', or '3 of the 5 nearest measured runs never left the unigram plateau within their budgets
        (the others at steps 50-60)'."""
        at = ""
        if self.steps:
            lo, hi = self.steps[0], self.steps[-1]
            at = f"step {lo:,}" if lo == hi else f"steps {lo:,}-{hi:,}"
        if self.median is not None:
            left = (
                f"all {self.runs} left it" if not self.never else f"{len(self.steps)} of {self.runs} left it"
            )
            return (f"the {self.runs} nearest measured runs left the unigram plateau around step "
                    f"{self.median:,} ({left}, at {at})")  # fmt: skip
        who = "none" if not self.steps else f"{self.never}"
        others = f" (the others at {at})" if self.steps else ""
        return (f"{who} of the {self.runs} nearest measured runs {'left' if who == 'none' else 'never left'} "
                f"the unigram plateau within their budgets{others}")  # fmt: skip


def nearest_escape(neighbours) -> NearestEscape:
    """:class:`NearestEscape` of ``neighbours`` ((distance, run) pairs, as :func:`nearest` returns)."""
    left = [r.escape_step if r.escape_step is not None else r.steps for _, r in neighbours
            if r.escape_step is not None or r.trained]  # fmt: skip
    return NearestEscape(tuple(sorted(left)), len(neighbours) - len(left))


def features(limit: LrLimit | None, q: Query, share: float | None) -> dict[str, float]:
    """The regressors of :data:`FEATURES` (the atlas's as ln(share / (1 - share)), 0 without neighbours)."""
    margin = 0.0
    if limit is not None and math.isfinite(limit.warn_above) and limit.warn_above > 0:
        margin = math.log(max(limit.value(q.lr), 1e-12) / limit.warn_above)
    return {
        "const": 1.0,
        "margin": margin,
        "margin_sq": margin * margin,  # a window, not a ceiling: too small an lr stalls within a budget too
        "ln_steps": math.log(q.steps),
        "ln_depth": math.log(q.n_layers),
        "ln_width": math.log(q.d_model),
        "ln_1_warmup": math.log1p(q.warmup),
        "atlas": 0.0 if share is None else math.log(share / (1 - share)),
    }


@dataclass(frozen=True)
class Prediction:
    """P(the run trains), the evidence it rests on, and whether it is a confident call."""

    p_trains: float
    family: str
    neighbours: tuple[tuple[float, MeasuredRun], ...]
    confident: bool
    why_not: str = ""  # why the call is not confident ("" when it is)
    budget: int | None = None  # the steps it was made for: a longer measured run counts as trained by then

    @property
    def later(self) -> int:
        """How many of the nearest runs trained only after the budget (their budgets were longer)."""
        return sum(r.trained and not trained_by(r, self.budget) for _, r in self.neighbours)

    @property
    def call(self) -> str:
        """ "trains" or "fails": the side of one half the probability is on."""
        return "trains" if self.p_trains >= 0.5 else "fails"

    @property
    def nearest_call(self) -> str:
        """The call of the nearest runs alone (the lookup advise is scored against, as registered): "trains"
        where their weighted share that trained at their own budgets (:func:`atlas_share`) is at least one
        half, or there is none."""
        share = atlas_share(list(self.neighbours))
        return "trains" if share is None or share >= 0.5 else "fails"

    @property
    def close(self) -> bool:
        """Whether the nearest measured run lies within ``FAR``: close evidence about this run."""
        return bool(self.neighbours) and self.neighbours[0][0] <= FAR

    @property
    def escape(self) -> NearestEscape:
        """When the nearest measured runs left the unigram plateau (:func:`nearest_escape`)."""
        return nearest_escape(self.neighbours)

    @property
    def said(self) -> str:
        """The call in words, a close call said as one (advise's headline, the probe's expected line)."""
        return call_words(self.p_trains)


CLOSE = (0.2, 0.8)  # P(trains) from the first up to the second is said as a close call


def call_words(p: float) -> str:
    """ "TRAINS", "probably trains, a close call", "probably fails, a close call" or "FAILS"."""
    if p >= CLOSE[1]:
        return "TRAINS"
    if p >= 0.5:
        return "probably trains, a close call"
    return "probably fails, a close call" if p >= CLOSE[0] else "FAILS"


def wrapping_model(wraps: dict, wrap: str, family: str | None) -> dict | None:
    """The model fitted for ``wrap`` where it was fitted on runs of ``family`` (None otherwise: post-LN
    without a norm is not the post-LN the wrapping's runs measured, and takes its family's model).
    ``family`` None (the probe gave no limit, so no family to tell) and a model that names no family (a
    record fitted before models named theirs) take the wrapping's model."""
    model = wraps.get(wrap)
    if model is None or family is None:
        return model
    return model if model.get("family", family) == family else None


def p_trains(
    fit: dict, limit: LrLimit | None, q: Query, atlas: Atlas, exclude: set[str] = frozenset()
) -> Prediction:
    """The prediction for ``q`` under the record's fitted predictor ``fit`` (its "predictor" section)."""
    family = limit.family if limit is not None else "free"
    near = nearest(atlas, q, exclude=exclude)
    x = features(limit, q, atlas_share(near, q.steps))
    model = (
        wrapping_model(fit.get("wraps", {}), q.wrap, limit.family if limit is not None else None)
        or fit["families"].get(family)
        or fit["families"][fit["fallback"]]
    )
    z = sum(model["coef"].get(name, 0.0) * x[name] for name in FEATURES)
    p = 1 / (1 + math.exp(-max(min(z, 40.0), -40.0)))
    why = _why_not(model, x, near, q.recipe)
    return Prediction(p, family, tuple(near), confident=not why, why_not=why, budget=q.steps)


def _why_not(model: dict, x: dict[str, float], near: list, recipe: str | None = "") -> str:
    """Why a prediction is not confident: no measured run within ``FAR`` and a feature outside the range
    the fit saw ("" when either holds); or, for a run of a recipe (:mod:`depthlab.doctor.recipe`), no
    measured run of it at all (the fit never saw a call without the atlas's evidence)."""
    if near and near[0][0] <= FAR:
        return ""
    if not near and recipe:
        return (
            f"no measured run of this stack sets what this run sets ({recipe}); the call rests on the limit"
        )
    out = [name for name, (lo, hi) in model.get("support", {}).items() if not lo <= x[name] <= hi]
    if not out:
        return ""
    where = "no measured run of this stack" if not near else f"nearest measured run {near[0][0]:.1f} away"
    said = dict.fromkeys(SAID.get(name, name) for name in out)  # margin and margin_sq say one thing
    return f"{where}; its {', '.join(said)} outside what the predictor was fitted on"


# The regressors as the screen says them (why a call is not confident).
SAID = {"margin": "lr against its limit", "margin_sq": "lr against its limit", "ln_steps": "steps",
        "ln_depth": "depth", "ln_width": "width", "ln_1_warmup": "warmup", "atlas": "nearest runs' share"}  # fmt: skip
