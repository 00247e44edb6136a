"""docs/doctor.md's sections on the fitted rules: the step-size limit, the limits on the relative update, the plateau prediction, from the calibration record.

All are written by ``depthlab calibrate`` into the record (:mod:`depthlab_lab.calibrate.refit`); these lines show
what each was fitted on (studies, runs, the code's commit), its support and its error, as the record
holds them, so that the page says what the doctor does without anyone copying a figure by hand.
"""

from __future__ import annotations

from depthlab.doctor.lr_limit import GATED_DEPTH, GATED_LIMIT, UPDATE_TRAINED, from_band
from depthlab.doctor.plateau import FAMILY_TEXT as PLATEAU_FAMILY_TEXT
from depthlab.doctor.plateau import FEATURES
from depthlab_lab.calibrate.update_limit_fit import FAMILY_TEXT


def family_text(fam: str, fit: dict | None) -> str:
    """The family's name as its rule applies: the zero-gated one 'of 6 layers or more' unless its limit
    was fitted on every depth's runs (the constants, and records fitted before that form, err only there)."""
    deep = fam == "gated" and not (fit or {}).get("all_depths")
    return FAMILY_TEXT[fam] + (f" of {GATED_DEPTH} layers or more" if deep else "")


def _span(lo, hi) -> str:
    return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"


def sources_text(record: dict) -> str:
    """'grids doctor-tuning (180 of 180 runs done, in runs/a.sqlite), ...; code at commit abc1234, date'."""
    fitted = record.get("fitted_from")
    if not fitted:
        return "not fitted yet (`depthlab calibrate` writes them)"
    studies = ", ".join(
        f"`{s['study']}` ({s['done']} of {s['runs']} runs done, {s['escaped']} escaped the plateau)"
        for s in fitted["studies"]
    )
    commit = (fitted.get("commit") or "unknown")[:10]
    return f"{studies}; code at commit {commit}, {fitted['when']}"


def limit_lines(record: dict) -> list[str]:
    """The step-size limit per fitted warmup length, as a table, and its support."""
    section = record.get("step_limit")
    if not section:
        return [
            "No limit was fitted against the warmup length: the doctor uses 1.3 without warmup and 4.7 with one."
        ]
    lines = [
        "| warmup steps | limit on s | band of equally good limits | tuning runs | misclassified |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {_warmup_cells(p)} |" for p in section["warmups"]]
    sup = section["support"]
    lines += [
        "",
        f"Between two fitted warmups the limit is interpolated linearly in ln(limit) against ln(1 + warmup); "
        f"beyond the longest it stays at that warmup's limit. Support: widths {_span(*sup['d_model'])}, depths "
        f"{_span(*sup['n_layers'])}, lrs {_span(*sup['lr'])}, warmups {_span(*sup['warmup'])}; a run outside "
        "it gets at most a warning, marked as an extrapolation.",
    ]
    return lines + wrap_limit_lines(section)


def wrap_limit_lines(section: dict) -> list[str]:
    """The per-wrapping limits on s (each fitted on that wrapping's tuning runs alone), as a table; []
    for a record fitted before them."""
    by_wrap = section.get("by_wrap") or {}
    if not by_wrap:
        return []
    lines = [
        "",
        "A wrapping whose own tuning runs tell a limit is judged by it (the same fit on its runs alone), "
        "calibrated only where its runs ran; the others by the pooled limit above:",
        "",
        "| wrapping | warmup steps | limit on s (or width-scaled s, below) | band of equally good limits | "
        "tuning runs | misclassified | support |",
        "|---|---|---|---|---|---|---|",
    ]
    for wrap, own in by_wrap.items():
        sup = own["support"]
        where = (
            f"widths {_span(*sup['d_model'])}, depths {_span(*sup['n_layers'])}, lrs {_span(*sup['lr'])}, "
            f"warmups {_span(*sup['warmup'])}"
        )
        lines += [f"| {wrap} | {_warmup_cells(p)} | {where} |" for p in own["warmups"]]
    scaled = [scaled_text(wrap, own) for wrap, own in by_wrap.items() if own.get("width_exponent")]
    kept = [w for w, own in by_wrap.items() if "misclassified" in own and not own.get("width_exponent")]
    if scaled or kept:
        lines += [
            "",
            "Where one limit on s does not hold across width, a wrapping's limits (the table's limits and "
            "bands) are on the width-scaled step s x (d / 128)^-a, with the middle of the exponents a that "
            "misclassify the fewest of its tuning runs, taken only where that form, fitted with each width's "
            "runs left out in turn, tells the left-out runs better than the limit on s itself:",
            "",
            *[f"- {t}" for t in scaled],
            *(
                [
                    f"- on s itself (the width-scaled form did not tell a left-out width better): {', '.join(kept)}"
                ]
                if kept
                else []
            ),
        ]
    return lines


