"""The probe's figure: gradient, position-varying gradient and stream rms by depth, log scale.

Figures are built with ``matplotlib.figure.Figure`` directly (:func:`~depthlab.display.inline_figure`,
which a notebook shows; matplotlib is imported when a figure is drawn): importing depthlab never chooses or changes matplotlib's backend, so a
notebook keeps its inline plots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from depthlab.display import inline_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PANELS = (
    ("grad_norm", "||d loss / d x_i||"),
    ("context_grad_norm", "position-varying gradient"),
    ("stream_rms", "stream rms"),
)


def probe_figure(results: list[tuple], title: str = "", axes=None) -> Figure:
    """Every (label, :class:`~depthlab.probe.result.ProbeResult`) drawn on three log-scale panels;
    ``axes``: three Axes to draw into (default: a new Figure's). Returns the Figure."""
    if axes is None:
        fig = inline_figure(figsize=(5 * len(PANELS), 4), layout="constrained")
        axes = fig.subplots(1, len(PANELS))
    fig = axes[0].figure
    for ax, (key, name) in zip(axes, PANELS):
        for label, result in results:
            pts = [(r["index"], r[key]) for r in result.layers if r.get(key) is not None and r[key] > 0]
            if pts:
                ax.plot(*zip(*pts), marker=".", markersize=3, label=label)
        ax.set_yscale("log")
        ax.set_xlabel("stream index i (0 = input of layer 1)")
        ax.set_title(name)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return fig
