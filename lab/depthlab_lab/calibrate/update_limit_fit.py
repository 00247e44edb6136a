"""The doctor's ceilings on the relative update rho for stacks that never renormalise the stream, fitted on tuning runs.

The relative update rho (:mod:`depthlab.probe.update_size`: Adam's first full step against each block
matrix's spectral norm) decides the learning-rate verdict of two families of stacks: "free" ones
(pre-LN, sandwich, reorder, LNS, LayerScale, ...: no block renormalises the stream, no branch is
zero-gated) and "gated" ones (ReZero, :data:`depthlab.doctor.lr_limit.GATED`), whose first step sets
every gate to +-lr whatever its size. Per family, :func:`fit_update_limits` finds the limit on rho that
misclassifies the fewest finished tuning runs (trained below it, stalled, undertrained or diverged
above; :func:`~depthlab_lab.calibrate.band_fit.best_band`). The gated family is fitted on its runs of every
depth: records fitted before this form kept only runs of :data:`~depthlab.doctor.lr_limit.GATED_DEPTH`
layers or more (at width 32 and 150 steps, 2-layer ReZero stacks had trained where deeper ones diverged),
but at the budgets of the grids across scale (600-1,000 steps) the 2-layer ReZero stacks failed above the
same band as the 6-layer ones (width 32: trained up to rho 0.85, failed from 2.8; width 512: failed from
1.3 without warmup), so such a record carries ``"all_depths": true`` and the doctor's error applies at
every depth. A family whose runs all trained (or all failed) tells no limit and is left out: the doctor
then keeps its constant. Each family also carries the same fit on each width's runs alone ("by_width"),
to show whether a limit in these units holds across width; the doctor does not use it.
"""

from __future__ import annotations

import math

from depthlab.doctor.lr_limit import GATED
from depthlab.watch.outcome import OUTCOMES
from depthlab_lab.calibrate.band_fit import band_fit, width_bands

KEYS = ("d_model", "n_layers", "lr", "warmup")  # the support's quantities
FAMILY_TEXT = {
    "free": "stacks that never renormalise the stream (pre-LN, sandwich, LayerScale, ...)",
    "gated": "zero-gated stacks (ReZero)",
}


def update_rows(runs: list[dict]) -> dict[str, list[dict]]:
    """{"free": rows, "gated": rows}, each row {"rho", "trained", "d_model", "n_layers", "lr", "warmup"},
    from the finished runs with an outcome whose probe measured a relative update and whose blocks never
    renormalise the stream (store run dicts with "probe" loaded)."""
    rows: dict[str, list[dict]] = {"free": [], "gated": []}
    for r in runs:
        if r.get("status") != "done" or r.get("outcome") not in OUTCOMES or not r.get("probe"):
            continue
        cfg = r["probe"].get("config") or {}
        rho = (cfg.get("probe") or {}).get("relative_update")
        if (cfg.get("stack") or {}).get("renormalised_share") or rho is None or not math.isfinite(rho):
            continue
        m, t = r["config"]["model"], r["config"]["train"]
        family = "gated" if m.get("wrap") in GATED else "free"
        rows[family].append(
            {
                "rho": float(rho),
                "trained": r["outcome"] == "trained",
                "d_model": int(m["d_model"]),
                "n_layers": int(m["n_layers"]),
                "lr": float(t["lr"]),
                "warmup": int(t.get("warmup") or 0),
            }
        )
    return rows


def family_limit(rows: list[dict]) -> dict | None:
    """{"limit", "band", "runs", "errors", "above": {"runs", "failed"}, "support", "by_width"} of one
    family's rows; None when they hold one class only. "above" counts the runs at or beyond the band's
    high end (those the limit calls failing) and how many of them failed."""
    if all(r["trained"] for r in rows) or not any(r["trained"] for r in rows):
        return None
    fit = band_fit(rows, "rho")
    high = fit["band"][1]
    above = [r for r in rows if high is not None and r["rho"] >= high]
    return fit | {
        "above": {"runs": len(above), "failed": sum(not r["trained"] for r in above)},
        "support": {k: [min(r[k] for r in rows), max(r[k] for r in rows)] for k in KEYS},
        "by_width": width_bands(rows, "rho"),
    }


def fit_update_limits(runs: list[dict]) -> dict | None:
    """The record's "update_limit" section: {"rule", "families": {"free": ..., "gated": ...}} (each as
    :func:`family_limit`; a family with one class only is left out); None when neither has a limit."""
    rows = update_rows(runs)
    families = {name: fit for name, at in rows.items() if (fit := family_limit(at)) is not None}
    if not families:
        return None
    if "gated" in families:
        families["gated"]["all_depths"] = True  # the doctor's error at every depth (see the module's text)
    return {
        "rule": "per family of stacks that never renormalise the stream (free; zero-gated, at every "
        "depth), the limit on the relative update rho with the fewest misclassified tuning "
        "runs (trained below, stalled, undertrained or diverged above; the band's geometric midpoint); "
        "the doctor errs above the band's high end, warns between the limit and it",
        "families": families,
    }
