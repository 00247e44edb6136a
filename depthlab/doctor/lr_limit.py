"""The doctor's learning-rate verdicts: a ceiling for every wrapping, with its evidence and its calibrated range.

Given the learning rate and warmup a model will train with, the probe measures the update gain G (how
far Adam's first update moves the output per unit lr; s = G x lr is the step size in output norms) and
the relative update rho (:mod:`depthlab.probe.update_size`: Adam's first full step against each block
matrix's spectral norm, a quantity comparable across width). Three families of stacks:

- blocks renormalise the stream (post-LN, DeepNorm, Admin, Mix-LN's bottom layers): **error** when
  s reaches the high end of the band of equally good limits for the run's warmup length (the smallest
  tuning step above the limit, interpolated between warmups; no error where no run above the limit
  failed), a **warning** between the limit and that end (a record whose
  "step_limit" lacks ``"error_from": "band_high"``, as those fitted before this form was registered: an
  error from the limit itself), :func:`step_limit`: the calibration record's "step_limit"
  (:mod:`depthlab_lab.calibrate.step_limit_fit`: per warmup length among the tuning runs, the limit that
  classified them best, interpolated in ln(1 + warmup) between them; the step a stack can take at the
  peak lr grows with the warmup it had to adapt). Without that section, ``STEP_LIMIT`` = 1.3 without
  warmup and ``STEP_LIMIT_WARMUP`` = 4.7 with one (any limit in ``STEP_BAND`` classified the first tuning
  grid's runs as well). The ceiling printed is lr <= band low / G (expected to train) and the failures
  above band high / G. A warmup beyond the longest fitted is an extrapolation. Where the section holds
  a limit fitted on this wrapping's runs alone ("by_wrap", :func:`for_wrap`), that limit judges it, and
  its range is where that wrapping's runs ran (it replaces the calibrated range rather than widening it).
  Such a limit may be on the width-scaled step s x (d / ``WIDTH_REF``)^-a ("width_exponent" a, fitted on
  that wrapping's runs across width where that form tells a width left out of the fit better than the
  limit on s itself: DeepNorm tolerates a smaller s the wider it is), and s is then
  scaled the same way before it is compared (:func:`width_scale`); the ceiling printed is in lr.
- zero-gated branches (ReZero, ``GATED``): the first step sets every gate to +-lr whatever its size, so
  rho decides. Without a fitted limit: on the first tuning grid all 6 ReZero runs at rho = 0.28 (lr
  0.01, width 32) trained and the 4 of 6 and 16 layers at rho = 1.4 (lr 0.05) diverged (the 2-layer
  ones trained): **error** above ``GATED_LIMIT`` = 0.63 (the geometric midpoint) from ``GATED_DEPTH`` =
  6 layers, a warning below.
- the rest (pre-LN, sandwich, reorder, LNS, LayerScale): without a fitted limit, they trained on the
  first tuning grid up to rho = ``UPDATE_TRAINED`` = 1.42 (lr 0.05 at width 32; 2 of the 12 16-layer
  runs there, pre-LN and reorder, stalled: 2 of its 10 runs of 16 layers at that lr, which no threshold
  on rho separates); the ceiling is the lr at which rho reaches it, and a larger lr is a **warning**: no
  calibration run went there.
- Where the record holds the "update_limit" section (:mod:`depthlab_lab.calibrate.update_limit_fit`: per
  family "free" and "gated", the limit on rho that classified the tuning runs best, the gated one on
  runs of every depth where it says "all_depths", else on runs of ``GATED_DEPTH`` layers or more), it
  replaces those constants (:func:`update_limit`): an
  **error** from the band's high end (the smallest measured rho above the limit: runs from there failed), a warning between
  the limit and it, ok below; the ceiling printed is lr <= band low / (rho / lr) expected to train and
  the failures from band high / (rho / lr). Under a gated fit without "all_depths", a zero-gated
  stack under ``GATED_DEPTH`` layers gets a warning at most. The fit's support widens the calibrated range, as the step limit's does.

Every verdict says where it was calibrated and, where the record holds it, how often the calibration
grid agreed (:mod:`depthlab.doctor.record`). A configuration outside the calibrated range (width,
depth, lr, warmup) is an extrapolation: its error becomes a warning that says so.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from depthlab.doctor.record import DIGITS, evidence, load_record, outside, range_text
from depthlab.doctor.verdict import Verdict

if TYPE_CHECKING:  # the doctor reads a probe's result; the probe package imports the doctor
    from depthlab.probe.result import ProbeResult

STEP_LIMIT = 1.3
STEP_LIMIT_WARMUP = 4.7
STEP_BAND = {False: (1.05, 1.68), True: (4.35, 5.15)}  # by "has a warmup": equally good limits
UPDATE_TRAINED = 1.42
GATED_TRAINED = 0.28
GATED_LIMIT = 0.63
GATED_DEPTH = 6
GATED = ("rezero",)
WIDTH_REF = 128  # a wrapping's width-scaled step s x (d / WIDTH_REF)^-a equals s at this width


def learning_rate(r: ProbeResult, record: dict | None = None) -> Verdict | None:
    """The learning-rate verdict with its ceiling, evidence and range; None when the gain was not measured."""
    pr = r.config["probe"]
    gain, step = pr.get("update_gain"), pr.get("step_size")
    if gain is None or step is None or not math.isfinite(gain) or gain <= 0:
        return None
    record = load_record() if record is None else record
    lr, warmup = pr["lr"], pr.get("warmup") or 0
    rho = pr.get("relative_update")
    share = r.config["stack"].get("renormalised_share") or 0.0
    wrap = (r.config.get("model") or {}).get("wrap")
    values = {"d_model": width(r), "n_layers": r.n_layers, "lr": lr, "warmup": warmup}
    if share > 0:
        record, who = for_wrap(record, wrap)
        scale = width_scale(record, values["d_model"])
        level, text, key = _renormalised(gain, step, lr, warmup, share, record, who, scale)
        support = (record.get("step_limit") or {}).get("support")
    elif wrap in GATED and rho:
        fit = update_limit("gated", record)
        level, text, key = _gated_fitted(rho, lr, r.n_layers, fit) if fit else _gated(rho, lr, r.n_layers)
        support = (fit or {}).get("support")
    else:
        fit = update_limit("free", record) if rho else None
        level, text, key = _free_fitted(gain, step, rho, lr, fit) if fit else _free(gain, step, rho, lr)
        support = (fit or {}).get("support")
    if support and record.get("own_range"):  # a wrapping's own limit: calibrated where its runs ran
        record = dict(record, range=record["range"] | support)
    elif support:  # the limit was fitted over these runs too: its support widens the range
        record = dict(record, range=_union(record["range"], support))
    out = outside(record, values)
    if share > 0 and values["d_model"] is None and (record.get("step_limit") or {}).get("width_exponent"):
        out.append("the stream's width is unknown, and this wrapping's limit is on width-scaled steps")
    return _with_range(level, text, key, record, out)


def for_wrap(record: dict, wrap: str | None) -> tuple[dict, str | None]:
    """(the record to judge a renormalising stack of ``wrap`` with, who its limit is for): where the
    record's "step_limit" holds a limit fitted on this wrapping's tuning runs alone ("by_wrap"), a view
    of the record with that section as its "step_limit" and "own_range" set (the verdict is calibrated
    where that wrapping's runs ran, not where any stack's did), and the wrapping's name; else the record
    and None (the limit pooled over every renormalising stack)."""
    section = ((record.get("step_limit") or {}).get("by_wrap") or {}).get(wrap or "")
    if not section:
        return record, None
    where = f"the {wrap} runs of the tuning grids"
    return dict(record, step_limit=section, own_range=True, where=where), wrap


def width_scale(record: dict, d_model: int | None) -> float:
    """(d / width_ref)^-a, the factor that puts s in the width-scaled units of a wrapping's own limit
    (:mod:`depthlab_lab.calibrate.step_limit_fit`: "width_exponent" a); 1 for a limit on s itself or an unknown width."""
    a = (record.get("step_limit") or {}).get("width_exponent") or 0.0
    if not a or not d_model:
        return 1.0
    return (d_model / record["step_limit"].get("width_ref", WIDTH_REF)) ** -a


def update_limit(family: str, record: dict) -> dict | None:
    """The record's fitted limit on rho for the "free" or "gated" family
    (:mod:`depthlab_lab.calibrate.update_limit_fit`: "limit", "band", "runs", "errors", "above", "support");
    None where the record holds none, and the constants decide."""
    return ((record.get("update_limit") or {}).get("families") or {}).get(family)


def _union(a: dict, b: dict) -> dict:
    """Per key, the smallest interval holding both ranges' intervals (a key of one only is kept)."""
    out = dict(a)
    for k, (lo, hi) in b.items():
        out[k] = [min(lo, a[k][0]), max(hi, a[k][1])] if k in a else [lo, hi]
    return out


