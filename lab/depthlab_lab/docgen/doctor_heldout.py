"""The doctor's held-out grids across width, each scored under its own record of record, for ``depthlab reproduce doctor``.

A held-out grid's score of record is under the rules registered before any of its runs. The doctor's
current record (``depthlab/doctor/calibration.json``) is refitted when a tuning part is added, so a grid
scored before that refit keeps its own record (:class:`HeldOutGrid`'s ``record``, a copy kept in
``depthlab/probe/``), and is scored under it: only the learning-rate verdict reads the fitted rules, so
it alone is taken again from each run's probe (:func:`depthlab_lab.docgen.doctor_registrations.under_record`),
every other verdict the current doctor's. Each grid's earlier registrations are scored beside it, and its
baselines are chosen on the tuning studies its record was fitted on. ``HELDOUT_GRIDS`` lists the grids
newest first: the newest with finished runs is the headline of docs/doctor.md.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

from depthlab.doctor.record import RECORD_PATH, load_record
from depthlab.report.doctor_score import doctor_pairs, format_score, interval_text, score
from depthlab.study import StudyConfig
from depthlab_lab import lab_file
from depthlab_lab.calibrate.baselines import baseline_pairs
from depthlab_lab.docgen.doctor_registrations import (
    PROBE_DIR,
    REGISTRATIONS,
    scores_under_registrations,
    under_record,
    versus_lookup,
)
from depthlab_lab.docgen.doctor_scale import by_width, grid_lines, hours, miss_lines, run_row, stored


@dataclass(frozen=True)
class HeldOutGrid:
    """A held-out grid across width: its grid file, a title, the rules it is scored with and why (one
    paragraph), its record of record (None: the doctor's current record), its earlier registrations
    ((label, record path), oldest first) and, where its record was rewritten after the grid's first run
    started, what that rewrite changed."""

    grid: str
    title: str
    rules: str
    record: str | None = None
    registrations: tuple[tuple[str, str], ...] = ()
    late_note: str = ""  # where the record was rewritten after the first run: what changed (and what did not)
    # when its first run started ("2026-12-01 18:39 UTC"), for runs whose record kept no start times (a
    # store restored from a run record written before it kept them): the time the store showed
    first_started: str = ""

    def record_path(self) -> str:
        """The record its score of record is under."""
        return self.record or RECORD_PATH


BAND_RECORD = os.path.join(PROBE_DIR, "calibration-four-studies-band.json")
FIVE_RECORD = os.path.join(PROBE_DIR, "calibration-five-studies.json")  # written by the refit before its runs
FAMILIES = HeldOutGrid(
    grid="lab/depthlab_lab/grids/doctor-scale-heldout-families.yaml",
    title="The second held-out grid across width (widths 192 and 384, 48 runs)",
    rules=(
        "Registered after the first grid across width was scored: its misses (DeepNorm stacks that stalled, "
        "ReZero stacks of 5 layers that diverged) led to a tuning part for DeepNorm and ReZero at widths 256 "
        "and 512 (`lab/depthlab_lab/grids/doctor-scale-tuning-families.yaml`), so the first grid is no longer blind to the "
        "rules fitted with that part, and this grid is their clean test. Its score of record is under the "
        "doctor's current record as `depthlab calibrate` refits it on the five tuning studies (that part "
        "included; each renormalising wrapping's own step-size limit fitted on width-scaled steps, a form "
        "added with that part on tuning runs only), in the form and with the code committed before this "
        "grid's first run, kept as "
        "`lab/depthlab_lab/records/calibration-five-studies.json` (a copy made by that refit, so that a later refit "
        "leaves this grid's score under the rules registered before its runs); beside it, the rules of "
        "record before that part."
    ),
    record=FIVE_RECORD,
    registrations=(
        (
            "the rules before the families tuning part: fitted on four tuning studies, one step-size limit "
            "pooled over the renormalising wrappings",
            BAND_RECORD,
        ),
    ),
)
FIRST = HeldOutGrid(
    grid="lab/depthlab_lab/grids/doctor-scale-heldout.yaml",
    title="The first held-out grid across width (widths 128, 256 and 512, 36 runs)",
    rules=(
        "The score of record uses the rules as last registered before any of its runs (fitted on the four "
        "tuning studies, the step-size error from the band's high end), kept as they were in "
        "`lab/depthlab_lab/records/calibration-four-studies-band.json`: the doctor's current record is refitted "
        "whenever a tuning part is added (one was, after this grid's runs: its misses led to it), and this "
        "grid's score stays the one under the rules registered before them. Only the learning-rate verdict reads those rules; it is "
        "taken again under the kept record from each run's probe, every other verdict the current doctor's."
    ),
    record=BAND_RECORD,
    registrations=REGISTRATIONS,
    late_note=(
        "the rewrite changed only the step-size rule's description (with the comparison of band ends as "
        "stored, a correction the grid's file records); every fitted limit, band and coefficient is the "
        "one the record committed before the first run held (fitted 2026-12-01 18:38 UTC)"
    ),
    first_started="2026-12-01 18:39 UTC",  # as its store showed when this page was first written from it
)
HELDOUT_GRIDS = (FAMILIES, FIRST)


def tuning_for(record: dict, pool: list[dict]) -> list[dict]:
    """The tuning runs of ``pool`` (each with its "study") from the studies ``record`` was fitted on;
    the whole pool for a record that does not name them."""
    fitted = record.get("fitted_from")
    if not fitted:
        return pool
    names = {s["study"] for s in fitted["studies"]}
    return [r for r in pool if r.get("study") in names]


def score_heldout(db: str, pool: list[dict], grid: HeldOutGrid) -> dict:
    """{"held_out": grid, "grid": (name, finished, total, hours), "record", "heldout": score or None,
    "baselines", "versus_lookup", "registrations", "by_width", "misses", "runs"}: ``grid``'s finished
    runs in ``db`` scored under its record of record, the baselines chosen on the runs of ``pool`` from
    the studies that record was fitted on. Each run gains "scored_under" (the record's file name)."""
    study, held = stored(db, grid.grid)
    out = {"held_out": grid, "grid": (study.name, len(held), len(study.expand()), hours(held))}
    record = _record_of(grid)
    if record is None:  # not written yet: the grid's runs are kept, never scored under another record
        return out | {"record": None, "heldout": None, "runs": held}
    if grid.record is not None:
        held = under_record(held, record)
    held = [dict(r, scored_under=os.path.basename(grid.record_path())) for r in held]
    out |= {
        "record": record,
        "heldout": None,
        "runs": held,
        "late": fitted_after_start(record, held, grid.first_started),
    }
    if not held:
        return out
    tuning = tuning_for(record, pool)
    pairs = baseline_pairs(tuning, held)
    return out | {
        "heldout": score(doctor_pairs(held)),
        "baselines": {name: score(p) for name, p in pairs.items()},
        "versus_lookup": versus_lookup(held, tuning),
        "registrations": scores_under_registrations(held, grid.registrations),
        "by_width": by_width(held, tuning),
        "misses": miss_lines(held),
    }


def _record_of(grid: HeldOutGrid) -> dict | None:
    """The grid's record of record; None where its kept copy is not written yet."""
    path = grid.record_path()
    return load_record(path) if os.path.isfile(path) else None


def fitted_after_start(record: dict, held: list[dict], first_started: str = "") -> str | None:
    """'fitted 2026-12-02 10:00 UTC, after the grid's first run started (2026-12-02 09:00 UTC)' where the
    record was fitted after any of ``held`` started (its rules were not registered before the grid's
    runs); None where it was fitted before them all, or where either time is unknown. ``first_started``
    ("2026-12-01 18:39 UTC"): the first start as known before, used where no run keeps its start time."""
    when = (record.get("fitted_from") or {}).get("when")
    starts = [r["started_at"] for r in held if r.get("started_at")]
    if not when or not (starts or first_started):
        return None
    fitted = _utc(when)
    first = datetime.datetime.fromtimestamp(min(starts), datetime.UTC) if starts else _utc(first_started)
    if fitted.replace(second=59) < first:  # the record's time is to the minute
        return None
    return f"fitted {when}, after the grid's first run started ({first:%Y-%m-%d %H:%M} UTC)"


def _utc(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M UTC").replace(tzinfo=datetime.UTC)


def score_heldout_grids(db: str, pool: list[dict]) -> list[dict]:
    """:func:`score_heldout` for every grid of ``HELDOUT_GRIDS``, newest first. Call it after the
    calibration record is written: the current record's verdicts read it."""
    return [score_heldout(db, pool, g) for g in HELDOUT_GRIDS]


def pop_runs(grids: list[dict]) -> dict[str, list[dict]]:
    """{study name: its runs as the run record keeps them} for each grid result with finished runs, the
    runs taken out of the results (the scores keep none)."""
    out = {}
    for g in grids:
        runs = g.pop("runs", [])
        if runs:
            out[g["grid"][0]] = [run_row(r) for r in runs]
    return out


def heldout_lines(scale: dict | None, db: str) -> list[str]:
    """The section of docs/doctor.md on the held-out grids across width: the newest grid with finished
    runs is the headline, a grid without any gets a short section; ``scale`` is {"tuning_grids": the
    tuning grids' counts, "grids": :func:`score_heldout_grids`'s result} (None: the store was not read)."""
    if scale is None:
        scale = {"tuning_grids": [], "grids": [_unread(g) for g in HELDOUT_GRIDS]}
    grids = scale["grids"]
    lines = [
        "## Held-out across width (the headline)",
        "",
        "Each held-out grid across width was committed before any of its runs and never used to choose "
        "anything; the doctor's rules were fitted on the tuning grids alone (the old grid and the scale "
        "tuning grids pooled, by `depthlab calibrate`, in the form committed before the grid's first run: "
        "its file says so), and so were the baselines, on the tuning studies of the rules the grid is "
        "scored with. The newest grid with finished runs is the headline. The runs are in "
        f"`{db}`:",
        "",
        *grid_lines([*scale["tuning_grids"], *(g["grid"] for g in grids)]),
    ]
    scored = [g for g in grids if g.get("heldout") is not None]
    for g in scored:
        lines += ["", *_scored_lines(g, headline=g is scored[0])]
    for g in grids:
        if g.get("heldout") is None:
            lines += ["", *_unscored_lines(g, db)]
    return lines


def _unread(grid: HeldOutGrid) -> dict:
    """A grid's result when the store was not read: no finished run."""
    study = StudyConfig.from_yaml(lab_file(grid.grid))
    return {"held_out": grid, "grid": (study.name, 0, len(study.expand()), 0.0), "record": _record_of(grid)}


def _unscored_lines(result: dict, db: str) -> list[str]:
    """A grid with no finished run: registered, not scored yet, and the command that runs it."""
    grid = result["held_out"]
    return [
        f"### {grid.title}: registered, not scored yet",
        "",
        grid.rules,
        "",
        _record_line(result, "To be scored"),
        "",
        _not_scored(result, db),
    ]


def _not_scored(result: dict, db: str) -> str:
    """Why a grid is not scored: no finished run yet, or runs but no record of record yet."""
    grid, done = result["held_out"], result["grid"][1]
    if done and result.get("record") is None:
        return (
            f"Not scored: {done} runs of `{grid.grid}` finished, but the record they are to be scored under "
            "is not written (a record fitted after them would not be a registration before its runs)."
        )
    return (
        f"Not scored yet: no finished run of `{grid.grid}` in the store "
        f"(`depthlab study --grid {grid.grid} --db {db}`, then this command again)."
    )


def _record_line(result: dict, said: str = "Scored") -> str:
    """Which record the score is under and what it is fitted on."""
    grid, record = result["held_out"], result["record"]
    name = f"`{os.path.basename(grid.record_path())}`"
    if record is None:
        return (
            f"{said} under {name}, not written yet: the refit on the tuning studies writes it, committed "
            "before this grid's first run; until then the grid is not scored."
        )
    name += " (the doctor's current record)" if grid.record is None else " (kept as registered)"
    fitted = record.get("fitted_from")
    if not fitted:
        return f"{said} under {name}, which does not name what it was fitted on; the baselines chosen on every tuning run."
    studies = ", ".join(f"`{s['study']}`" for s in fitted["studies"])
    commit = (fitted.get("commit") or "unknown")[:10]
    return (
        f"{said} under {name}, fitted on {studies} (code at commit {commit}, {fitted['when']}); the "
        "baselines chosen on those studies' runs."
    )


def _scored_lines(result: dict, headline: bool) -> list[str]:
    """A scored grid's section: its score with the baselines, per width, against the lookup, under its
    earlier registrations, and its misses."""
    grid = result["held_out"]
    lines = [
        f"### {grid.title}" + (": the headline" if headline else ""),
        "",
        grid.rules,
        "",
        _record_line(result),
        "",
        *_late_lines(result),
        "With 95% Wilson intervals (runs counted as independent: each is its own configuration), against "
        "always answering 'trains' and the wrapping x learning rate lookup chosen on the tuning runs:",
        "",
        "```",
        format_score(result["heldout"], result.get("baselines")),
        "```",
        "",
        "| width | runs | doctor | wrapping x lr lookup |",
        "|---|---|---|---|",
    ]
    for row in result["by_width"]:
        d, k = row["doctor"], row["lookup"]
        lines.append(
            f"| {row['d_model']} | {d['runs']} | {d['hits']} ({interval_text(d['accuracy'], d['interval'])}) | "
            f"{k['hits']} ({interval_text(k['accuracy'], k['interval'])}) |"
        )
    lines += _comparison_lines(result)
    lines += ["", "Runs the doctor got wrong:", ""]
    lines += [f"- {m}" for m in result["misses"]] or ["- none"]
    return lines


def _late_lines(result: dict) -> list[str]:
    """A warning where the record was fitted after the grid's first run started: then its score is not
    a held-out score under rules registered before the runs."""
    if not result.get("late"):
        return []
    note = result["held_out"].late_note
    if note:
        return [f"The record was {result['late']}: {note}.", ""]
    return [
        f"**Not a registered score:** the record was {result['late']}, so its rules were not fixed before "
        "the grid's runs.",
        "",
    ]


def _comparison_lines(result: dict) -> list[str]:
    """The doctor against the lookup on the same runs (a paired difference with its interval), and the
    held-out score under each earlier registration of the rules."""
    lines = []
    v = result.get("versus_lookup")
    if v:
        lo, hi = v["interval"]
        lines += [
            "",
            f"The doctor against the lookup on the same {v['runs']} runs: {v['difference']:+.0%} "
            f"[{lo:+.0%}, {hi:+.0%}] (95%, Newcombe's interval for a paired difference): both right on "
            f"{v['both']}, only the doctor on {v['doctor_only']}, only the lookup on {v['lookup_only']}, "
            f"neither on {v['neither']}.",
        ]
    regs = result.get("registrations") or []
    if regs:
        lines += [
            "",
            "Under the earlier registrations (each committed before any of this grid's runs too, their "
            "records kept in `lab/depthlab_lab/records/`):",
            "",
            "| registration | record | held-out score |",
            "|---|---|---|",
        ]
        for r in regs:
            s = r["score"]
            lines.append(
                f"| {r['label']} | `{r['record']}` | {s['hits']} of {s['runs']} "
                f"({interval_text(s['accuracy'], s['interval'])}) |"
            )
    return lines
