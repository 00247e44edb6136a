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
grid agreed (:mod:`depthlab.doctor.record`), naming the runs each count is of: a wrapping's own limit
gives how many of that wrapping's runs it classified right, beside the count over every wrapping's; a
warning that no calibration run had gives both sides' counts (the runs with an error, with ok).
A configuration outside the calibrated range (width, depth, lr, warmup) is an extrapolation: its error
becomes a warning that says so ("above where such stacks failed, but outside the calibrated range").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from depthlab.doctor.limit import LrLimit
from depthlab.doctor.record import load_record, outside, range_text
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
    """The learning-rate verdict with its limit, evidence and range; None when the gain was not measured."""
    found = limit_of(r, record)
    if found is None:
        return None
    limit, record, out = found
    pr = r.config["probe"]
    return render(limit, pr["lr"], r.n_layers, record, out)


def limit_of(r: ProbeResult, record: dict | None = None) -> tuple[LrLimit, dict, list[str]] | None:
    """(the stack's :class:`LrLimit` at the probe's warmup, the record it was read from with the range it
    was calibrated on, the phrases that put the probe's width, depth, lr or warmup outside that range);
    None when the probe measured no update gain. The one computation of the limit: the verdict, the
    comparison table and ``depthlab advise`` all read it (through :func:`limit_from`)."""
    pr = r.config["probe"]
    gain, step = pr.get("update_gain"), pr.get("step_size")
    if gain is None or step is None or not math.isfinite(gain) or gain <= 0:
        return None
    lr, rho = pr["lr"], pr.get("relative_update")
    stack = Stack(
        wrap=(r.config.get("model") or {}).get("wrap"),
        renormalised_share=r.config["stack"].get("renormalised_share") or 0.0,
        update_gain=gain,
        rho_per_lr=rho / lr if rho else None,
        d_model=width(r),
        n_layers=r.n_layers,
    )
    return limit_from(stack, lr, pr.get("warmup") or 0, record)


@dataclass(frozen=True)
class Stack:
    """What the limit reads of a probed stack: its wrapping, the share of its blocks that renormalise the
    stream, the update gain G (s = G lr), the relative update per unit lr (None where not measured),
    its width (None where unknown) and depth."""

    wrap: str | None
    renormalised_share: float
    update_gain: float
    rho_per_lr: float | None
    d_model: int | None
    n_layers: int


def limit_from(
    stack: Stack, lr: float, warmup: int, record: dict | None = None
) -> tuple[LrLimit, dict, list[str]]:
    """:func:`limit_of` for a stack given by its measured quantities (a probe, or a run of the atlas)."""
    record = load_record() if record is None else record
    values = {"d_model": stack.d_model, "n_layers": stack.n_layers, "lr": lr, "warmup": warmup}
    if stack.renormalised_share > 0:
        record, who = for_wrap(record, stack.wrap)
        scale = width_scale(record, stack.d_model)
        limit = _renormalised(stack.update_gain * scale, warmup, record, who, scale)
        support = (record.get("step_limit") or {}).get("support")
    elif stack.wrap in GATED and stack.rho_per_lr:
        fit = update_limit("gated", record)
        limit = _gated(stack.rho_per_lr, warmup, fit)
        support = (fit or {}).get("support")
    else:
        fit = update_limit("free", record) if stack.rho_per_lr else None
        limit = _free(stack.rho_per_lr or stack.update_gain, warmup, fit, measured=bool(stack.rho_per_lr))
        support = (fit or {}).get("support")
    if support and record.get("own_range"):  # a wrapping's own limit: calibrated where its runs ran
        record = dict(record, range=record["range"] | support)
    elif support:  # the limit was fitted over these runs too: its support widens the range
        record = dict(record, range=_union(record["range"], support))
    out = outside(record, values)
    if (
        stack.renormalised_share > 0
        and stack.d_model is None
        and (record.get("step_limit") or {}).get("width_exponent")
    ):
        out.append("the stream's width is unknown, and this wrapping's limit is on width-scaled steps")
    return limit, record, out


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


