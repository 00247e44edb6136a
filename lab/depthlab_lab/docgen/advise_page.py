"""docs/advise.md: how well ``depthlab advise`` foretells a run, scored on its held-out grids under the
rules registered before their runs, beside the lookups on the same runs; how its predictor was chosen.

The held-out grids at depth and the Hugging Face set (:mod:`depthlab_lab.calibrate.heldout_depth`) were
each committed with every run's prediction frozen in its registration file (the Hugging Face set with the
first grid; the second grid after the first was scored and its runs joined the atlas). This page reads the finished runs from their store (``--db``, default ``runs/advise-heldout.sqlite``),
writes their compact run record beside it (``docs/advise-heldout-runs.json``: kept, so that the page
re-derives without the store, and a later sitting resumes), and scores each prediction against the
outcome: accuracy with its Wilson interval, the paired difference with the best lookup (Newcombe's
interval), the Brier score. Until every run is done the page says how many are, and decides nothing.
Below, the cross-validation that chose advise's predictor and its reliability, from the doctor's
record. ``python -m depthlab_lab.docgen.advise_page [--db DB]`` writes it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess

from depthlab.doctor.atlas import Atlas
from depthlab.doctor.plateau import family as plateau_family
from depthlab.doctor.plateau import p_within
from depthlab.doctor.plateau import predict as escape_at
from depthlab.doctor.predict import CLOSE, Query, nearest, nearest_escape
from depthlab.doctor.record import RECORD_PATH, load_record
from depthlab.errors import InputError
from depthlab.intervals import paired_counts, paired_difference_interval, wilson_interval
from depthlab.paths import check_output_file, printable, replace_file
from depthlab.report.doctor_score import expected
from depthlab.study.store import Store
from depthlab.study.storefile import check_sqlite_header, check_store_path
from depthlab_lab import REPOSITORY, lab_file
from depthlab_lab.calibrate.advise_track import build as track_record
from depthlab_lab.calibrate.advise_track import differ_reading, every_grid, finished_grids, placed, run_field
from depthlab_lab.calibrate.heldout_depth import GRIDS_AT_DEPTH, MARGIN, RECORD, TARGET, digest
from depthlab_lab.calibrate.lookups import LOOKUPS
from depthlab_lab.calibrate.predictor_fit import shape_folds
from depthlab_lab.calibrate.seed_agreement import agreement
from depthlab_lab.cli import one_line
from depthlab_lab.restore import check_restore_path, restore

DOC = os.path.join("docs", "advise.md")
DB = os.path.join("runs", "advise-heldout.sqlite")
MARKER = (
    "<!-- written by `python -m depthlab_lab.docgen.advise_page`: regenerate it rather than editing it -->"
)
ROW_KEYS = ("outcome", "val_loss", "unigram_loss", "escape_step", "seconds", "started_at", "finished_at")
LOOKUP_NAMES = tuple(LOOKUPS)
ALWAYS = "always 'trains'"


def stored_runs(db: str) -> dict[str, dict]:
    """{config hash: record row} of every finished run of the store's advise studies."""
    out = {}
    if not (os.path.isfile(db) and os.path.getsize(db) > 0):
        return out
    with Store(db, create=False) as store:
        for study in store.studies():
            if not study["name"].startswith("advise-heldout"):
                continue
            for r in store.runs(study["id"]):
                if r.get("status") == "done" and r.get("outcome"):
                    out[r["config_hash"]] = {"config_hash": r["config_hash"], "study": study["name"],
                                             **{k: r.get(k) for k in ROW_KEYS}}  # fmt: skip
    return out


def merged_record(db: str, path: str = RECORD) -> dict:
    """The record: the store's finished runs, and those an earlier record kept that the store lacks."""
    kept = {}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            kept = {r["config_hash"]: r for r in json.load(f)["runs"]}
    return {
        "runs": sorted({**kept, **stored_runs(db)}.values(), key=lambda r: (r["study"], r["config_hash"]))
    }


def score(predicted: list[dict], done: dict[str, dict], best: str | None = None) -> dict:
    """Advise's and each lookup's hits on the finished runs, with intervals and the Brier scores; advise
    is compared with ``best`` (default: the lookup right on most runs, then with the lower Brier score)."""
    runs = [(p, done[p["config_hash"]]) for p in predicted if p["config_hash"] in done]
    n = len(runs)
    truth = [expected(d["outcome"]) == "trains" for _, d in runs]
    calls = {"advise": [p["advise"] == "trains" for p, _ in runs]}
    calls |= {name: [p["lookups"][name] == "trains" for p, _ in runs] for name in LOOKUP_NAMES}
    calls[ALWAYS] = [True] * n
    probs = {"advise": [p["p_trains"] for p, _ in runs]} | {
        k: [float(c) for c in v] for k, v in calls.items() if k != "advise"
    }
    out = {"runs": n, "planned": len(predicted), "by": {}}
    for name, c in calls.items():
        hits = sum(ci == ti for ci, ti in zip(c, truth))
        brier = sum((pi - ti) ** 2 for pi, ti in zip(probs[name], truth)) / n if n else None
        out["by"][name] = {"hits": hits, "accuracy": hits / n if n else None,
                           "interval": wilson_interval(hits, n) if n else None, "brier": brier}  # fmt: skip
    if n:
        best = best or max(LOOKUP_NAMES, key=lambda k: (out["by"][k]["hits"], -out["by"][k]["brier"]))
        a = [ci == ti for ci, ti in zip(calls["advise"], truth)]
        b = [ci == ti for ci, ti in zip(calls[best], truth)]
        counts = paired_counts(a, b)
        out["best_lookup"] = best
        out["paired"] = dict(zip(("both", "advise_only", "lookup_only", "neither"), counts))
        out["difference"] = paired_difference_interval(*counts)
        out["misses"] = [(p, d) for (p, d), ok in zip(runs, a) if not ok]
        always = [ci == ti for ci, ti in zip(calls[ALWAYS], truth)]
        out["versus_always"] = paired_difference_interval(*paired_counts(a, always))
    return out