def step_limit(warmup: int, record: dict) -> tuple[float, tuple[float, float]]:
    """(limit, (band low, band high)) on s for a run with ``warmup`` steps: the record's fitted limits
    interpolated linearly in ln against ln(1 + warmup), the longest fitted warmup's beyond it, the
    shortest's below it; ``STEP_LIMIT`` / ``STEP_LIMIT_WARMUP`` without a fitted "step_limit"."""
    points = (record.get("step_limit") or {}).get("warmups")
    if not points:
        return (STEP_LIMIT_WARMUP if warmup else STEP_LIMIT), STEP_BAND[bool(warmup)]

    open_high = math.inf if from_band(record) else None  # the band form: no failed run above, no error

    def triple(p):
        lo, hi = p["band"]
        return [math.log(v) for v in (p["limit"], lo or p["limit"], hi or open_high or p["limit"])]

    x = math.log(1 + warmup)
    xs = [math.log(1 + p["warmup"]) for p in points]
    i = next((j for j, xj in enumerate(xs) if xj >= x), len(xs) - 1)
    if x <= xs[0] or x >= xs[-1] or xs[i] == x:
        ln = triple(points[0] if x <= xs[0] else points[i])
    else:
        f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
        ln = [a + f * (b - a) for a, b in zip(triple(points[i - 1]), triple(points[i]))]
    limit, lo, hi = (math.exp(v) for v in ln)
    return limit, (lo, hi)