def width(r: ProbeResult) -> int | None:
    """The stream's width: the last dimension of the probed stream (None when it has no such axis)."""
    shape = r.config["probe"].get("batch_shape") or []
    return int(shape[-1]) if len(shape) >= 2 else None


def _renormalised(per_lr: float, warmup: int, record: dict, who: str | None, scale: float = 1.0) -> LrLimit:
    """Post-LN-style stacks: the step-size limit for this warmup length (``who``'s own where the record
    holds one for that wrapping, else the one pooled over such stacks). ``per_lr``: G, times the width
    scale where the limit is on width-scaled steps."""
    limit, (lo, hi) = step_limit(warmup, record)
    band = from_band(record)  # the form registered first (no band): an error above the limit itself
    sec = record.get("step_limit") or {}
    return LrLimit(
        "renormalising",
        "s",
        per_lr,
        warn_above=limit,
        error_from=hi if band else limit,
        trained_to=lo,
        who=f"{who} stacks (fitted on that wrapping's tuning runs alone)" if who else RENORMALISING_WHO,
        warmup=warmup,
        fitted=bool(sec.get("warmups")),
        error_strict=not band,
        width_exponent=sec.get("width_exponent") or 0.0,
        scale=scale,
        note=_interpolated(warmup, record),
    )


def _gated(per_lr: float, warmup: int, fit: dict | None) -> LrLimit:
    """Zero-gated branches (ReZero): the relative update decides (the first step sets every gate to
    +-lr whatever its size). Without a fitted limit the first tuning grid's constants: an error above
    ``GATED_LIMIT`` from ``GATED_DEPTH`` layers."""
    if fit is None:
        return LrLimit("gated", "rho", per_lr, GATED_LIMIT, GATED_LIMIT, GATED_TRAINED, GATED_WHO, warmup,
                       fitted=False, error_strict=True, error_min_depth=GATED_DEPTH)  # fmt: skip
    every = fit.get("all_depths")
    who = GATED_WHO + ("" if every else f" of {GATED_DEPTH} layers or more")
    lo, hi = fit["band"]
    return LrLimit("gated", "rho", per_lr, fit["limit"], hi, lo or fit["limit"], who, warmup,
                   error_min_depth=None if every else GATED_DEPTH, above=_above(fit))  # fmt: skip


def _free(per_lr: float, warmup: int, fit: dict | None, measured: bool) -> LrLimit:
    """Stacks that never renormalise the stream: the limit on rho fitted on the tuning runs, else the
    largest rho at which such stacks trained on the first tuning grid (a warning above it: no
    calibration run went there). Without a measured rho, no ceiling: ``per_lr`` is G, the limit infinite."""
    if not measured:
        return LrLimit("free", "s", per_lr, math.inf, None, None, FREE_WHO, warmup, fitted=False)
    if fit is None:
        return LrLimit(
            "free", "rho", per_lr, UPDATE_TRAINED, None, UPDATE_TRAINED, FREE_WHO, warmup, fitted=False
        )
    lo, hi = fit["band"]
    return LrLimit(
        "free", "rho", per_lr, fit["limit"], hi, lo or fit["limit"], FREE_WHO, warmup, above=_above(fit)
    )


def _above(fit: dict) -> tuple[int, int] | None:
    """(failed, runs) of a fitted band's tuning runs at or above its high end (None where not recorded)."""
    a = fit.get("above")
    return (a["failed"], a["runs"]) if a else None