def verdict(s: dict, hf: bool = False) -> str:
    """The result under the registered rule, each of its parts met or not, or why none yet. The grid's
    rule has three parts; the Hugging Face set's (``hf``) one: advise above always 'trains'."""
    if s["runs"] < s["planned"]:
        return f"not decided: {s['runs']} of {s['planned']} runs done"
    if hf:
        d, lo, hi = s["versus_always"]
        ok = s["by"]["advise"]["hits"] > s["by"][ALWAYS]["hits"]
        best = s["by"][s["best_lookup"]]["hits"]
        return (f"{'passes' if ok else 'fails'}: {100 * d:+.1f} points over always 'trains' [{100 * lo:+.0f}, "
                f"{100 * hi:+.0f}] (the registered bar here: above it): {'met' if ok else 'not met'}; "
                f"the best lookup, not this set's registered bar, got {best} of {s['runs']}")  # fmt: skip
    acc, lookup = s["by"]["advise"]["accuracy"], s["by"][s["best_lookup"]]["accuracy"]
    brier_ok = all(s["by"]["advise"]["brier"] < s["by"][k]["brier"] for k in LOOKUP_NAMES)
    parts = [
        (acc >= TARGET, f"accuracy {acc:.0%} (needs {TARGET:.0%})"),
        (acc - lookup >= MARGIN, f"{100 * (acc - lookup):+.1f} points over the best lookup "
                                 f"[{100 * s['difference'][1]:+.0f}, {100 * s['difference'][2]:+.0f}] (needs +{100 * MARGIN:.0f})"),
        (brier_ok, "Brier below every lookup's" if brier_ok else "Brier not below every lookup's"),
    ]  # fmt: skip
    said = "; ".join(f"{text}: {'met' if ok else 'not met'}" for ok, text in parts)
    return ("passes: " if all(ok for ok, _ in parts) else "fails: ") + said


def _pct(by: dict) -> str:
    if by["accuracy"] is None:
        return "-"
    lo, hi = by["interval"]
    return f"{by['hits']} ({by['accuracy']:.0%} [{lo:.0%}, {hi:.0%}])"


def registered_at(path: str) -> tuple[str, float]:
    """(the commit that added the registration file ``path``, its time in seconds since the epoch)."""

    def git(*a):
        return subprocess.run(
            ["git", *a], cwd=REPOSITORY, capture_output=True, text=True, check=True
        ).stdout.strip()

    commit = git("log", "--diff-filter=A", "--format=%H", "--", path).split()[-1]
    return commit, float(git("show", "-s", "--format=%ct", commit))


def registrations() -> list[dict]:
    """The committed registrations of the grids at depth, first first (each with its file's path as
    "path")."""
    out = []
    for g in GRIDS_AT_DEPTH:
        with open(lab_file(g.registration), encoding="utf-8") as f:
            out.append({**json.load(f), "path": g.registration})
    return out


def _done(record: dict) -> dict[str, dict]:
    """The record's finished runs by config hash."""
    return {r["config_hash"]: r for r in record["runs"]}


def _span(reg: dict, field: str) -> tuple[int, int]:
    """The least and greatest ``field`` (n_layers, d_model) of a registration's runs."""
    values = [int(run_field(p["run"], field)) for p in reg["runs"]]
    return min(values), max(values)


def grid_name(reg: dict, i: int) -> str:
    """'held-out grid at depth (8-32 layers, widths 96-256)', the second 'second held-out grid at depth ...'."""
    (depth_lo, depth_hi), (width_lo, width_hi) = _span(reg, "n_layers"), _span(reg, "d_model")
    nth = f"{ORDINALS[i]} " if i else ""
    again = (
        f", the {ORDINALS[_index(reg['repeats'])]} grid's runs at another seed" if reg.get("repeats") else ""
    )
    return (f"{nth}held-out grid at depth ({depth_lo}-{depth_hi} layers, widths "
            f"{width_lo}-{width_hi}{again})")  # fmt: skip


ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh")


def _index(name: str) -> int:
    """Where the grid at depth ``name`` stands among those registered (0 for the first)."""
    return next(i for i, g in enumerate(GRIDS_AT_DEPTH) if g.name == name)


HF_NAME = "Hugging Face shapes (Llama, GPT-NeoX, Gemma 2; own wiring and post-LN)"


def held_out_sets(regs: list[dict]) -> list[tuple[str, list[dict], bool, dict]]:
    """(name, predicted runs, whether it is the Hugging Face set, its registration) per held-out set,
    in the order registered."""
    out = []
    for i, reg in enumerate(regs):
        out.append((grid_name(reg, i), reg["runs"], False, reg))
        if reg["hf_runs"]:
            out.append((HF_NAME, reg["hf_runs"], True, reg))
    return out


