"""The step-size limit of stacks that renormalise the stream, as a function of the warmup length, fitted on tuning runs.

The doctor's learning-rate verdict for post-LN-style stacks compares s = update gain x lr (how far one
full-size Adam step moves the output, in output norms) with a limit. A warmup lets the stack adapt
before the peak learning rate arrives, so the step it can take at the peak grows with the warmup's
length. For each warmup length among the tuning runs, :func:`~depthlab_lab.calibrate.band_fit.best_band`
finds the limits on s that classify those runs (trained below, stalled or diverged above) with the
fewest errors; the limit is the band's geometric midpoint. Where a longer warmup's limit comes out below
a shorter one's (runs of another depth or budget), the two are pooled and one limit chosen on their runs
together (:func:`_monotone`). :func:`fit_step_limit` returns the record section that
:func:`depthlab.doctor.lr_limit.step_limit` reads: per warmup its limit, band, runs and errors, the same
fit on each width's runs alone (evidence of whether the limit on s holds across width), and the support
(the runs' widths, depths, lrs, warmups). Between two fitted warmups the limit is interpolated linearly
in ln(limit) against ln(1 + warmup); beyond the longest it is that warmup's limit, and the verdict is
marked as an extrapolation.

The renormalising wrappings do not share one limit on s: on the tuning runs at width 128 and 6 layers
without warmup, DeepNorm's band (its residual scaled up, its branches' init scaled down) lies at 0.17-0.50
output norms where post-LN's lies at 1.9-5.6. So the same fit is also made on each wrapping's runs alone
("by_wrap"; pooled over widths like the pooled limit), and the doctor judges a wrapping that has one by
its own limit, calibrated only where its own runs ran (every run of that wrapping, at any warmup).

Nor does one limit on s hold across width for every wrapping: DeepNorm's band without warmup lies at
1.3-1.7 output norms at width 32 and at 0.17-0.50 at width 128 (its update gain grows faster with width
than the step it tolerates). So a wrapping's own limit is fitted on a width-scaled step, s x (d / 128)^-a,
with the exponent a (from -2 to 2 in steps of 0.05) that misclassifies the fewest of its tuning runs under
the whole rule (the per-warmup limits and their interpolation): a = 0 is the limit on s itself. Among equally good exponents the middle one is taken (as a limit is the middle
of its band), and the scaled form only where it transfers: with each width's runs left out in turn and
the rule fitted on the others, it must misclassify fewer of the left-out runs than the limit on s itself,
else a = 0 is kept. The record keeps the exponent, the width it is relative to, and the misclassified
runs with and without it, in sample and with widths held out.
"""

from __future__ import annotations

import math

from depthlab.doctor.lr_limit import WIDTH_REF, step_limit
from depthlab.watch.outcome import OUTCOMES
from depthlab_lab.calibrate.band_fit import band_fit, band_limit, best_band, width_bands


def limit_rows(runs: list[dict]) -> list[dict]:
    """{"wrap", "warmup", "step", "trained", "lr", "d_model", "n_layers"} of every finished run with an outcome
    whose probe measured a step size and whose blocks renormalise the stream (store run dicts with
    "probe" loaded)."""
    rows = []
    for r in runs:
        if r.get("status") != "done" or r.get("outcome") not in OUTCOMES or not r.get("probe"):
            continue
        cfg = r["probe"].get("config") or {}
        step = (cfg.get("probe") or {}).get("step_size")
        if not (cfg.get("stack") or {}).get("renormalised_share") or step is None or not math.isfinite(step):
            continue
        m, t = r["config"]["model"], r["config"]["train"]
        rows.append(
            {
                "wrap": m.get("wrap"),
                "warmup": int(t.get("warmup") or 0),
                "step": float(step),
                "trained": r["outcome"] == "trained",
                "lr": float(t["lr"]),
                "d_model": int(m["d_model"]),
                "n_layers": int(m["n_layers"]),
            }
        )
    return rows


