"""A study store rebuilt from a committed run record: every recorded run's outcome and losses, and the
telemetry the record kept of it.

A grid of hours is kept in the repository as a compact run record (``docs/doctor-runs.json``,
``docs/reproductions-ladder-runs.json``: per study, each run's config hash, outcome, losses, escape step
and, where it was kept, its training time, when it started and finished, and some of its telemetry),
not as a store. :func:`restore` writes such a record back into a store, so that what reads a store
(``depthlab reproduce doctor``, ``depthlab reproduce ladder``) re-derives its numbers from the record
without training anything, and a study resumed on that store trains only what the record lacks. Each
study is added exactly as ``depthlab study`` adds it, from its grid file or from a StudyConfig built in
code; a recorded run is written as done only where the store does not already hold it done (a stored
run is never replaced). The whole record is checked before anything is written: a record run whose
config hash the study does not produce (the grid or the config hashing changed since the record was
written, and the run could not be told apart from another), an unknown outcome or malformed telemetry
is refused with the store untouched.

What a restored run reads back (``depthlab.report.load(db, study).runs``): the record's result fields
as the runs columns, the start and finish times the record gives (none where it kept none: the
registration checks read when a study's runs started, never when they were restored), and, where a
row carries them, its "metrics" (logged steps as the store's metrics table holds them: ``{"step": 1,
"loss": ...}``) and "layers" (telemetry rows ``{"step", "layer", "update_ratio", ...}``), each read back
as the original store returned it for the steps, streams and columns kept (the others None). With
``probe`` (the doctor's), each run's at-init probe is taken again with the current code, as the study
worker takes it (deterministic: the run's seed and first batch), so that ``depthlab calibrate`` can
refit on it.
"""

from __future__ import annotations

import json
import os

from depthlab.errors import InputError
from depthlab.study.grid import StudyConfig
from depthlab.study.schema import LAYER_COLUMNS, METRIC_COLUMNS
from depthlab.study.store import Store
from depthlab.study.worker import probe_at_init
from depthlab.watch.outcome import OUTCOMES
from depthlab_lab import lab_file

HOST = "restored from a run record"  # the host column of a restored run: where its numbers came from
RESULT_KEYS = ("outcome", "val_loss", "unigram_loss", "escape_step")
MORE_RESULT_KEYS = ("final_train_loss", "val_bpb", "accuracy")  # written where a row carries them
NOT_METRICS = ("run_id", "extra_json", "layers")  # a stored metrics row's keys that are not on_log keys


