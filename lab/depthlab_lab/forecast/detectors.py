"""The divergence-detector benchmark: recall, precision and lead time of each detector on a study's runs.

A run is a positive when its outcome is ``diverged`` (:mod:`depthlab.watch.outcome`; the run stopped
at ``outcome_step``). A detector's first alarm (:data:`depthlab.watch.detectors.DETECTORS`) is

- a hit on a diverged run when it comes at or before the outcome step (lead time = outcome step - alarm
  step, in updates), a miss when it comes later or never;
- a false alarm on any other run, whenever it comes.

Recall = hits / diverged runs and precision = hits / (hits + false alarms), each with Wilson's 95%
interval (:func:`depthlab.intervals.wilson_interval`); the lead time is the median over hits and the
mean with its t-interval (:func:`depthlab.intervals.mean_interval`). Nothing here chooses a threshold:
the detectors keep their published parameters (or depthlab's defaults) and the grid is held out.
"""

from __future__ import annotations

import statistics

from depthlab.intervals import mean_interval, wilson_interval
from depthlab.watch.detectors import DETECTORS


def score(runs: list[dict], detect) -> dict:
    """One detector on ``runs`` (dicts with "outcome", "outcome_step", "records"): counts, recall,
    precision (None when it never fired), their Wilson intervals, and the lead times of its hits."""
    positives = hits = false_alarms = 0
    leads = []
    for run in runs:
        alarm = detect(run["records"])
        if run["outcome"] == "diverged":
            positives += 1
            end = run.get("outcome_step") or run["records"][-1]["step"]
            if alarm is not None and alarm <= end:
                hits += 1
                leads.append(end - alarm)
        elif alarm is not None:
            false_alarms += 1
    fired = hits + false_alarms
    lead = mean_interval(leads) if len(leads) >= 2 else None
    return {
        "runs": len(runs),
        "diverged": positives,
        "hits": hits,
        "false_alarms": false_alarms,
        "recall": hits / positives if positives else None,
        "recall_interval": wilson_interval(hits, positives) if positives else None,
        "precision": hits / fired if fired else None,
        "precision_interval": wilson_interval(hits, fired) if fired else None,
        "lead_median": statistics.median(leads) if leads else None,
        "lead_mean_interval": lead.to_dict() if lead is not None else None,
        "leads": leads,
    }


def benchmark(runs: list[dict], detectors: dict | None = None) -> dict[str, dict]:
    """:func:`score` of every detector (default all of DETECTORS) on ``runs``."""
    return {name: score(runs, detect) for name, detect in (detectors or DETECTORS).items()}


def format_benchmark(table: dict[str, dict]) -> str:
    """The benchmark as a Markdown table (one row per detector)."""
    any_row = next(iter(table.values()))
    lines = [
        f"{any_row['runs']} runs, {any_row['diverged']} diverged; intervals 95% (Wilson for proportions, t for "
        "the mean lead time)",
        "",
        "| detector | hits | false alarms | recall | precision | lead time, median (mean [interval]) |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in table.items():
        lines.append(
            f"| {name} | {s['hits']}/{s['diverged']} | {s['false_alarms']} | "
            f"{_share(s['recall'], s['recall_interval'])} | {_share(s['precision'], s['precision_interval'])} | "
            f"{_lead(s)} |"
        )
    return "\n".join(lines)


def _share(value, interval) -> str:
    if value is None:
        return "-"
    return f"{value:.2f} [{interval[0]:.2f}, {interval[1]:.2f}]"


def _lead(s: dict) -> str:
    if s["lead_median"] is None:
        return "-"
    iv = s["lead_mean_interval"]
    if iv is None:
        return f"{s['lead_median']:g} (one hit)"
    high = "inf" if iv["high"] is None else f"{iv['high']:.1f}"
    low = "-inf" if iv["low"] is None else f"{iv['low']:.1f}"
    return f"{s['lead_median']:g} ({iv['mean']:.1f} [{low}, {high}])"
