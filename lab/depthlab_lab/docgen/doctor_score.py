"""``depthlab reproduce doctor``: score the doctor's at-init verdicts on its held-out grid; docs/doctor.md.

The doctor's thresholds were chosen on ``lab/depthlab_lab/grids/doctor-tuning.yaml`` and are constants in
:mod:`depthlab.doctor.checks`; ``lab/depthlab_lab/grids/doctor-heldout.yaml`` was fixed before any of its runs and is
only scored. This command runs both grids into one store (resumable: runs already done are skipped),
probes every run's model at init again with the current probe (deterministic: the run's seed and first
batch), so that the score is always the current doctor's, scores it on each grid (the tuning score is
in-sample, shown for comparison only), scores the doctor as it was before it took a learning rate (the
same probes, diagnosed without one) on the held-out runs, and writes the document from what it measured.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import os
import platform
import time

from depthlab.doctor.checks import diagnose
from depthlab.doctor.lr_limit import GATED_DEPTH, GATED_LIMIT, from_band, update_limit
from depthlab.doctor.record import RECORD_PATH, load_record
from depthlab.paths import check_output_file, write_json
from depthlab.probe.result import ProbeResult
from depthlab.progress import TimeLeft, duration, say
from depthlab.report import load
from depthlab.report.doctor_score import doctor_pairs, format_score, score
from depthlab.study import StudyConfig, plan, run_study
from depthlab.train.cost import run_seconds
from depthlab_lab import lab_file
from depthlab_lab.calibrate.baselines import baseline_pairs
from depthlab_lab.docgen.advise_page import committed_lines as advise_score_lines
from depthlab_lab.docgen.advise_page import committed_reliability as advise_reliability_lines
from depthlab_lab.docgen.doctor_answers import how_lines, misses_table, score_table
from depthlab_lab.docgen.doctor_fits import (
    limit_lines,
    plateau_lines,
    sources_text,
    update_limit_lines,
    width_lines,
)
from depthlab_lab.docgen.doctor_heldout import HELDOUT_GRIDS, heldout_lines, pop_runs, score_heldout_grids
from depthlab_lab.docgen.doctor_lookups import committed_lines as doctor_lookup_lines
from depthlab_lab.docgen.doctor_scale import (
    DEFAULT_SCALE_DB,
    SCALE_TUNING,
    miss_lines,
    probe_again,
    probe_key,
    probe_seconds,
    probing,
    refit_command,
    run_row,
    scale_tuning,
)

TUNING, HELDOUT = "lab/depthlab_lab/grids/doctor-tuning.yaml", "lab/depthlab_lab/grids/doctor-heldout.yaml"
DEFAULT_DB = os.path.join("runs", "doctor.sqlite")
DEFAULT_DOC = os.path.join("docs", "doctor.md")
SCALE_GRIDS = (*SCALE_TUNING, *(g.grid for g in reversed(HELDOUT_GRIDS)))  # the order to run them in


def without_lr(probe: dict) -> dict:
    """A stored probe re-diagnosed as the doctor did before it was given a learning rate."""
    p = copy.deepcopy(probe)
    p["config"]["probe"]["lr"] = None
    result = ProbeResult(p["config"], p["layers"])
    p["verdicts"] = [v.to_dict() for v in diagnose(result)]
    return p


WHERE = f"thresholds chosen on {TUNING} at width 32, scored on {HELDOUT} at widths 48-64; 150 steps"


def doctor_plan(
    db: str = DEFAULT_DB, scale_db: str = DEFAULT_SCALE_DB, workers: int = 1
) -> tuple[str, TimeLeft]:
    """(the line that says what ``depthlab reproduce doctor`` will do and how long it expects, its clock).
    The clock's jobs: each grid's training ("train GRID": its runs not yet done in ``db``, the cost model's
    seconds, ``workers`` at a time) and each run's probe taken again (:func:`probe_key`: every run of the
    two grids, and every finished run of the scale grids in ``scale_db``). Reads the stores, writes nothing."""
    expected, total, done, train = {}, 0, 0, 0.0
    probes = []
    for path in (TUNING, HELDOUT):
        grid = StudyConfig.from_yaml(lab_file(path))
        seconds = 0.0
        for spec, status in plan(grid, db):
            total += 1
            probes.append(spec)
            if status == "done":
                done += 1
            else:
                seconds += run_seconds(spec.model, spec.train)
        if seconds:
            expected[f"train {grid.name}"] = seconds / max(1, workers)
            train += seconds / max(1, workers)
    for path in SCALE_GRIDS:
        probes += [
            spec for spec, status in plan(StudyConfig.from_yaml(lab_file(path)), scale_db) if status == "done"
        ]
    by_key = {probe_key(s.hash): s for s in probes}
    expected |= {key: probe_seconds(s) for key, s in by_key.items()}
    clock = TimeLeft(expected)
    probing_s = sum(v for k, v in expected.items() if k.startswith("probe "))
    line = (
        f"the doctor's grids: {total} tiny training runs ({done} already in {db}), {total - done} to train: "
        f"about {duration(train)}; then {len(by_key)} runs' probes taken again (the scale grids' finished runs "
        f"in {scale_db} included): about {duration(probing_s)}; about {duration(clock.total_s())} in all "
        "(cost model: step times measured now)"
    )
    return line, clock


def _trained(clock: TimeLeft | None, grid: StudyConfig, res) -> None:
    """A grid's training is over: its measured time goes to ``clock``, and a line says the time left."""
    key = f"train {grid.name}"
    if clock is None or key not in clock.expected:
        return
    if res.ran:
        clock.finished(key, res.seconds)
    else:
        clock.skip(key)
    say(f"reproduce doctor: {grid.name} trained ({res.ran} runs); about {duration(clock.left_s())} left")


