"""Does a warning in the first 10% of a run's steps foretell its outcome? Precision and recall per outcome.

Two forecasters read only what a run logged up to step ceil(share x steps):

- **loss alone** (the baseline): "diverged" if the loss was non-finite or spiked (the watcher's two loss
  rules), else "stalled" if the loss at the mark is still >= ``stall_ratio`` x the unigram loss, else
  "trained";
- **watch**: the same, plus the per-layer warnings: "diverged" also on attention-entropy collapse,
  attention-logit growth, output-logit growth or an update-ratio spike; "stalled" also on gradient
  starvation.

Warnings are recomputed from the stored records (:func:`depthlab.watch.replay`) with the thresholds
under test, so thresholds are chosen on one study (:func:`tune`) and measured on another
(:func:`forecast_table`) without re-running either. Outcomes are the runs' own (trained / stalled /
diverged, :mod:`depthlab.watch.outcome`); any other labelling works the same way: the functions take
plain run dicts {"outcome", "steps", "unigram_loss", "records"}.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

from depthlab.errors import option
from depthlab.study.store import Store
from depthlab.watch import Thresholds, replay
from depthlab.watch.rules import LOSS_CODES

OUTCOMES = ("trained", "stalled", "diverged")
STALL_CODES = ("gradient-starvation",)


def load_runs(db: str, study: str | int | None, flag: str | None = None) -> list[dict]:
    """The finished runs of ``study`` as forecast inputs: outcome (and the step it was decided at), steps,
    unigram loss and the records (metrics rows with their extra keys and per-layer rows), in step order.
    ``flag``: how a missing study is named (default ``--study``)."""
    with Store(db, create=False) as store:
        sid = store.find_study(study, flag)["id"]
        out = []
        for r in store.runs(sid):
            if r["status"] != "done":
                continue
            layers: dict[int, list] = {}
            for row in store.layer_metrics(r["id"]):
                layers.setdefault(row["step"], []).append({"index": row["layer"], **row})
            records = []
            for m in store.metrics(r["id"]):
                extra = json.loads(m.get("extra_json") or "{}")
                records.append({**m, **extra, "layers": layers.get(m["step"], [])})
            steps = r["config"]["train"]["steps"]
            out.append(
                {
                    "outcome": r["outcome"],
                    "outcome_step": r.get("outcome_step"),
                    "steps": steps,
                    "unigram_loss": r["unigram_loss"],
                    "records": records,
                }
            )
        return out


def predict(run: dict, thresholds: Thresholds, stall_ratio: float, share: float, layers: bool) -> str:
    """The forecast of one run from its first ``share`` of steps; ``layers``: use the per-layer warnings."""
    mark = math.ceil(share * run["steps"])
    early = [r for r in run["records"] if r["step"] <= mark]
    codes = {w["code"] for w in replay(early, thresholds)}
    if not layers:
        codes &= set(LOSS_CODES)
    stall_codes = codes & set(STALL_CODES)
    if codes - stall_codes:
        return "diverged"
    losses = [r.get("loss") for r in early if r.get("loss") is not None]
    unigram = run.get("unigram_loss")
    if stall_codes or (losses and unigram and losses[-1] >= stall_ratio * unigram):
        return "stalled"
    return "trained"


def scores(runs: list[dict], predictions: list[str]) -> dict[str, dict]:
    """Per outcome: runs with it, predicted, hits, precision (None when never predicted), recall (None
    when no run had it)."""
    out = {}
    for o in OUTCOMES:
        actual = sum(r["outcome"] == o for r in runs)
        said = sum(p == o for p in predictions)
        hits = sum(p == o and r["outcome"] == o for r, p in zip(runs, predictions))
        out[o] = {"runs": actual, "predicted": said, "hits": hits,
                  "precision": hits / said if said else None, "recall": hits / actual if actual else None}  # fmt: skip
    return out


def forecast_table(runs: list[dict], thresholds: Thresholds | None = None, stall_ratio: float = 1.1,
                   share: float = 0.1) -> dict:  # fmt: skip
    """{"runs": n, "share", "watch": scores, "loss": scores}: both forecasters on ``runs``."""
    th = thresholds or Thresholds()
    table = {"runs": len(runs), "share": share, "stall_ratio": stall_ratio}
    for name, layers in (("watch", True), ("loss", False)):
        table[name] = scores(runs, [predict(r, th, stall_ratio, share, layers) for r in runs])
    return table


# The candidates tune() compares: the rules' defaults, and each per-layer rule made stricter or looser.
CANDIDATES = [
    {},
    {"entropy_share": 0.1}, {"entropy_share": 0.35},
    {"attn_logit_factor": 2.0}, {"attn_logit_factor": 10.0},
    {"lse_rise": 2.0}, {"lse_rise": 10.0},
    {"update_factor": 5.0}, {"update_factor": 30.0},
    {"starved_ratio": 0.05}, {"starved_ratio": 0.003},
    {"spike_ratio": 1.5}, {"spike_ratio": 3.0},
]  # fmt: skip
STALL_RATIOS = (1.0, 1.05, 1.1, 1.2, 1.3)


def tune(runs: list[dict], share: float = 0.1) -> tuple[Thresholds, float, float]:
    """(thresholds, stall_ratio, macro-F1) with the best mean F1 over the outcomes of the watch forecast
    on ``runs`` (the tuning study), trying :data:`CANDIDATES` x :data:`STALL_RATIOS`."""
    best = None
    for change in CANDIDATES:
        th = replace(Thresholds(), **change)
        for ratio in STALL_RATIOS:
            s = forecast_table(runs, th, ratio, share)["watch"]
            f1 = sum(_f1(v) for v in s.values()) / len(s)
            if best is None or f1 > best[2]:
                best = (th, ratio, f1)
    return best


def _f1(v: dict) -> float:
    p, r = v["precision"] or 0.0, v["recall"] or 0.0
    return 2 * p * r / (p + r) if p + r else 0.0


def format_table(table: dict) -> str:
    """The table as text: one line per outcome, both forecasters side by side."""
    lines = [
        f"{table['runs']} runs; forecast from the first {table['share']:.0%} of each run's steps",
        f"{'outcome':10} {'runs':>5}   {'watch: precision  recall':>26}   {'loss alone: precision  recall':>31}",
    ]
    fmt = lambda v: "   -  " if v is None else f"{v:6.2f}"  # noqa: E731
    for o in OUTCOMES:
        w, b = table["watch"][o], table["loss"][o]
        lines.append(
            f"{o:10} {w['runs']:5d}   {fmt(w['precision']):>17} {fmt(w['recall']):>8}   "
            f"{fmt(b['precision']):>22} {fmt(b['recall']):>8}"
        )
    return "\n".join(lines)


def forecast(db: str, study: str | int, tune_study: str | int, share: float = 0.1) -> dict:
    """Thresholds tuned on ``tune_study``, then both forecasters measured on ``study`` (held out): the
    forecast_table plus "tuned" (the thresholds and stall ratio chosen, the tuning study's F1) and "text"."""
    tuning = load_runs(db, tune_study, option("tune"))
    th, ratio, f1 = tune(tuning, share)
    held = load_runs(db, study)
    table = forecast_table(held, th, ratio, share)
    table["tuned"] = {
        "thresholds": th.__dict__,
        "stall_ratio": ratio,
        "tuning_runs": len(tuning),
        "tuning_macro_f1": f1,
    }
    table["text"] = format_table(table)
    return table