def scaled_text(wrap: str, own: dict) -> str:
    """'deepnorm: s x (d / 128)^0.85 (a = -0.85): 4 of its 80 tuning runs misclassified, 9 on s itself; with
    each width left out of the fit in turn, 9 against 24'."""
    a, ref, n = own["width_exponent"], own.get("width_ref", 128), own.get("misclassified") or {}
    text = (
        f"{wrap}: s x (d / {ref})^{-a:g} (a = {a:g}): {n.get('scaled')} of its {n.get('runs')} tuning runs "
        f"misclassified, {n.get('unscaled')} on s itself"
    )
    if "held_out_scaled" in n:
        text += (
            f"; with each width's runs left out of the fit in turn, {n['held_out_scaled']} of the left-out "
            f"runs misclassified against {n['held_out_unscaled']}"
        )
    return text


def _warmup_cells(p: dict) -> str:
    """'30 (pooled with 30, 300) | 4.73 | 4.35-5.15 | 33 | 3': one fitted warmup's row of a limit table."""
    pooled = f" (pooled with {', '.join(map(str, p['pooled_with']))})" if p.get("pooled_with") else ""
    return f"{p['warmup']}{pooled} | {p['limit']:.3g} | {band_text(p['band'])} | {p['runs']} | {p['errors']}"


def plateau_lines(record: dict) -> list[str]:
    """The plateau model's form and, per family, its runs, censoring, error, support and coefficients."""
    section = record.get("escape")
    if not section or not section.get("families"):
        return ["No plateau model was fitted: the doctor makes no plateau prediction."]
    lines = [
        f"Model: {section['model']}. The interval printed is the fit's 80% interval for one run.",
        "",
        "| family | runs | never escaped (censored) | sigma (ln steps) | escape within budget told right "
        "(in-sample) | escaped runs' median factor | support |",
        "|---|---|---|---|---|---|---|",
    ]
    for fam, fit in section["families"].items():
        ins, sup = fit["in_sample"], fit["support"]
        where = (
            f"lrs {_span(*sup['lr'])}, widths {_span(*sup['d_model'])}, depths {_span(*sup['n_layers'])}, "
            f"warmups {_span(*sup['warmup'])}, budgets {_span(*sup['steps'])}"
        )
        factor = f"{ins['median_factor']:.2g}" if ins.get("median_factor") else "-"
        lines.append(
            f"| {PLATEAU_FAMILY_TEXT[fam]} | {fit['runs']} | {fit['censored']} | {fit['sigma']:.2f} | "
            f"{ins['agreed']} of {ins['runs']} | {factor} | {where} |"
        )
    lines += ["", "Coefficients (a feature that did not vary among a family's runs is left out, at 0):", ""]
    lines += ["| family | " + " | ".join(FEATURES) + " |", "|---|" + "---|" * len(FEATURES)]
    for fam, fit in section["families"].items():
        lines.append(f"| {fam} | " + " | ".join(f"{fit['coef'][k]:.3g}" for k in FEATURES) + " |")
    return lines


