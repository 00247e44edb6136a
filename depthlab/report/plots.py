"""The study's figures, each a function ``name(data, axes=None) -> Figure | None``.

The pattern every figure of the report follows (and a new one should):

- it takes a :class:`~depthlab.report.data.StudyData` and, optionally, ``axes``: the Axes to draw into
  (one, or a sequence with one per panel; :func:`panel_axes` says how many it needs and refuses others);
- without ``axes`` it draws a new Figure (:func:`~depthlab.display.inline_figure`, made by
  :func:`panel_axes`; never pyplot: importing depthlab chooses no backend, and a notebook shows the
  Figure a cell returns), titled with ``suptitle``;
- it returns the Figure, or None when the study has no data for it; it never writes a file.

:mod:`depthlab.report.figures` lists the report's figures (file name, function, caption); ``render``
draws and saves each of them, and the notebook's ``StudyView.figure(name)`` draws one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from depthlab.display import inline_figure, text_colour
from depthlab.errors import InputError
from depthlab.report.data import StudyData
from depthlab.report.grouping import COLOURS, STATES, cells, column_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plain(text: str) -> str:
    """A config string drawn as it is: a "$" must not open matplotlib's mathtext (``$x^{2$`` would
    not even parse). Applied only to strings from configs, so that the axes' own formulas still render."""
    return str(text).replace("$", r"\$")


def title_of(fig: Figure) -> str:
    """The figure's title (its suptitle) as plain text, the "$" that :func:`plain` protected restored."""
    return fig.get_suptitle().replace(r"\$", "$")


def panel_axes(axes, n: int, ncols: int, w: float, h: float) -> tuple[Figure, list, bool]:
    """(Figure, ``n`` Axes, whether the Figure is new). With ``axes`` None: a new Figure with ``n``
    panels of ``w`` x ``h`` inches in rows of ``ncols`` (unused ones hidden). Otherwise ``axes`` is one
    Axes (``n`` = 1) or a sequence of ``n`` Axes; InputError for any other number."""
    if axes is None:
        ncols = max(1, min(n, ncols))
        nrows = math.ceil(n / ncols)
        fig = inline_figure(figsize=(w * ncols, h * nrows), layout="constrained")
        grid = list(np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).flat)
        for ax in grid[n:]:
            ax.set_visible(False)
        return fig, grid[:n], True
    from matplotlib.axes import Axes  # matplotlib is imported when a figure is drawn (not by import depthlab)

    given = [axes] if isinstance(axes, Axes) else list(np.asarray(axes, dtype=object).flat)
    if len(given) != n or not all(isinstance(a, Axes) for a in given):
        raise InputError(
            f"this figure draws {n} panel{'s' if n != 1 else ''}: pass {n} Axes, got {len(given)}"
        )
    return given[0].figure, given, False


def finish(fig: Figure, axes: Sequence, new: bool, title: str, handles: dict | None = None) -> Figure:
    """One legend (each label once; ``handles`` label -> artist, default those of ``axes``) and, on a
    new Figure, the title; on the caller's Axes the legend goes in the last one. Returns ``fig``."""
    if handles is None:
        handles = {}
        for ax in axes:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(lab, h)
    if handles and new:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="outside lower center",
            ncol=min(6, len(handles)),
            fontsize=8,
        )
    elif handles:
        axes[-1].legend(list(handles.values()), list(handles), fontsize=7)
    if new:
        fig.suptitle(plain(title))
    return fig


