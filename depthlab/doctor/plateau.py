"""The doctor's plateau verdict: whether and roughly when a run leaves the unigram plateau, and what its budget would call it.

A stack that renormalises its stream can sit on the unigram plateau (the loss of a model that knows only
which tokens are common) for hundreds of steps and then train: at a short budget such a run is called
stalled, though it is only late. The calibration record's "escape" section
(:mod:`depthlab_lab.calibrate.escape_fit`, refitted by ``depthlab calibrate``) holds, per family of stacks, a
censored log-linear fit of the escape step on the learning rate, width, depth, warmup and the probe's
step size s (how far one full Adam step moves the output). The verdict
(code ``plateau``) gives its median and its 80% interval and, given the run's budget (``probe --steps``;
studies pass theirs), the probability of leaving the plateau within it: a **warning** when that is
below ``SAFE_BUDGET`` = 0.9 ("at a budget of 200 steps this run would likely be called stalled"), else
**ok**; a run not expected to leave the plateau at all is a warning whatever its budget. It is never an
error and predicts nothing for the doctor's score: a configuration outside the fit's support (the lrs,
widths, depths and warmups it was fitted on) is marked as an extrapolation.

Given advise's calibrated call (:class:`~depthlab.doctor.predict.Prediction`), the verdict judges the
budget by the call's P(trains): **ok** exactly where the call's words are TRAINS (P >= 0.8), a warning
otherwise, whatever the escape fit says. Where the call's nearest measured run lies within ``FAR``, the
verdict leads with those runs' escape steps (:class:`~depthlab.doctor.predict.NearestEscape`: their
median, a run that never left counted last); the fit's step and probability move to the detail. On the
held-out runs at depth the nearest runs' median was within a factor 2 of the measured step more often
than the fit's (docs/advise.md).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from depthlab.doctor.atlas import renormalises
from depthlab.doctor.predict import CLOSE, Prediction, call_words
from depthlab.doctor.record import outside
from depthlab.doctor.verdict import Verdict

if TYPE_CHECKING:  # the doctor reads a probe's result; the probe package imports the doctor
    from depthlab.probe.result import ProbeResult

FEATURES = ("const", "ln_lr", "ln_lr_sq", "ln_d_model", "ln_n_layers", "ln_1_warmup", "ln_step", "ln_step_sq")
Z_INTERVAL = 1.2816  # the normal's 90% point: an 80% interval for one run's escape step
SAFE_BUDGET = 0.9
NEVER = 100  # a median beyond this many times the longest budget fitted: not expected to escape at all
FAMILY_TEXT = {
    "renormalising": "stacks whose blocks renormalise the stream",
    "pre-ln-like": "stacks that never renormalise the stream",
}


def family(wrap: str | None, renormalised_share: float | None, n_layers: int) -> str:
    """ "renormalising" (some blocks renormalise the stream: post-LN, DeepNorm, Admin, Mix-LN) or
    "pre-ln-like" (the rest), from the probe's renormalised share, else from the wrapping's layer plan
    (:func:`depthlab.doctor.atlas.renormalises`: Mix-LN renormalises nothing at 2 or 3 layers)."""
    if renormalised_share is not None:
        return "renormalising" if renormalised_share > 0 else "pre-ln-like"
    return "renormalising" if wrap is not None and renormalises(wrap, n_layers) else "pre-ln-like"


def features(values: dict) -> list[float]:
    """The fit's regressors (:data:`FEATURES`) of {"lr", "d_model", "n_layers", "warmup", "step_size"}
    (the probe's s = update gain x lr: how far one full Adam step moves the output, which tells a
    DeepNorm stack from a post-LN one of the same shape)."""
    ln_lr, ln_s = math.log(values["lr"]), math.log(values["step_size"])
    return [
        1.0,
        ln_lr,
        ln_lr**2,
        math.log(values["d_model"]),
        math.log(values["n_layers"]),
        math.log(1 + values["warmup"]),
        ln_s,
        ln_s**2,
    ]


def predict(fit: dict, values: dict, z: float = Z_INTERVAL) -> dict:
    """{"median", "low", "high" (steps), "mu", "sigma"} of one family's fit at ``values``."""
    mu = sum(fit["coef"][name] * v for name, v in zip(FEATURES, features(values)))
    s = fit["sigma"]
    return {
        "mu": mu,
        "sigma": s,
        "median": math.exp(mu),
        "low": math.exp(mu - z * s),
        "high": math.exp(mu + z * s),
    }


def p_within(pred: dict, budget: int) -> float:
    """The probability that the escape step is at most ``budget`` under the fit's normal error."""
    return 0.5 * math.erfc((pred["mu"] - math.log(budget)) / (pred["sigma"] * math.sqrt(2)))