def from_band(record: dict) -> bool:
    """Whether the record's step-size rule is in the band form (an error from the band's high end, a
    warning between the limit and it); a record fitted before that form: an error above the limit."""
    return (record.get("step_limit") or {}).get("error_from") == "band_high"


def reaches(value: float, high: float | None) -> bool:
    """Whether a measured value reaches a band's high end as the record stores it: rounded to the same
    ``DIGITS`` decimals, so that the tuning run the end was taken from reaches it."""
    return high is not None and math.isfinite(high) and round(value, DIGITS) >= round(high, DIGITS)


def width(r: ProbeResult) -> int | None:
    """The stream's width: the last dimension of the probed stream (None when it has no such axis)."""
    shape = r.config["probe"].get("batch_shape") or []
    return int(shape[-1]) if len(shape) >= 2 else None


def _with_range(level: str, text: str, key: str, record: dict, out: list[str]) -> Verdict:
    """The verdict with its evidence and range; an error outside the range becomes a warning."""
    said = evidence(record, key) or evidence(
        record, "prediction:" + ("fails" if level == "error" else "trains")
    )
    text += f". Calibrated at {range_text(record)}" + (f"; {said}" if said else "")
    if out:
        if level == "error":
            level = "warning"
        text += f". Extrapolation: {'; '.join(out)}, so this is not a confident verdict"
    return Verdict(level, "learning-rate" if key.startswith("learning-rate") else "update-size", text)