def _monotone(groups: list) -> list:
    """Pool neighbouring warmup groups until the limit never falls with a longer warmup (pool adjacent
    violators): a warmup only shrinks the steps before the peak, so a longer one cannot lower the step a
    stack takes at the peak; where the per-warmup limits fall (runs of another depth or budget), one
    limit is chosen on the pooled runs."""
    groups = [list(g) for g in groups]
    while True:
        limits = [band_limit(*best_band(at)[:2]) for _, at in groups]
        fall = next((i for i in range(1, len(groups)) if limits[i] < limits[i - 1]), None)
        if fall is None:
            return groups
        (wa, ra), (wb, rb) = groups[fall - 1], groups[fall]
        groups[fall - 1 : fall + 1] = [[wa + wb, ra + rb]]


def _fit_rows(rows: list[dict], every: bool = False) -> dict | None:
    """{"warmups": [{"warmup", "limit", "band", "runs", "errors", "by_width"}], "support"} of ``rows``;
    None without two classes of runs at any warmup. The support spans the runs of the warmups that told
    a limit, or with ``every`` all of ``rows`` (a wrapping's own limit: where its runs ran)."""
    groups = []  # [warmups, rows] in warmup order, each telling a limit
    for w in sorted({r["warmup"] for r in rows}):
        at = [r for r in rows if r["warmup"] == w]
        if not all(r["trained"] for r in at) and any(r["trained"] for r in at):
            groups.append([[w], at])  # one class only tells no limit: such warmups are skipped
    groups = _monotone(groups)
    if not groups:
        return None
    points = []
    for warmups, at in groups:
        fit, widths = band_fit(at, "step"), width_bands(at, "step")
        for w in warmups:
            pooled = {"pooled_with": warmups} if len(warmups) > 1 else {}
            points.append({"warmup": w} | fit | pooled | {"by_width": widths})
    used = rows if every else [r for r in rows if r["warmup"] in {p["warmup"] for p in points}]
    keys = ("d_model", "n_layers", "lr", "warmup")
    return {
        "warmups": points,
        "support": {k: [min(r[k] for r in used), max(r[k] for r in used)] for k in keys},
    }


EXPONENTS = tuple(round(-2 + 0.05 * i, 2) for i in range(81))  # the width exponents tried, -2 to 2


def width_scaled(rows: list[dict], a: float) -> list[dict]:
    """``rows`` with each step s replaced by s x (d_model / WIDTH_REF)^-a (unchanged for a = 0)."""
    return [dict(r, step=r["step"] * (r["d_model"] / WIDTH_REF) ** -a) for r in rows] if a else rows


def misclassified(rows: list[dict], section: dict) -> int:
    """How many ``rows`` the fitted limits of ``section`` (a "step_limit" section) classify wrongly:
    a step above the limit for the row's warmup (interpolated as the doctor does) that trained, or one
    within it that did not."""
    record = {"step_limit": section}
    return sum((r["step"] > step_limit(r["warmup"], record)[0]) == r["trained"] for r in rows)


def _search(rows: list[dict]) -> tuple[float, dict] | None:
    """(a, fit): among the exponents whose width-scaled fit misclassifies the fewest ``rows``, the middle
    one (the median of those equally good, as a limit is the middle of its band of equally good limits;
    of two middles, the smaller |a|); None where no exponent tells a limit."""
    found = []
    for a in EXPONENTS:
        fit = _fit_rows(width_scaled(rows, a), every=True)
        if fit is not None:
            found.append((misclassified(width_scaled(rows, a), fit), a, fit))
    if not found:
        return None
    fewest = min(e for e, _, _ in found)
    best = [(a, fit) for e, a, fit in found if e == fewest]
    mid = len(best) // 2
    pick = best[mid] if len(best) % 2 else min(best[mid - 1], best[mid], key=lambda t: abs(t[0]))
    return pick


