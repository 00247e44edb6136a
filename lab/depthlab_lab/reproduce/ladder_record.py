"""The scale ladder's run record: every finished ladder run, kept in the repository beside its page
(docs/reproductions-ladder.md -> docs/reproductions-ladder-runs.json), and written back into a study
store before the ladder resumes, so that a run recorded is never trained again.

A study store lives outside the repository and does not outlive a working session; the ladder's runs
take many sessions. The record keeps, per rung study, each done run's config hash, setting label, seed,
outcome, losses (validation, final training, unigram), training time and when it started and finished,
and only the telemetry the page reads: the step-1 metrics row (the first logged loss of the lr
sensitivity curves) and, for a claim with an update-ratio slope effect, the update ratio per stream at
the last logged step. Restored (:func:`restore_ladder`, ``depthlab reproduce ladder --restore``), it
gives the same effects, intervals, results and registration counts as the store it was written from.
"""

from __future__ import annotations

import json
import os

from depthlab.errors import InputError
from depthlab.paths import check_output_file, replace_file
from depthlab.report import load
from depthlab.study import Store
from depthlab.study.schema import METRIC_COLUMNS
from depthlab_lab.reproduce.ladder import LADDER
from depthlab_lab.reproduce.ladder_effects import by_setting
from depthlab_lab.reproduce.ladder_run import Rung, rungs
from depthlab_lab.restore import check_restore_path, check_studies, checked, read_record, restore

ROW_KEYS = ("outcome", "val_loss", "final_train_loss", "unigram_loss", "escape_step", "seconds")
ROW_KEYS += ("started_at", "finished_at")


def record_path(doc: str) -> str:
    """The run record beside the page: docs/reproductions-ladder.md -> docs/reproductions-ladder-runs.json."""
    return os.path.splitext(doc)[0] + "-runs.json"


def reads_layers(claim: str) -> bool:
    """Whether one of the claim's effects reads the per-stream telemetry (an update-ratio slope)."""
    return any(e.kind == "slope" for e in LADDER[claim].effects)


def run_row(rung: Rung, label: str, run: dict) -> dict:
    """A done run of the setting ``label`` as the record keeps it (see the module docstring)."""
    row = {"config_hash": run["config_hash"], "setting": label, "seed": run["config"]["train"]["seed"]}
    row |= {k: run.get(k) for k in ROW_KEYS}
    first = [m for m in run.get("metrics") or [] if m["step"] == 1]
    row["metrics"] = [{k: m[k] for k in ("step", *METRIC_COLUMNS) if m.get(k) is not None} for m in first]
    layers = run.get("layers") or []
    if reads_layers(rung.claim) and layers:
        last = max(x["step"] for x in layers)
        row["layers"] = [
            {"step": last, "layer": x["layer"], "update_ratio": x["update_ratio"]}
            for x in layers
            if x["step"] == last
        ]
    return row


def ladder_record(db: str, quick: bool = False, earlier: dict | None = None) -> dict:
    """{"studies": {rung study: [run row]}}: the done runs of every rung of the ladder (quick or not) the
    store ``db`` holds, and of ``earlier`` (a record written before) the runs the store does not hold
    done (and its studies that are no rung now): a page written from a store not restored first keeps
    what was recorded."""
    present = set()
    if os.path.isfile(db) and os.path.getsize(db) > 0:
        with Store(db, create=False) as store:
            present = {s["name"] for s in store.studies()}
    studies = {}
    for rung in rungs(list(LADDER), quick):
        name = rung.study.name
        runs = load(db, name).runs if name in present else []
        rows = [
            run_row(rung, label, r)
            for label, by_seed in by_setting(rung, runs).items()
            for r in by_seed.values()
        ]
        done = {r["config_hash"] for r in rows}
        rows += [r for r in (earlier or {}).get(name, []) if r.get("config_hash") not in done]
        if rows:
            studies[name] = rows
    # a recorded study that is no rung now is kept too: restoring it is refused, never silently lost
    studies |= {k: v for k, v in (earlier or {}).items() if k not in studies and v}
    return {"studies": studies}


def check_record_file(path: str) -> None:
    """InputError (naming --doc) for a record path that cannot be written, or an existing file that is
    not a run record (it is not replaced)."""
    check_output_file(path, "--doc")
    if os.path.isfile(path):
        try:
            read_record(path)
        except InputError as e:
            raise InputError(f"--doc: {e}; move it or name another page") from None


def record_text(record: dict) -> str:
    """The record as JSON, one run a line (compact, and a new run is one new line in a diff)."""
    studies = [
        f"  {json.dumps(name)}: [\n" + ",\n".join(f"   {json.dumps(r)}" for r in rows) + "\n  ]"
        for name, rows in record["studies"].items()
    ]
    return '{"studies": {\n' + ",\n".join(studies) + "\n}}\n"


def write_ladder_record(db: str, doc: str, quick: bool = False) -> str:
    """Write the ladder's run record beside ``doc`` (keeping the runs of the record there that ``db``
    lacks); returns its path."""
    path = record_path(doc)
    check_record_file(path)
    earlier = read_record(path) if os.path.isfile(path) else None
    record = ladder_record(db, quick, earlier)
    replace_file(path, record_text(record), "--doc")
    return path


def restore_ladder(record: str, db: str, names: list[str], quick: bool = False) -> dict[str, tuple[int, int]]:
    """Write the runs ``record`` keeps of the rungs of ``names`` into ``db`` (no probe: the ladder reads
    none); returns {study: (restored, already done)}. A record of none of the ladder's rungs (the
    doctor's), a record study that is no rung of the ladder, or a row its rung no longer produces, is
    an InputError before the store is touched."""
    check_restore_path(record)
    every = rungs(list(LADDER), quick)
    ladder = f"the{' quick' if quick else ''} ladder's"
    other = "the doctor's run record? it goes to depthlab reproduce doctor --restore"
    check_studies(record, read_record(record), [r.study.name for r in every], ladder, other)
    settings = {r.study.name: {label: _axis(s) for label, s in r.settings.items()} for r in every}
    checked(record, [r.study for r in every], settings)  # the whole record, the rungs not restored too
    todo = rungs(names, quick)
    return restore(record, db, [r.study for r in todo], probe=False, settings=settings)


def _axis(setting: dict) -> dict:
    """The "setting" axis value of a rung's setting ({"model": ..., "train": ...}), as a run's axes keep it."""
    return {f"{part}.{k}": v for part in ("model", "train") for k, v in setting[part].items()}
