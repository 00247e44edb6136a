"""The report page: one self-contained index.html (inline CSS, no script, no network), PNGs beside it.

Every string that comes from a config, a run or the store passes through :func:`esc`.
"""

from __future__ import annotations

import time

import yaml

from depthlab.display import esc, table
from depthlab.display import state_badge as _state
from depthlab.report.data import StudyData
from depthlab.report.doctor_score import PREDICTIONS, doctor_pairs, expected, score
from depthlab.report.figures import PageFigure
from depthlab.report.grouping import depth, predicted, state
from depthlab.report.lr_tables import lr_section
from depthlab.report.summary import outcome_tables
from depthlab.watch.outcome import OUTCOMES
from depthlab.words import plural

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #444; max-width: 60em; } .muted { color: #777; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; }
"""

READING = (
    "The table above and the outcome map below it: each cell is a wrapping at a depth (or a learning rate), "
    "green where the run trained, light green where it was still falling when it ended (undertrained), "
    "orange where it stalled (at the unigram level, predicting only common bytes, or flat above it), red "
    "where it diverged. With a learning-rate axis, the learning-rate curves and their table show how "
    "forgiving each wrapping is. The loss curves show how each run got there. The per-layer figures explain "
    "why: a gradient that vanishes toward the bottom layers, or a stream whose scale grows with depth. The "
    "verdict table asks whether the doctor's one-batch probe at init predicted the outcome before any training."
)


def _num(v, fmt: str = ".3f") -> str:
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


def figure_html(fig: PageFigure) -> str:
    return (
        f'<h2>{esc(fig.title)}</h2>\n<figure><img src="{esc(fig.file)}" alt="{esc(fig.title)}">'
        f"<figcaption>{esc(fig.caption)}</figcaption></figure>"
    )


def _verdict_row(data: StudyData, r: dict, pred: str | None, actual: str) -> list[str]:
    """One row of the verdict table: configuration, verdict at init, prediction, outcome, agreement."""
    agree = ""
    if pred is not None and actual in OUTCOMES:
        agree = "yes" if pred == expected(actual) else "no"
    verdict = esc(r.get("probe_level") or "-")
    if r.get("probe_codes"):
        verdict += f" ({esc(r['probe_codes'])})"
    if r.get("probe_error"):
        verdict = f'<span class="muted">no probe: {esc(r["probe_error"])}</span>'
    lay = data.layout
    return [
        esc(lay.row(r)),
        str(depth(r)),
        esc(lay.setting(r)),
        verdict,
        esc(pred or "-"),
        _state(actual),
        agree,
    ]


def verdict_section(data: StudyData) -> str:
    """The doctor's verdict at init beside each run's outcome; its score (depthlab.report.doctor_score)."""
    rows = [_verdict_row(data, r, predicted(r, r.get("probe")), state(r)) for r in data.runs]
    s = score(doctor_pairs(data.runs))
    pct = lambda v: "-" if v is None else f"{v:.0%}"  # noqa: E731
    if s["runs"]:
        summary = (
            f"The verdict predicted {s['hits']} of {s['runs']} outcomes ({pct(s['accuracy'])}); always "
            f"answering '{s['baseline']['predicts']}' would get {s['baseline']['hits']} "
            f"({pct(s['baseline']['accuracy'])})."
        )
    else:
        summary = "No run has both a probe and an outcome yet."
    conf = [
        [esc(p)] + [str(s["confusion"][p][o]) for o in OUTCOMES] + [pct(s["precision"][p])]
        for p in PREDICTIONS
    ]
    conf.append(["recall"] + [pct(s["recall"][o]) for o in OUTCOMES] + [""])
    head = ["wrapping", "layers", "setting", "verdict at init", "predicts", "outcome", "agree"]
    return (
        "<h2>Know before you train: the verdict at init vs the outcome</h2>\n"
        "<p>Each configuration is probed once at init (one batch, forward and backward, and Adam's first "
        "update at the run's learning rate) before it trains. A verdict predicts a failure when it has an "
        "error (a learning rate too large for the stack, a vanishing gradient, ...), or says "
        "<code>warmup-required</code> for a run without warmup; otherwise it predicts that the run trains. "
        f"A hit is trains/trained or fails/any other outcome. {esc(summary)}</p>\n"
        + table(["predicted \\ outcome", *OUTCOMES, "precision"], conf, num={1, 2, 3, 4, 5})
        + "\n"
        + table(head, rows, num={1})
    )


def runs_section(data: StudyData) -> str:
    """Every run: its configuration, status/outcome, reason, escape step (the first logged step from which
    its loss stayed below the unigram band: a late escape from the plateau is not a stall), losses,
    speed, time and host."""
    lay, rows = data.layout, []
    for i, r in enumerate(data.runs, 1):
        reason = r.get("reason") or (r.get("error") or "").strip().splitlines()[-1:] or [""]
        reason = reason if isinstance(reason, str) else reason[0]
        rows.append(
            [
                str(i),
                esc(lay.row(r)),
                str(depth(r)),
                esc(lay.setting(r)),
                esc(r["config"]["train"].get("seed")),
                _state(state(r)),
                esc(reason),
                esc(r.get("escape_step") if r.get("escape_step") is not None else "-"),
                _num(r.get("final_train_loss")),
                _num(r.get("val_loss")),
                _num(r.get("val_bpb")),
                _num(r.get("tokens_per_s"), ".0f"),
                _num(r.get("seconds"), ".1f"),
                esc(r.get("host") or "-"),
                f"<code>{esc(r['config_hash'])}</code>",
            ]
        )
    head = [
        "#",
        "wrapping",
        "layers",
        "setting",
        "seed",
        "outcome",
        "reason",
        "left the unigram band at step",
        "train loss",
        "val loss",
        "val bpb",
        "tokens/s",
        "seconds",
        "host",
        "config hash",
    ]
    return "<h2>Every run</h2>\n" + table(head, rows, num={0, 2, 7, 8, 9, 10, 11, 12})


def page(data: StudyData, figures: list[PageFigure]) -> str:
    """The whole index.html as a string."""
    counts = ", ".join(f"{n} {esc(s)}" for s, n in sorted(data.counts().items()))
    config = yaml.safe_dump(data.study["config"], sort_keys=False, default_flow_style=None)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>depthlab study {esc(data.name)}</title><style>{CSS}</style></head><body>",
        f"<h1>depthlab study: {esc(data.name)}</h1>",
        f"<p>{esc(data.study['config'].get('description', ''))}</p>",
        f'<p class="muted">{plural(len(data.runs), "run")} ({counts}); store {esc(data.db)}; '
        f"report written {esc(time.strftime('%Y-%m-%d %H:%M:%S'))}.</p>",
        "<h2>Outcome per cell (final validation loss)</h2>",  # the answer first: as the terminal's summary
        *outcome_tables(data),
        f"<h2>How to read this report</h2><p>{esc(READING)}</p>",
        *[figure_html(f) for f in figures],
        lr_section(data),
        verdict_section(data),
        runs_section(data),
        f"<h2>The study's configuration</h2><pre>{esc(config)}</pre>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
