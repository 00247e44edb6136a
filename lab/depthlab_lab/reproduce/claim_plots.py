"""Plots shared by the claim reproductions: loss curves and per-layer profiles.

``loss_curves_figure`` and ``profiles_figure`` return a matplotlib Figure (made by
:func:`~depthlab.display.inline_figure`: no backend is chosen, a notebook shows it); ``loss_curves`` and
``profiles`` save that Figure as one PNG and return its path, or return None when ``out_dir`` is None
(a caller that only wants the numbers).
"""

from __future__ import annotations

import math
import os

from matplotlib.figure import Figure

from depthlab.display import inline_figure


def new_figure(ncols: int = 1, figsize: tuple[float, float] = (5.6, 3.6)):
    """(Figure, a row of ``ncols`` Axes) with constrained layout, drawn without any backend."""
    fig = inline_figure(figsize=figsize, layout="constrained")
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
    """Save :func:`loss_curves_figure` as out_dir/name.png; returns its path (None without ``out_dir``)."""
    return None if out_dir is None else save(loss_curves_figure(panels, title, unigram), out_dir, name)


def loss_curves_figure(panels: dict[str, list], title: str, unigram: float | None = None) -> Figure:
    """One panel per key; each panel a list of Runs drawn as train loss against step. The unigram loss
    (the level of a model that predicts only byte frequencies) is a dashed line. Returns the Figure."""
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
    return fig


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
    """Save :func:`profiles_figure` as out_dir/name.png; returns its path (None without ``out_dir``)."""
    if out_dir is None:
        return None
    return save(profiles_figure(series, title, xlabel, ylabel, log, x), out_dir, name)


def profiles_figure(
    series: dict[str, list[float]],
    title: str,
    xlabel: str,
    ylabel: str,
    log: bool = False,
    x: list | None = None,
) -> Figure:
    """Several named series of per-layer (or per-depth) values on one axis; None values are skipped.
    Returns the Figure."""
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
    return fig