def held_out_widths(rows: list[dict], scaled: bool) -> int:
    """Misclassified runs with each width's runs left out in turn: the rule (width-scaled with its exponent
    searched again, or on s itself) fitted on the other widths' runs and applied to that width's."""
    errors = 0
    for d in sorted({r["d_model"] for r in rows}):
        rest, left = [r for r in rows if r["d_model"] != d], [r for r in rows if r["d_model"] == d]
        got = _search(rest) if scaled else (0.0, _fit_rows(rest, every=True))
        if got is None or got[1] is None:  # the other widths tell no limit: the rule judges nothing here
            continue
        a, fit = got
        errors += misclassified(width_scaled(left, a), fit)
    return errors


def fit_across_width(rows: list[dict]) -> dict | None:
    """The wrapping's own limit, with "width_exponent", "width_ref" and "misclassified": {"runs",
    "scaled", "unscaled", "held_out_scaled", "held_out_unscaled"}; None where no limit can be told.
    The width-scaled form (:func:`_search`'s exponent) is taken only where it misclassifies fewer runs
    with each width left out in turn than the limit on s itself (:func:`held_out_widths`): fitted on
    some widths, it must tell the outcomes at a width it did not see better, or a = 0 is kept."""
    plain = _fit_rows(rows, every=True)
    searched = _search(rows)
    if searched is None:
        return None
    a, fit = searched
    counts = {
        "runs": len(rows),
        "scaled": misclassified(width_scaled(rows, a), fit),
        "unscaled": misclassified(rows, plain) if plain is not None else None,
        "held_out_scaled": held_out_widths(rows, scaled=True),
        "held_out_unscaled": held_out_widths(rows, scaled=False),
    }
    if plain is not None and (a == 0 or counts["held_out_scaled"] >= counts["held_out_unscaled"]):
        a, fit = 0.0, plain
    return fit | {"width_exponent": a, "width_ref": WIDTH_REF, "misclassified": counts}


def fit_step_limit(runs: list[dict]) -> dict | None:
    """The record's "step_limit" section: {"rule", "warmups": [{"warmup", "limit", "band", "runs",
    "errors", "by_width"}], "error_from", "support", "by_wrap"}; None without two classes of runs at any
    warmup. "by_width" is the same fit on each width's runs of the warmup's group alone (evidence, not used
    by the doctor). "by_wrap" holds, per renormalising wrapping whose own tuning runs tell a limit, the same
    fit on its runs alone ({"warmups", "support", "error_from"}): the doctor judges that wrapping by it,
    calibrated where its runs ran, and the other wrappings by the pooled limit."""
    rows = limit_rows(runs)
    pooled = _fit_rows(rows)
    if pooled is None:
        return None
    by_wrap = {}
    for wrap in sorted({r["wrap"] for r in rows if r["wrap"]}):
        own = fit_across_width([r for r in rows if r["wrap"] == wrap])
        if own is not None:
            by_wrap[wrap] = own | {"error_from": "band_high"}
    return {
        "rule": "per warmup length, the limit on s = update gain x lr with the fewest misclassified tuning "
        "runs (the band's geometric midpoint; warmups pooled where a longer one's limit fell below a "
        "shorter one's); ln(limit) linear in ln(1 + warmup) between them; the doctor's error from the band's "
        "high end (the smallest tuning step above the limit), a warning between the limit and it; a "
        "wrapping whose own tuning runs tell a limit is judged by the same fit on its runs alone, "
        "calibrated where they ran, on the width-scaled step s x (d / 128)^-a with the exponent a that "
        "misclassifies the fewest of its runs where that form tells a width left out of the fit better "
        "than the limit on s itself (else a = 0)",
        "warmups": pooled["warmups"],
        "error_from": "band_high",  # the doctor's error starts at the band's high end, a warning from the limit
        "support": pooled["support"],
        "by_wrap": by_wrap,
    }
