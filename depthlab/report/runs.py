"""One page overlaying several run folders (``depthlab report --run A B C``): a sane and a hot run side by side.

    from depthlab.report import write_runs_report
    write_runs_report(["runs/lr-3e-3", "runs/lr-0.5"], "runs/compare")   # -> runs/compare/index.html

The page's table has one row per run (learning rate, steps, final loss, outcome, warnings); its figures
overlay, one colour per run: the training loss over the steps; the gradient reaching each stream at
each run's last logged step where it was finite; each run's attention entropy (the mean over its layers)
over the steps.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import numpy as np

from depthlab.display import esc
from depthlab.display import table as _table
from depthlab.errors import InputError, as_flags, option
from depthlab.paths import printable
from depthlab.report.figures import DPI, PageFigure
from depthlab.report.html import CSS
from depthlab.report.plots import colormap, finish, panel_axes, title_of
from depthlab.report.run_page import load_run, run_facts, warnings_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure as MplFigure


def _colours(n: int) -> list:
    return list(colormap("tab10")(np.arange(n) % 10))


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def overlay_plot(runs: list[tuple[str, dict]]) -> MplFigure:
    """Three panels, one line per run: the loss, the stream gradient by layer at the last finite logged
    step, the mean attention entropy over the steps."""
    # matplotlib is imported when a figure is drawn (not by import depthlab)
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    fig, axes, new = panel_axes(None, 3, 3, 5, 3.8)
    handles = {}
    for (name, run), colour in zip(runs, _colours(len(runs))):
        recs = run["records"]
        pts = [(r["step"], r["loss"]) for r in recs if _finite(r.get("loss"))]
        if pts:
            axes[0].plot(*zip(*pts), color=colour)
        last = next(
            (
                r
                for r in reversed(recs)
                if r.get("layers") and all(_finite(x.get("grad_norm")) for x in r["layers"])
            ),
            None,
        )
        label = name
        if last is not None:
            rows = sorted(last["layers"], key=lambda x: x["index"])
            axes[1].plot([x["index"] for x in rows], [x["grad_norm"] for x in rows], "o-", color=colour)
            label = f"{name} (gradient at step {last['step']})"
        handles[label] = Line2D([], [], color=colour)
        ent = [
            (
                r["step"],
                float(np.mean([x["attn_entropy"] for x in r["layers"] if _finite(x.get("attn_entropy"))])),
            )
            for r in recs
            if any(_finite(x.get("attn_entropy")) for x in r.get("layers") or [])
        ]
        if ent:
            axes[2].plot(*zip(*ent), color=colour)
    axes[0].set(xlabel="step", ylabel="training loss (nats per token)")
    axes[1].set(
        xlabel="stream i (0 = embeddings)", ylabel="||d loss / d x_i|| at the last finite step", yscale="log"
    )
    axes[2].set(xlabel="step", ylabel="attention entropy, mean over layers (nats)")
    axes[1].xaxis.set_major_locator(MaxNLocator(integer=True))
    return finish(fig, axes, new, "The runs overlaid", handles=handles)


def runs_page(runs: list[tuple[str, dict]], figure: PageFigure) -> str:
    """The HTML of the overlay page (every run-provided string escaped)."""
    rows = []
    for name, run in runs:
        f = run_facts(run)
        rows.append([esc(name), esc(f["lr"] or "-"), esc(f["steps"]), esc(f["final_loss"] or "-"),
                     esc(f["outcome"] or "not known"), esc(len(warnings_of(run)))])  # fmt: skip
    warn_rows = [[esc(name), esc(w["step"]), esc(w["code"]), esc(w["message"])] for name, run in runs
                 for w in warnings_of(run)]  # fmt: skip
    return "\n".join(
        [
            "<!doctype html><html><head><meta charset='utf-8'><title>depthlab runs</title>",
            f"<style>{CSS}</style></head><body><h1>depthlab runs</h1>",
            _table(["run", "learning rate", "steps", "final loss", "outcome", "warnings"], rows),
            f"<h2>{esc(figure.title)}</h2><figure><img src='{esc(figure.file)}' alt='{esc(figure.title)}'>"
            f"<figcaption>{esc(figure.caption)}</figcaption></figure>",
            "<h2>Warnings</h2>",
            _table(["run", "step", "code", "message"], warn_rows)
            if warn_rows
            else "<p class='muted'>none</p>",
            "</body></html>\n",
        ]
    )


CAPTION = (
    "Left: each run's training loss. Middle: the gradient reaching each stream at each run's last logged "
    "step where every stream's gradient was finite (a hot run's may be early). Right: the attention "
    "entropy, mean over layers; a fall toward 0 is entropy collapse (Zhai et al. 2023)."
)


def check_distinct(folders: list[str]) -> None:
    """InputError when two of ``folders`` are one folder (``A A``, ``A ./A``, a link to A): its page
    would overlay the run on itself."""
    seen: dict[str, str] = {}
    for f in folders:
        real = os.path.realpath(f)
        if real in seen:
            same = "twice" if seen[real] == f else f"twice ({printable(seen[real])} and {printable(f)})"
            verb = "names" if as_flags() else "holds"  # --run names it twice; folders holds it twice
            raise InputError(
                f"{option('runs')} {verb} the folder {printable(seen[real])} {same}; name each run once"
            )
        seen[real] = f


def render_runs(folders: list[str], out_dir: str, prepare) -> str:
    """Load the run folders, draw the overlay and write index.html into ``out_dir`` (``prepare(out_dir,
    files)`` checks and clears it first); returns the page's path."""
    check_distinct(folders)
    runs = [(os.path.basename(os.path.normpath(f)) or f, load_run(f, option("runs"))) for f in folders]
    names = [n for n, _ in runs]
    if len(set(names)) < len(names):  # two folders named alike: tell them apart by their whole paths
        runs = [(f, run) for f, (_, run) in zip(folders, runs)]
    prepare(out_dir, ("overlay_plot.png",))
    fig = overlay_plot(runs)
    fig.savefig(os.path.join(out_dir, "overlay_plot.png"), dpi=DPI, bbox_inches="tight")
    path = os.path.join(out_dir, "index.html")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(runs_page(runs, PageFigure("overlay_plot.png", title_of(fig), CAPTION)))
    os.replace(path + ".tmp", path)
    return path
