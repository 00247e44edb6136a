"""The page of one run folder: a ``depthlab train --out DIR`` run or a watched loop's ``out`` folder.

    from depthlab.report import write_run_report
    write_run_report("runs/mine")            # -> runs/mine/report/index.html (PNGs beside it)

It reads DIR/metrics.jsonl (the watcher's records, :mod:`depthlab.watch.keys`) and, where present,
watch.json (a watched loop's warnings and unigram estimate) or result.json (a trained run's outcome),
and draws: a layer x step heatmap of the gradient reaching each stream and one of each layer's update
ratio; the loss with every warning marked at its step; each layer's attention entropy and largest
attention logit over the steps; for a residual topology, its composite gain or its reads' effective depth.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from depthlab.display import esc
from depthlab.display import table as _table
from depthlab.errors import InputError, option
from depthlab.paths import check_path, printable, replace_file
from depthlab.progress import say
from depthlab.report.figures import DPI, PageFigure
from depthlab.report.html import CSS
from depthlab.report.plots import colormap, finish, panel_axes, title_of
from depthlab.report.topology_plots import topology_run
from depthlab.watch.outcome import outcome_line

if TYPE_CHECKING:
    from matplotlib.figure import Figure as MplFigure


def load_run(folder: str, who: str | None = None) -> dict:
    """{"records", "summary", "result", "config"} of a run folder (InputError without metrics.jsonl);
    ``who`` names the folder in a refusal (default: --run on the command line, folder from Python)."""
    who = who or option("run")
    check_path(folder, who)
    path = Path(folder)
    metrics = path / "metrics.jsonl"
    try:
        text = metrics.read_text(errors="replace") if metrics.is_file() else None
    except OSError as e:
        raise InputError(f"{who} {folder}: metrics.jsonl cannot be read ({e.strerror or e})") from None
    if text is None:
        raise InputError(f"{who} {folder}: no metrics.jsonl (not a depthlab train or watch folder)")
    records, skipped = read_records(text)
    if not records:
        raise InputError(
            f"{who} {folder}: metrics.jsonl holds no record yet" + (f": {skipped}" if skipped else "")
        )
    if skipped:  # said once, on stderr: the page is drawn from the records that are whole
        say(f"{who} {printable(folder)}: metrics.jsonl: {skipped}; the page shows its {len(records):,} "
            f"complete record{'s' if len(records) != 1 else ''}")  # fmt: skip

    def read(name):
        """The JSON object in ``name``, None where there is none; a damaged one is refused (its
        outcome and warnings would silently be missing from the page)."""
        if not (path / name).is_file():
            return None
        try:
            obj = json.loads((path / name).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            why = getattr(e, "strerror", None) or str(e).split(":")[0]
            raise InputError(f"{who} {printable(folder)}: {name} is damaged ({why}); restore it, or move it "
                             "away to draw the page without it") from None  # fmt: skip
        if not isinstance(obj, dict):
            raise InputError(f"{who} {printable(folder)}: {name} is damaged (a JSON {type(obj).__name__}, "
                             "not an object); restore it, or move it away to draw the page without it")  # fmt: skip
        return obj

    return {
        "records": records,
        "summary": read("watch.json"),
        "result": read("result.json"),
        "config": read("config.json"),
    }


def read_records(text: str) -> tuple[list[dict], str]:
    """The records of metrics.jsonl's ``text`` (a JSON object with a numeric step per line), and what was
    skipped, in words ("" for nothing): the last line cut short (a run killed while it wrote it), or
    lines that are no record (damaged, or written by hand)."""
    records, bad = [], []
    lines = text.splitlines()
    for i, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if _is_record(record):
            records.append(record)
        elif line.strip():
            bad.append(i)
    cut = bool(bad) and bad[-1] == len(lines) and not text.endswith("\n")
    said = ["its last line is cut short (the run stopped while writing it)"] if cut else []
    if cut:
        bad.pop()
    if bad:
        where = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
        said.append(
            f"line{'s' if len(bad) > 1 else ''} {where} {'are' if len(bad) > 1 else 'is'} no record, skipped"
        )
    return records, "; ".join(said)


def _is_record(record) -> bool:
    """Whether a parsed line is a record the page can draw: an object with a numeric step and, where it
    has per-layer rows, a list of objects each with its integer index."""
    if not isinstance(record, dict):
        return False
    step, layers = record.get("step"), record.get("layers")
    if not isinstance(step, (int, float)) or isinstance(step, bool):
        return False
    if layers is None:
        return True
    return isinstance(layers, list) and all(
        isinstance(row, dict) and type(row.get("index")) is int and row["index"] >= 0 for row in layers
    )


def _matrix(records: list[dict], key: str) -> tuple[np.ndarray, list[int]]:
    """(layers x steps array of ``key``, NaN where missing; the steps) over records that have layers."""
    rows = [r for r in records if r.get("layers")]
    n = max(len(r["layers"]) for r in rows)
    m = np.full((n, len(rows)), np.nan)
    for j, r in enumerate(rows):
        for row in r["layers"]:
            v = row.get(key)
            if isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
                m[row["index"], j] = v
    return m, [r["step"] for r in rows]


def heatmaps(run: dict, axes=None) -> MplFigure | None:
    """Gradient reaching each stream and each layer's update ratio, layer x step (log colour)."""
    from matplotlib.colors import LogNorm  # matplotlib is imported when a figure is drawn

    if not any(r.get("layers") for r in run["records"]):
        return None
    fig, axes, new = panel_axes(axes, 2, 2, 6, 4.2)
    for ax, key, title in (
        (axes[0], "grad_norm", "gradient reaching stream i, ||d loss / d x_i||"),
        (axes[1], "update_ratio", "update ratio of layer i, ||x_i - x_(i-1)|| / ||x_(i-1)||"),
    ):
        m, steps = _matrix(run["records"], key)
        finite = m[np.isfinite(m)]
        if not finite.size:
            ax.set_visible(False)
            continue
        norm = LogNorm(vmin=finite.min(), vmax=max(finite.max(), finite.min() * 1.0001))
        im = ax.imshow(m, aspect="auto", origin="lower", norm=norm, cmap="viridis", interpolation="nearest")
        ticks = np.linspace(0, len(steps) - 1, min(len(steps), 8)).round().astype(int)
        ax.set_xticks(ticks, [str(steps[t]) for t in ticks])
        ax.set_xlabel("step")
        ax.set_ylabel("stream i (0 = embeddings)")
        ax.set_title(title, fontsize=10)
        fig.colorbar(im, ax=ax)
    return finish(fig, axes, new, "Per layer over training", handles={})