def measure(
    db: str = DEFAULT_DB,
    workers: int = 1,
    out=None,
    record: str = RECORD_PATH,
    scale_db: str = DEFAULT_SCALE_DB,
    clock: TimeLeft | None = None,
) -> dict:
    """Run (or resume) both grids into ``db`` and read the scale grids from ``scale_db`` (never trained
    here); returns {"tuning", "heldout", "heldout_before"} scores, the misses on the held-out grid, the
    held-out grids across width scored ("scale": the scale tuning grids' counts and each held-out grid's
    score, newest first) and the seconds this took. It reads the doctor's calibration record and never
    writes it: a document generator does not change what the library does (``depthlab calibrate`` refits
    the record; ``record`` is the one scored). ``clock`` (:func:`doctor_plan`'s): a line with the time
    left after each grid's training, and a progress line over the probes taken again."""
    probes = sum(k.startswith("probe ") for k in clock.expected) if clock is not None else 0
    with probing(clock, probes, "reproduce doctor") if probes else contextlib.nullcontext():
        return _measure(db, workers, out, scale_db, clock)


def _measure(db: str, workers: int, out, scale_db: str, clock: TimeLeft | None) -> dict:
    start = time.perf_counter()
    scores = {}
    tuning_grid, heldout_grid = (
        StudyConfig.from_yaml(lab_file(TUNING)),
        StudyConfig.from_yaml(lab_file(HELDOUT)),
    )
    res = run_study(tuning_grid, db=db, workers=workers, progress=False, out=out)
    _trained(clock, tuning_grid, res)
    data = load(db, res.study_id)
    tuning_runs = [dict(r, probe=probe_again(r), study=tuning_grid.name) for r in data.runs]
    scores["tuning"] = score(doctor_pairs(tuning_runs))
    scale_grids, scale_runs, scale_counts = scale_tuning(scale_db)
    pool = tuning_runs + scale_runs
    if scale_runs:
        scores["scale_tuning"] = score(doctor_pairs(scale_runs))
    res = run_study(heldout_grid, db=db, workers=workers, progress=False, out=out)
    _trained(clock, heldout_grid, res)
    data = load(db, res.study_id)
    held = [dict(r, probe=probe_again(r)) for r in data.runs]
    scores["heldout"] = score(doctor_pairs(held))
    scores["baselines"] = {name: score(p) for name, p in baseline_pairs(tuning_runs, held).items()}
    before = [dict(r, probe=without_lr(r["probe"])) if r.get("probe") else r for r in held]
    scores["heldout_before"] = score(doctor_pairs(before))
    scores["misses"] = miss_lines(held)
    scores["scale"] = {"tuning_grids": scale_counts, "grids": score_heldout_grids(scale_db, pool)}
    scores["runs"] = {tuning_grid.name: [run_row(r) for r in tuning_runs]}
    for r in scale_runs:
        scores["runs"].setdefault(r["study"], []).append(run_row(r))
    scores["runs"] |= pop_runs(scores["scale"]["grids"])
    scores["runs"][heldout_grid.name] = [run_row(r) for r in held]
    scores["seconds"] = time.perf_counter() - start
    return scores


