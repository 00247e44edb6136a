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

A refit never loses a fitted rule it cannot fit again: runs that fit none of the sections (no finished
run, no at-init probe, one class of outcome only: not a tuning study) are refused with the reason and
the record left as it was; a section, or a family or wrapping of one, that the runs do not fit is kept
from the record as it was, and "fitted_from" says which ("kept", with the reason and when it was fitted).
A run that two of the studies named share (the same config hash, in one store or two) is counted once;
the same study named twice is refused.
"""

from __future__ import annotations

import datetime
import os
import time

from depthlab.doctor.plateau import FAMILY_TEXT as PLATEAU_FAMILIES
from depthlab.errors import InputError, as_flags
from depthlab.progress import Progress, TimeLeft, duration, say
from depthlab.study.store import Store
from depthlab_lab.calibrate.escape_fit import MIN_RUNS, escape_rows, fit_escape
from depthlab_lab.calibrate.step_limit_fit import fit_step_limit, limit_rows
from depthlab_lab.calibrate.update_limit_fit import FAMILY_TEXT as UPDATE_FAMILIES
from depthlab_lab.calibrate.update_limit_fit import fit_update_limits, update_rows

FITTED = ("escape", "step_limit", "update_limit", "fitted_from")  # the record's sections this module writes
SECTIONS = FITTED[:3]  # the fitted rules (fitted_from says what they were fitted on)
PARTS = {"escape": "families", "step_limit": "by_wrap", "update_limit": "families"}  # a section's own fits
SECTION_TEXT = {
    "escape": "plateau prediction",
    "step_limit": "step limit",
    "update_limit": "limits on rho",
}
WHY_NOT = {
    "escape": f"fewer than {MIN_RUNS} finished, non-diverged runs with a probed step size in any family of stacks, "
    "or none escaped",
    "step_limit": "no warmup at which finished runs of stacks that renormalise the stream (with a probed step "
    "size) both trained and failed",
    "update_limit": "no family of stacks that never renormalise the stream whose finished runs (with a probed "
    "relative update) both trained and failed",
}


def tuning_runs(sources: list[tuple[str, str]]) -> tuple[list[dict], list[dict]]:
    """(every run of the named studies, with "probe" loaded, each run once; one summary per study).
    ``sources``: (store path, study name or id) pairs. InputError for a held-out study (by name or by
    id), a missing store or study, or one study named twice; a run that a held-out study in the same
    store also holds is left out, and a run an earlier study named already holds (its config hash) is
    counted there only (the summary's "shared")."""
    runs, summary, seen, named = [], [], set(), {}
    for db, name in sources:
        _refuse_held_out(name)
        said = "--from" if as_flags() else "sources"  # the store and the study were given together
        with Store(db, create=False, flag=said) as store:
            study = store.find_study(name, flag=f"{said} {db}")
            _refuse_held_out(study["name"])  # named by its id, a held-out study is refused too
            key = (os.path.realpath(db), study["id"])
            if key in named:
                raise InputError(
                    f"--from {db} {name}: the study {study['name']!r} is named twice (first as --from "
                    f"{named[key][0]} {named[key][1]}); each run is fitted on once"
                )
            named[key] = (db, name)
            held = {r["id"] for s in store.studies() if is_held_out(s["name"]) for r in store.runs(s["id"])}
            got = [r for r in store.runs(study["id"]) if r["id"] not in held]  # a run a held-out grid shares
            for r in got:
                r["probe"] = store.probe(r["id"])
        done = [r for r in got if r.get("status") == "done"]
        new = [r for r in got if r["config_hash"] not in seen]
        seen.update(r["config_hash"] for r in got)
        summary.append(
            {
                "store": db,
                "study": study["name"],
                "grid_hash": study["config_hash"],
                "runs": len(got),
                "done": len(done),
                "escaped": sum(r.get("escape_step") is not None for r in done),
                "shared": len(got) - len(new),
            }
        )
        runs.extend(new)
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


def _studies_text(summary: list[dict]) -> str:
    said = [f"{s['study']} in {s['store']} ({s['done']} of {s['runs']} runs done)" for s in summary]
    return ", ".join(said)


def nothing_to_fit(runs: list[dict], summary: list[dict]) -> str | None:
    """Why ``runs`` can fit none of the doctor's rules before any fit is tried (None when they may):
    no finished run, or no finished run with an at-init probe."""
    done = [r for r in runs if r.get("status") == "done"]
    if not done:
        return f"{_studies_text(summary)}: no finished run to fit on"
    if not any(r.get("probe") for r in done):
        return (
            f"{_studies_text(summary)}: none of the {len(done)} finished runs has an at-init probe (a study "
            "run by depthlab study takes one; a store restored without probes, such as the ladder's, has none)"
        )
    return None


def refit(record: dict, sources: list[tuple[str, str]], commit: str | None, progress: bool = False) -> dict:
    """The record with its "escape", "step_limit", "update_limit" and "fitted_from" sections fitted on
    ``sources``' runs. A section (or a family or wrapping of one) the runs cannot fit is kept from
    ``record`` as it was and named in "fitted_from"'s "kept"; InputError, the record unchanged, when
    they fit none (module docstring). ``progress``: say (stderr) what will be fitted and how long it is
    expected to take before the fits start, and the time left as each ends (:func:`_fit_all`)."""
    runs, summary = tuning_runs(sources)
    why = nothing_to_fit(runs, summary)
    if why:
        raise InputError(f"{why}; the calibration record was left as it was")
    rows = fittable(runs)
    if not any(rows.values()):
        done = sum(r.get("status") == "done" for r in runs)
        raise InputError(
            f"{_studies_text(summary)}: the {done} finished runs fit none of the doctor's rules (not a "
            f"tuning study? the plateau: {WHY_NOT['escape']}; the step limit: {WHY_NOT['step_limit']}; "
            f"the limits on rho: {WHY_NOT['update_limit']}); the calibration record was left as it was"
        )
    fits = _fit_all(runs, summary, rows, progress)
    out = {k: v for k, v in record.items() if k not in FITTED}
    earlier = (record.get("fitted_from") or {}).get("when")
    kept = []
    for section in SECTIONS:
        new, old = fits[section], record.get(section)
        if new is None:
            if isinstance(old, dict) and old:
                out[section] = old
                kept.append({"section": section, "why": WHY_NOT[section], "fitted": earlier})
            continue
        part = PARTS[section]
        olds = old.get(part) if isinstance(old, dict) else None
        for name, fit in (olds or {}).items() if isinstance(olds, dict) else ():
            if name not in (new.get(part) or {}):
                new[part] = {**(new.get(part) or {}), name: fit}
                why = f"the runs named tell no fit of {_part_text(section, name)}"
                kept.append({"section": section, part: name, "why": why, "fitted": earlier})
        out[section] = new
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out["fitted_from"] = {"studies": summary, "commit": commit, "when": when}
    if kept:
        out["fitted_from"]["kept"] = kept
    return out


# Seconds per row of each fit on one core, measured on the doctor's five tuning studies (777 runs: the
# plateau 1.24 s for 642 rows, the step limit 1.01 s for 293, the limits on rho 4 ms for 484): the
# expectation the clock starts from before a fit has been timed here.
SECONDS_PER_ROW = {"escape": 2e-3, "step_limit": 3.5e-3, "update_limit": 1e-5}
FITS = {"escape": fit_escape, "step_limit": fit_step_limit, "update_limit": fit_update_limits}


def fittable(runs: list[dict]) -> dict[str, int]:
    """{section: how many runs its fit would use}, 0 for a section the runs cannot fit (the fits' own
    conditions, checked before any is made): the plateau needs a family of at least MIN_RUNS rows with
    one escape; the step limit a warmup at which renormalising runs both trained and failed; the limits
    on rho a family whose runs both trained and failed."""
    escape = escape_rows(runs)
    families = {r["family"] for r in escape}
    ok = any(
        len(at) >= MIN_RUNS and not all(r["censored"] for r in at)
        for at in ([r for r in escape if r["family"] == f] for f in families)
    )
    limit = limit_rows(runs)
    by_warmup = {}
    for r in limit:
        by_warmup.setdefault(r["warmup"], set()).add(r["trained"])
    update = update_rows(runs)
    return {
        "escape": len(escape) if ok else 0,
        "step_limit": len(limit) if any(len(v) == 2 for v in by_warmup.values()) else 0,
        "update_limit": sum(len(v) for v in update.values())
        if any({r["trained"] for r in v} == {True, False} for v in update.values())
        else 0,
    }


def _fit_all(runs: list[dict], summary: list[dict], rows: dict[str, int], progress: bool) -> dict:
    """{section: its fit, or None where the runs fit none} for the sections ``rows`` (:func:`fittable`)
    says can be fitted. With ``progress``, a line first says what is fitted on how many runs and the
    expected time, and a progress line (plain lines off a terminal) gives the time left after each fit
    (:class:`depthlab.progress.TimeLeft`, corrected by the fits' measured times)."""
    todo = {k: n for k, n in rows.items() if n}
    clock = TimeLeft({k: max(1e-3, SECONDS_PER_ROW[k] * n) for k, n in todo.items()})
    bar = None
    if progress:
        done = sum(r.get("status") == "done" for r in runs)
        parts = [f"the {SECTION_TEXT[k]} ({n} runs)" for k, n in todo.items()]
        said = ", ".join(parts[:-1]) + " and " * (len(parts) > 1) + parts[-1]
        say(
            f"calibrate: {len(runs)} runs of {len(summary)} stud{'y' if len(summary) == 1 else 'ies'} ({done} "
            f"finished); fitting {said}: expected about {duration(clock.total_s())}"
        )
        bar = Progress(len(todo), "calibrate", unit="fit", clock=clock, plain=True)
    fits = dict.fromkeys(FITS)
    try:
        for key in todo:
            start = time.monotonic()
            fits[key] = FITS[key](runs)
            clock.finished(key, time.monotonic() - start)
            if bar is not None:
                bar.advance()
    finally:
        if bar is not None:
            bar.close()
    if fits["escape"] is not None and not fits["escape"]["families"]:
        fits["escape"] = None
    return fits


def _part_text(section: str, name: str) -> str:
    if section == "escape":
        return PLATEAU_FAMILIES.get(name, name)
    if section == "update_limit":
        return UPDATE_FAMILIES.get(name, name)
    return f"the {name} wrapping"


def kept_text(entry: dict) -> str:
    """'kept the earlier step limit (fitted 2026-12-02 02:11 UTC): no warmup at which ...'."""
    part = next((entry[k] for k in ("families", "by_wrap") if k in entry), None)
    what = SECTION_TEXT[entry["section"]] + (f" of {_part_text(entry['section'], part)}" if part else "")
    when = f" (fitted {entry['fitted']})" if entry.get("fitted") else ""
    return f"kept the earlier {what}{when}: {entry['why']}"


def keep_fitted(new: dict, old: dict) -> dict:
    """``new`` (a record rewritten from the tuning grid's counts) with ``old``'s fitted sections."""
    return new | {k: old[k] for k in FITTED if k in old}