def read_record(path: str) -> dict[str, list[dict]]:
    """{study name: [recorded run]} from a run record ({"studies": {...}}); InputError when it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise InputError(f"run record {path}: cannot be read ({e.strerror or e})") from None
    except ValueError as e:
        raise InputError(f"run record {path}: not JSON ({e})") from None
    studies = data.get("studies") if isinstance(data, dict) else None
    if not isinstance(studies, dict) or not all(
        isinstance(v, list) and all(isinstance(r, dict) for r in v) for v in studies.values()
    ):
        raise InputError(f'run record {path}: not a run record (no "studies" of run lists)')
    return studies


def restore(
    record: str, db: str, studies: list[str | StudyConfig], probe: bool = True
) -> dict[str, tuple[int, int]]:
    """Write the runs ``record`` keeps of each study in ``studies`` (grid files or StudyConfigs; one the
    record does not name is skipped) into the store at ``db``, their at-init probes taken again when
    ``probe``; returns {study: (runs restored, runs already done)}. Nothing is written when any of it
    is refused."""
    todo = checked(record, studies)
    return {study.name: _write(db, study, specs, rows, probe) for study, specs, rows in todo}


def checked(record: str, studies: list[str | StudyConfig]) -> list[tuple[StudyConfig, list, list[dict]]]:
    """(study, its runs, the record's rows of it) for each study the record names, every row checked
    against the study as it is built now; InputError, before anything is written, for a row it refuses."""
    recorded = read_record(record)
    out = []
    for given in studies:
        study = StudyConfig.from_yaml(lab_file(given)) if isinstance(given, str) else given
        where = given if isinstance(given, str) else f"the study {study.name}"
        rows = recorded.get(study.name)
        if not rows:
            continue
        specs = study.expand()
        known = {s.hash for s in specs}
        stray = [r.get("config_hash") for r in rows if r.get("config_hash") not in known]
        if stray:
            raise InputError(
                f"run record {record}: {len(stray)} run(s) of {study.name} (first {stray[0]}) are not in "
                f"{where} as it stands: the grid or its config hashing changed since the record was written"
            )
        odd = [r.get("outcome") for r in rows if r.get("outcome") not in OUTCOMES]
        if odd:
            raise InputError(
                f"run record {record}: a run of {study.name} has the outcome {odd[0]!r}, not one of "
                f"{', '.join(OUTCOMES)}"
            )
        for row in rows:
            why = _bad_telemetry(row)
            if why:
                raise InputError(f"run record {record}: run {row['config_hash']} of {study.name}: {why}")
        out.append((study, specs, rows))
    return out


def _bad_telemetry(row: dict) -> str | None:
    """Why a row's "metrics" or "layers" cannot be written back (None when they can, or are absent)."""
    for key, index in (("metrics", ("step",)), ("layers", ("step", "layer"))):
        items = row.get(key)
        if items is None:
            continue
        if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
            return f'"{key}" is not a list of rows'
        for x in items:
            if not all(type(x.get(k)) is int for k in index):
                return f'a "{key}" row has no whole-number {" and ".join(index)}'
            numbers = [
                v for k, v in x.items() if k in (METRIC_COLUMNS if key == "metrics" else LAYER_COLUMNS)
            ]
            if not all(v is None or isinstance(v, (int, float)) for v in numbers):
                return f'a "{key}" row of step {x["step"]} has a value that is not a number'
    return None


def _metrics(row: dict) -> list[dict]:
    """The row's kept logged steps as on_log records (what Store.finish takes)."""
    out = []
    for m in row.get("metrics") or []:
        extra = json.loads(m["extra_json"]) if isinstance(m.get("extra_json"), str) else {}
        out.append({**extra, **{k: v for k, v in m.items() if k not in NOT_METRICS}})
    return out


def _write(db: str, study: StudyConfig, specs: list, rows: list[dict], probe: bool) -> tuple[int, int]:
    os.makedirs(os.path.dirname(os.path.abspath(db)), exist_ok=True)
    with Store(db) as store:
        sid = store.add_study(study.name, study.to_dict(), study.config_hash(specs), specs)
        stored = {r["config_hash"]: r for r in store.runs(sid)}
        by_hash = {s.hash: s for s in specs}
        restored = kept = 0
        for row in rows:
            run = stored[row["config_hash"]]
            if run["status"] == "done":
                kept += 1
                continue
            result = {k: row.get(k) for k in RESULT_KEYS} | {k: row[k] for k in MORE_RESULT_KEYS if k in row}
            payload = {
                "result": result,
                "metrics": _metrics(row),
                "host": HOST,
                "seconds": row.get("seconds"),
            }
            if probe:
                payload["probe"], payload["probe_error"] = probe_at_init(by_hash[row["config_hash"]])
            store.finish(run["id"], payload)
            with (
                store.transaction() as c
            ):  # when it ran, as recorded (unknown: none), not when it was restored
                c.execute(
                    "UPDATE runs SET started_at = ?, finished_at = ? WHERE id = ?",
                    (row.get("started_at"), row.get("finished_at"), run["id"]),
                )
                _insert_layers(c, run["id"], row.get("layers") or [])
            restored += 1
    return restored, kept


def _insert_layers(c, run_id: int, layers: list[dict]) -> None:
    """The kept telemetry rows, each at its own step (a step whose metrics row was not kept gets none)."""
    c.executemany(
        f"INSERT OR REPLACE INTO layer_metrics (run_id, step, layer, {', '.join(LAYER_COLUMNS)}) "
        f"VALUES (?, ?, ?, {', '.join('?' for _ in LAYER_COLUMNS)})",
        [
            (
                run_id,
                x["step"],
                x["layer"],
                *(None if x.get(k) is None else float(x[k]) for k in LAYER_COLUMNS),
            )
            for x in layers
        ],
    )