def render(limit: LrLimit, lr: float, depth: int, record: dict, out: list[str]) -> Verdict:
    """The verdict for a run at ``lr``: its level (an error outside the calibrated range is a warning);
    its message, lr against the limit in one sentence as the level says it (such a warning says it is
    an extrapolation); its detail, how the limit was measured, the evidence and the range it was
    calibrated on."""
    measured = limit.level(lr, depth)
    level = "warning" if out and measured == "error" else measured
    code = "update-size" if limit.family == "gated" else "learning-rate"
    message = _position(limit, lr, depth, level)
    if out and level == measured:
        message += " (an extrapolation: see below)"
    detail = f"{_how(limit, lr)}. Calibrated at {range_text(record)}{_own_count(record)}"
    said = _evidence(record, code, measured, level)
    detail += f"; {said}" if said else ""
    if out:
        detail += f". Extrapolation: {'; '.join(out)}, so this is not a confident verdict"
    if measured == "error" and limit.above:
        detail += (
            f"; above lr {limit.lr_fails:.2g}, {limit.above[0]} of {limit.above[1]} tuning runs there failed"
        )
    if level != "ok":
        detail += f". {ADVICE[limit.family]}"
    return Verdict(level, code, message, detail=detail)


def _own_count(record: dict) -> str:
    """': the limit classified 79 of those 89 runs right' where the range is one wrapping's tuning runs
    and its own limit judges (:func:`for_wrap`; the fit's "misclassified" count of the form kept:
    width-scaled where it has an exponent, else on s itself); '' otherwise."""
    sec = record.get("step_limit") or {}
    counts = sec.get("misclassified")
    if not record.get("own_range") or not counts:
        return ""
    wrong = counts.get("scaled") if sec.get("width_exponent") else counts.get("unscaled")
    wrong = counts.get("scaled") if wrong is None else wrong
    return f": the limit classified {counts['runs'] - wrong} of those {counts['runs']} runs right"


def _evidence(record: dict, code: str, measured: str, level: str) -> str | None:
    """How often the calibration runs went the way this verdict says: 'on the calibration grid, 205 of
    219 runs with this verdict stalled or diverged', naming the runs counted where the range names one
    wrapping's ("(every wrapping's tuning runs)"). ``measured`` is the limit's level, ``level`` the
    verdict's: where the range holds an error back to a warning, the count is of the runs with an
    error, named so; a warning without a count of its own gets both sides' counts. None where the record
    holds no count."""
    table = record.get("agreement") or {}
    where = "on the calibration grid" + (" (every wrapping's tuning runs)" if record.get("own_range") else "")
    own = table.get(f"{code}:{measured}")
    if own and measured == level:
        return f"{where}, {own['agreed']} of {own['runs']} runs {own['what']}"
    if measured != "warning":
        said = _count(table, code, measured, named=measured != level)
        return f"{where}, {said}" if said else None
    sides = [s for s in (_count(table, code, "error", True), _count(table, code, "ok", True)) if s]
    if not sides:
        return None
    counted = table.get(f"{code}:error") or table.get(f"{code}:ok")
    none = "no calibration run had this verdict; " if counted else "a warning counts as predicted to train; "
    return f"{none}{where}, {' and '.join(sides)}"


def _count(table: dict, code: str, level: str, named: bool) -> str | None:
    """'205 of 219 runs with this verdict stalled or diverged' for an "error" or "ok" (``named``: 'with
    an error', 'with ok'), from the record's count of that verdict, else of that prediction ('242 of 263
    runs predicted to fail stalled or diverged'); None where the record holds neither."""
    went = "stalled or diverged" if level == "error" else "trained"
    a = table.get(f"{code}:{level}")
    if a:
        verdict = ("an error" if level == "error" else "ok") if named else "this verdict"
        return f"{a['agreed']} of {a['runs']} runs with {verdict} {went}"
    p = table.get("prediction:" + ("fails" if level == "error" else "trains"))
    if not p:
        return None
    return f"{p['agreed']} of {p['runs']} runs predicted to {'fail' if level == 'error' else 'train'} {went}"


