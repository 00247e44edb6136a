"""The doctor across width for ``depthlab reproduce doctor``: its scale grids read from their store, and what scores them.

The scale grids (``SCALE_TUNING``, and the held-out grids of :mod:`depthlab_lab.docgen.doctor_heldout`) are
run by ``depthlab study`` into one store (``--scale-db``): they take hours, so this module never trains
them; it reads what is stored and probes every finished run's model at init again with the current code
(the score is always the current doctor's). A grid not yet complete is scored on its finished runs, and
says how many that is. Here too the pieces of a held-out grid's score: per width against the lookup,
the misses, each run as the run record keeps it.
"""

from __future__ import annotations

import contextlib
import os
import time

from depthlab.config import ModelConfig, TrainConfig
from depthlab.progress import Progress, TimeLeft
from depthlab.report import load
from depthlab.report.doctor_score import doctor_pairs, score
from depthlab.report.grouping import predicted
from depthlab.study import RunSpec, StudyConfig
from depthlab.study.store import Store
from depthlab.study.worker import probe_at_init
from depthlab.train.cost import device_of, step_cost
from depthlab_lab import lab_file
from depthlab_lab.calibrate.baselines import baseline_pairs

SCALE_TUNING = (
    "lab/depthlab_lab/grids/doctor-scale-tuning.yaml",
    "lab/depthlab_lab/grids/doctor-scale-tuning-wide.yaml",
    "lab/depthlab_lab/grids/doctor-scale-tuning-wide-deep.yaml",
    "lab/depthlab_lab/grids/doctor-scale-tuning-families.yaml",
)
DEFAULT_SCALE_DB = os.path.join("runs", "doctor-scale.sqlite")


def probe_again(run: dict) -> dict | None:
    """The run's at-init probe taken again with the current code, as the study worker takes it (its
    measured time given to the clock of :func:`probing`, when one is set)."""
    start = time.monotonic()
    spec = RunSpec(
        ModelConfig.from_dict(run["config"]["model"]), TrainConfig.from_dict(run["config"]["train"])
    )
    probe, _ = probe_at_init(spec)
    if _PROBING:
        clock, bar = _PROBING[-1]
        key = probe_key(run.get("config_hash"))
        if key in clock.expected and key not in clock.done:
            clock.finished(key, time.monotonic() - start)
            bar.advance()
    return probe


_PROBING: list[tuple[TimeLeft, Progress]] = []  # the clock and progress line of the probes taken again


def probe_key(config_hash: str | None) -> str:
    """The key of a run's probe among a clock's jobs."""
    return f"probe {config_hash}"


@contextlib.contextmanager
def probing(clock: TimeLeft, total: int, what: str):
    """While inside, each run probed again (:func:`probe_again`) whose :func:`probe_key` is one of
    ``clock``'s jobs is counted on a progress line of ``total`` probes with the clock's time left (redrawn
    on a terminal; a plain line at each tenth of them elsewhere)."""
    bar = Progress(total, what, unit="probe", clock=clock, plain=True)
    _PROBING.append((clock, bar))
    try:
        yield bar
    finally:
        _PROBING.pop()
        bar.close()


def probe_seconds(spec) -> float:
    """The expected seconds of one probe at init of ``spec``'s model (:mod:`depthlab.train.cost`'s step
    times): building the model, a forward and two backward passes on the run's first batch."""
    m, t = spec.model, spec.train
    fixed, per_layer, build = step_cost(m, t.batch_size, t.seq_len, device_of(t))
    layers = m.enc_depth + m.dec_depth
    return build * layers + 2 * (fixed + per_layer * layers)


def stored(db: str, grid: str) -> tuple[StudyConfig, list[dict]]:
    """(the grid, its finished runs in ``db`` with their probes taken again and "study" its name); no
    runs when the store or the study is absent."""
    study = StudyConfig.from_yaml(lab_file(grid))
    if not os.path.isfile(db) or os.path.getsize(db) == 0:
        return study, []
    with Store(db, create=False) as store:
        if study.name not in {s["name"] for s in store.studies()}:
            return study, []
    done = [r for r in load(db, study.name).runs if r.get("status") == "done"]
    return study, [dict(r, probe=probe_again(r), study=study.name) for r in done]