def readme_table(regs: list[dict] | None = None, record: dict | None = None) -> str:
    """README's table of advise's finished held-out sets (the committed registrations and record by
    default): per grid at depth its runs, layers, advise's hits with interval, the best lookup's and the
    verdict; last the Hugging Face set, against always 'trains'."""
    regs = registrations() if regs is None else regs
    if record is None:
        with open(os.path.join(REPOSITORY, RECORD), encoding="utf-8") as f:
            record = json.load(f)
    done = _done(record)
    lines = ["| held-out grid | runs | layers | advise right | best lookup (HF: always \"trains\") | verdict |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for i, reg in enumerate(regs):
        s = score(reg["runs"], done)
        if s["runs"] < s["planned"] or not s["runs"]:
            continue
        lo, hi = _span(reg, "n_layers")
        name = (
            ORDINALS[i]
            + (f" (the {ORDINALS[_index(reg['repeats'])]}'s, another seed)" if reg.get("repeats") else "")
            + (" (where the calls differ)" if reg.get("drawn") else "")
        )
        lines.append(f"| {name} | {s['runs']} | {lo}-{hi} | {_pct(s['by']['advise'])} | "
                     f"{s['by'][s['best_lookup']]['hits']} | {verdict(s).split(':')[0]} |")  # fmt: skip
    hf = score(regs[0]["hf_runs"], done) if regs and regs[0]["hf_runs"] else None
    if hf and hf["runs"] == hf["planned"]:
        lines.append(f"| Hugging Face decoders | {hf['runs']} | - | {_pct(hf['by']['advise'])} | "
                     f"{hf['by'][ALWAYS]['hits']} | {verdict(hf, hf=True).split(':')[0]} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def score_lines(regs: list[dict], record: dict) -> tuple[list[str], list]:
    """(the score table's lines, [(set name, its score, its registration)]): a row per held-out set."""
    done = _done(record)
    lines = ["| held-out set | runs done | advise | best lookup | always 'trains' | Brier: advise / best lookup | result |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    scored = []
    for name, predicted, hf, reg in held_out_sets(regs):
        s = score(predicted, done)
        scored.append((name, s, reg))
        if not s["runs"]:
            lines.append(f"| {name} | 0 of {s['planned']} | - | - | - | - | not run yet |")
            continue
        best = s["best_lookup"]
        lines.append(f"| {name} | {s['runs']} of {s['planned']} | {_pct(s['by']['advise'])} | {best}: "
                     f"{_pct(s['by'][best])} | {_pct(s['by'][ALWAYS])} | "
                     f"{s['by']['advise']['brier']:.3f} / {s['by'][best]['brier']:.3f} | {verdict(s, hf)} |")  # fmt: skip
    return lines, scored


def committed_record() -> dict:
    """The committed run record of the held-out sets (no runs where none is committed)."""
    path = os.path.join(REPOSITORY, RECORD)
    if not os.path.isfile(path):
        return {"runs": []}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def committed_lines() -> list[str]:
    """The score table from the committed registrations and run record (docs/doctor.md quotes it)."""
    return score_lines(registrations(), committed_record())[0]


def committed_reliability() -> list[str]:
    """What advise's registered probabilities meant on the finished runs at depth, from the committed
    registrations and run record: a sentence with the Brier scores, then the reliability table (docs/doctor.md
    quotes them; docs/advise.md has the same table)."""
    regs, record = registrations(), committed_record()
    done = _done(record)
    finished = placed(finished_grids(regs, done))
    table = [line for line in _reliability_lines(finished, record) if line.startswith("|")]
    if not table:
        return []
    s = score([p for reg in finished for p in reg["runs"]], done)
    best = s["best_lookup"]
    pairs = [(p["p_trains"], expected(done[p["config_hash"]]["outcome"]) == "trains")
             for reg in finished for p in reg["runs"] if p["config_hash"] in done]  # fmt: skip
    off = [f"{lo:.1f}-{hi:.1f}: {k / len(band):.0%} trained" for lo, hi, band, k in _bands(pairs)
           if band and not lo <= k / len(band) <= hi]  # fmt: skip
    said = (
        f" Outside its band: {'; '.join(off)}." if off else " Every band's runs trained at a rate inside it."
    )
    return [f"What advise's probabilities meant on the {s['runs']} finished runs of its grids at depth, each under "
            f"the predictor registered for it (what it calls p should happen about p of the time): Brier "
            f"{s['by']['advise']['brier']:.3f}, against {s['by'][best]['brier']:.3f} for the best lookup "
            f"({best}) and {s['by'][ALWAYS]['brier']:.3f} for always 'trains'.{said}", "", *table]  # fmt: skip


def render(regs: list[dict], record: dict, record_path: str = RECORD) -> str:
    """The page's Markdown."""
    table, scored = score_lines(regs, record)
    lines = [MARKER, "# How well `depthlab advise` foretells a run", "", *table]
    lines += [
        "",
        "A call is right when advise said 'trains' (P >= 0.5) and the run ended 'trained', or said 'fails' and "
        "it ended otherwise (stalled, undertrained, diverged). Intervals are 95% (Wilson). Each grid was "
        "registered with the predictor of its day: each after the earlier grids' runs joined the atlas and "
        "the predictor was chosen again (below), except a grid that repeats another at another seed, which "
        "keeps that grid's predictor and atlas.",
        "",
    ]
    atlas = Atlas.load()
    if len(regs) > 1 and _source(regs[-1]) in {r.source for r in atlas.runs}:
        lines[-1:] = [
            f"The runs of the {grid_name(regs[-1], len(regs) - 1).split(' (')[0]} have since joined the atlas, "
            "and the predictor advise ships was chosen again on them: the calls above are the registered "
            "predictors'; what the shipped one would call at depth is estimated below, leaving out one shape "
            "at a time.",
            "",
        ]
    lines += _pooled_lines(regs, record)
    for name, s, reg in scored:
        if s["runs"] and name != HF_NAME:
            lines += _by_wrapping(name, reg, record, s["best_lookup"])
    lines += _misses(scored)
    lines += _lead_lines(regs)
    lines += _differ_lines(regs, record)
    lines += _reliability_lines(regs, record)
    lines += _seed_lines(regs, record)
    for i, reg in enumerate(regs):
        lines += _registration_lines(grid_name(reg, i), reg, record, record_path)
    lines += [
        f"Every run is in `{os.path.basename(record_path)}` beside this page; `python -m "
        "depthlab_lab.docgen.advise_page --restore NAME` writes a grid's runs back into the store "
        "(`runs/advise-heldout.sqlite`), so that its study, run again as its grid file says, trains only the "
        "runs the record lacks (a grid runs across sessions this way). Under its answer, `depthlab "
        "advise` prints how often it was right on the runs of the question's wrapping over every finished "
        "grid at depth, beside the lookup that did best over them all (shipped as "
        "`depthlab/advise/track_record.json`, with the latest finished grid's counts).",
        "",
    ]
    fitted = load_record()
    lines += _cv_lines(fitted.get("predictor") or {})
    lines += _shape_fold_lines(regs, fitted, atlas)
    lines += _plateau_lines(plateau_against_call(regs, record, atlas, fitted))
    return "\n".join(lines).rstrip() + "\n"


def _by_wrapping(name: str, reg: dict, record: dict, best: str) -> list[str]:
    """Per wrapping of a grid at depth (once every run is done): how its runs ended below and above the
    safe lr, advise's hits (its track record) and those of ``best``, the lookup that hit most (where
    advise is weak, and why: a limit too high or too low)."""
    track = track_record(reg, record)
    if track is None:
        return []
    done = _done(record)
    out = [f"## By wrapping, on the {name.split(' (')[0]}", "",
           "| wrapping | runs | trained below / above the safe lr | other outcomes | advise right | "
           f"{best} right |", "|---|---|---|---|---|---|"]  # fmt: skip
    for wrap, w in track["by_wrap"].items():
        mine = [p for p in reg["runs"] if run_field(p["run"], "wrap") == wrap]
        truth = [expected(done[p["config_hash"]]["outcome"]) == "trains" for p in mine]
        below = [t for p, t in zip(mine, truth) if p["lr_over_limit"] <= 1]
        above = [t for p, t in zip(mine, truth) if p["lr_over_limit"] > 1]
        others = ", ".join(f"{n} {o}" for o, n in w["outcomes"].items() if o != "trained") or "none"
        lookup = sum((p["lookups"][best] == "trains") == t for p, t in zip(mine, truth))
        out.append(f"| {wrap} | {w['runs']} | {sum(below)} of {len(below)} / {sum(above)} of {len(above)} "
                   f"| {others} | {w['right']} | {lookup} |")  # fmt: skip
    return out + [""]


def _misses(scored) -> list[str]:
    rows = [(name, p, d) for name, s, _ in scored for p, d in s.get("misses", [])]
    if not rows:
        return []
    out = [
        "## Its misses",
        "",
        "| set | run | P(trains) | outcome | lr / its safe lr |",
        "|---|---|---|---|---|",
    ]
    for name, p, d in rows:
        out.append(
            f"| {name.split(' (')[0]} | {p['run']} | {p['p_trains']:.2f} | {d['outcome']} | {p['lr_over_limit']:.2f} |"
        )
    return out + [""]


BANDS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)


def _pooled_lines(regs: list[dict], record: dict) -> list[str]:
    """Every finished grid at depth together, each run under the predictor registered for it: advise
    against the best lookup over all of them (a summary after the fact, not a registered rule)."""
    done = _done(record)
    finished = placed(finished_grids(regs, done))
    if len(finished) < 2:
        return []
    every = every_grid(finished, record)  # what the screen prints: its lookup is the text's and the table's
    s = score([p for reg in finished for p in reg["runs"]], done, best=every["lookup"])
    best, d = s["best_lookup"], s["difference"]
    table = ["| wrapping | runs | advise right | " + best + " right |", "|---|---|---|---|"]
    table += [f"| {w} | {c['runs']} | {c['right']} ({c['right'] / c['runs']:.0%}) | {c['lookup_right']} "
              f"({c['lookup_right'] / c['runs']:.0%}) |" for w, c in every["by_wrap"].items()]  # fmt: skip
    which = " placed by the limit" if len(placed(regs)) < len(regs) else ""
    return [f"The {len(finished)} finished grids at depth{which} together ({s['runs']} runs, each called by the predictor "
            "registered for it; a repeated grid's configurations count at each seed), a summary after the fact "
            f"and not a registered rule: advise {_pct(s['by']['advise'])}, the best lookup ({best}) "
            f"{_pct(s['by'][best])}, a lead of {100 * d[0]:+.1f} points [{100 * d[1]:+.0f}, {100 * d[2]:+.0f}]; "
            f"Brier {s['by']['advise']['brier']:.3f} against {s['by'][best]['brier']:.3f}. By wrapping (what "
            "`depthlab advise` prints under its answer):", "", *table, ""]  # fmt: skip


def plateau_against_call(regs: list[dict], record: dict, atlas: Atlas, fitted: dict) -> dict:
    """On the finished runs at depth whose at-init probe the atlas holds, three forecasts of whether a run
    trains within its budget ('trains' from 0.5): the plateau verdict's escape fit alone (its probability
    of leaving the plateau by the budget), the nearest measured runs' median escape step (:class:`depthlab.
    doctor.predict.NearestEscape`; every atlas run at the run's shape left out, as the shape folds do: the
    run itself and its twin at another seed are no evidence about it) within the budget, and the P(trains)
    registered for the run. On the runs that left the plateau, the step each of the first two puts it at
    against the measured one. {"runs", "escape_right", "escape_brier", "near_right", "call_right",
    "call_brier", "escaped", "fit_factor", "near_factor", "fit_within_2", "near_within_2", "near_never"}."""
    done, fits = _done(record), (fitted.get("escape") or {}).get("families") or {}
    probed = {r.config_hash: r for r in atlas.runs if r.update_gain}
    shapes = {}
    for r in atlas.runs:
        shapes.setdefault((r.n_layers, r.d_model), set()).add(r.config_hash)
    rows, steps = [], []
    for reg in regs:
        for p in reg["runs"]:
            run = probed.get(p["config_hash"])
            if p["config_hash"] not in done or run is None:
                continue
            fit = fits.get(plateau_family(run.wrap, run.renormalised_share, run.n_layers))
            if fit is None:
                continue
            at = {"lr": run.lr, "d_model": run.d_model, "n_layers": run.n_layers, "warmup": run.warmup,
                  "step_size": run.update_gain * run.lr}  # fmt: skip
            trained = expected(done[p["config_hash"]]["outcome"]) == "trains"
            pred = escape_at(fit, at)
            near = nearest_escape(nearest(atlas, Query.of(run), exclude=shapes[(run.n_layers, run.d_model)]))
            within = near.median is not None and near.median <= run.steps
            rows.append((p_within(pred, run.steps), within, p["p_trains"], trained))
            if run.escape_step is not None:
                steps.append(
                    (pred["median"] / run.escape_step, near.median and near.median / run.escape_step)
                )
    n = len(rows)
    fit_f = sorted(max(f, 1 / f) for f, _ in steps)
    near_f = sorted(max(f, 1 / f) if f else math.inf for _, f in steps)
    return {
        "runs": n,
        "escape_right": sum((q >= 0.5) == t for q, _, _, t in rows),
        "escape_brier": sum((q - t) ** 2 for q, _, _, t in rows) / n if n else None,
        "near_right": sum(w == t for _, w, _, t in rows),
        "call_right": sum((c >= 0.5) == t for _, _, c, t in rows),
        "call_brier": sum((c - t) ** 2 for _, _, c, t in rows) / n if n else None,
        "escaped": len(steps),
        "fit_factor": fit_f[(len(fit_f) - 1) // 2] if steps else None,
        "near_factor": near_f[(len(near_f) - 1) // 2] if steps else None,
        "fit_within_2": sum(f <= 2 for f in fit_f),
        "near_within_2": sum(f <= 2 for f in near_f),
        "near_never": sum(math.isinf(f) for f in near_f),
    }


def _plateau_lines(s: dict) -> list[str]:
    """Why the probe judges a run's budget by the calibrated call, and takes the step from the nearest runs."""
    if not s["runs"]:
        return []
    n, e = s["runs"], s["escaped"]
    steps = (
        [
            f"| the step a run left the plateau, on the {e} of them that did | within a factor 2 | median factor |",
            "|---|---|---|",
            f"| the escape fit's median | {s['fit_within_2']} ({s['fit_within_2'] / e:.0%}) | "
            f"{s['fit_factor']:.2f} |",
            f"| the 5 nearest measured runs' median | {s['near_within_2']} ({s['near_within_2'] / e:.0%}) | "
            f"{s['near_factor']:.2f} |",
            "",
        ]
        if e
        else []
    )
    return [
        "## A run's budget and its step off the plateau: the escape fit, the nearest runs and the call",
        "",
        "| forecast | right | Brier |",
        "|---|---|---|",
        f"| the escape fit alone: P(leaving the plateau by the budget) | {s['escape_right']} of {n} "
        f"({s['escape_right'] / n:.0%}) | {s['escape_brier']:.3f} |",
        f"| the 5 nearest measured runs' median escape step within the budget | {s['near_right']} of {n} "
        f"({s['near_right'] / n:.0%}) | |",
        f"| advise's P(trains), as registered | {s['call_right']} of {n} ({s['call_right'] / n:.0%}) | "
        f"{s['call_brier']:.3f} |",
        "",
        *steps,
        f"The runs are the {n} finished runs at depth whose probe the atlas holds. A forecast is counted right "
        "when it is on the side of one half the run ended on; the nearest runs' forecast, when their median "
        "escape step is within the run's budget. The escape fit is a censored fit of the tuning runs' escape "
        "steps, and no run at depth was fitted on. For the nearest runs, every measured run at the run's "
        "width and depth is left out, its twin at another seed included. Where most of the nearest runs never "
        f"left the plateau their median is none: {s['near_never']} of the {e} runs that left it had such a "
        "median, and count as more than a factor 2 off. A comparison after the fact, not a registered rule.",
        "",
        "So where the probe can make the call (a depthlab decoder given `--lr`), it judges the budget by "
        "P(trains), the number advise leads with. Where measured runs of the same stack lie near (the nearest "
        "within 2 units), its plateau verdict gives the nearest runs' escape steps; the escape fit's median, "
        "interval and probability stay in the verdict's detail.",
        "",
    ]


def _bands(pairs: list[tuple[float, bool]]) -> list[tuple[float, float, list[float], int]]:
    """Per band of :data:`BANDS`: (low, high, the probabilities of ``pairs`` (P(trains), trained) that fall
    in it, how many of those runs trained)."""
    out = []
    for lo, hi in zip(BANDS, BANDS[1:]):
        inside = [(q, t) for q, t in pairs if lo <= q < hi or (hi == 1.0 and q == 1.0)]
        out.append((lo, hi, [q for q, _ in inside], sum(t for _, t in inside)))
    return out


def _reliability_lines(regs: list[dict], record: dict) -> list[str]:
    """What advise's probabilities meant on the finished runs at depth, each run under the predictor
    registered for it: per band of P(trains), how many runs, their mean P and how many trained; beside
    it the same for the runs registered with the predictor advise ships now. A grid drawn where the
    calls differ is left out: its runs are no sample of the runs at depth."""
    drawn = len(placed(regs)) < len(regs)
    regs = placed(regs)
    done = _done(record)
    shipped = digest(RECORD_PATH)
    runs = [(p["p_trains"], expected(done[p["config_hash"]]["outcome"]) == "trains", reg["record"]["sha256"] == shipped)
            for reg in regs for p in reg["runs"] if p["config_hash"] in done]  # fmt: skip
    if not runs:
        return []
    now = [r for r in runs if r[2]]
    groups = (runs, now) if now else (runs,)
    beside = (
        f"beside it the {len(now)} registered with the predictor advise ships now"
        if now
        else "none of them was registered with the predictor advise ships now"
    )
    head = "| P(trains) | runs | mean P | trained |" + (
        " runs (shipped predictor) | mean P | trained |" if now else ""
    )
    which = (
        " placed by the limit (a grid drawn where the calls differ is no sample of such runs)"
        if drawn
        else ""
    )
    out = ["## What its probabilities meant on the runs at depth", "",
           f"Every finished run ({len(runs)}) of the grids at depth{which}, each under the predictor registered for it; "
           f"{beside}:", "", head, "|---" * (1 + 3 * len(groups)) + "|"]  # fmt: skip
    banded = [_bands([(q, t) for q, t, _ in group]) for group in groups]
    for i, (lo, hi, _, _) in enumerate(banded[0]):
        cells = []
        for bands in banded:
            _, _, band, k = bands[i]
            cells += (
                [str(len(band)), f"{sum(band) / len(band):.2f}", f"{k} ({k / len(band):.0%})"]
                if band
                else ["0", "-", "-"]
            )
        out.append(f"| {lo:.1f}-{hi:.1f} | " + " | ".join(cells) + " |")
    lo, hi = CLOSE
    sure = [(q >= 0.5) == t for q, t, _ in now if not lo <= q < hi]
    close = [(q >= 0.5) == t for q, t, _ in now if lo <= q < hi]
    if now:
        out += ["", f"Under the predictor advise ships, the calls it prints as TRAINS or FAILS (P from {hi} up, "
                f"or below {lo}) were right on {sum(sure)} of {len(sure)} runs; those it prints as close calls "
                f"({lo} to {hi}) on {sum(close)} of {len(close)}."]  # fmt: skip
    return out + [""]


def _seed_lines(regs: list[dict], record: dict) -> list[str]:
    """For a grid that repeats another at another seed, once both are done: how often the outcome held,
    the ceiling of any call from the configuration, and each caller's hits on both grids' runs."""
    done = _done(record)
    grids = {_source(reg): (i, reg) for i, reg in enumerate(regs)}
    seeds = {g.name: g.seed for g in GRIDS_AT_DEPTH}
    out = []
    for name, (i, again) in grids.items():
        if not again.get("repeats"):
            continue
        j, first = grids[again["repeats"]]
        a = agreement(first, again, done)
        if a is None:
            continue
        n, k = a["configs"], a["agree"]
        lo, hi = a["agree_interval"]
        s1, s2 = seeds[again["repeats"]], seeds[name]
        these, those = (grid_name(r, x).split(" (")[0] for r, x in ((first, j), (again, i)))
        out += ["## How often the seed alone changes the outcome", "",
                f"The {those} trains the {n} configurations of the {these} again, only the seed changed ({s1}, then "
                f"{s2}). {k} of {n} configurations ended the same way at both seeds ({k / n:.0%} [{lo:.0%}, "
                f"{hi:.0%}]); {n - k} changed between 'trains' and 'fails'. On such a configuration any call "
                "made from the configuration alone (the same call at both seeds) is right once in two, so on the two "
                f"grids' {2 * n} runs none can score more than {2 * k + (n - k)} ({a['ceiling']:.0%}). The lookups "
                "call from the configuration alone; advise's probe sees each seed's own initialisation, and its "
                f"call changed with the seed on {a['seed_dependent']} of the {n} configurations.", "",
                f"| caller | right on all {2 * n} runs | right on the {2 * k} runs whose outcome held |",
                "|---|---|---|",
                f"| ceiling of any call from the configuration | {2 * k + n - k} ({a['ceiling']:.0%}) | {2 * k} (100%) |"]  # fmt: skip
        for c in sorted(a["hits"], key=lambda c: -a["hits"][c]):
            held = f"{a['held_hits'][c]} ({a['held_hits'][c] / (2 * k):.0%})" if k else "-"
            out.append(f"| {c} | {a['hits'][c]} ({a['hits'][c] / (2 * n):.0%}) | {held} |")
        out += ["", "| wrapping | configurations | same outcome at both seeds | advise right (of 2 per configuration) |",
                "|---|---|---|---|"]  # fmt: skip
        for wrap, w in a["by_wrap"].items():
            out.append(f"| {wrap} | {w['configs']} | {w['agree']} | {w['advise']} of {2 * w['configs']} |")
        if a["differ"]:
            out += ["", f"| configuration whose outcome changed | outcome at seed {s1} / {s2} | P(trains) at seed "
                    f"{s1} / {s2} | lr / its safe lr |", "|---|---|---|---|"]  # fmt: skip
            for r in a["differ"]:
                p, q = r["pair"]
                out.append(f"| {r['run']} | {r['outcomes'][0]} / {r['outcomes'][1]} | {p['p_trains']:.2f} / "
                           f"{q['p_trains']:.2f} | {p['lr_over_limit']:.2f} |")  # fmt: skip
        out.append("")
    return out


def _registration_lines(name: str, reg: dict, record: dict, record_path: str) -> list[str]:
    commit, at = registered_at(reg["path"])
    mine = {p["config_hash"] for p in reg["runs"] + reg["hf_runs"]}
    runs = [r for r in record["runs"] if r["config_hash"] in mine]
    starts = [r["started_at"] for r in runs if r.get("started_at")]
    first = (
        f"{datetime.datetime.fromtimestamp(min(starts), datetime.UTC):%Y-%m-%d %H:%M:%S} UTC"
        if starts
        else "none yet"
    )
    when = f"{datetime.datetime.fromtimestamp(at, datetime.UTC):%Y-%m-%d %H:%M:%S} UTC"
    ok = not starts or min(starts) > at
    within = sum(0.5 <= p["lr_over_limit"] <= 2 for p in reg["runs"] if p["lr_over_limit"] is not None)
    hf = f"; the Hugging Face set: {', '.join(f'`{g}`' for g in reg['hf_grids'])}" if reg["hf_grids"] else ""
    hours = sum(r.get("seconds") or 0 for r in runs) / 3600
    cost = reg.get("cost") or "not stated in the registration file"
    lines = [f"## What was registered for the {name.split(' (')[0]}, and when", "",
             f"Registered in commit {commit[:10]} ({when}), with every run's prediction; the first run started {first}"
             + ("" if ok else ": BEFORE the registration, so this is not a registered score") + ".", "",
             *([f"{reg['after']}", ""] if reg.get("after") else []),
             f"- the grid: `{reg['grid']}` ({len(reg['runs'])} runs, every lr within 2x of its stack's limit: "
             f"{within}){hf}",
             f"- the predictor: `{reg['record']['path']}` (sha256 {reg['record']['sha256']}, form "
             f"{reg['record']['predictor_form']}); the atlas: `{reg['atlas']['path']}` ({reg['atlas']['runs']:,} runs)",
             f"- cost as registered: {cost}; measured: {hours:.1f} h of run time over {len(runs)} runs done"]  # fmt: skip
    lines += [f"- {k}: {v}" for k, v in reg["rules"].items() if isinstance(v, str)]
    if reg.get("drawn"):
        lines.append(f"- drawn: {reg['drawn']}")
    if reg.get("seed agreement"):
        lines.append(f"- seed agreement (with `{reg['repeats']}`): {reg['seed agreement']}")
    lines += [f"- lookup '{k}': {v}" for k, v in reg["rules"]["lookups"].items()]
    return lines + [""]


def _cv_lines(pred: dict) -> list[str]:
    if not pred:
        return []
    lines = ["## How the predictor was chosen", "",
             f"By cross-validation on {pred['examples']:,} measured runs (the atlas's probed runs of full-skip stacks), "
             f"leaving out one width, then one depth, at a time; kept: **{pred['form']}** (lowest log loss among the "
             "forms at least as accurate as every lookup on both). A form's atlas feature is the weighted share of the "
             "run's 5 nearest measured runs of the same stack and recipe that had trained by the run's own budget: a "
             "longer run counts as trained only where it left the unigram plateau by then (the lookups read each run "
             "as it ended, as registered).", "",
             "| candidate | leaving out a width: right | Brier | leaving out a depth: right | Brier |", "|---|---|---|---|---|"]  # fmt: skip
    w, d = pred["cv"]["d_model"], pred["cv"]["n_layers"]
    for name in w:
        lines.append(f"| {name} | {w[name]['hits']} of {w[name]['runs']} ({w[name]['accuracy']:.1%}) | "
                     f"{w[name]['brier']:.3f} | {d[name]['hits']} of {d[name]['runs']} ({d[name]['accuracy']:.1%}) | {d[name]['brier']:.3f} |")  # fmt: skip
    lines += ["", "Reliability of the kept form on the left-out runs (what it calls p happens about p of the time):", "",
              "| P(trains) band | runs (width / depth folds) | mean P | share trained |", "|---|---|---|---|"]  # fmt: skip
    bands = {tuple(r["band"]): {} for r in w[pred["form"]]["reliability"] + d[pred["form"]]["reliability"]}
    for fold, cv in (("w", w), ("d", d)):
        for r in cv[pred["form"]]["reliability"]:
            bands[tuple(r["band"])][fold] = r
    for (lo, hi), by in sorted(bands.items()):
        runs, mean, share = (
            " / ".join(_cell(by.get(f), k) for f in "wd") for k in ("runs", "predicted", "trained")
        )
        lines.append(f"| {lo:.1f}-{hi:.1f} | {runs} | {mean} | {share} |")
    return lines + [""]


def _source(reg: dict) -> str:
    """The study name of a registered grid at depth."""
    return next(g.name for g in GRIDS_AT_DEPTH if g.grid == reg["grid"])


def _shape_fold_lines(regs: list[dict], record: dict, atlas: Atlas) -> list[str]:
    """What the kept form would have called on each grid at depth whose runs joined the atlas, had it
    been fitted without each of the grid's shapes in turn: an estimate of what to expect on another grid
    at depth, with the best lookup on the same folds (its atlas without the shape's runs too)."""
    pred = record.get("predictor") or {}
    sources = {r.source for r in atlas.runs}
    rest = {k: v for k, v in record.items() if k != "predictor"}
    lines, hits, runs = [], 0, 0
    lookups, differ = dict.fromkeys(LOOKUP_NAMES, 0), dict.fromkeys(LOOKUP_NAMES, 0)
    for i, reg in enumerate(regs):
        source = _source(reg)
        if not pred or source not in sources or not placed([reg]):  # a drawn grid is no sample of such runs
            continue
        s = shape_folds(atlas, rest, source, pred["form"])
        hits, runs = hits + s["hits"], runs + s["runs"]
        lookups = {k: lookups[k] + s["lookups"][k] for k in LOOKUP_NAMES}
        differ = {k: differ[k] + s["differ"][k] for k in LOOKUP_NAMES}
        lo, hi = wilson_interval(s["hits"], s["runs"])
        shapes = ", ".join(f"{k}: {h} of {n}" for k, (h, n) in s["by_shape"].items())
        best = max(s["lookups"], key=s["lookups"].__getitem__)
        lines.append(
            f"- the {grid_name(reg, i).split(' (')[0]}: {s['hits']} of its {s['runs']} runs right "
            f"({s['hits'] / s['runs']:.0%} [{lo:.0%}, {hi:.0%}]; {shapes}); the best lookup on the same "
            f"folds, {best}: {s['lookups'][best]}"
        )
    if not lines:
        return []
    lo, hi = wilson_interval(hits, runs)
    best = max(lookups, key=lookups.__getitem__)
    lines.append(f"- in all: {hits} of {runs} ({hits / runs:.0%} [{lo:.0%}, {hi:.0%}]); the best single lookup "
                 f"on the same folds, {best}: {lookups[best]}, its call not advise's on {differ[best]} of the "
                 f"{runs} runs")  # fmt: skip
    return [
        "What to expect at depth: the kept form, fitted without each shape of a grid at depth in turn "
        "(every run of the atlas at that shape left out, a repeated grid's runs at another seed included; "
        "every other run kept), calls",
        "",
        *lines,
        "",
        "Cross-validation over the whole atlas flatters it at depth, where the calls are hard. Where the "
        "atlas holds runs all around a shape, advise's call and the nearest runs' seldom differ, and it can "
        "lead that lookup only on the runs where they do (see how far advise could lead the lookups, above).",
        "",
    ]


def lead_bound(reg: dict) -> dict:
    """Before any run of a grid: on how many of its runs each lookup's registered call is not advise's.
    advise's lead over a lookup, in runs right, is at most that count (it gains only where they differ),
    so the closest lookup's count over the runs bounds the lead the grid can show.
    {"runs", "differ": {lookup: runs}, "closest", "most": the bound as a share of the runs}."""
    runs = reg["runs"]
    differ = {k: sum(p["lookups"][k] != p["advise"] for p in runs) for k in LOOKUP_NAMES}
    closest = min(LOOKUP_NAMES, key=lambda k: (differ[k], LOOKUP_NAMES.index(k)))
    return {"runs": len(runs), "differ": differ, "closest": closest, "most": differ[closest] / len(runs)}


def _lead_lines(regs: list[dict]) -> list[str]:
    """Per grid at depth, known from its registration before any run: where each lookup's call differs
    from advise's, and so the most lead over the lookups the grid could show, against the margin."""
    rows = [(grid_name(reg, i).split(" (")[0], lead_bound(reg)) for i, reg in enumerate(regs) if reg["runs"]]
    if not rows:
        return []
    out = ["## How far advise could lead the lookups, known before any run", "",
           f"`depthlab advise` gains on a lookup only on the runs where their calls differ. From each registration, before "
           f"any run: the runs on which each lookup's call was not advise's, and the most lead the grid could "
           f"show over the closest lookup (the registered margin: +{100 * MARGIN:.0f} points).", "",
           "| grid | runs | " + " | ".join(f"differs: {k}" for k in LOOKUP_NAMES) + " | most lead possible |",
           "|---|---|" + "---|" * len(LOOKUP_NAMES) + "---|"]  # fmt: skip
    for name, b in rows:
        cells = " | ".join(str(b["differ"][k]) for k in LOOKUP_NAMES)
        out.append(f"| {name} | {b['runs']} | {cells} | {100 * b['most']:+.1f} points ({b['closest']}) |")
    return out + [
        "",
        "Each grid's runs joined the atlas before the next was drawn, so the nearest runs came to surround "
        "each new shape, and advise, which weighs them, called more and more as they do.",
        "",
    ]


def _differ_lines(regs: list[dict], record: dict) -> list[str]:
    """Which call to trust where advise's and the nearest runs' differ: pooled over the grids placed by
    the limit (after the fact), and the registered reading of a grid drawn where they differ."""
    drawn = [(i, reg) for i, reg in enumerate(regs) if reg.get("drawn")]
    if not drawn:
        return []
    done = _done(record)
    readings = [differ_reading(reg, done) for reg in placed(regs)]
    n, k = sum(r["runs"] for r in readings), sum(r["advise"] for r in readings)
    out = ["## Where advise's call and the nearest runs' differ", ""]
    if n:
        lo, hi = wilson_interval(k, n)
        grids = f"{len(readings)} grid{'s' if len(readings) > 1 else ''}"
        out += [f"On the {grids} placed at x0.7 and x1.4 of each limit, advise's registered call was "
                f"not the nearest runs' on {n} finished runs; advise was right on {k} ({k / n:.0%} [{lo:.0%}, "
                f"{hi:.0%}]), the nearest runs on {n - k} (a summary after the fact, not a registered rule).", ""]  # fmt: skip
    for i, reg in drawn:
        name = grid_name(reg, i).split(" (")[0]
        r = differ_reading(reg, done)
        planned = len(reg["runs"])
        if r["runs"] < planned:
            said = f"not decided: {r['runs']} of {planned} runs done"
        else:
            lo, hi = r["interval"]
            ok = lo > 0.5
            said = (f"advise right on {r['advise']} of {planned} ({r['advise'] / planned:.0%} [{lo:.0%}, {hi:.0%}]), "
                    f"the nearest runs on {planned - r['advise']}: advise's call is the one to trust where the two "
                    f"differ (its interval above 50%): {'met' if ok else 'not met'}")  # fmt: skip
        out += [f"The {name} was drawn where the two calls differ, from the predictions alone, before any run. "
                "Registered with it: advise's call is the one to trust where the two differ when advise is right "
                f"on a share of its runs whose 95% interval lies above 50%. {said[0].upper() + said[1:]}.", ""]  # fmt: skip
    return out


def _cell(row: dict | None, key: str) -> str:
    if row is None:
        return "-"
    return str(row[key]) if key == "runs" else f"{row[key]:.2f}"


def restore_grid(db: str, name: str, record_path: str = RECORD) -> tuple[int, int]:
    """Write the record's runs of the grid at depth ``name`` into the store ``db`` (each checked against
    the grid as it is built now; none where the record has none): (restored, already there)."""
    grid = next(g.grid for g in GRIDS_AT_DEPTH if g.name == name)
    with open(record_path, encoding="utf-8") as f:
        rows = [r for r in json.load(f)["runs"] if r["study"] == name]
    recorded = {name: [{k: v for k, v in r.items() if k != "study"} for r in rows]}
    return restore(record_path, db, [grid], probe=False, recorded=recorded).get(name, (0, 0))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m depthlab_lab.docgen.advise_page")
    p.add_argument("--db", default=DB, help=f"the held-out grids' store (default {DB})")
    p.add_argument("--doc", default=DOC)
    p.add_argument("--restore", metavar="NAME", choices=[g.name for g in GRIDS_AT_DEPTH],
                   help="write the committed record's runs of this grid at depth into --db and stop: a study "
                   "resumed on that store (another session, a clean clone) trains only the runs the record "
                   "lacks")  # fmt: skip
    args = p.parse_args(argv)
    return one_line(p.prog, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    """The page and its record, or (``--restore``) a grid's recorded runs written back into ``--db``;
    every path checked before anything is read or written."""
    record_path = os.path.splitext(args.doc)[0] + "-heldout-runs.json"
    check_store_path(args.db, "--db")
    check_sqlite_header(args.db, "--db")
    if args.restore:
        if not os.path.lexists(record_path):
            raise InputError(f"--restore {args.restore}: no run record {printable(record_path)} "
                             f"(it is read beside --doc {printable(args.doc)})")  # fmt: skip
        check_restore_path(record_path, "--restore")
        done = restore_grid(args.db, args.restore, record_path)
        print(f"{args.restore}: {done[0]} runs restored into {args.db}, {done[1]} already there")
        return 0
    check_output_file(args.doc, "--doc", ("md",))
    record = merged_record(args.db, record_path)
    replace_file(record_path, json.dumps(record, indent=1) + "\n")
    replace_file(args.doc, render(registrations(), record, record_path))
    print(f"wrote {args.doc} and {record_path}: {len(record['runs'])} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