def _renormalised(gain, step, lr, warmup, share, record, who=None, scale=1.0):
    """Post-LN-style stacks: the step-size limit for this warmup length (``who``'s own limit where the
    record holds one for that wrapping, else the pooled one) and the ceiling it implies. ``scale``
    (:func:`width_scale`) puts s in the units of a limit fitted on width-scaled steps."""
    limit, (lo, hi) = step_limit(warmup, record)
    with_w = f"with a {warmup}-step warmup" if warmup else "without warmup"
    such = f"{who} stacks (the limit fitted on that wrapping's tuning runs alone)" if who else "such stacks"
    scaled = ""
    if scale != 1.0:
        sec = record["step_limit"]
        scaled = (
            f" ({step * scale:.3g} width-scaled: {who}'s limit is on s x (d / {sec.get('width_ref', WIDTH_REF)})"
            f"^{-sec['width_exponent']:g}, the width exponent that classified its tuning runs best)"
        )
    gain, step = gain * scale, step * scale  # compared, and the ceiling taken, in the limit's units
    s = "s" if scale == 1.0 else "the width-scaled s"
    text = (
        f"update gain {gain / scale:.3g}: one Adam step at lr {lr:g} reaches s = {step / scale:.3g} output "
        f"norms{scaled}; lr <= {lo / gain:.2g} expected to train {with_w}; "
        + (
            f"above {hi / gain:.2g} {such} (blocks that renormalise the stream, {share:.0%} of them here) "
            "stalled or diverged on the calibration grid"
            if math.isfinite(hi)
            else "no such stack above the limit failed on the calibration grid"
        )
    )
    advice = (
        "A smaller learning rate" + (", a warmup" if not warmup else "") + " or a wrapping that does not "
        "renormalise the stream (pre-LN, sandwich) would train"
    )
    liu = "Liu et al. 2020: post-LN's output moves with depth"
    if not from_band(record):  # the form registered first: an error above the limit
        if step > limit:
            return (
                "error",
                text + f" ({s} above the limit {limit:.3g} for {_warm(warmup)}; {liu}). " + advice,
                ("learning-rate:error"),
            )
    elif reaches(step, hi):
        return (
            "error",
            text + f" ({s} reaches {hi:.3g}, the high end of the band of limits for {_warm(warmup)}: the "
            f"smallest tuning step above the limit{_interpolated(warmup, record)}; {liu}). " + advice,
            "learning-rate:error",
        )
    elif step > limit:  # inside the band: the tuning runs do not place the limit more exactly
        end = f"below {hi:.3g}, the band's high end" if math.isfinite(hi) else "with no failed run above it"
        return (
            "warning",
            text + f" ({s} above the limit {limit:.3g} for {_warm(warmup)} but {end}: the tuning runs do not "
            "place the limit more exactly than that band, so not expected to be safe; a smaller learning "
            "rate is)",
            "learning-rate:warning",
        )
    return "ok", text + f" ({s} within the limit {limit:.3g} for {_warm(warmup)})", "learning-rate:ok"


def _interpolated(warmup: int, record: dict) -> str:
    """' (interpolated between the fitted warmups)' where no tuning warmup is this one and its neighbours
    hold different limits; '' where one is, or where both neighbours were pooled into one limit."""
    points = sorted((record.get("step_limit") or {}).get("warmups") or [], key=lambda p: p["warmup"])
    fitted = {p["warmup"] for p in points}
    if not points or warmup in fitted or not min(fitted) < warmup < max(fitted):
        return ""
    below = max((p for p in points if p["warmup"] < warmup), key=lambda p: p["warmup"])
    above = min((p for p in points if p["warmup"] > warmup), key=lambda p: p["warmup"])
    if (below["limit"], below["band"]) == (above["limit"], above["band"]):
        return " (the fitted warmups around it pooled into one limit)"
    return " (interpolated between the fitted warmups)"


def _warm(warmup: int) -> str:
    return f"a {warmup}-step warmup" if warmup else "no warmup"


def _gated(rho, lr, depth):
    """Zero-gated branches (ReZero): the relative update decides."""
    per_lr = rho / lr
    text = (
        f"relative update rho = {rho:.3g} (Adam's first step against the block matrices' size); "
        f"lr <= {GATED_TRAINED / per_lr:.2g} expected to train; from {GATED_LIMIT / per_lr:.2g} (rho {GATED_LIMIT:g}) "
        f"zero-gated stacks (ReZero) of {GATED_DEPTH} layers or more diverged on the calibration grid"
    )
    if rho <= GATED_LIMIT:
        return "ok", text, "update-size:ok"
    if depth >= GATED_DEPTH:
        return "error", text + ": lower the learning rate (or warm it up longer)", "update-size:error"
    return "warning", text + f"; at {depth} layers such runs trained", "update-size:warning"