def where(scale_runs: list[dict], pool: list[dict]) -> str:
    """Where the thresholds were chosen, for the record's "where" (the verdicts quote it)."""
    if not scale_runs:
        return WHERE
    widths = sorted({r["config"]["model"]["d_model"] for r in pool})
    steps = sorted({r["config"]["train"]["steps"] for r in pool})
    return (
        f"thresholds chosen on {TUNING} and the scale tuning grids (widths {', '.join(map(str, widths))}; "
        f"{steps[0]}-{steps[-1]} steps)"
    )


def scale_section(record: dict, refit: str) -> list[str]:
    """The registered grids across scale, then the fitted limits (``refit``: the command that refits
    them) and the plateau prediction."""
    return [*_grids_lines(), *_fits_lines(record, refit)]


def _grids_lines() -> list[str]:
    """The grids across scale: what each holds, its estimated cost, the commands that run them."""
    return [
        "## Across scale: registered grids",
        "",
        "The grids above stop at width 64, 16 layers, lr 0.05 and 150 steps. Every learning-rate and "
        "trainability verdict says where it was calibrated and how often the tuning grid agreed with it "
        "(the record `depthlab/doctor/calibration.json`, fitted by `depthlab calibrate`; this page never writes it), and a "
        "configuration outside that range (a wider or deeper model, another lr or warmup) gets at most a "
        "warning marked as an extrapolation. These grids, each committed before any of its runs, are to "
        "calibrate and score the doctor where people train:",
        "",
        "- `lab/depthlab_lab/grids/doctor-scale-tuning.yaml`: 540 runs, 10 wrappings x width 32 at 2 and 24 layers and width "
        "128 at 6 x lr 1e-4 to 1 in half-decades x warmup 0 and 300, 600 steps; the cost model estimates "
        "5.1 h of one core.",
        "- `lab/depthlab_lab/grids/doctor-scale-tuning-wide.yaml`: 24 runs at width 512 (post-LN, pre-LN, ReZero x lr 3e-4 to "
        "1e-2 x warmup 0 and 300, 1,000 steps); 2.5 h of one core.",
        "- `lab/depthlab_lab/grids/doctor-scale-tuning-wide-deep.yaml`: 9 runs at width 512 and 6 layers (post-LN x lr 3e-4 "
        "to 3e-3 x warmup 0, 50 and 300, 1,000 steps), added when the rules fitted on the first two parts "
        "called a 6-layer post-LN stack at that width that trained a failure; 1-1.5 h with 2 workers.",
        "- `lab/depthlab_lab/grids/doctor-scale-heldout.yaml`: the first held-out grid across width, 36 runs (post-LN, pre-LN, "
        "DeepNorm, ReZero x widths 128, 256, 512 x lr 6e-4, 2e-3, 6e-3, warmup 100, 1,000 steps); 3.5 h of "
        "one core. It is never used to choose anything, and `depthlab calibrate` refuses it.",
        "- `lab/depthlab_lab/grids/doctor-scale-tuning-families.yaml`: 24 runs (DeepNorm and ReZero x widths 256, 512 x lr "
        "1e-3 to 1e-2 x warmup 0 and 300, 4 layers, 1,000 steps), added after the first held-out grid's misses in "
        "these two wrappings; about 2.3 h of one core from the stored runs' medians.",
        "- `lab/depthlab_lab/grids/doctor-scale-heldout-families.yaml`: the second held-out grid across width, 48 runs "
        "(post-LN, pre-LN, DeepNorm, ReZero x widths 192, 384 x lr 1.5e-3 to 1.2e-2 x warmup 0 and 200, 3 "
        "layers, 1,000 steps, seed 2), the clean test of the rules fitted with that part; about 1.8 h.",
        "",
        "In all about 17 hours of one core by these estimates (about half with `--workers 2`). Each resumes "
        "where it stopped:",
        "",
        "```",
        *[f"depthlab study --grid {g} --db runs/doctor-scale.sqlite" for g in SCALE_GRIDS],
        "```",
        "",
        "What each cost as run (the runs' own times) is in the first section.",
    ]


