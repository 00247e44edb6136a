"""The doctor's calibration record filled from studies: its range from the grids, its counts from the tuning runs.

The record's format is :mod:`depthlab.doctor.record`'s. :func:`calibration_record` builds it: the
range of width, depth, lr and warmup spans the grids given (the tuning grid where the thresholds were
chosen and the held-out grid where they were scored: the verdicts were tested over both), the range of
the relative update spans the tuning runs' probes, and every count comes from the tuning runs alone,
per verdict ("code:level"; an error agrees with a run that did not train, an ok or warning verdict with
one that trained) and per prediction.
"""

from __future__ import annotations

import json
import os

from depthlab.doctor.checks import prediction
from depthlab.study.grid import StudyConfig
from depthlab.watch.outcome import OUTCOMES

# the verdicts whose counts the record keeps: the learning-rate and trainability verdicts
COUNTED = ("learning-rate", "update-size", "vanishing-gradient", "exploding-gradient", "stream-growth")


def grid_range(grids: list[StudyConfig]) -> dict:
    """{"d_model": [lo, hi], "n_layers": ..., "lr": ..., "warmup": ...} over every run of the grids."""
    values: dict[str, list] = {"d_model": [], "n_layers": [], "lr": [], "warmup": []}
    for grid in grids:
        for spec in grid.iter_specs():
            values["d_model"].append(spec.model.d_model)
            values["n_layers"].append(spec.model.n_layers)
            values["lr"].append(spec.train.lr)
            values["warmup"].append(spec.train.warmup)
    return {k: [min(v), max(v)] for k, v in values.items() if v}


def _count(table: dict, key: str, agreed: bool, what: str) -> None:
    entry = table.setdefault(key, {"runs": 0, "agreed": 0, "what": what})
    entry["runs"] += 1
    entry["agreed"] += int(agreed)


def agreement(runs: list[dict]) -> dict:
    """Per verdict key and per prediction: {"runs", "agreed", "what"} over the finished runs that have a
    probe and an outcome (store run dicts with "probe" loaded)."""
    table: dict[str, dict] = {}
    for r in runs:
        if r.get("status") != "done" or not r.get("probe") or r.get("outcome") not in OUTCOMES:
            continue
        trained = r["outcome"] == "trained"
        for v in r["probe"].get("verdicts") or []:
            if v.get("code") not in COUNTED:
                continue
            bad = v["level"] == "error"
            what = "with this verdict " + ("stalled or diverged" if bad else "trained")
            _count(table, f"{v['code']}:{v['level']}", trained != bad, what)
        said = prediction(r["probe"], int(r["config"]["train"].get("warmup") or 0))
        if said is not None:
            what = (
                "predicted to fail stalled or diverged" if said == "fails" else "predicted to train trained"
            )
            _count(table, f"prediction:{said}", trained == (said == "trains"), what)
    return dict(sorted(table.items()))


def runs_range(runs: list[dict]) -> dict:
    """{"d_model": [lo, hi], "n_layers": ..., "lr": ..., "warmup": ...} over the finished runs (a grid
    only partly run is calibrated where it ran, not where it is to run)."""
    values: dict[str, list] = {"d_model": [], "n_layers": [], "lr": [], "warmup": []}
    for r in runs:
        if r.get("status") != "done":
            continue
        m, t = r["config"]["model"], r["config"]["train"]
        values["d_model"].append(m["d_model"])
        values["n_layers"].append(m["n_layers"])
        values["lr"].append(t["lr"])
        values["warmup"].append(t.get("warmup") or 0)
    return {k: [min(v), max(v)] for k, v in values.items() if v}


def calibration_record(tuning_runs: list[dict], where: str, source: str) -> dict:
    """The record (:mod:`depthlab.doctor.record`'s format) from the tuning runs: its range is where
    they ran (their finished runs' widths, depths, lrs and warmups)."""
    rng = runs_range(tuning_runs)
    rho = [
        r["probe"]["config"]["probe"].get("relative_update")
        for r in tuning_runs
        if r.get("probe") and (r["probe"].get("config") or {}).get("probe")
    ]
    rho = [x for x in rho if x is not None]
    if rho:
        rng["relative_update"] = [float(f"{min(rho):.3g}"), float(f"{max(rho):.3g}")]
    return {"where": where, "range": rng, "agreement": agreement(tuning_runs), "source": source}


def write_record(record: dict, path: str) -> None:
    """Write the record as indented JSON (through a temporary file: a reader never sees half of it)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