def outcome_map(data: StudyData, axes=None) -> Figure | None:
    """Wrapping x depth (or learning rate), one panel per remaining setting (``axes``: one per setting),
    each cell coloured by its outcome and labelled with its final validation loss (seeds pooled). None
    without runs."""
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    lay = data.layout
    if not data.runs:
        return None
    table = cells(data.runs, lay)
    fig, axes, new = panel_axes(
        axes, len(lay.panels), 2, 1.0 * len(lay.columns) + 2.6, 0.45 * len(lay.rows) + 1.2
    )
    for ax, panel in zip(axes, lay.panels):
        img = np.ones((len(lay.rows), len(lay.columns), 3))
        for i, row in enumerate(lay.rows):
            for j, col in enumerate(lay.columns):
                cell = table.get((panel, row, col))
                if cell is None:
                    continue
                colour = COLOURS.get(cell.state, "#ffffff")
                img[i, j] = to_rgb(colour)
                ax.text(j, i, cell.label(), ha="center", va="center", fontsize=8, color=text_colour(colour))
        ax.imshow(img, aspect="auto", interpolation="nearest")
        ticks = [str(c) if lay.x == "n_layers" else f"{c:g}" for c in lay.columns]
        ax.set_xticks(range(len(lay.columns)), ticks, rotation=0 if lay.x == "n_layers" else 45)
        ax.set_yticks(range(len(lay.rows)), [plain(r) for r in lay.rows])
        ax.set_xticks(np.arange(-0.5, len(lay.columns)), minor=True)
        ax.set_yticks(np.arange(-0.5, len(lay.rows)), minor=True)
        ax.grid(which="minor", color="white", linewidth=2)
        ax.tick_params(which="minor", length=0)
        ax.set_xlabel(lay.x_label)
        ax.set_title(plain(panel), fontsize=10)
    present = {
        s: Patch(color=COLOURS[s], label=s) for s in STATES if any(c.state == s for c in table.values())
    }
    return finish(fig, axes, new, "Outcome map: which configurations trained", present)


def loss_curves(data: StudyData, axes=None) -> Figure | None:
    """Training loss over steps, with the validation loss at each evaluation (circles, dashed): a column
    per wrapping, a row per setting (``axes``: one per wrapping and setting, row by row), a line per
    depth (or learning rate), the unigram level dashed. None without metrics."""
    lay = data.layout
    runs = [r for r in data.runs if r.get("metrics")]
    if not runs:
        return None
    ncols = len(lay.rows)
    fig, axes, new = panel_axes(axes, ncols * len(lay.panels), ncols, 2.7, 2.1)
    colours = _depth_colours(lay.columns)
    unigram = next((r["unigram_loss"] for r in runs if r.get("unigram_loss") is not None), None)
    top = max((m["loss"] for r in runs for m in r["metrics"][:1] if m["loss"] is not None), default=None)
    for k, ax in enumerate(axes):
        panel, row = lay.panels[k // ncols], lay.rows[k % ncols]
        for r in runs:
            if lay.panel(r) == panel and lay.row(r) == row:
                steps = [m["step"] for m in r["metrics"]]
                loss = [m["loss"] if m["loss"] is not None else np.nan for m in r["metrics"]]
                colour, label = colours[lay.column(r)], column_text(lay, lay.column(r))
                ax.plot(steps, loss, color=colour, lw=1.2, label=label)
                val = [(m["step"], m["val_loss"]) for m in r["metrics"] if m.get("val_loss") is not None]
                if val:
                    ax.plot(*zip(*val), color=colour, ls="--", marker="o", ms=3, lw=0.8, label="validation")
        if unigram is not None:
            ax.axhline(unigram, color="grey", ls="--", lw=0.8, label="unigram level")
        if top is not None:
            ax.set_ylim(top=min(top * 1.05, (unigram or top) * 2.5))
        ax.set_title(plain(f"{row}\n{panel}"), fontsize=8)
        ax.tick_params(labelsize=7)
    per = "by wrapping and train setting" if len(lay.panels) > 1 else "by wrapping"
    return finish(fig, axes, new, f"Loss curves {per}")


def colormap(name: str):
    """matplotlib's colormap ``name`` (imported here, when a figure is drawn)."""
    from matplotlib import colormaps

    return colormaps[name]


def _depth_colours(columns: list) -> dict:
    """A colour per column value (depth or learning rate), dark to light."""
    cmap = colormap("viridis")
    return {c: cmap(i / max(1, len(columns) - 1) * 0.85) for i, c in enumerate(columns)}
