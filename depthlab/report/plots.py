"""The report's figures (matplotlib's object API, no pyplot: nothing global, no display needed).

Each function takes a :class:`StudyData` and an output folder, writes one PNG there and returns a
:class:`Figure` (file name, title, one-sentence caption), or None when the study has no data for it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure as MplFigure
from matplotlib.patches import Patch

from depthlab.report.data import StudyData
from depthlab.report.grouping import COLOURS, STATES, cells, depth

DARK = ("trained", "diverged", "failed")  # cell colours that need white text


@dataclass
class Figure:
    """A written figure: its PNG file name (relative to the report folder), title and caption."""

    file: str
    title: str
    caption: str


def plain(text: str) -> str:
    """A config string drawn as it is: a "$" must not open matplotlib's mathtext (``$x^{2$`` would
    not even parse). Applied only to strings from configs, so that the axes' own formulas still render."""
    return str(text).replace("$", r"\$")


def _save(fig: MplFigure, out_dir: str, name: str) -> str:
    fig.savefig(os.path.join(out_dir, name), dpi=110, bbox_inches="tight")
    return name


def _grid(n: int, ncols: int, w: float, h: float) -> tuple[MplFigure, list]:
    """A figure with n panels in rows of ``ncols``; unused panels hidden."""
    ncols = max(1, min(n, ncols))
    nrows = math.ceil(n / ncols)
    fig = MplFigure(figsize=(w * ncols, h * nrows), layout="constrained")
    axes = list(np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).flat)
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def outcome_map(data: StudyData, out_dir: str) -> Figure | None:
    """Depth x wrapping, one panel per train setting, each cell coloured by outcome, labelled with val loss."""
    lay = data.layout
    if not data.runs:
        return None
    table = cells(data.runs, lay)
    fig, axes = _grid(len(lay.panels), 2, 1.0 * len(lay.depths) + 2.6, 0.45 * len(lay.rows) + 1.2)
    for ax, panel in zip(axes, lay.panels):
        img = np.ones((len(lay.rows), len(lay.depths), 3))
        for i, row in enumerate(lay.rows):
            for j, d in enumerate(lay.depths):
                cell = table.get((panel, row, d))
                if cell is None:
                    continue
                img[i, j] = to_rgb(COLOURS.get(cell.state, "#ffffff"))
                colour = "white" if cell.state in DARK else "black"
                ax.text(j, i, cell.label(), ha="center", va="center", fontsize=8, color=colour)
        ax.imshow(img, aspect="auto", interpolation="nearest")
        ax.set_xticks(range(len(lay.depths)), [str(d) for d in lay.depths])
        ax.set_yticks(range(len(lay.rows)), [plain(r) for r in lay.rows])
        ax.set_xticks(np.arange(-0.5, len(lay.depths)), minor=True)
        ax.set_yticks(np.arange(-0.5, len(lay.rows)), minor=True)
        ax.grid(which="minor", color="white", linewidth=2)
        ax.tick_params(which="minor", length=0)
        ax.set_xlabel("layers")
        ax.set_title(plain(panel), fontsize=10)
    present = [s for s in STATES if any(c.state == s for c in table.values())]
    fig.legend(
        handles=[Patch(color=COLOURS[s], label=s) for s in present], loc="outside lower center", ncol=6
    )
    title = "Outcome map: which configurations trained"
    fig.suptitle(title)
    return Figure(
        _save(fig, out_dir, "outcome_map.png"),
        title,
        "Each cell is one wrapping at one depth (seeds pooled), coloured by outcome and labelled with its "
        "final validation loss: look for the cells that turn orange or red as depth grows, and whether a "
        "warmup turns them green.",
    )


def loss_curves(data: StudyData, out_dir: str) -> Figure | None:
    """Training loss over steps: a column per wrapping, a row per train setting, a line per depth."""
    lay = data.layout
    runs = [r for r in data.runs if r.get("metrics")]
    if not runs:
        return None
    ncols = len(lay.rows)
    fig, axes = _grid(ncols * len(lay.panels), ncols, 2.7, 2.1)
    colours = _depth_colours(lay.depths)
    unigram = next((r["unigram_loss"] for r in runs if r.get("unigram_loss") is not None), None)
    top = max((m["loss"] for r in runs for m in r["metrics"][:1] if m["loss"] is not None), default=None)
    for k, ax in enumerate(axes):
        panel, row = lay.panels[k // ncols], lay.rows[k % ncols]
        for r in runs:
            if lay.panel(r) == panel and lay.row(r) == row:
                steps = [m["step"] for m in r["metrics"]]
                loss = [m["loss"] if m["loss"] is not None else np.nan for m in r["metrics"]]
                ax.plot(steps, loss, color=colours[depth(r)], lw=1.2, label=f"{depth(r)} layers")
        if unigram is not None:
            ax.axhline(unigram, color="grey", ls="--", lw=0.8, label="unigram level")
        if top is not None:
            ax.set_ylim(top=min(top * 1.05, (unigram or top) * 2.5))
        ax.set_title(plain(f"{row}\n{panel}"), fontsize=8)
        ax.tick_params(labelsize=7)
    _dedup_legend(fig, axes)
    title = "Loss curves by wrapping, with and without warmup"
    fig.suptitle(title)
    return Figure(
        _save(fig, out_dir, "loss_curves.png"),
        title,
        "Training loss per logged step, one line per depth; the dashed line is the unigram level (the loss "
        "of predicting only common bytes): a curve that flattens there has stalled.",
    )


def _depth_colours(depths: list[int]) -> dict[int, tuple]:
    cmap = colormaps["viridis"]
    return {d: cmap(i / max(1, len(depths) - 1) * 0.85) for i, d in enumerate(depths)}


def _dedup_legend(fig: MplFigure, axes: list) -> None:
    """One legend for the figure, each label once."""
    seen: dict[str, object] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    if seen:
        fig.legend(
            list(seen.values()), list(seen), loc="outside lower center", ncol=min(6, len(seen)), fontsize=8
        )
