"""A study store rebuilt from a committed run record: every recorded run's outcome, losses and escape step, without its telemetry.

A grid of hours is kept in the repository as a compact run record (``docs/doctor-runs.json``: per study,
each run's config hash, outcome, validation and unigram losses, escape step and, where it was kept, its
training time and when it started and finished), not as a store. :func:`restore` writes such a record back into a store, so that what
reads a store (``depthlab reproduce doctor``: it probes every run's model at init again and scores the
doctor) re-derives its numbers from the record without training anything. Each study is added from its
grid file, exactly as ``depthlab study`` adds it; a recorded run is written as done only where the store
does not already hold it done (a stored run is never replaced), and a record run whose config hash the
grid does not produce is refused (the grid or the config hashing changed since the record was written,
and the run could not be told apart from another). Each restored run's at-init probe is taken again with
the current code, as the study worker takes it (deterministic: the run's seed and first batch), so that
``depthlab calibrate`` can refit on it; the restored runs have no curves. A run keeps the start and
finish times the record gives (none where it kept none): the registration checks read when a grid's runs
started, never when they were restored.
"""

from __future__ import annotations

import json
import os

from depthlab.errors import InputError
from depthlab.study.grid import StudyConfig
from depthlab.study.store import Store
from depthlab.study.worker import probe_at_init
from depthlab.watch.outcome import OUTCOMES

HOST = "restored from a run record"  # the host column of a restored run: where its numbers came from
RESULT_KEYS = ("outcome", "val_loss", "unigram_loss", "escape_step")


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
    if not isinstance(studies, dict) or not all(isinstance(v, list) for v in studies.values()):
        raise InputError(f'run record {path}: not a run record (no "studies" of run lists)')
    return studies


def restore(record: str, db: str, grids: list[str]) -> dict[str, tuple[int, int]]:
    """Write the runs ``record`` keeps of each grid in ``grids`` (grid files; a grid the record does not
    name is skipped) into the store at ``db``; returns {study: (runs restored, runs already done)}."""
    studies = read_record(record)
    out = {}
    for path in grids:
        study = StudyConfig.from_yaml(path)
        rows = studies.get(study.name)
        if not rows:
            continue
        specs = study.expand()
        known = {s.hash for s in specs}
        stray = [r.get("config_hash") for r in rows if r.get("config_hash") not in known]
        if stray:
            raise InputError(
                f"run record {record}: {len(stray)} run(s) of {study.name} (first {stray[0]}) are not in "
                f"{path} as it stands: the grid or its config hashing changed since the record was written"
            )
        odd = [r.get("outcome") for r in rows if r.get("outcome") not in OUTCOMES]
        if odd:
            raise InputError(
                f"run record {record}: a run of {study.name} has the outcome {odd[0]!r}, not one of "
                f"{', '.join(OUTCOMES)}"
            )
        out[study.name] = _write(db, study, specs, rows)
    return out


def _write(db: str, study: StudyConfig, specs: list, rows: list[dict]) -> tuple[int, int]:
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
            result = {k: row.get(k) for k in RESULT_KEYS}
            probe, why = probe_at_init(by_hash[row["config_hash"]])
            payload = {"result": result, "probe": probe, "probe_error": why}
            store.finish(run["id"], payload | {"host": HOST, "seconds": row.get("seconds")})
            with (
                store.transaction() as c
            ):  # when it ran, as recorded (unknown: none), not when it was restored
                c.execute(
                    "UPDATE runs SET started_at = ?, finished_at = ? WHERE id = ?",
                    (row.get("started_at"), row.get("finished_at"), run["id"]),
                )
            restored += 1
    return restored, kept
