"""Per-layer figures: gradient and stream rms over depth (init vs end), and bottom vs top layers over time.

Both use the deepest depth of the study, in the setting where the wrappings' outcomes differ most
(:meth:`StudyData.informative`), one run per wrapping (the lowest seed). They follow the figure
pattern of :mod:`depthlab.report.plots`: ``name(data, axes=None) -> Figure | None``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from depthlab.report.data import StudyData
from depthlab.report.plots import colormap, finish, panel_axes, plain
from depthlab.watch.keys import GRAD_KEYS

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _wrap_colours(rows: list[str]) -> dict[str, tuple]:
    cmap = colormap("tab10")
    return {row: cmap(i % 10) for i, row in enumerate(rows)}


def _last_step(layers: list[dict]) -> list[dict]:
    """The telemetry rows of the last logged step."""
    if not layers:
        return []
    last = max(r["step"] for r in layers)
    return [r for r in layers if r["step"] == last]


def _positive(values) -> list[float]:
    """Values for a log axis: missing or non-positive ones become NaN (a gap, not a crash)."""
    return [v if v is not None and v > 0 else np.nan for v in values]


def layer_profiles(data: StudyData, axes=None) -> Figure | None:
    """2 x 2 (``axes``: four): gradient norm and stream rms by stream index, at init (the probe) and at
    the end of training, a line per wrapping. None when no run has a probe or telemetry."""
    (panel, column), deep = data.informative(), data.deepest()
    picks = data.pick(panel, column)
    if not any(r["probe_layers"] or r["layers"] for r in picks.values()):
        return None
    fig, axes, new = panel_axes(axes, 4, 2, 4.2, 2.9)
    colours = _wrap_colours(data.layout.rows)
    for row, r in picks.items():
        end = _last_step(r["layers"])
        for k, (rows, col) in enumerate(
            [
                (r["probe_layers"], "grad_norm"),
                (end, "grad_norm"),
                (r["probe_layers"], "stream_rms"),
                (end, "stream_rms"),
            ]
        ):
            if rows:
                axes[k].plot(
                    [x["layer"] for x in rows],
                    _positive(x[col] for x in rows),
                    color=colours[row],
                    label=plain(row),
                )
    names = ["gradient norm at init", "gradient norm at end", "stream rms at init", "stream rms at end"]
    for k, (ax, name) in enumerate(zip(axes, names)):
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("stream index (0 = embedding output)", fontsize=8)
        if ax.lines:
            ax.set_yscale("log")
            ax.xaxis.get_major_locator().set_params(integer=True)
        else:  # say why a panel is empty rather than draw a blank frame
            why = "no at-init probe was recorded" if k % 2 == 0 else "no telemetry was recorded"
            ax.text(0.5, 0.5, why, transform=ax.transAxes, ha="center", va="center", color="grey")
    return finish(
        fig,
        axes,
        new,
        f"Per-layer gradient and stream scale over depth ({_where(data, deep, panel, column)})",
    )


def _layer_grad(row: dict) -> float | None:
    """A layer's parameter gradient norm: its sublayers' combined, else the stream gradient."""
    parts = [row.get(k) for k in GRAD_KEYS]
    if all(v is None for v in parts):
        return row.get("grad_norm")
    return math.sqrt(sum((v or 0.0) ** 2 for v in parts))


def _bottom_top(layers: list[dict]) -> tuple[list[int], list[float], list[float], int]:
    """(steps, mean grad of the bottom quarter of layers, of the top quarter, layers per quarter)."""
    top_index = max((r["layer"] for r in layers), default=0)
    q = max(1, top_index // 4)
    by_step: dict[int, dict[int, float | None]] = {}
    for r in layers:
        by_step.setdefault(r["step"], {})[r["layer"]] = _layer_grad(r)

    def mean(vals):
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else np.nan

    steps = sorted(by_step)
    bottom = [mean(by_step[s].get(i) for i in range(1, q + 1)) for s in steps]
    top = [mean(by_step[s].get(i) for i in range(top_index - q + 1, top_index + 1)) for s in steps]
    return steps, bottom, top, q


def bottom_vs_top(data: StudyData, axes=None) -> Figure | None:
    """One panel per wrapping with telemetry (``axes``: one each): the mean parameter gradient of the
    bottom and of the top quarter of layers at each logged step. None without telemetry."""
    (panel, column), deep = data.informative(), data.deepest()
    picks = {row: r for row, r in data.pick(panel, column).items() if r["layers"]}
    if not picks:
        return None
    fig, axes, new = panel_axes(axes, len(picks), 3, 3.2, 2.5)
    for ax, (row, r) in zip(axes, picks.items()):
        steps, bottom, top, quarter = _bottom_top(r["layers"])
        ax.plot(steps, _positive(bottom), color="#1565c0", label=f"bottom {quarter} layers")
        ax.plot(steps, _positive(top), color="#ef6c00", label=f"top {quarter} layers")
        ax.set_yscale("log")
        ax.set_title(plain(f"{row}: {r.get('outcome') or r['status']}"), fontsize=9)
        ax.set_xlabel("step", fontsize=8)
    return finish(
        fig,
        axes,
        new,
        f"Gradient of the bottom vs the top layers over training ({_where(data, deep, panel, column)})",
    )


def _where(data: StudyData, deep: int, panel: str | None, col) -> str:
    """The setting a per-layer figure shows, in words: "24 layers, warmup=0" or "24 layers, lr=0.01"."""
    parts = [f"{deep} layers"]
    if data.layout.x == "lr":
        parts.append(f"lr={col:g}")
    if panel and panel != "all runs" and f"n_layers={deep}" != panel:
        parts.append(panel.replace(f"n_layers={deep}", "").strip())
    return ", ".join(p for p in parts if p)