def miss_lines(runs: list[dict]) -> list[str]:
    """One line per run the doctor got wrong: its configuration, the prediction, the outcome."""
    out = []
    for r in runs:
        pred = predicted(r, r.get("probe"))
        if pred is None or r.get("outcome") is None:
            continue
        if (pred == "trains") != (r["outcome"] == "trained"):
            m, t = r["config"]["model"], r["config"]["train"]
            step = (r["probe"]["config"]["probe"] or {}).get("step_size")
            out.append(
                f"{m['wrap']} {m['n_layers']} layers d_model {m['d_model']} lr {t['lr']:g} warmup {t['warmup']}: "
                f"predicted {pred}, {r['outcome']} (step size {step:.3g})"
            )
    return out


def run_row(run: dict) -> dict:
    """A run as the document's record keeps it: its configuration, its outcome, its escape step, the
    run's training time and when it started and finished (seconds since the epoch), the probe's step size and relative update, what the doctor predicted, and for a held-out run the record
    it was scored under ("scored_under") and its prediction under each earlier registration."""
    m, t = run["config"]["model"], run["config"]["train"]
    probe = (run.get("probe") or {}).get("config", {}).get("probe") or {}
    return {
        "config_hash": run.get("config_hash"),
        "wrap": m.get("wrap"),
        "d_model": m.get("d_model"),
        "n_layers": m.get("n_layers"),
        "lr": t.get("lr"),
        "warmup": t.get("warmup"),
        "steps": t.get("steps"),
        "seed": t.get("seed"),
        "outcome": run.get("outcome"),
        "val_loss": run.get("val_loss"),
        "unigram_loss": run.get("unigram_loss"),
        "escape_step": run.get("escape_step"),
        "seconds": run.get("seconds"),
        "started_at": run.get("started_at"),
        "finished_at": run.get("finished_at"),
        "step_size": probe.get("step_size"),
        "relative_update": probe.get("relative_update"),
        "predicted": predicted(run, run.get("probe")),
    } | {k: run[k] for k in ("scored_under", "predicted_under") if k in run}


def by_width(runs: list[dict], tuning: list[dict]) -> list[dict]:
    """Per width of the held-out runs: the doctor's and the lookup's hits, with their Wilson intervals."""
    rows = []
    for d in sorted({r["config"]["model"]["d_model"] for r in runs}):
        at = [r for r in runs if r["config"]["model"]["d_model"] == d]
        doctor = score(doctor_pairs(at))
        lookup = score(baseline_pairs(tuning, at)["wrapping x lr lookup"])
        rows.append({"d_model": d, "doctor": doctor, "lookup": lookup})
    return rows


def scale_tuning(db: str) -> tuple[list[StudyConfig], list[dict], list[tuple[str, int, int, float]]]:
    """(the scale tuning grids, their finished runs probed again, (name, finished, total, hours) per grid)."""
    grids, runs, counts = [], [], []
    for path in SCALE_TUNING:
        study, got = stored(db, path)
        grids.append(study)
        runs.extend(got)
        counts.append((study.name, len(got), len(study.expand()), hours(got)))
    return grids, runs, counts


def hours(runs: list[dict]) -> float | None:
    """The runs' own training times summed, in hours of one core (None when a run's time is not kept: a
    run restored from a run record written before the record kept times)."""
    if any(r.get("seconds") is None for r in runs):
        return None
    return sum(r["seconds"] for r in runs) / 3600


def grid_lines(grids) -> list[str]:
    """One line per grid: its finished runs and what they cost (the runs' own times on this machine)."""
    return [
        f"- `{name}`: {done} of {total} runs finished" + _cost(done, rest)
        for name, done, total, *rest in grids
    ]


def _cost(done: int, rest: list) -> str:
    """', 4.9 h of one core (the runs' own times)', or what is known of it."""
    if not done:
        return ""
    h = rest[0] if rest else None
    if h is None:
        return " (their training times are not in the run record they were restored from)"
    return f", {h:.1f} h of one core (the runs' own times)"


def refit_command(first: tuple[str, str], scale_db: str, tuning_grids: list | None, record: dict) -> str:
    """The `depthlab calibrate` line that refits the rules: ``first`` (store, study) and each scale tuning
    grid with finished runs (``tuning_grids``: :func:`scale_tuning`'s counts; None when the scale store
    was not read: the scale studies ``record`` was fitted on)."""
    if tuning_grids is None:
        names = [s["study"] for s in (record.get("fitted_from") or {}).get("studies", [])]
        tuning_grids = [(n, 1) for n in names if n != first[1]]
    sources = [first] + [(scale_db, name) for name, done, *_ in tuning_grids if done]
    return "depthlab calibrate " + " ".join(f"--from {db} {name}" for db, name in sources)
