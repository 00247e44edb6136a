"""The coordinate check's figures: mup's (one panel per step, a curve per module, against the size) and
CompleteP's (each module's activation against depth, a curve per wrapping and parametrization).

Built with ``matplotlib.figure.Figure`` directly (an :class:`~depthlab.display.InlineFigure`), as the
probe's figure: importing depthlab never changes matplotlib's backend.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from depthlab.display import inline_figure
from depthlab.probe.coord import CoordResult, seed_means

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn, not with the command line
    from matplotlib.figure import Figure

MAX_PANELS = 10


def _steps(n: int) -> list[int]:
    """The steps drawn: all up to MAX_PANELS, else MAX_PANELS spread from the first to the last."""
    if n <= MAX_PANELS:
        return list(range(1, n + 1))
    return sorted({round(1 + k * (n - 1) / (MAX_PANELS - 1)) for k in range(MAX_PANELS)})


def coord_figure(result: CoordResult, wrap: str, param: str) -> Figure:
    """mup's coordinate check for one setting: a panel per step, mean |x| of each module against the
    size (log-log). Flat curves are what a transferring parametrization gives."""
    s = result.spec
    steps = _steps(s.steps)
    cols = min(5, len(steps))
    rows = math.ceil(len(steps) / cols)
    fig = inline_figure(figsize=(3.2 * cols, 2.8 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, t in zip(axes, steps):
        for module, table in result.values[(wrap, param)].items():
            ax.plot(s.sizes, [row[t - 1] for row in seed_means(table)], marker=".", label=module)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"step {t}", fontsize=9)
        ax.set_xlabel(s.axis, fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[len(steps) :]:
        ax.set_visible(False)
    axes[0].set_ylabel("mean |coordinate|", fontsize=8)
    axes[0].legend(fontsize=6)
    fig.suptitle(f"{wrap}, {param_title(param)}: coordinate check over {s.axis}")
    return fig


def param_title(param: str) -> str:
    return {"sp": "SP", "mup": "muP", "depth_mup": "depth-muP", "completep": "CompleteP"}.get(param, param)


def coord_vs_size_figure(result: CoordResult, step: int | None = None) -> Figure:
    """CompleteP's view: a panel per module, its mean |x| at ``step`` (default the last) against the
    size, a curve per (wrapping, parametrization)."""
    s = result.spec
    step = s.steps if step is None else step
    modules = [m for m in next(iter(result.values.values()))]
    cols = min(4, len(modules))
    rows = math.ceil(len(modules) / cols)
    fig = inline_figure(figsize=(3.4 * cols, 2.9 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, module in zip(axes, modules):
        for (wrap, param), tables in result.values.items():
            if module in tables:
                ys = [row[step - 1] for row in seed_means(tables[module])]
                ax.plot(s.sizes, ys, marker=".", label=f"{wrap} {param_title(param)}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(module, fontsize=9)
        ax.set_xlabel(s.axis, fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[len(modules) :]:
        ax.set_visible(False)
    axes[0].legend(fontsize=6)
    fig.suptitle(f"mean |coordinate| at step {step} against {s.axis}")
    return fig