def limit_summary(record: dict) -> str:
    """'1.66 output norms without warmup, 4.98 after a 30-step warmup': where the doctor's error starts,
    from the fitted bands' high ends (the constants when none was fitted)."""
    points = (record.get("step_limit") or {}).get("warmups")
    if not points:
        return "1.3 output norms without warmup (4.7 with one)"
    band_form = from_band(record)
    said = [
        f"{(p['band'][1] if band_form and p['band'][1] else p['limit']):.3g} output norms "
        + (f"after a {p['warmup']}-step warmup" if p["warmup"] else "without warmup")
        for p in points
    ]
    by_wrap = (record.get("step_limit") or {}).get("by_wrap")
    own = (
        f"; a wrapping with a limit of its own ({', '.join(by_wrap)}) by that one (table below)"
        if by_wrap
        else ""
    )
    if not band_form:
        return (
            "more than "
            + ", ".join(said)
            + (" (a limit per warmup length, never lower for a longer one, interpolated between them)")
            + own
        )
    return (
        ", ".join(said)
        + " (per warmup length the high end of the band of equally good limits, the smallest tuning step "
        "above the limit, interpolated between the fitted warmups; between the limit and that end, a "
        "warning" + own + ")"
    )


def band_text(band) -> str:
    """'1.05-1.18', 'above 3.2' (no run failed beyond it) or 'below 0.5' (none trained under it)."""
    lo, hi = band
    if not hi:
        return f"above {lo:.3g}"
    return f"below {hi:.3g}" if not lo else f"{lo:.3g}-{hi:.3g}"


def _support_text(sup: dict) -> str:
    return (
        f"widths {_span(*sup['d_model'])}, depths {_span(*sup['n_layers'])}, lrs {_span(*sup['lr'])}, "
        f"warmups {_span(*sup['warmup'])}"
    )


def update_limit_lines(record: dict) -> list[str]:
    """The fitted limits on the relative update rho per family, as a table (the constants where none)."""
    families = (record.get("update_limit") or {}).get("families") or {}
    lines = [
        "| family | limit on rho | band of equally good limits | tuning runs | misclassified | failed from the "
        "band's high end | support |",
        "|---|---|---|---|---|---|---|",
    ]
    for fam, fit in families.items():
        above = fit["above"]
        lines.append(
            f"| {family_text(fam, fit)} | {fit['limit']:.3g} | {band_text(fit['band'])} | {fit['runs']} | "
            f"{fit['errors']} | {above['failed']} of {above['runs']} | {_support_text(fit['support'])} |"
        )
    missing = [f for f in FAMILY_TEXT if f not in families]
    if not families:
        lines = ["No limit on rho was fitted."]
    fallback = {
        "free": f"its constant: a warning above rho {UPDATE_TRAINED:g}",
        "gated": f"its constant: an error above rho {GATED_LIMIT:g}",
    }
    if missing:
        lines.append("")
    for f in missing:
        lines.append(
            f"- {family_text(f, None)}: no limit fitted (no tuning run, or one outcome only), the doctor keeps "
            f"{fallback[f]}."
        )
    return lines


def width_lines(record: dict) -> list[str]:
    """Per fitted limit (the step limit per warmup group, the rho limit per family), the band found on each
    width's runs alone: a table that shows whether the limit in its units holds across width."""
    rows = []
    seen = set()
    for p in (record.get("step_limit") or {}).get("warmups", []):
        warmups = tuple(p.get("pooled_with") or [p["warmup"]])
        if warmups in seen:
            continue  # pooled warmups share one fit
        seen.add(warmups)
        name = f"s, warmup {', '.join(map(str, warmups))}"
        rows += [(name, p["limit"], w) for w in p.get("by_width", [])]
    for fam, fit in ((record.get("update_limit") or {}).get("families") or {}).items():
        rows += [(f"rho, {fam}", fit["limit"], w) for w in fit.get("by_width", [])]
    if not rows:
        return ["No fitted limit holds a fit per width yet."]
    lines = [
        "| limit | pooled limit | width | band on that width's runs alone | its limit | runs | misclassified |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, pooled, w in rows:
        lines.append(
            f"| {name} | {pooled:.3g} | {w['d_model']} | {band_text(w['band'])} | {w['limit']:.3g} | "
            f"{w['runs']} | {w['errors']} |"
        )
    return lines