def _fits_lines(record: dict, refit: str) -> list[str]:
    """The rules fitted on the tuning runs: the step-size limit, the relative-update ceilings, both
    across width, and the plateau model."""
    return [
        "",
        "The rules below were fitted by `depthlab calibrate` on the tuning runs pooled: "
        f"{sources_text(record)}. To refit them on every tuning grid with finished runs: `{refit}`, then "
        "this command again to score the doctor with them.",
        "",
        "### The step-size limit against the warmup length",
        "",
        "Stacks whose blocks renormalise the stream are judged by s = update gain x lr, how far one full "
        "Adam step at the peak learning rate moves the output. A warmup lets the stack adapt before the "
        "peak arrives, so a longer warmup cannot lower the limit on s; per warmup length among the "
        "tuning runs, the limit is the one that classified them best, and where a longer warmup's limit "
        "came out lower (its runs differ in depth and budget, not only in warmup) the two warmups are "
        "pooled and one limit chosen on their runs together. A wrapping whose own runs tell a limit is "
        "judged by its own, on the width-scaled step s x (d / 128)^-a where that form tells a width left "
        "out of its fit better (the list under its table). " + _step_error_text(record) + ":",
        "",
        *limit_lines(record),
        "",
        "### Ceilings on the relative update",
        "",
        "Stacks that never renormalise the stream (pre-LN, sandwich, reorder, LNS, LayerScale, ...) and "
        "zero-gated ones (ReZero, whose first step sets every gate to +-lr whatever its size) are judged by "
        "the relative update rho, Adam's first full step against each block matrix's spectral norm. Per "
        "family, the limit on rho is the one that classified the tuning runs best (trained below, "
        "stalled, undertrained or diverged above); the zero-gated family is fitted on its runs "
        f"{_gated_depths(record)}, where its error applies. The doctor calls an lr whose rho reaches the band's high "
        "end (the smallest measured rho above the limit) an error, one between the limit and that end a "
        "warning; outside the calibrated range (the grids' range widened by the fit's support), a warning "
        "at most, marked as an extrapolation:",
        "",
        *update_limit_lines(record),
        "",
        "rho is measured on depthlab's layout of the block matrices (q, k and v in one matrix; a gated "
        "FFN's two inputs in one), where every measured run had it. A Hugging Face model that keeps them "
        "apart (Llama, Gemma) is measured on the same weights in that layout: Adam moves each entry alike "
        "either way, so the run trains alike, while the median over matrices of other shapes would read "
        "about 20% lower. `probe --hf` and `advise --hf` give one safe lr.",
        "",
        "### The limits across width",
        "",
        "Each limit fitted again on each width's runs alone. The doctor uses only the limits pooled over "
        "widths (a wrapping with its own step-size limit: that one, pooled over its widths, on the width-scaled step where it has an exponent); this "
        "table is the evidence of whether a limit in its units (s in output norms, rho against the "
        "matrices' size) holds from one width to the next. A band open at one end means that width's runs "
        "all trained (or all failed) on the side measured. The widths' runs may differ in depth too "
        "(the support above says which were run):",
        "",
        *width_lines(record),
        "",
        "### Leaving the unigram plateau",
        "",
        "A stack can sit on the unigram plateau (the loss of a model that knows only which tokens are "
        "common) for hundreds of steps and then train: at a short budget it is called stalled, though it "
        "is only late. Each run's escape step (the first step its loss leaves the unigram band for good) is "
        "stored with it and shown in the report. Given the learning rate (and `probe --steps`, the budget; "
        "studies pass theirs), the doctor's `plateau` verdict says when the run is expected to leave the "
        "plateau and whether its budget would call it stalled: a warning at most, never an error, marked "
        "as an extrapolation outside the fit's support, and not part of the score above. Runs that never "
        "escaped are censored at their budget (they escape later, if at all), not dropped; diverged runs "
        "are left out (the learning-rate verdict judges divergence). Where the probe makes advise's call "
        "and measured runs of the same stack lie near, the verdict gives the nearest runs' escape steps "
        "instead, and this fit's step in its detail: on the held-out runs at depth theirs was the closer "
        "step ([advise.md](advise.md)).",
        "",
        *plateau_lines(record),
    ]