def _position(limit: LrLimit, lr: float, depth: int, level: str) -> str:
    """Where ``lr`` lies against the limit, in lr, as ``level`` says it (one short sentence): a warning
    where the limit gives an error says the call is an extrapolation outside the calibrated range."""
    if not math.isfinite(limit.warn_above):
        return f"lr {lr:g}: no relative update measured, so no ceiling"
    safe = f"safe lr <= {limit.lr_limit:.2g} ({_who(limit)}, {_warm(limit.warmup)})"
    fails = f"{limit.lr_fails:.2g}" if limit.lr_fails else None
    measured = limit.level(lr, depth)
    if level == "ok":
        return f"lr {lr:g} is within the limit: {safe}" + (
            f"; such runs failed from {fails}" if fails else ""
        )
    if level == "error":
        return f"lr {lr:g} is where such stacks failed (from {fails}): {safe}"
    if measured == "error":  # an error held back by the calibrated range
        return (
            f"lr {lr:g} is above where such stacks failed (from {fails}), but outside the calibrated range: "
            f"an extrapolation, not expected to be safe; {safe}"
        )
    if limit.error_from is not None and limit.value(lr) > limit.error_from:  # an error held back by depth
        return f"lr {lr:g} is where deeper such stacks failed; at {depth} layers they trained: {safe}"
    if fails:
        above = f"below {fails}, where such runs failed"
    else:
        above = "where no tuning run above it failed" if limit.fitted else "where no calibration run went"
    return f"lr {lr:g} is above the limit, {above}: not expected to be safe; {safe}"


def _who(limit: LrLimit) -> str:
    """The stacks the limit is for, briefly: "post's own limit", "the limit of stacks like this"."""
    if limit.who.endswith("(fitted on that wrapping's tuning runs alone)"):
        return f"{limit.who.split()[0]}'s own limit"
    return f"the limit of {limit.who}"


def _how(limit: LrLimit, lr: float) -> str:
    """How the limit is measured: the quantity at this lr, the limit on it, the band it came from."""
    if not math.isfinite(limit.warn_above):
        return f"update gain {limit.per_lr:.3g}: one Adam step at lr {lr:g} reaches s = {limit.value(lr):.3g} output norms"
    name = "s" if limit.quantity == "s" else "rho"
    if name == "s":
        text = f"s = {limit.value(lr) / limit.scale:.3g} output norms per Adam step here"
        if limit.width_exponent:
            text += f", {limit.value(lr):.3g} width-scaled by (d / {WIDTH_REF})^{-limit.width_exponent:g}"
    else:
        text = f"rho = {limit.value(lr):.3g} here (Adam's first step against the block matrices' size)"
    text += f"; the limit is {name} <= {limit.warn_above:.3g}"
    if not limit.fitted:
        return text + " (the first tuning grid's constant)" + limit.note
    band = [f"trained up to {limit.trained_to:.3g} (lr {limit.lr_trained:.2g})"] if limit.trained_to else []
    if limit.lr_fails:
        band.append(f"failed from {limit.error_from:.3g} (lr {limit.lr_fails:.2g})")
    return text + (f" (tuning runs {' and '.join(band)})" if band else "") + limit.note


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
        return "; the fitted warmups around it pooled into one limit"
    return "; interpolated between the fitted warmups"


def _warm(warmup: int) -> str:
    return f"with a {warmup}-step warmup" if warmup else "without warmup"


RENORMALISING_WHO = "stacks whose blocks renormalise the stream"
GATED_WHO = "zero-gated stacks (ReZero)"
FREE_WHO = "stacks that never renormalise the stream"
ADVICE = {
    "renormalising": "A smaller learning rate, a longer warmup or a wrapping that does not renormalise the "
    "stream (pre-LN, sandwich) would train (Liu et al. 2020: post-LN's output moves with depth)",
    "gated": "Lower the learning rate or warm it up longer",
    "free": "A smaller learning rate would train",
}
