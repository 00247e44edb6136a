"""The first screen of docs/doctor.md: the held-out scores against the baselines on the same runs, the
runs the doctor got wrong, and what it predicts from, in short sentences.

Every number is :func:`depthlab_lab.docgen.doctor_score.measure`'s: each held-out grid's score under
its record of record, the baselines on the same runs, the paired difference against the lookup, and
the runs as the page's run record keeps them (``scores["runs"]``: each run's configuration, what the
doctor predicted, its outcome and its step size). Scores built without runs (a test's) list the misses
as their lines.
"""

from __future__ import annotations

from depthlab_lab.docgen.doctor_fits import limit_summary

LOOKUP, ALWAYS = "wrapping x lr lookup", "always 'trains'"
# The widths-48-64 held-out grid's status: fixed before its runs, but rules were chosen after its
# misses were shown, so it is no longer a clean test.
NOT_CLEAN = "no: rules were revised after its misses were shown"


def _hits(s: dict | None) -> str:
    """'44 (92% [80%, 97%])': the hits, the accuracy and its 95% Wilson interval."""
    if not s or s.get("accuracy") is None:
        return "-"
    if not s.get("interval"):
        return f"{s['hits']} ({s['accuracy']:.0%})"
    lo, hi = s["interval"]
    return f"{s['hits']} ({s['accuracy']:.0%} [{lo:.0%}, {hi:.0%}])"


def _paired(v: dict | None) -> str:
    if not v:
        return "-"
    lo, hi = v["interval"]
    return f"{v['difference']:+.0%} [{lo:+.0%}, {hi:+.0%}]"


def _grids(scores: dict, heldout_name: str) -> list[dict]:
    """The held-out grids scored, newest first, each as {"label", "study", "score", "baselines",
    "versus", "clean"}: the grids across width (registered before their runs), then the widths-48-64 grid."""
    out = []
    for g in (scores.get("scale") or {}).get("grids", []):
        if g.get("heldout") is None:
            continue
        name, runs = g["grid"][0], g["grid"][2]
        widths = sorted({row["d_model"] for row in g.get("by_width", [])})
        out.append(
            {
                "label": f"across width: d_model {', '.join(map(str, widths))}" if widths else name,
                "study": name,
                "score": g["heldout"],
                "baselines": g.get("baselines") or {},
                "versus": g.get("versus_lookup"),
                "clean": "yes: scored under the rules registered before its runs",
                "runs": runs,
            }
        )
    out.append(
        {
            "label": "d_model 48-64, 150 steps",
            "study": heldout_name,
            "score": scores["heldout"],
            "baselines": scores.get("baselines") or {},
            "versus": None,
            "clean": NOT_CLEAN,
            "runs": scores["heldout"]["runs"],
        }
    )
    return out


def score_table(scores: dict, heldout_name: str) -> list[str]:
    """A row per held-out grid: its runs, the doctor's hits, the two baselines' on the same runs, the
    paired difference against the lookup, and whether it is a clean test."""
    lines = [
        "| held-out grid | runs | doctor | wrapping x lr lookup | always 'trains' | doctor - lookup | clean test? |",
        "|---|---|---|---|---|---|---|",
    ]
    for g in _grids(scores, heldout_name):
        b = g["baselines"]
        lines.append(
            f"| {g['label']} | {g['runs']} | {_hits(g['score'])} | {_hits(b.get(LOOKUP))} "
            f"| {_hits(b.get(ALWAYS))} | {_paired(g['versus'])} | {g['clean']} |"
        )
    return lines


def _missed(row: dict) -> bool:
    return row.get("predicted") is not None and (row["predicted"] == "trains") != (
        row["outcome"] == "trained"
    )


def misses_table(scores: dict, heldout_name: str) -> list[str]:
    """Every held-out run the doctor got wrong, one row each (from the run record's rows); without
    runs, the misses' lines."""
    runs = scores.get("runs")
    if not runs:
        return [f"- {m}" for m in scores.get("misses", [])] or ["- none"]
    lines = [
        "| held-out grid | wrapping | layers | d_model | lr | warmup | predicted | outcome | step size |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for g in _grids(scores, heldout_name):
        for r in runs.get(g["study"], []):
            if _missed(r):
                step = "-" if r.get("step_size") is None else f"{r['step_size']:.3g}"
                lines.append(
                    f"| {g['label']} | {r['wrap']} | {r['n_layers']} | {r['d_model']} | {r['lr']:g} "
                    f"| {r['warmup']} | {r['predicted']} | {r['outcome']} | {step} |"
                )
    return lines if len(lines) > 2 else ["- none"]


def how_lines(record: dict, gated: str, gated_depths: str, free: str) -> list[str]:
    """What the doctor predicts from, in short sentences: the rules it reads from its record
    (``gated``, ``gated_depths``, ``free``: the record's ReZero and free-stack limits as sentences)."""
    lines = [
        "Before a run trains, `depthlab probe` (and every study, for each run) probes the model once at "
        "init. Given the learning rate and warmup the run will use (`probe --lr --warmup`), the doctor "
        "measures how far Adam's first full step moves the output. It predicts a failure when:",
        "",
        f"- blocks renormalise the stream and that step reaches {limit_summary(record)};",
        f"- a ReZero stack {gated_depths} takes a relative update (Adam's first step against its block "
        f"matrices' size) {gated};",
    ]
    if free:
        lines.append(f"- {free.removeprefix('where ').rstrip(', ')};")
    lines += [
        "- or any other verdict is an error.",
        "",
        "An error outside the calibrated range is only a warning, marked as an extrapolation, and predicts "
        "nothing. A hit is a predicted 'trains' for a run that trained, or 'fails' for one that did not "
        "(undertrained, stalled or diverged).",
    ]
    return lines