def _steps(x: float) -> str:
    return f"{x:,.0f}" if x < 1e6 else f"{x:.1e}"


def _fit_text(fit: dict, fam: str) -> str:
    s, sup = fit["in_sample"], fit["support"]
    lo_b, hi_b = sup["steps"]
    budgets = f"{lo_b:,}" if lo_b == hi_b else f"{lo_b:,}-{hi_b:,}"
    told = f"{s['agreed']} of {s['runs']} runs' escape within their budget told right"
    factor = (
        f", escaped runs' step within a factor {s['median_factor']:.2g} (median)"
        if s.get("median_factor")
        else ""
    )
    return (
        f"fitted on {fit['runs']} runs of {FAMILY_TEXT[fam]} ({fit['censored']} of them still on the plateau "
        f"at their budget of {budgets} steps; in-sample: {told}{factor})"
    )


def plateau_verdict(
    r: ProbeResult,
    record: dict,
    width: int | None,
    prediction: Prediction | None = None,
    budget: int | None = None,
) -> Verdict | None:
    """The ``plateau`` verdict of a probe given a learning rate (None without a fit for its family).

    ``prediction``: the run's calibrated call at its budget (:func:`depthlab.doctor.predict.p_trains`: the
    probe's limit and the nearest measured runs; ``depthlab advise``'s headline), where one was made.
    The budget is then judged by its P(trains), not by the escape fit's own probability: the two answer
    the same question, and on runs neither was fitted on the calibrated call is the better one
    (docs/advise.md). Where the nearest measured runs are close (within ``FAR``), the step the verdict
    leads with is theirs (:class:`~depthlab.doctor.predict.NearestEscape`): on the held-out runs at depth
    it is nearer the measured step than the escape fit's, which stays in the detail. ``budget``: the steps
    the call was made for, where the probe was given none (``--steps`` unset: the default budget)."""
    pr = r.config["probe"]
    fam = family(
        (r.config.get("model") or {}).get("wrap"), r.config["stack"].get("renormalised_share"), r.n_layers
    )
    fit = ((record.get("escape") or {}).get("families") or {}).get(fam)
    step = pr.get("step_size")
    if fit is None or width is None or pr.get("lr") is None or not step or not math.isfinite(step):
        return None
    values = {"lr": pr["lr"], "d_model": width, "n_layers": r.n_layers, "warmup": pr.get("warmup") or 0}
    values["step_size"] = step
    pred = predict(fit, values, (record.get("escape") or {}).get("z_interval", Z_INTERVAL))
    budget = pr.get("steps") or budget
    never = pred["median"] > NEVER * fit["support"]["steps"][1]
    detail = []
    if never:  # without a call, a verdict never says ok to a run it expects to stay stalled
        fitted = f"expects no escape from the unigram plateau at lr {pr['lr']:g}"
        detail.append(
            f"its median escape is {_steps(pred['median'])} steps, beyond {NEVER}x the longest budget fitted"
        )
    else:
        fitted = f"puts its escape around step {_steps(pred['median'])} (80% interval {_steps(pred['low'])}-{_steps(pred['high'])})"
    near = prediction.escape if prediction is not None and prediction.close else None
    if near is not None:  # the nearest runs' steps lead: at depth they were nearer the measured step
        text = near.text()
        level = "warning" if near.median is None or (budget and near.median > budget) else "ok"
        detail.insert(0, f"the escape fit alone {fitted}")
    else:
        text = f"the escape fit {fitted}"
        level = "warning" if never else "ok"
    if budget and prediction is not None:  # the budget judged by the calibrated call: its words, its level
        p = prediction.p_trains
        level = "ok" if p >= CLOSE[1] else "warning"  # ok exactly where the call says TRAINS
        text += f"; at a {budget:,}-step budget P(trains) = {p:.2f}: {call_words(p).lower()}"
        alone = "it" if near is not None else "the escape fit alone"  # the fit's step is said just before
        detail.append(f"{alone} gives {p_within(pred, budget):.2f} of leaving the plateau by then; "
                      "P(trains) also weighs the limit and the nearest measured runs")  # fmt: skip
    elif budget:
        p = p_within(pred, budget)
        if p < SAFE_BUDGET:
            level = "warning"
            call = "would likely be called stalled" if p < 0.5 else "may be called stalled"
            text += f"; a {budget:,}-step budget {call} (probability {p:.2f} of leaving it by then)"
        else:
            text += f"; a {budget:,}-step budget leaves it room (probability {p:.2f} of leaving it by then)"
    detail.append(_fit_text(fit, fam))
    detail = "; ".join(detail)
    out = outside({"range": fit["support"]}, values, "fitted")
    if out:
        detail += f". Extrapolation: {'; '.join(out)}, so the step is a rough guess"
    return Verdict(level, "plateau", text, detail=detail)
