"""The doctor across width for ``depthlab reproduce doctor``: its scale tuning grids and the held-out grid across width, scored from their store.

The scale grids (``SCALE_TUNING``, ``SCALE_HELDOUT``) are run by ``depthlab study`` into one store
(``--scale-db``): they take hours, so this module never trains them; it reads what is stored, probes
every finished run's model at init again with the current code (the score is always the current
doctor's), and scores the held-out runs against the two baselines chosen on the tuning runs (old and
scale grids pooled). A grid not yet complete is scored on its finished runs, and says how many that is.
"""

from __future__ import annotations

import os

from depthlab.config import ModelConfig, TrainConfig
from depthlab.docgen.doctor_registrations import scores_under_registrations, versus_lookup
from depthlab.report import load
from depthlab.report.grouping import predicted
from depthlab.study import RunSpec, StudyConfig
from depthlab.study.baselines import baseline_pairs
from depthlab.study.scoring import doctor_pairs, format_score, interval_text, score
from depthlab.study.store import Store
from depthlab.study.worker import probe_at_init

SCALE_TUNING = (
    "grids/doctor-scale-tuning.yaml",
    "grids/doctor-scale-tuning-wide.yaml",
    "grids/doctor-scale-tuning-wide-deep.yaml",
)
SCALE_HELDOUT = "grids/doctor-scale-heldout.yaml"
DEFAULT_SCALE_DB = os.path.join("runs", "doctor-scale.sqlite")


def probe_again(run: dict) -> dict | None:
    """The run's at-init probe taken again with the current code, as the study worker takes it."""
    spec = RunSpec(
        ModelConfig.from_dict(run["config"]["model"]), TrainConfig.from_dict(run["config"]["train"])
    )
    probe, _ = probe_at_init(spec)
    return probe


def stored(db: str, grid: str) -> tuple[StudyConfig, list[dict]]:
    """(the grid, its finished runs in ``db`` with their probes taken again and "study" its name); no
    runs when the store or the study is absent."""
    study = StudyConfig.from_yaml(grid)
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
    probe's step size and relative update, and what the doctor predicted."""
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
        "step_size": probe.get("step_size"),
        "relative_update": probe.get("relative_update"),
        "predicted": predicted(run, run.get("probe")),
    } | ({"predicted_under": run["predicted_under"]} if "predicted_under" in run else {})


def by_width(runs: list[dict], tuning: list[dict]) -> list[dict]:
    """Per width of the held-out runs: the doctor's and the lookup's hits, with their Wilson intervals."""
    rows = []
    for d in sorted({r["config"]["model"]["d_model"] for r in runs}):
        at = [r for r in runs if r["config"]["model"]["d_model"] == d]
        doctor = score(doctor_pairs(at))
        lookup = score(baseline_pairs(tuning, at)["wrapping x lr lookup"])
        rows.append({"d_model": d, "doctor": doctor, "lookup": lookup})
    return rows


def scale_tuning(db: str) -> tuple[list[StudyConfig], list[dict], list[tuple[str, int, int]]]:
    """(the scale tuning grids, their finished runs probed again, (name, finished, total) per grid)."""
    grids, runs, counts = [], [], []
    for path in SCALE_TUNING:
        study, got = stored(db, path)
        grids.append(study)
        runs.extend(got)
        counts.append((study.name, len(got), len(study.expand()), _hours(got)))
    return grids, runs, counts


def score_heldout(db: str, tuning: list[dict]) -> dict:
    """{"grid": (name, finished, total), "heldout": score or None, "baselines", "by_width", "misses"}: the
    held-out grid across width scored, the baselines chosen on ``tuning`` (every tuning run pooled).
    Probe it after the calibration record is written: its verdicts read the record."""
    study, held = stored(db, SCALE_HELDOUT)
    out = {"grid": (study.name, len(held), len(study.expand()), _hours(held)), "heldout": None, "runs": held}
    if not held:
        return out
    pairs = baseline_pairs(tuning, held)
    return out | {
        "heldout": score(doctor_pairs(held)),
        "baselines": {name: score(p) for name, p in pairs.items()},
        "versus_lookup": versus_lookup(held, tuning),
        "registrations": scores_under_registrations(held),
        "by_width": by_width(held, tuning),
        "misses": miss_lines(held),
    }


