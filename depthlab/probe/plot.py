"""One PNG for one or several probes: gradient, position-varying gradient and stream rms by depth (log y)."""

from __future__ import annotations

import os

from depthlab.errors import InputError
from depthlab.probe.result import ProbeResult

PANELS = (
    ("grad_norm", "||d loss / d x_i||"),
    ("context_grad_norm", "position-varying gradient"),
    ("stream_rms", "stream rms"),
)


def plot_probes(results: list[tuple[str, ProbeResult]], path: str, title: str = "") -> str:
    """Draw every (label, result) on one figure of three log-scale panels; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 4), constrained_layout=True)
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
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise InputError(f"cannot write the plot {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return path
