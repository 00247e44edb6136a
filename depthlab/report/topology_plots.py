"""A residual topology over training: the composite gain of hyper-connections' H_res maps, H_res's distance
from the identity, the effective depth of DenseFormer's and Attention Residuals' reads.

The watcher writes them into each logged step's record under ``topology``
(:func:`depthlab.probe.topology.watch_summary`): lists by layer boundary. ``topology_run`` draws one run's
(the run page); ``composite_gains`` the top layer's gain of every run of a study that has one (the report).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

from depthlab.report.data import StudyData
from depthlab.report.plots import colormap, finish, panel_axes

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _series(records: list[dict]) -> tuple[list[int], list[dict]]:
    """(steps, topology records) of the records that have one."""
    pairs = [(r["step"], r["topology"]) for r in records if isinstance(r.get("topology"), dict)]
    return [s for s, _ in pairs], [t for _, t in pairs]


def _top(values: list) -> float:
    """The last layer boundary's value (NaN when missing)."""
    v = values[-1] if values else None
    return float(v) if isinstance(v, (int, float)) else np.nan


def topology_run(run: dict, axes=None) -> Figure | None:
    """1 x 2: the top layer's composite gain (forward and backward) or mean effective depth over the logged
    steps; the same by depth at the first and last logged step. None without topology records."""
    steps, topo = _series(run["records"])
    if not topo:
        return None
    hyper = "composite_gain" in topo[0]
    key = "composite_gain" if hyper else "effective_depth"
    if key not in topo[0]:
        return None
    fig, axes, new = panel_axes(axes, 2, 2, 5.2, 3.4)
    if hyper:
        axes[0].plot(steps, [_top(t["composite_gain"]) for t in topo], label="forward (row sums)")
        axes[0].plot(
            steps, [_top(t["composite_gain_back"]) for t in topo], "--", label="backward (column sums)"
        )
        axes[0].set_yscale("log")
        axes[0].set_ylabel("composite gain at the top")
    else:
        axes[0].plot(steps, [np.nanmean([v or np.nan for v in t[key][1:]]) for t in topo])
        axes[0].set_ylabel("mean effective depth of the reads")
    axes[0].set_xlabel("step")
    for t, step, style in ((topo[0], steps[0], ":"), (topo[-1], steps[-1], "-")):
        ys = [v if isinstance(v, (int, float)) else np.nan for v in t[key]]
        axes[1].plot(range(len(ys)), ys, style, label=f"step {step}")
    axes[1].set_xlabel("layer")
    axes[1].set_ylabel(key.replace("_", " "))
    if hyper:
        axes[1].set_yscale("log")
    for ax in axes:
        ax.legend(fontsize=7)
    return finish(
        fig,
        axes,
        new,
        "Residual topology: " + ("composite gain of H_res" if hyper else "effective depth"),
        handles={},
    )


def composite_gains(data: StudyData, axes=None) -> Figure | None:
    """The top layer's forward composite gain over the logged steps, a line per run that has one (the
    hyper-connection designs); None when no run has it."""
    lines = []
    for r in data.runs:
        steps, gains = [], []
        for m in r.get("metrics") or []:
            extra = json.loads(m.get("extra_json") or "{}")
            if isinstance(extra.get("topology"), dict) and "composite_gain" in extra["topology"]:
                steps.append(m["step"])
                gains.append(_top(extra["topology"]["composite_gain"]))
        if steps:
            lines.append((r, steps, gains))
    if not lines:
        return None
    fig, axes, new = panel_axes(axes, 1, 1, 6.5, 3.8)
    colours = colormap("tab10")
    for i, (r, steps, gains) in enumerate(lines):
        model = r["config"]["model"]
        label = f"{model.get('wrap')} {model.get('n_layers')} layers, lr {r['config']['train'].get('lr')}"
        axes[0].plot(steps, gains, color=colours(i % 10), label=label)
    axes[0].set_yscale("log")
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("composite gain at the top (forward)")
    axes[0].legend(fontsize=6, ncol=2)
    return finish(fig, axes, new, "Composite gain of the residual mixing maps over training", handles={})
