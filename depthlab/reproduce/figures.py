"""Plots shared by the claim reproductions: loss curves and per-layer profiles.

Each function writes one PNG and returns its path, or returns None when ``out_dir`` is None (a caller
that only wants the numbers). Figures are ``matplotlib.figure.Figure`` objects, so no backend is chosen.
"""

from __future__ import annotations

import math
import os

from matplotlib.figure import Figure


def new_figure(ncols: int = 1, figsize: tuple[float, float] = (5.6, 3.6)):
    """(Figure, a row of ``ncols`` Axes) with constrained layout, drawn without any backend."""
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, list(fig.subplots(1, ncols, squeeze=False)[0])


def save(fig: Figure, out_dir: str, name: str) -> str:
    """Write ``fig`` to out_dir/name.png (folders created); returns the path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.png")
    fig.savefig(path, dpi=110)
    return path


def loss_curves(
    panels: dict[str, list], out_dir: str | None, name: str, title: str, unigram: float | None = None
) -> str | None:
    """One panel per key; each panel a list of Runs drawn as train loss against step.

    The unigram loss (the level of a model that predicts only byte frequencies) is a dashed line.
    """
    if out_dir is None:
        return None
    fig, axes = new_figure(len(panels), figsize=(4.2 * len(panels), 3.4))
    for ax, (panel, runs) in zip(axes, panels.items()):
        for run in runs:
            steps = [s for s, v in run.curve if math.isfinite(v)]
            losses = [v for s, v in run.curve if math.isfinite(v)]
            ax.plot(steps, losses, label=f"{run.label} ({run.short()})")
        if unigram is not None:
            ax.axhline(unigram, color="grey", ls="--", lw=1, label="unigram loss")
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("train loss (nats)")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return save(fig, out_dir, name)


def profiles(
    series: dict[str, list[float]],
    out_dir: str | None,
    name: str,
    title: str,
    xlabel: str,
    ylabel: str,
    log: bool = False,
    x: list | None = None,
) -> str | None:
    """Several named series of per-layer (or per-depth) values on one axis; None values are skipped."""
    if out_dir is None:
        return None
    fig, (ax,) = new_figure()
    for label, ys in series.items():
        xs = x if x is not None else list(range(len(ys)))
        pts = [(a, b) for a, b in zip(xs, ys) if b is not None and math.isfinite(b) and (b > 0 or not log)]
        if pts:
            ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", ms=3, label=label)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return save(fig, out_dir, name)
