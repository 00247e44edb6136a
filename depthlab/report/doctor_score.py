"""How well an at-init prediction foretold the outcomes of a study's runs: the doctor's score.

The doctor predicts "trains" or "fails" (:func:`depthlab.doctor.checks.prediction`); a run's outcome is
one of trained, undertrained, stalled, diverged (:mod:`depthlab.watch.outcome`). A prediction is a hit
when "trains" meets "trained" or "fails" meets any other outcome. :func:`score` gives the accuracy, the
confusion table (predictions down, outcomes across), per outcome its recall (the share of its runs the
doctor got right), per prediction its precision (the share of runs so predicted that went that way),
and the baseline that always answers the majority: a doctor is worth reading only above it. Every
share comes with its 95% Wilson interval (:func:`depthlab.intervals.wilson_interval`; runs are counted
as independent, though runs of one configuration at other lrs or warmups are alike).
"""

from __future__ import annotations

from depthlab.doctor.checks import prediction
from depthlab.intervals import wilson_interval
from depthlab.watch.outcome import OUTCOMES

PREDICTIONS = ("trains", "fails")


def expected(outcome: str) -> str:
    """The prediction an outcome calls for: "trains" for trained, "fails" for anything else."""
    return "trains" if outcome == "trained" else "fails"


def score(pairs: list[tuple[str, str]]) -> dict:
    """{"runs", "hits", "accuracy", "interval": (low, high) or None, "confusion": {prediction: {outcome:
    n}}, "recall": {outcome: share or None}, "recall_interval": {outcome: (low, high) or None},
    "precision": {prediction: share or None}, "baseline": {"predicts", "hits", "accuracy"}} of
    (prediction, outcome) pairs."""
    n = len(pairs)
    hits = sum(p == expected(o) for p, o in pairs)
    confusion = {p: {o: sum(1 for q, a in pairs if q == p and a == o) for o in OUTCOMES} for p in PREDICTIONS}
    recall, recall_interval = {}, {}
    for o in OUTCOMES:
        runs = [p for p, a in pairs if a == o]
        right = sum(p == expected(o) for p in runs)
        recall[o] = right / len(runs) if runs else None
        recall_interval[o] = wilson_interval(right, len(runs)) if runs else None
    precision = {}
    for p in PREDICTIONS:
        said = [a for q, a in pairs if q == p]
        precision[p] = sum(expected(a) == p for a in said) / len(said) if said else None
    majority = max(PREDICTIONS, key=lambda p: sum(expected(o) == p for _, o in pairs))
    base = sum(expected(o) == majority for _, o in pairs)
    return {
        "runs": n,
        "hits": hits,
        "accuracy": hits / n if n else None,
        "interval": wilson_interval(hits, n) if n else None,
        "confusion": confusion,
        "recall": recall,
        "recall_interval": recall_interval,
        "precision": precision,
        "baseline": {"predicts": majority, "hits": base, "accuracy": base / n if n else None},
    }


def doctor_pairs(runs: list[dict]) -> list[tuple[str, str]]:
    """(prediction, outcome) for every finished run that has both an at-init probe and an outcome (store
    run dicts with "probe" loaded, as :func:`depthlab.report.load` gives them)."""
    out = []
    for r in runs:
        if r.get("status") != "done" or not r.get("probe") or r.get("outcome") not in OUTCOMES:
            continue
        p = prediction(r["probe"], int(r["config"]["train"].get("warmup") or 0))
        if p is not None:
            out.append((p, r["outcome"]))
    return out


def interval_text(share, interval) -> str:
    """'75% (95% interval 47-91%)', or '-' without a share."""
    if share is None:
        return "-"
    return f"{share:.0%} (95% interval {interval[0]:.0%}-{interval[1]:.0%})"


def format_score(s: dict, baselines: dict | None = None) -> str:
    """The score as text: the accuracy with its interval against the majority baseline (and against
    ``baselines``: {name: score of its predictions}), the confusion table, recall and precision, and
    each outcome's recall with its interval."""
    pct = lambda v: "-" if v is None else f"{v:.0%}"  # noqa: E731
    lines = [
        f"{s['hits']} of {s['runs']} outcomes predicted: {interval_text(s['accuracy'], s.get('interval'))}; "
        f"always answering '{s['baseline']['predicts']}' gets {s['baseline']['hits']} ({pct(s['baseline']['accuracy'])})",
    ]
    for name, b in (baselines or {}).items():
        lines.append(
            f"baseline {name}: {b['hits']} of {b['runs']}, {interval_text(b['accuracy'], b.get('interval'))}"
        )
    lines.append(f"{'predicted':10}" + "".join(f"{o:>14}" for o in OUTCOMES) + f"{'precision':>12}")
    for p in PREDICTIONS:
        row = "".join(f"{s['confusion'][p][o]:>14}" for o in OUTCOMES)
        lines.append(f"{p:10}{row}{pct(s['precision'][p]):>12}")
    lines.append(f"{'recall':10}" + "".join(f"{pct(s['recall'][o]):>14}" for o in OUTCOMES))
    ri = s.get("recall_interval") or {}
    lines.append(
        "recall by outcome: "
        + "; ".join(
            f"{o} {interval_text(s['recall'][o], ri.get(o))}" for o in OUTCOMES if s["recall"][o] is not None
        )
    )
    return "\n".join(lines)
