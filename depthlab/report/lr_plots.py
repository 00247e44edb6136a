"""The learning-rate figure: final loss against learning rate, one line per depth, one panel per setting.

It follows the figure pattern of :mod:`depthlab.report.plots` (``name(data, axes=None)``, a new
Figure without ``axes``, None without the data). The curves are :mod:`depthlab.study.sensitivity`'s:
each point is the mean over seeds of min(final loss, l0) (a diverged run counts as l0, the loss at
initialisation), its bar the seeds' range; a learning rate where any seed diverged is marked with x.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from depthlab.report.data import StudyData
from depthlab.report.plots import colormap, finish, panel_axes, plain

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def lr_curves(data: StudyData, axes=None) -> Figure | None:
    """Final validation loss against learning rate (log axis): a panel per setting, a line per depth, the
    unigram level dashed. None when no setting was run at two or more learning rates."""
    curves = data.lr_curves
    if not curves:
        return None
    labels = list(dict.fromkeys(c.label for c in curves))
    depths = sorted({c.depth for c in curves})
    cmap = colormap("viridis")
    colour = {d: cmap(i / max(1, len(depths) - 1) * 0.85) for i, d in enumerate(depths)}
    fig, axes, new = panel_axes(axes, len(labels), 3, 3.8, 3.0)
    unigram = next((r["unigram_loss"] for r in data.runs if r.get("unigram_loss")), None)
    for ax, label in zip(axes, labels):
        for c in (c for c in curves if c.label == label):
            lrs = [p.lr for p in c.points]
            per_seed = [[p.capped(s, c.l0) for s in c.seeds] for p in c.points]
            mean = [sum(v) / len(v) if v else math.nan for v in per_seed]
            lo = [m - min(v) if v else 0 for m, v in zip(mean, per_seed)]
            hi = [max(v) - m if v else 0 for m, v in zip(mean, per_seed)]
            ax.errorbar(lrs, mean, yerr=[lo, hi], color=colour[c.depth], lw=1.3, capsize=2,
                        marker="o", ms=3, label=f"{c.depth} layers")  # fmt: skip
            bad = [(p.lr, m) for p, m in zip(c.points, mean) if any(p.diverged(s) for s in c.seeds)]
            if bad:
                ax.plot(*zip(*bad), "x", color=colour[c.depth], ms=8, mew=2)
        if unigram:
            ax.axhline(unigram, color="grey", ls="--", lw=0.8, label="unigram level")
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel("final val loss (nats)")
        ax.set_title(plain(label), fontsize=9)
        ax.tick_params(labelsize=7)
    return finish(
        fig, axes, new, "Final loss against learning rate (mean over seeds, bars: their range; x: diverged)"
    )
