"""The learning-rate transfer figures: the best lr against the size per setting, and the loss against lr,
a line per size, per setting (the lines overlap where the best lr transfers).

The numbers are :mod:`depthlab.study.transfer`'s and :mod:`depthlab.study.sensitivity`'s curves. The
report's two follow the figure pattern of :mod:`depthlab.report.plots` (``name(data, axes=None)``, None
without the data): :func:`transfer_best_lr` for a study that sweeps lr across depth or width, and
:func:`width_lr_curves` for one across width (across depth, the report's ``lr_curves`` is that figure
already, a line per depth). ``depthlab transfer --plot`` draws :func:`best_lr_figure` and
:func:`loss_vs_lr_figure` from the same drawing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from depthlab.report.data import StudyData
from depthlab.report.plots import finish, panel_axes, plain
from depthlab.study.sensitivity import Curve, curves
from depthlab.study.transfer import Transfer

if TYPE_CHECKING:
    from matplotlib.figure import Figure

AXES = ("depth", "width")
SIZE_FIELD = {"depth": "n_layers", "width": "d_model"}


def draw_best_lr(ax, result: list[Transfer], axis: str) -> None:
    """Into ``ax``: the best lr (95% interval over seeds) against the size, a line per setting; a hollow
    marker where the best sat at the sweep's edge."""
    for t in result:
        xs = [r.size for r in t.rows]
        ys = [r.best_lr[0] for r in t.rows]
        err = [[y - r.best_lr[1] for y, r in zip(ys, t.rows)], [r.best_lr[2] - y for y, r in zip(ys, t.rows)]]
        line = ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=plain(t.setting))
        edges = [(x, y) for x, y, r in zip(xs, ys, t.rows) if r.at_edge]
        if edges:
            ax.plot(*zip(*edges), "o", mfc="white", color=line[0].get_color(), markersize=9)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(axis)
    ax.set_ylabel("best learning rate")
    ax.grid(True, which="both", alpha=0.3)


def draw_loss_vs_lr(ax, cs: list[Curve], axis: str, label: str) -> None:
    """Into ``ax``: one setting's seed-averaged final loss (a diverged run counts as the loss at init)
    against lr, a line per size."""
    for c in sorted(cs, key=lambda c: c.depth):
        ax.plot([p.lr for p in c.points], c.mean_curve(), marker=".", label=f"{axis} {c.depth}")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_title(plain(label), fontsize=8)
    ax.grid(True, which="both", alpha=0.3)


def _by_setting(runs: list[dict], axis: str) -> dict[str, list[Curve]]:
    out: dict[str, list[Curve]] = {}
    for c in curves(runs, SIZE_FIELD[axis]):
        out.setdefault(c.label, []).append(c)
    return out


def transfer_best_lr(data: StudyData, axes=None) -> Figure | None:
    """The best lr against depth and against width: a panel per axis the study sweeps lr across (two or
    more sizes of one setting), a line per setting. None when it sweeps lr across neither."""
    found = [(axis, data.transfers[axis]) for axis in AXES if data.transfers[axis]]
    if not found:
        return None
    fig, axes, new = panel_axes(axes, len(found), 2, 5.0, 3.6)
    for ax, (axis, result) in zip(axes, found):
        draw_best_lr(ax, result, axis)
    names = " and ".join(axis for axis, _ in found)
    return finish(
        fig,
        axes,
        new,
        f"Best learning rate against {names} (95% interval over seeds; hollow: at the sweep's edge)",
    )


def width_lr_curves(data: StudyData, axes=None) -> Figure | None:
    """The final loss against lr, a panel per setting swept across width, a line per width. None when
    the study sweeps lr across no width."""
    settings = [t.setting for t in data.transfers["width"]]
    if not settings:
        return None
    by_setting = _by_setting(data.runs, "width")
    fig, axes, new = panel_axes(axes, len(settings), 3, 3.8, 3.0)
    for ax, label in zip(axes, settings):
        draw_loss_vs_lr(ax, by_setting[label], "width", label)
    axes[0].set_ylabel("final val loss (nats)")
    return finish(fig, axes, new, "Final loss against learning rate, a line per width (mean over seeds)")


def best_lr_figure(result: list[Transfer]) -> Figure:
    """``depthlab transfer --plot``'s best lr against the size, a line per setting. Returns the Figure."""
    fig, (ax,), _ = panel_axes(None, 1, 1, 6, 4)
    axis = result[0].axis if result else "depth"
    draw_best_lr(ax, result, axis)
    ax.set_title(f"best learning rate against {axis} (hollow: at the sweep's edge)", fontsize=9)
    ax.legend(fontsize=7)
    return fig


def loss_vs_lr_figure(runs: list[dict], axis: str = "depth") -> Figure:
    """``depthlab transfer --plot``'s loss against lr: a panel per setting, a line per size. Returns the
    Figure."""
    by_setting = _by_setting(runs, axis)
    settings = sorted(by_setting)
    cols = min(3, max(1, len(settings)))
    fig, axes, _ = panel_axes(None, max(1, len(settings)), cols, 4.2, 3.3)
    for ax, label in zip(axes, settings):
        draw_loss_vs_lr(ax, by_setting[label], axis, label)
        ax.legend(fontsize=6)
    axes[0].set_ylabel("final validation loss")
    return fig