def _free(gain, step, rho, lr):
    """Stacks that never renormalise the stream: a ceiling from the largest calibrated relative update."""
    reach = f"update gain {gain:.3g}: one Adam step at lr {lr:g} reaches s = {step:.3g} output norms"
    if not rho:
        return "ok", reach + "; no relative update measured, so no ceiling", "learning-rate:ok"
    ceiling = UPDATE_TRAINED / (rho / lr)
    text = (
        f"{reach}, relative update rho = {rho:.3g}; lr <= {ceiling:.2g} expected to train (rho "
        f"{UPDATE_TRAINED:g}, the largest at which stacks that never renormalise the stream trained on the "
        "calibration grid)"
    )
    if rho <= UPDATE_TRAINED:
        return "ok", text, "learning-rate:ok"
    return (
        "warning",
        text + f"; lr {lr:g} is {rho / UPDATE_TRAINED:.3g}x above it, where the calibration grid has no run: "
        "not expected to be safe",
        "learning-rate:warning",
    )


def _band_text(rho, lr, fit, who):
    """'lr <= X expected to train; from Y such stacks failed (...)': the ceiling a fitted band on rho
    puts on this model's lr (rho grows in proportion to lr)."""
    per_lr, (lo, hi) = rho / lr, fit["band"]
    text = f"lr <= {(lo or fit['limit']) / per_lr:.2g} expected to train"
    if hi:
        text += f"; from {hi / per_lr:.2g} such stacks failed"
    return text + (
        f" (limit rho {fit['limit']:.3g} for {who}, the one that classified {fit['runs']} calibration "
        f"runs best: {fit['errors']} misclassified)"
    )


def _band_level(rho, fit):
    """The level: "error" from the fitted band's high end (where the calibration runs failed), "warning"
    between the limit and it (no calibration run lies there), "ok" up to the limit."""
    if reaches(rho, fit["band"][1]):
        return "error"
    return "warning" if rho > fit["limit"] else "ok"


def _band_tail(level, rho, lr, fit):
    """The text that says what the level means in the calibration grid's runs ('' for ok)."""
    hi, limit = fit["band"][1], fit["limit"]
    if level == "error":
        above = fit["above"]
        return (
            f"; above lr {hi / (rho / lr):.2g} such stacks diverged or stalled on the calibration grid: "
            f"{above['failed']} of {above['runs']} runs there failed. A smaller learning rate would train"
        )
    if level == "warning":
        where = (
            f"below {hi:.3g}, the smallest measured rho above the limit (runs from there failed)"
            if hi
            else "with no measured run above it"
        )
        return f"; rho is above the limit {limit:.3g}, {where}: not expected to be safe"
    return ""


def _free_fitted(gain, step, rho, lr, fit):
    """Stacks that never renormalise the stream, against the limit on rho fitted on the tuning runs."""
    reach = f"update gain {gain:.3g}: one Adam step at lr {lr:g} reaches s = {step:.3g} output norms"
    level = _band_level(rho, fit)
    text = f"{reach}, relative update rho = {rho:.3g}; " + _band_text(
        rho, lr, fit, "stacks that never renormalise the stream"
    )
    return level, text + _band_tail(level, rho, lr, fit), f"learning-rate:{level}"


def _gated_fitted(rho, lr, depth, fit):
    """Zero-gated branches (ReZero) against the fitted limit on rho; an error at every depth where the
    fit took every depth's runs ("all_depths"), else only from ``GATED_DEPTH`` layers, the depths a
    record fitted before that form was fitted on."""
    level = _band_level(rho, fit)
    every = fit.get("all_depths")
    who = "zero-gated stacks (ReZero)" + ("" if every else f" of {GATED_DEPTH} layers or more")
    text = f"relative update rho = {rho:.3g} (Adam's first step against the block matrices' size); "
    text += _band_text(rho, lr, fit, who)
    if level == "error" and depth < GATED_DEPTH and not every:
        note = (
            f"; fitted on stacks of {GATED_DEPTH} layers or more, so at {depth} layers no confident verdict "
            "(the 2-layer ReZero runs of the first tuning grid trained at rho 1.4)"
        )
        return "warning", text + note, "update-size:warning"
    return level, text + _band_tail(level, rho, lr, fit), f"update-size:{level}"
