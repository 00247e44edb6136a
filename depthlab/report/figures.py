"""The report's figures in page order: for each, the function that draws it, its file and its caption.

To add a figure to the report: write ``name(data, axes=None) -> Figure | None`` as
:mod:`depthlab.report.plots` describes, and add a ``ReportFigure`` here. ``render`` then draws and
saves it, the page shows it under its title (the Figure's suptitle) with the caption, and a notebook
gets it from ``StudyView.figure("name")``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from depthlab.errors import InputError
from depthlab.report.data import StudyData
from depthlab.report.layer_plots import bottom_vs_top, layer_profiles
from depthlab.report.lr_plots import lr_curves
from depthlab.report.plots import loss_curves, outcome_map, title_of
from depthlab.report.topology_plots import composite_gains
from depthlab.report.transfer_plots import transfer_best_lr, width_lr_curves

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 110


@dataclass(frozen=True)
class ReportFigure:
    """One figure of the report: ``draw(data, axes=None)`` returns a Figure (or None: no data for it)."""

    draw: Callable[..., Figure | None]
    caption: str

    @property
    def name(self) -> str:
        """The drawing function's name: the figure's name and its file's stem."""
        return self.draw.__name__

    @property
    def file(self) -> str:
        return f"{self.name}.png"


@dataclass(frozen=True)
class PageFigure:
    """A figure as the page shows it: its PNG file name (relative to the report folder), title, caption."""

    file: str
    title: str
    caption: str


FIGURES = (
    ReportFigure(
        outcome_map,
        "Each cell is one wrapping at one depth (seeds pooled), coloured by outcome and labelled with its "
        "final validation loss: look for the cells that turn orange or red as depth grows, and whether a "
        "warmup turns them green.",
    ),
    ReportFigure(
        lr_curves,
        "Each point is the final validation loss at one learning rate, averaged over seeds (the bar spans "
        "the seeds; a diverged run counts as the loss at initialisation, marked x). A wide, flat valley is "
        "a configuration that forgives the learning rate; a narrow one is sensitive to it, and where its "
        "minimum sits says which learning rate each depth wants (the table below has the numbers); where "
        "the depths' minima line up, the learning rate transfers across depth.",
    ),
    ReportFigure(
        transfer_best_lr,
        "Each point is the best learning rate at one depth (or width), each seed's own refined in log "
        "space and averaged, with its 95% interval; a line per setting (wrapping, parametrization, ...). "
        "A flat line is a learning rate that transfers from the smallest size to the largest; a falling "
        "one is a proxy's learning rate too large for the target. A hollow marker sat at the edge of the "
        "sweep, where the true best lies beyond it. depthlab transfer prints the slopes, the best lr "
        "extrapolated to a target size and the penalty of the proxy's lr.",
    ),
    ReportFigure(
        width_lr_curves,
        "The final loss against the learning rate, a line per width (mean over seeds; a diverged run counts "
        "as the loss at initialisation): where the lines' minima line up, the learning rate transfers "
        "across width.",
    ),
    ReportFigure(
        loss_curves,
        "Training loss per logged step, one line per depth (or learning rate), the validation loss at each "
        "evaluation as circles; the grey dashed line is the unigram level (the loss of predicting only "
        "common bytes): a curve that flattens there has stalled.",
    ),
    ReportFigure(
        layer_profiles,
        "The gradient reaching each layer's stream and the stream's rms, at init (the doctor's probe) and at "
        "the last logged step: a gradient that falls by orders of magnitude toward index 0 means the bottom "
        "layers barely learn, and a steadily rising rms is pre-LN's stream growth.",
    ),
    ReportFigure(
        bottom_vs_top,
        "Mean parameter-gradient norm of the bottom and the top quarter of layers at each logged step: "
        "where the blue line sits orders of magnitude under the orange one, the bottom layers are starved "
        "of gradient, as in a deep stack without its attention skip.",
    ),
    ReportFigure(
        composite_gains,
        "The largest row sum of the product of a hyper-connection model's H_res maps, at the top, over training, "
        "a line per run: 1 is a skip path that neither amplifies nor shrinks the stream; unconstrained "
        "hyper-connections let it grow (Xie et al. 2025 saw ~3,000 at 27B), mHC's doubly stochastic maps keep "
        "it at 1.",
    ),
)
FIGURE_NAMES = tuple(f.name for f in FIGURES)


def report_figure(name: str) -> ReportFigure:
    """The report's figure called ``name``; InputError naming the figures for an unknown name."""
    for f in FIGURES:
        if f.name == name:
            return f
    raise InputError(f"no figure {name!r}: one of {', '.join(FIGURE_NAMES)}")


def save_figures(data: StudyData, out_dir: str) -> list[PageFigure]:
    """Draw every figure of ``FIGURES`` that ``data`` has data for and save it as ``out_dir/<name>.png``;
    returns what the page shows of each, in order."""
    shown = []
    for spec in FIGURES:
        fig = spec.draw(data)
        if fig is not None:
            fig.savefig(os.path.join(out_dir, spec.file), dpi=DPI, bbox_inches="tight")
            shown.append(PageFigure(spec.file, title_of(fig), spec.caption))
    return shown
