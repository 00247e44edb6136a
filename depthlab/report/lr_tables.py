"""The learning-rate sensitivity tables: per setting and depth, and the recommendation, as HTML and text.

The numbers are :mod:`depthlab.study.sensitivity`'s (its docstring states every definition); this
module only lays them out.
"""

from __future__ import annotations

import math

from depthlab.display import esc, table
from depthlab.report.data import StudyData
from depthlab.study.sensitivity import MARGIN, best_lr_slope, recommend
from depthlab.study.sensitivity import table as sensitivity_table
from depthlab.words import plural

DEFINITION = (
    "LR sensitivity (Wortsman et al. 2023, section 2.2): with l(eta) the final validation loss at learning "
    "rate eta, l0 the loss at initialisation and l* the best l over the sweep, the mean over the swept "
    "learning rates of min(l(eta), l0) - l*; a diverged run counts as l0. 0 means every learning rate "
    "reached the best loss. It is computed for each seed and averaged, with a 95% t-interval over seeds "
    "in brackets. The best learning rate is the minimum of the seed-averaged curve, refined by a parabola "
    "in log(lr) through its neighbours; the usable range is the run of learning rates within "
    f"{MARGIN:g} nats of the best; the trainable range the widest run where most seeds trained (decades = "
    "log10 of its width). The slope is that of log10(best lr) against log10(depth), fitted per seed. "
    "For information: Jelassi et al. 2023 derive a best learning rate ~ L^(-3/2) for muP networks; "
    "depth-wise parametrisations (CompleteP) aim for 0; neither is the standard parametrisation used here."
)


def _ci(v: tuple | list, fmt: str = ".3f") -> str:
    m, lo, hi = v
    if m is None or not math.isfinite(m):
        return "-"
    if lo == hi:
        return f"{m:{fmt}}"
    return f"{m:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def _range(v: list) -> str:
    lo, hi, dec = v
    return "-" if lo is None else f"{lo:g} .. {hi:g} ({dec:.1f})"


def _rows(data: StudyData) -> list[list[str]]:
    rows = []
    for r in sensitivity_table(data.lr_curves):
        edge = " (edge)" if r["best_at_edge"] else ""
        rows.append(
            [
                r["setting"],
                str(r["depth"]),
                str(r["seeds"]),
                _ci(r["sensitivity"]),
                f"{r['best_lr']:.2g}{edge}",
                _ci(r["best_loss"]),
                _range(r["usable_range"]),
                _range(r["trainable_range"]),
            ]
        )
    return rows


HEAD = ["setting", "layers", "seeds", "LR sensitivity", "best lr", "loss at best lr", "usable lrs (decades)",
        "trainable lrs (decades)"]  # fmt: skip


def lr_section(data: StudyData) -> str:
    """The HTML section (empty without learning-rate curves): definitions, the table, the slope, the
    recommendation."""
    if not data.lr_curves:
        return ""
    slope_rows = [[esc(k), esc(_ci(v, "+.2f"))] for k, v in best_lr_slope(data.lr_curves).items()]
    parts = [
        "<h2>Learning-rate sensitivity</h2>",
        f"<p>{esc(DEFINITION)}</p>",
        table(HEAD, [[esc(c) for c in row] for row in _rows(data)], num={1, 2, 3, 4, 5}),
    ]
    if slope_rows:
        parts += ["<h3>Best learning rate against depth</h3>",
                  table(["setting", "slope of log10 best lr vs log10 depth"], slope_rows, num={1})]  # fmt: skip
    parts += ["<h2>Recommendation</h2>", f"<p>{esc(RECOMMENDATION)}</p>"]
    for depth_, ranked in recommend(data.lr_curves).items():
        rows = [
            [str(i), esc(r["setting"]), esc(_ci(r["best_loss"])), esc(f"{r['best_lr']:.2g}"),
             esc(f"{r['trainable_decades']:.1f}"), "tied" if r["tied_with_first"] and i > 1 else ""]
            for i, r in enumerate(ranked, 1)
        ]  # fmt: skip
        parts += [f"<h3>{depth_} layers</h3>",
                  table(["rank", "setting", "best loss", "at lr", "trainable decades", ""], rows, num={0, 3, 4})]  # fmt: skip
    return "\n".join(parts)


RECOMMENDATION = (
    "Per depth, the settings ranked by their best final loss (mean over seeds, 95% interval), with the "
    "width of the learning-rate range where they trained: prefer the first, and among settings whose "
    "interval overlaps the first's (tied), the one with the widest trainable range."
)


def lr_summary(data: StudyData) -> str:
    """The terminal version: the table, the slopes, and per depth the ranking (empty without curves)."""
    if not data.lr_curves:
        return ""
    rows = _rows(data)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEAD)]
    out = ["learning-rate sensitivity (Wortsman et al. 2023; mean [95% interval] over seeds):"]
    out.append("  " + "  ".join(h.ljust(w) for h, w in zip(HEAD, widths)))
    out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    for k, v in best_lr_slope(data.lr_curves).items():
        out.append(f"slope of log10 best lr against log10 depth, {k}: {_ci(v, '+.2f')}")
    for depth_, ranked in recommend(data.lr_curves).items():
        line = ", ".join(f"{r['setting']} {r['best_loss'][0]:.3f}" + (" (tied)" if r["tied_with_first"] and k else "")
                         for k, r in enumerate(ranked))  # fmt: skip
        out.append(f"best at {plural(depth_, 'layer')}: {line}")
    return "\n".join(out)