def _hours(runs: list[dict]) -> float:
    """The runs' own training times summed, in hours of one core."""
    return sum(r.get("seconds") or 0.0 for r in runs) / 3600


def _grid_lines(grids) -> list[str]:
    """One line per grid: its finished runs and what they cost (the runs' own times on this machine)."""
    return [
        f"- `{name}`: {done} of {total} runs finished"
        + (f", {hours:.1f} h of one core (the runs' own times)" if done else "")
        for name, done, total, *rest in grids
        for hours in [rest[0] if rest else 0.0]
    ]


def heldout_lines(scale: dict | None, db: str) -> list[str]:
    """The section of docs/doctor.md on the held-out grid across width (the headline); ``scale`` is
    :func:`score_heldout`'s result with "tuning_grids" (None: the scale store was not read)."""
    if scale is None:
        scale = {"tuning_grids": [], "grid": (SCALE_HELDOUT, 0, 0, 0.0), "heldout": None}
    lines = [
        "## Held-out across width (the headline)",
        "",
        f"`{SCALE_HELDOUT}` was committed before any of its runs and never used to choose anything; the "
        "doctor's rules were fitted on the tuning grids alone (the old grid and the scale tuning grids "
        "pooled, by `depthlab calibrate`, in the form committed before the held-out grid's first run: its "
        f"file says so), and so were the baselines. The runs are in `{db}`:",
        "",
        *_grid_lines([*scale["tuning_grids"], scale["grid"]]),
        "",
    ]
    h = scale.get("heldout")
    if h is None:
        return lines + [
            f"Not scored yet: no finished run of `{SCALE_HELDOUT}` in the store "
            f"(`depthlab study --grid {SCALE_HELDOUT} --db {db}`, then this command again).",
        ]
    lines += [
        "With 95% Wilson intervals (runs counted as independent: each is its own configuration), against "
        "always answering 'trains' and the wrapping x learning rate lookup chosen on the tuning runs:",
        "",
        "```",
        format_score(h, scale.get("baselines")),
        "```",
        "",
        "| width | runs | doctor | wrapping x lr lookup |",
        "|---|---|---|---|",
    ]
    for row in scale["by_width"]:
        d, k = row["doctor"], row["lookup"]
        lines.append(
            f"| {row['d_model']} | {d['runs']} | {d['hits']} ({interval_text(d['accuracy'], d['interval'])}) | "
            f"{k['hits']} ({interval_text(k['accuracy'], k['interval'])}) |"
        )
    lines += _comparison_lines(scale)
    lines += ["", "Runs the doctor got wrong:", ""]
    lines += [f"- {m}" for m in scale["misses"]] or ["- none"]
    return lines


def _comparison_lines(scale: dict) -> list[str]:
    """The doctor against the lookup on the same runs (a paired difference with its interval), and the
    held-out score under each earlier registration of the rules."""
    lines = []
    v = scale.get("versus_lookup")
    if v:
        lo, hi = v["interval"]
        lines += [
            "",
            f"The doctor against the lookup on the same {v['runs']} runs: {v['difference']:+.0%} "
            f"[{lo:+.0%}, {hi:+.0%}] (95%, Newcombe's interval for a paired difference): both right on "
            f"{v['both']}, only the doctor on {v['doctor_only']}, only the lookup on {v['lookup_only']}, "
            f"neither on {v['neither']}.",
        ]
    regs = scale.get("registrations") or []
    if regs:
        lines += [
            "",
            "The score of record uses the rules as last registered before any held-out run (fitted on the "
            "four tuning studies, the step-size error from the band's high end). Under the earlier "
            "registrations (each committed before any held-out run too, their records kept in "
            "`depthlab/probe/`):",
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
