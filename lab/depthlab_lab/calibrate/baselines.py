"""The baselines a doctor must beat, chosen on the tuning grid and applied to the held-out runs.

- **always "trains"**: what a reader who ignores the doctor assumes.
- **wrapping x learning rate lookup**: per (wrapping, lr) of the tuning runs, the prediction most of
  them called for (:func:`depthlab.report.doctor_score.expected`; ties go to "trains"); a held-out run takes
  the entry of its wrapping at the tuning lr nearest its own on a log scale, and "trains" for a
  wrapping the tuning grid does not have. A doctor that does not beat it is not worth its probe: the
  lookup needs no probe at all.
"""

from __future__ import annotations

import math

from depthlab.report.doctor_score import expected
from depthlab.watch.outcome import OUTCOMES


def _key(run: dict) -> tuple[str, float]:
    return run["config"]["model"].get("wrap"), float(run["config"]["train"]["lr"])


def _finished(runs: list[dict]) -> list[dict]:
    return [r for r in runs if r.get("status") == "done" and r.get("outcome") in OUTCOMES]


def lookup_table(tuning_runs: list[dict]) -> dict[tuple[str, float], str]:
    """(wrap, lr) -> the majority prediction over the tuning runs with that wrapping and lr."""
    votes: dict[tuple[str, float], list[int]] = {}
    for r in _finished(tuning_runs):
        v = votes.setdefault(_key(r), [0, 0])
        v[expected(r["outcome"]) == "fails"] += 1
    return {k: "fails" if fails > trains else "trains" for k, (trains, fails) in votes.items()}


def lookup(table: dict[tuple[str, float], str], wrap: str, lr: float) -> str:
    """The table's prediction for (wrap, lr): its wrapping's entry at the nearest lr in log10."""
    lrs = [k_lr for k_wrap, k_lr in table if k_wrap == wrap]
    if not lrs:
        return "trains"
    near = min(lrs, key=lambda x: abs(math.log10(x) - math.log10(lr)))
    return table[(wrap, near)]


def baseline_pairs(tuning_runs: list[dict], heldout_runs: list[dict]) -> dict[str, list[tuple[str, str]]]:
    """{"always 'trains'": pairs, "wrapping x lr lookup": pairs}: (prediction, outcome) per finished
    held-out run, for :func:`depthlab.report.doctor_score.score`."""
    table = lookup_table(tuning_runs)
    held = _finished(heldout_runs)
    return {
        "always 'trains'": [("trains", r["outcome"]) for r in held],
        "wrapping x lr lookup": [(lookup(table, *_key(r)), r["outcome"]) for r in held],
    }
