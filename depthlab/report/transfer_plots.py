"""The learning-rate transfer figures: the best lr against the size per setting, and the loss against lr,
a line per size, per setting (the lines overlap where the best lr transfers).

The numbers are :mod:`depthlab.study.transfer`'s and :mod:`depthlab.study.sensitivity`'s curves.
"""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from depthlab.display import InlineFigure
from depthlab.study.sensitivity import curves
from depthlab.study.transfer import Transfer


def best_lr_figure(result: list[Transfer]) -> Figure:
    """The best lr (95% interval over seeds) against the size, a line per setting; a hollow marker
    where the best sat at the sweep's edge. Returns the Figure."""
    fig = InlineFigure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    for t in result:
        xs = [r.size for r in t.rows]
        ys = [r.best_lr[0] for r in t.rows]
        err = [[y - r.best_lr[1] for y, r in zip(ys, t.rows)], [r.best_lr[2] - y for y, r in zip(ys, t.rows)]]
        line = ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=t.setting)
        edges = [(x, y) for x, y, r in zip(xs, ys, t.rows) if r.at_edge]
        if edges:
            ax.plot(*zip(*edges), "o", mfc="white", color=line[0].get_color(), markersize=9)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    axis = result[0].axis if result else "depth"
    ax.set_xlabel(axis)
    ax.set_ylabel("best learning rate")
    ax.set_title(f"best learning rate against {axis} (hollow: at the sweep's edge)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def loss_vs_lr_figure(runs: list[dict], axis: str = "depth") -> Figure:
    """A panel per setting: the seed-averaged final loss (a diverged run counts as the loss at init)
    against lr, a line per size. Returns the Figure."""
    by_setting: dict[str, list] = {}
    for c in curves(runs, "n_layers" if axis == "depth" else "d_model"):
        by_setting.setdefault(c.label, []).append(c)
    settings = sorted(by_setting)
    cols = min(3, max(1, len(settings)))
    rows = math.ceil(len(settings) / cols) or 1
    fig = InlineFigure(figsize=(4.2 * cols, 3.3 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, label in zip(axes, settings):
        for c in sorted(by_setting[label], key=lambda c: c.depth):
            ax.plot([p.lr for p in c.points], c.mean_curve(), marker=".", label=f"{axis} {c.depth}")
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_title(label, fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    for ax in axes[len(settings) :]:
        ax.set_visible(False)
    axes[0].set_ylabel("final validation loss")
    return fig