def loss_plot(run: dict, axes=None) -> MplFigure | None:
    """The training (and validation) loss with each warning marked at its step."""
    recs = [r for r in run["records"] if r.get("loss") is not None]
    if not recs:
        return None
    fig, (ax,), new = panel_axes(axes, 1, 1, 12, 3.6)
    ax.plot([r["step"] for r in recs], [r["loss"] for r in recs], color="#1f77b4", label="training loss")
    val = [r for r in run["records"] if r.get("val_loss") is not None]
    if val:
        ax.plot(
            [r["step"] for r in val],
            [r["val_loss"] for r in val],
            "o",
            color="#2ca02c",
            label="validation loss",
        )
    unigram = (run["summary"] or {}).get("unigram_loss") or (run["result"] or {}).get("unigram_loss")
    if unigram:
        ax.axhline(unigram, color="#888", ls="--", lw=1, label=f"unigram level {unigram:.2f}")
    at: dict[int, list[str]] = {}
    for w in warnings_of(run):
        at.setdefault(w["step"], []).append(w["code"])
    for step, codes in at.items():  # one line and one label per step, however many warnings it raised
        ax.axvline(step, color="#d62728", ls=":", lw=1.2)
        ax.annotate(", ".join(codes), (step, 0.98), xycoords=("data", "axes fraction"), rotation=90,
                    va="top", ha="right", fontsize=8, color="#d62728")  # fmt: skip
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    ax.legend(loc="upper right", fontsize=8)
    return finish(fig, [ax], new, "Loss, with the warnings", handles={})


def attention_plot(run: dict, axes=None) -> MplFigure | None:
    """Each layer's attention entropy and largest attention logit over the logged steps."""
    ent, steps = (
        _matrix(run["records"], "attn_entropy")
        if any(r.get("layers") for r in run["records"])
        else (None, [])
    )
    if ent is None or not np.isfinite(ent).any():
        return None
    peak, _ = _matrix(run["records"], "attn_logit_max")
    fig, axes, new = panel_axes(axes, 2, 2, 6, 3.8)
    colours = colormap("plasma")(np.linspace(0, 0.9, ent.shape[0]))
    for i in range(1, ent.shape[0]):
        axes[0].plot(steps, ent[i], color=colours[i], label=f"layer {i}")
        axes[1].plot(steps, peak[i], color=colours[i])
    axes[0].set_ylabel("attention entropy (nats)")
    axes[1].set_ylabel("largest attention logit")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7, ncol=2)
    return finish(fig, axes, new, "Attention entropy and logits per layer", handles={})


