"""``depthlab calibrate``'s work: refit the doctor's plateau, warmup-length and update-size rules from tuning studies in stores.

:func:`tuning_runs` reads the runs of each (store, study) named, their at-init probes loaded, and
refuses a held-out study (its name holds "heldout": a held-out grid is only ever scored, never fitted
on). :func:`refit` fits the plateau model (:mod:`depthlab_lab.calibrate.escape_fit`), the step-size limit
against the warmup length (:mod:`depthlab_lab.calibrate.step_limit_fit`) and the limits on the relative update
of stacks that never renormalise the stream (:mod:`depthlab_lab.calibrate.update_limit_fit`) on all of them
pooled, and returns the calibration record with those sections replaced and a summary of what they were
fitted on ("fitted_from": per study its store, name, grid hash and runs; the code's commit; the date).
The rest of the record (its range and agreement counts, written by ``depthlab reproduce doctor``) is
kept as it was.
"""

from __future__ import annotations

import datetime

from depthlab.errors import InputError
from depthlab.study.store import Store
from depthlab_lab.calibrate.escape_fit import fit_escape
from depthlab_lab.calibrate.step_limit_fit import fit_step_limit
from depthlab_lab.calibrate.update_limit_fit import fit_update_limits

FITTED = ("escape", "step_limit", "update_limit", "fitted_from")  # the record's sections this module writes


def tuning_runs(sources: list[tuple[str, str]]) -> tuple[list[dict], list[dict]]:
    """(every run of the named studies, with "probe" loaded; one summary per study). ``sources``:
    (store path, study name or id) pairs. InputError for a held-out study (by name or by id), a missing
    store or study; a run that a held-out study in the same store also holds is left out."""
    runs, summary = [], []
    for db, name in sources:
        _refuse_held_out(name)
        with Store(db, create=False) as store:
            study = store.find_study(name)
            _refuse_held_out(study["name"])  # named by its id, a held-out study is refused too
            held = {r["id"] for s in store.studies() if is_held_out(s["name"]) for r in store.runs(s["id"])}
            got = [r for r in store.runs(study["id"]) if r["id"] not in held]  # a run a held-out grid shares
            for r in got:
                r["probe"] = store.probe(r["id"])
        done = [r for r in got if r.get("status") == "done"]
        summary.append(
            {
                "store": db,
                "study": study["name"],
                "grid_hash": study["config_hash"],
                "runs": len(got),
                "done": len(done),
                "escaped": sum(r.get("escape_step") is not None for r in done),
            }
        )
        runs.extend(got)
    return runs, summary


def is_held_out(name: str) -> bool:
    """Whether a study is a held-out grid (its name holds "heldout"): only ever scored, never fitted on."""
    return "heldout" in name.lower()


def _refuse_held_out(name: str) -> None:
    if is_held_out(name):
        raise InputError(
            f"study {name!r} is a held-out grid: the doctor's rules are fitted on tuning grids only "
            "(a held-out grid is only ever scored)"
        )


def refit(record: dict, sources: list[tuple[str, str]], commit: str | None) -> dict:
    """The record with its "escape", "step_limit", "update_limit" and "fitted_from" sections fitted on
    ``sources``' runs (a section that cannot be fitted is left out, and the doctor falls back on its constants)."""
    runs, summary = tuning_runs(sources)
    out = {k: v for k, v in record.items() if k not in FITTED}
    escape = fit_escape(runs)
    if escape["families"]:
        out["escape"] = escape
    limit = fit_step_limit(runs)
    if limit is not None:
        out["step_limit"] = limit
    update = fit_update_limits(runs)
    if update is not None:
        out["update_limit"] = update
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out["fitted_from"] = {"studies": summary, "commit": commit, "when": when}
    return out


def keep_fitted(new: dict, old: dict) -> dict:
    """``new`` (a record rewritten from the tuning grid's counts) with ``old``'s fitted sections."""
    return new | {k: old[k] for k in FITTED if k in old}
