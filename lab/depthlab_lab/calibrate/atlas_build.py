"""The atlas the library ships (``depthlab/doctor/atlas.csv.gz``), written from the committed run records.

Every run of the doctor's grids (``docs/doctor-runs.json``: its tuning grids and the held-out grids
scored before), of the scale ladder (``docs/reproductions-ladder-runs.json``) and of advise's held-out
grids once scored (``docs/advise-heldout-runs.json``: the grids at depth and the Hugging Face set) becomes one
:class:`~depthlab.doctor.atlas.MeasuredRun`: its configuration is rebuilt from its grid by its config hash
(:func:`depthlab_lab.restore.checked`, which refuses a record its grid no longer produces), its outcome,
escape step and losses come from the record, and its probe's quantities from the record where the
doctor's grids kept them (step size and relative update at the run's lr) or, for the ladder's and
advise's runs (their records keep no probe), from the at-init probe taken again exactly as the study worker takes it (the run's seed
and first batch: deterministic). ``python -m depthlab_lab.calibrate.atlas_build`` rewrites the file;
lab/tests/test_atlas.py checks that the shipped file is what the records give.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import time

from depthlab.doctor.atlas import ATLAS_PATH, Atlas, MeasuredRun, from_run
from depthlab.study.worker import probe_at_init
from depthlab_lab.calibrate.heldout_depth import (
    FIFTH,
    FIRST,
    FOURTH,
    HF_GRIDS,
    SECOND,
    SEVENTH,
    SIXTH,
    THIRD,
)
from depthlab_lab.calibrate.heldout_depth import RECORD as ADVISE_RECORD
from depthlab_lab.docgen.doctor_heldout import HELDOUT_GRIDS
from depthlab_lab.docgen.doctor_scale import SCALE_TUNING
from depthlab_lab.docgen.doctor_score import HELDOUT, TUNING
from depthlab_lab.reproduce.ladder import LADDER
from depthlab_lab.reproduce.ladder_run import rungs
from depthlab_lab.restore import checked

DOCTOR_RECORD = os.path.join("docs", "doctor-runs.json")
LADDER_RECORD = os.path.join("docs", "reproductions-ladder-runs.json")


def doctor_grids() -> list[str]:
    """The doctor's grid files, tuning first: every study of its run record."""
    return [TUNING, *SCALE_TUNING, HELDOUT, *(g.grid for g in HELDOUT_GRIDS)]


def doctor_runs(record: str = DOCTOR_RECORD) -> list[MeasuredRun]:
    """The doctor's recorded runs with their configurations and the probe quantities the record kept."""
    out = []
    for study, specs, rows in checked(record, doctor_grids()):
        by_hash = {s.hash: s for s in specs}
        for row in rows:
            spec = by_hash[row["config_hash"]]
            lr = spec.train.lr
            probe = {"config": {"probe": _probe_fields(row, lr), "stack": {}}}
            out.append(from_run(study.name, _run(spec, row), probe))
    return out


def _probe_fields(row: dict, lr: float) -> dict:
    """The probe's fields the record kept: the step size s (= G lr) and the relative update at lr."""
    s, rho = row.get("step_size"), row.get("relative_update")
    return {"update_gain": None if s is None else s / lr, "relative_update": rho}


def ladder_runs(record: str = LADDER_RECORD, log=sys.stderr) -> list[MeasuredRun]:
    """The ladder's recorded runs, each probed again at init (they were never probed)."""
    return _probed(checked(record, [r.study for r in rungs(list(LADDER))]), "ladder", log)


def advise_grids() -> list[str]:
    """advise's held-out grids whose runs are scored (every run done, the verdict in docs/advise.md): the
    grids at depth and the Hugging Face set."""
    return [FIRST.grid, SECOND.grid, *HF_GRIDS, THIRD.grid, FOURTH.grid, FIFTH.grid, SIXTH.grid, SEVENTH.grid]


def advise_runs(record: str = ADVISE_RECORD, log=sys.stderr) -> list[MeasuredRun]:
    """advise's scored held-out runs, each probed again at init (the record keeps their outcomes only)."""
    with open(record, encoding="utf-8") as f:
        rows = json.load(f)["runs"]
    by_study: dict[str, list[dict]] = {}
    for row in rows:
        by_study.setdefault(row["study"], []).append({k: v for k, v in row.items() if k != "study"})
    return _probed(checked(record, advise_grids(), recorded=by_study), "advise", log)


def _probed(todo, what: str, log) -> list[MeasuredRun]:
    """The runs of ``todo`` (what :func:`checked` gives), each probed again at init as the worker does."""
    out = []
    total, start = sum(len(rows) for _, _, rows in todo), time.perf_counter()
    for study, specs, rows in todo:
        by_hash = {s.hash: s for s in specs}
        for row in rows:
            spec = by_hash[row["config_hash"]]
            probe, _ = probe_at_init(spec)
            out.append(from_run(study.name, _run(spec, row), probe))
            if log and len(out) % 25 == 0:
                left = (time.perf_counter() - start) / len(out) * (total - len(out))
                log.write(
                    f"atlas: {len(out)} of {total} {what} runs probed, about {left / 60:.0f} min left\n"
                )
    return out


def _run(spec, row: dict) -> dict:
    """A stored run's shape (what :func:`depthlab.doctor.atlas.from_run` reads) from a spec and a record row."""
    return {
        "config": spec.config_dict(),
        "config_hash": spec.hash,
        "outcome": row["outcome"],
        "escape_step": row.get("escape_step"),
        "val_loss": row.get("val_loss"),
        "unigram_loss": row.get("unigram_loss"),
    }


def build() -> Atlas:
    """The atlas of every recorded run: the doctor's grids, the ladder, then advise's held-out grids."""
    return Atlas(once(doctor_runs() + ladder_runs() + advise_runs()))


def once(runs: list[MeasuredRun]) -> tuple[MeasuredRun, ...]:
    """Each run once, where it first appears: two studies can share a run (the ladder's claims share
    pre-LN runs, some of them the doctor's too), and one run counted twice would be two runs of evidence."""
    seen: set[str] = set()
    out = []
    for r in runs:
        if r.config_hash not in seen:
            seen.add(r.config_hash)
            out.append(r)
    return tuple(out)


def write(atlas: Atlas, path: str = str(ATLAS_PATH)) -> None:
    """``atlas`` as gzip-compressed CSV at ``path`` (mtime 0: the same runs give the same bytes)."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(atlas.to_csv().encode())


if __name__ == "__main__":
    atlas = build()
    write(atlas)
    print(f"wrote {ATLAS_PATH}: {len(atlas)} runs")