def _step_error_text(record: dict) -> str:
    """Where the step-size rule's error starts: the band's high end (the form registered last) or the
    limit itself (a record fitted before that form)."""
    if from_band(record):
        return (
            "The doctor calls a step that reaches the band's high end (the smallest tuning step above the "
            "limit; interpolated between the fitted warmups) an error, one between the limit and that end "
            "a warning: the tuning runs do not place the limit more exactly than its band"
        )
    return "The doctor calls a step above the limit an error"


def _gated_summary(record: dict) -> str:
    """'of 0.83 or more (such runs failed ...)' with a fitted limit; 'above 0.63' (the constant)."""
    fit = update_limit("gated", record)
    if fit and fit["band"][1]:
        return f"of {fit['band'][1]:.3g} or more (such runs failed from there on the tuning grid)"
    return f"above {GATED_LIMIT:g}"


def _free_clause(record: dict) -> str:
    """'where any other stack's relative update reaches 8.3 (...), ' with a fitted limit; '' without."""
    fit = update_limit("free", record)
    if not fit or not fit["band"][1]:
        return ""
    high = fit["band"][1]
    return (
        f"where any other stack's relative update reaches {high:.3g} (such runs failed from there on the "
        "tuning grid), "
    )


def _scale_tuning_lines(scores: dict) -> list[str]:
    """The scale tuning grids' in-sample score (the rules were fitted on these runs)."""
    if "scale_tuning" not in scores:
        return []
    return [
        "",
        "The scale tuning grids' runs, in-sample (the limits and the plateau model were fitted on them):",
        "",
        "```",
        format_score(scores["scale_tuning"]),
        "```",
    ]


def _refit(scores: dict, db: str, record: dict, scale_db: str) -> str:
    """The `depthlab calibrate` line over the tuning grids with finished runs."""
    counts = (scores.get("scale") or {}).get("tuning_grids")
    return refit_command((db, os.path.splitext(os.path.basename(TUNING))[0]), scale_db, counts, record)


# Where the doctor is asked at real width (a set registered before its GPU run; docs/gpu.md).
REAL_WIDTH = (
    "At real width: a held-out set for `depthlab advise` at widths 1,024 and 2,048 and depths 12 to 48 (24 "
    "runs on one GPU, bf16) is registered with every prediction frozen before any of its runs "
    "(`lab/depthlab_lab/grids/advise-heldout-width.registration.json`); it waits for a GPU: "
    "[gpu.md](gpu.md) has the command and its rules."
)