# The run page's figures in page order: (drawing function, caption).
RUN_FIGURES = (
    (
        heatmaps,
        "Each column is a logged step, each row a stream (log colour scale). A gradient fading toward the "
        "bottom rows means the bottom layers hardly learn; a bright band in the update ratio is a layer "
        "rewriting the stream.",
    ),
    (
        loss_plot,
        "The training loss (mean since the previous logged step); each red dotted line is a warning, at the "
        "step it was raised, named by its code (the table above gives its numbers).",
    ),
    (
        attention_plot,
        "Entropy falling toward 0 means each query attends to one key (entropy collapse, Zhai et al. 2023); "
        "a largest logit growing by orders of magnitude is attention-logit growth (Dehghani et al. 2023).",
    ),
    (
        topology_run,
        "A residual topology's skip paths: the largest row (forward) and column (backward) sum of the product "
        "of the H_res maps up to the top, and by depth; 1 means they neither amplify nor shrink the stream, "
        "growth is hyper-connections' instability (Xie et al. 2025), which mHC's doubly stochastic maps rule "
        "out. For DenseFormer and Attention Residuals: how many earlier layers each layer's read averages.",
    ),
)
RUN_FIGURE_FILES = tuple(f"{draw.__name__}.png" for draw, _ in RUN_FIGURES)


def warnings_of(run: dict) -> list[dict]:
    seen = [w for r in run["records"] for w in r.get("warnings") or []]
    extra = [w for w in (run["summary"] or {}).get("warnings") or [] if w not in seen]
    return sorted(seen + extra, key=lambda w: w["step"])


def run_facts(run: dict) -> dict:
    """{"lr", "steps", "final_loss", "outcome"} of a run folder: the learning rate (its first and last
    logged values, one when equal), the updates run ("2 of 100" where a trained run stopped short of its
    budget: diverged, or still running), the final loss (validation, else the last logged
    training loss) and the outcome line (result.json's for a trained run, watch.json's for a watched one)."""
    recs, res, summ = run["records"], run["result"] or {}, run["summary"] or {}
    lrs = [r["lr"] for r in recs if isinstance(r.get("lr"), (int, float))]
    lr = None if not lrs else (f"{lrs[0]:.3g}" if lrs[0] == lrs[-1] else f"{lrs[0]:.3g} -> {lrs[-1]:.3g}")
    losses = [r["loss"] for r in recs if isinstance(r.get("loss"), (int, float))]
    val = res.get("val_loss")
    final = val if isinstance(val, (int, float)) and math.isfinite(val) else (losses[-1] if losses else None)
    which = "validation" if final is not None and final is val else "training"
    outcome = {k: res.get(k) for k in ("outcome", "reason", "step")} if res else summ.get("outcome")
    done = summ.get("steps") or recs[-1]["step"]
    planned = ((run.get("config") or {}).get("train") or {}).get("steps")  # a trained run's budget
    ran = f"{done:,} of {planned:,}" if isinstance(planned, int) and planned != done else f"{done:,}"
    return {
        "lr": lr,
        "steps": ran,
        "final_loss": None if final is None else f"{final:.4g} ({which})",
        "outcome": outcome_line(outcome) if outcome else None,
    }


def run_page(run: dict, folder: str, figures: list[PageFigure]) -> str:
    """The HTML of the run page (every run-provided string escaped)."""
    last, facts_of = run["records"][-1], run_facts(run)
    facts = [
        ["folder", esc(folder)],
        ["outcome", esc(facts_of["outcome"] or "not known")],
        ["learning rate", esc(facts_of["lr"] or "not logged")],
        [
            "steps",
            esc(f"{facts_of['steps']} ({len(run['records'])} logged, the last at step {last['step']})"),
        ],
        ["final loss", esc(facts_of["final_loss"] or "not logged")],
    ]
    if run["summary"]:
        facts.append(
            ["watched stack", esc(f"{run['summary'].get('stack')} ({run['summary'].get('n_layers')} layers)")]
        )
        facts += [["blind spot", esc(g["message"])] for g in run["summary"].get("blind_spots") or []]
    warn_rows = [[esc(w["step"]), esc(w["code"]), esc(w["message"])] for w in warnings_of(run)]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>depthlab run</title>",
        f"<style>{CSS}</style></head><body><h1>depthlab run</h1>",
        _table(["", ""], facts),
        "<h2>Warnings</h2>",
        _table(["step", "code", "message"], warn_rows) if warn_rows else "<p class='muted'>none raised</p>",
    ]
    for f in figures:
        parts.append(
            f"<h2>{esc(f.title)}</h2><figure><img src='{esc(f.file)}' alt='{esc(f.title)}'>"
            f"<figcaption>{esc(f.caption)}</figcaption></figure>"
        )
    parts.append("</body></html>\n")
    return "\n".join(parts)


def render_run(run: dict, folder: str, out_dir: str, prepare) -> str:
    """Draw and save the figures and write index.html into ``out_dir`` (``prepare(out_dir, files)``
    checks and clears it first); returns the page's path."""
    prepare(out_dir, RUN_FIGURE_FILES)
    figures = []
    for draw, caption in RUN_FIGURES:
        fig = draw(run)
        if fig is not None:
            name = f"{draw.__name__}.png"
            fig.savefig(os.path.join(out_dir, name), dpi=DPI, bbox_inches="tight")
            figures.append(PageFigure(name, title_of(fig), caption))
    path = os.path.join(out_dir, "index.html")
    replace_file(path, run_page(run, folder, figures), option("out"))
    return path
