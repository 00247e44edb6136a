"""A held-out grid across width scored under each registration of the doctor's rules, for ``depthlab reproduce doctor``.

The rules a held-out grid is scored with were registered (committed) before any of its runs; the
first grid across width saw them revised twice before any of its runs, each time in the grid's own file
with the reason: first the rules fitted on three tuning studies, then on four (a 6-layer part at width
512 added), then with the step-size rule's error moved from the fitted limit to the band's high end.
Each grid's score of record is under its record of record (:mod:`depthlab_lab.docgen.doctor_heldout`); the
earlier registrations' records are kept beside it (for the first grid, ``REGISTRATIONS``) and the
held-out runs are scored under each, so that a reader sees what every registration would have said.
Only the learning-rate verdict reads the fitted limits: under a record other than the doctor's current
one it is taken again from the probe's measurements (each held-out run is probed once, with the current
code; :func:`under_record`), every other verdict kept.

:func:`versus_lookup` gives the doctor's gain over the wrapping x lr lookup on the same runs, with
Newcombe's interval for a paired difference (:func:`depthlab.intervals.paired_difference_interval`).
"""

from __future__ import annotations

import os

from depthlab.doctor.lr_limit import learning_rate
from depthlab.doctor.record import load_record
from depthlab.intervals import paired_difference_interval
from depthlab.probe.result import ProbeResult
from depthlab.report.doctor_score import doctor_pairs, expected, score
from depthlab.report.grouping import predicted
from depthlab.watch.outcome import OUTCOMES
from depthlab_lab import RECORDS
from depthlab_lab.calibrate.baselines import lookup, lookup_table

PROBE_DIR = str(RECORDS)  # where the records of the earlier registrations are kept
# The first held-out grid across width's earlier registrations, oldest first: (label, record path).
REGISTRATIONS = (
    (
        "first registration: fitted on three tuning studies (no 6-layer run at width 512), error from the "
        "fitted step-size limit",
        os.path.join(PROBE_DIR, "calibration-three-studies.json"),
    ),
    (
        "second: fitted on four tuning studies, error from the fitted step-size limit",
        os.path.join(PROBE_DIR, "calibration-four-studies-limit.json"),
    ),
)
LR_CODES = ("learning-rate", "update-size")


def probe_under(probe: dict, record: dict) -> dict:
    """The stored probe with its learning-rate verdict taken again under ``record``."""
    result = ProbeResult(probe["config"], probe["layers"])
    kept = [v for v in probe.get("verdicts") or [] if v.get("code") not in LR_CODES]
    verdict = learning_rate(result, record)
    return dict(probe, verdicts=kept + ([verdict.to_dict()] if verdict else []))


def under_record(runs: list[dict], record: dict) -> list[dict]:
    """The runs, each with its stored probe's learning-rate verdict taken again under ``record``."""
    return [dict(r, probe=probe_under(r["probe"], record)) if r.get("probe") else r for r in runs]


def scores_under_registrations(held: list[dict], registrations) -> list[dict]:
    """[{"label", "record", "score"}] per earlier registration ((label, record path) pairs): the held-out
    runs scored under it. Each run gains "predicted_under": {record file: its prediction under that
    record}, for the run record."""
    out = []
    for label, path in registrations:
        record, name = load_record(path), os.path.basename(path)
        runs = under_record(held, record)
        for r, under in zip(held, runs):
            r.setdefault("predicted_under", {})[name] = predicted(under, under.get("probe"))
        out.append({"label": label, "record": name, "score": score(doctor_pairs(runs))})
    return out


def versus_lookup(held: list[dict], tuning: list[dict]) -> dict | None:
    """{"runs", "both", "doctor_only", "lookup_only", "neither", "difference", "interval"}: the doctor's
    hits against the lookup's on the same finished held-out runs (the lookup chosen on ``tuning``);
    None without such runs."""
    table = lookup_table(tuning)
    counts = {"both": 0, "doctor_only": 0, "lookup_only": 0, "neither": 0}
    for r in held:
        if r.get("status") != "done" or not r.get("probe") or r.get("outcome") not in OUTCOMES:
            continue
        said = predicted(r, r["probe"])
        if said is None:
            continue
        right = expected(r["outcome"])
        doctor = said == right
        base = lookup(table, r["config"]["model"].get("wrap"), float(r["config"]["train"]["lr"])) == right
        key = ("both" if base else "doctor_only") if doctor else ("lookup_only" if base else "neither")
        counts[key] += 1
    n = sum(counts.values())
    if not n:
        return None
    d, lo, hi = paired_difference_interval(
        counts["both"], counts["doctor_only"], counts["lookup_only"], counts["neither"]
    )
    return {"runs": n, **counts, "difference": d, "interval": (lo, hi)}