def render(scores: dict, db: str, record: str = RECORD_PATH, scale_db: str = DEFAULT_SCALE_DB) -> str:
    """The Markdown of docs/doctor.md from :func:`measure`'s scores and the calibration record."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    h, b, t = scores["heldout"], scores["heldout_before"], scores["tuning"]
    rec = load_record(record)
    heldout_name = StudyConfig.from_yaml(lab_file(HELDOUT)).name
    lines = [
        "<!-- written by `depthlab reproduce doctor`: regenerate it rather than editing it -->",
        "# How well the doctor's verdict at init foretells a run",
        "",
        "The doctor probes a model once at init and says whether its run will train. Here is its score on "
        "held-out grids, against two baselines on the same runs. Each grid was committed before its runs "
        "and never used to choose a rule. Hits carry 95% Wilson intervals; the paired difference, "
        "Newcombe's.",
        "",
        *score_table(scores, heldout_name),
        "",
        "The lookup answers each run with the majority outcome of its wrapping and learning rate on the "
        "tuning runs. The doctor is worth its probe only above it.",
        "",
        *doctor_lookup_lines(),
        "",
        "`depthlab advise` (a probability from the doctor's limit and the nearest measured runs) on its own "
        "held-out sets, registered with every prediction before their runs, against the strongest lookups "
        "([advise.md](advise.md)):",
        "",
        *advise_score_lines(),
        "",
        *advise_reliability_lines(),
        "",
        "## The runs it got wrong",
        "",
        *misses_table(scores, heldout_name),
        "",
        "## What it predicts from",
        "",
        *how_lines(rec, _gated_summary(rec), _gated_depths(rec), _free_clause(rec)),
        "",
        "## Method and provenance",
        "",
        f"The thresholds were chosen on `{TUNING}` only. `{HELDOUT}` was fixed in the repository before "
        "any of its runs; it differs from the tuning grid in depth, width, learning rate, warmup length and "
        "seed, and was never used to choose anything. One caveat: the ReZero update-size rule and the error "
        "for collapsed positions were chosen on the tuning grid after that grid's misses (ReZero runs that "
        "diverged at lr 0.02) were listed on this page. So the held-out grid is no longer blind to them, "
        "and its score is optimistic. The same holds for the step-size limit as a function of the "
        "warmup length (fitted on tuning runs only, but after this page had shown the held-out scores of "
        "the rule it replaces). The held-out grids across width (the next section), each registered before "
        "any of its runs and scored under the rules registered before them, are the clean test.",
        "",
        REAL_WIDTH,
        "",
        *heldout_lines(scores.get("scale"), scale_db),
        "",
        "## Held-out score (widths 48-64)",
        "",
        "With 95% Wilson intervals, against two baselines chosen on the tuning grid: always answering "
        "'trains', and a lookup of the majority outcome by wrapping x learning rate on the tuning runs "
        "(nearest tuning lr): the doctor is worth its probe only above the lookup.",
        "",
        "```",
        format_score(h, scores.get("baselines")),
        "```",
        "",
        "## The same held-out runs, the doctor without the learning rate",
        "",
        "The same probes, diagnosed as the doctor did before it took a learning rate (it then judged "
        "post-LN-style stacks by their depth alone, with `warmup-required`):",
        "",
        "```",
        format_score(b),
        "```",
        "",
        "## Tuning grid (in-sample, for comparison only)",
        "",
        "```",
        format_score(t),
        "```",
        *_scale_tuning_lines(scores),
        "",
        *scale_section(rec, _refit(scores, db, rec, scale_db)),
        "",
        "---",
        "",
        f"Written by `depthlab reproduce doctor` on {when} ({platform.node()}, {os.cpu_count()} cores); the "
        f"runs are in `{db}` ({scores['seconds']:.0f} s to run or resume them this time). Every run "
        "scored here is kept in `docs/doctor-runs.json`; `depthlab reproduce doctor --restore "
        "docs/doctor-runs.json` writes those runs back into the two stores (their probes taken again) and "
        "re-derives this page without training them.",
        "",
    ]
    return "\n".join(lines)


def write_doctor_doc(
    db: str = DEFAULT_DB,
    doc: str = DEFAULT_DOC,
    workers: int = 1,
    out=None,
    scale_db: str = DEFAULT_SCALE_DB,
    clock: TimeLeft | None = None,
) -> dict:
    """Measure and write ``doc``; returns the scores. ``clock``: :func:`doctor_plan`'s, for the time
    left as the grids train and their probes are taken again."""
    check_output_file(doc, "--doc", ("md",))
    scores = measure(db, workers, out, scale_db=scale_db, clock=clock)
    with open(doc, "w", encoding="utf-8") as f:
        f.write(render(scores, db, scale_db=scale_db))
    write_json({"studies": scores["runs"]}, record_path(doc))
    return scores


def record_path(doc: str) -> str:
    """The run record beside the document: docs/doctor.md -> docs/doctor-runs.json."""
    return os.path.splitext(doc)[0] + "-runs.json"


def _gated_depths(rec: dict) -> str:
    """'of every depth' where the record's zero-gated limit was fitted on every depth's runs, else 'of 6
    layers or more' (a record fitted before that form)."""
    gated = ((rec.get("update_limit") or {}).get("families") or {}).get("gated") or {}
    return "of every depth" if gated.get("all_depths") else f"of {GATED_DEPTH} layers or more"
