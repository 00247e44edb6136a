"""The held-out set at real width for ``depthlab advise``: its design, and its registration before any run.

Every run ``depthlab advise`` was fitted on is at most 512 wide and 48 deep, trained on two CPU cores in
fp32. This set (``grids/advise-heldout-width.yaml``) asks it where people train: widths 1,024 and 2,048,
depths 12 to 48, on one GPU under bf16 autocast. Four wrappings that fail differently (post-LN, pre-LN,
DeepNorm, sandwich), each at three shapes (1,024 x 24 layers, 2,048 x 12, 1,024 x 48), a warmup of 0 or
300 steps, a budget of 1,000 steps of 16 x 32 tokens (the atlas's batch, so that width, depth, device and
precision are what is new), at two learning rates on either side of the stack's own limit (x 0.7 and
x 1.4 of the safe lr the probe gives it, as the held-out grid at depth placed them): 24 runs.

:func:`registration` computes, before any run, every run's prediction: advise's probability from the
study worker's probe of the run (fp32, on this machine's CPU, on the run's first batch of this machine's
default corpus), the shipped atlas and the record's predictor, and each lookup's call on the same atlas
(:mod:`depthlab_lab.calibrate.lookups`). It goes into ``grids/advise-heldout-width.registration.json``,
with the rules the set is scored under and the order its runs start in, in the commit that precedes
the GPU run. ``python benchmarks/gpu.py --all`` trains the set (:mod:`benchmarks.gpu_suite`): the run
and scoring functions it calls are :func:`train_one` and :func:`score`.

    python -m depthlab_lab.calibrate.heldout_width design     # the grid (one light probe per point)
    python -m depthlab_lab.calibrate.heldout_width register   # the predictions (one full probe per run)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import time

from depthlab.config import ModelConfig, TrainConfig
from depthlab.doctor.atlas import ATLAS_PATH, Atlas
from depthlab.doctor.lr_limit import limit_of
from depthlab.doctor.record import RECORD_PATH, load_record
from depthlab.intervals import paired_counts, paired_difference_interval, wilson_interval
from depthlab.report.doctor_score import expected
from depthlab.study.grid import RunSpec, StudyConfig
from depthlab.study.worker import probe_run
from depthlab_lab import lab_file
from depthlab_lab.calibrate.heldout_depth import RULES as DEPTH_RULES
from depthlab_lab.calibrate.heldout_depth import digest, prediction
from depthlab_lab.calibrate.lookups import LOOKUPS

WRAPS = ("post", "pre", "deepnorm", "sandwich")
SHAPES = ((1024, 24), (2048, 12), (1024, 48))  # (d_model, n_layers): at most 604M parameters each
WARMUPS = (0, 300)
FACTORS = (0.7, 1.4)  # x the stack's safe lr: on either side of its limit
STEPS, SEED = 1000, 4
MODEL = {"arch": "decoder", "n_heads": 16, "vocab_size": 256, "max_len": 64}
TRAIN = {"task": "lm", "steps": STEPS, "batch_size": 16, "seq_len": 32, "beta2": 0.98, "log_every": 10,
         "schedule": "linear", "seed": SEED, "bf16": True}  # fmt: skip
GRID = os.path.join("lab", "depthlab_lab", "grids", "advise-heldout-width.yaml")
REGISTRATION = os.path.join("lab", "depthlab_lab", "grids", "advise-heldout-width.registration.json")
MARGIN = 0.05  # advise's accuracy must exceed the best lookup's by this much, with accuracy >= TARGET
TARGET = 0.90


def points() -> list[tuple[str, int, int, int]]:
    """The 12 design points (wrap, d_model, n_layers, warmup) in the order their runs start: every four
    consecutive points hold the four wrappings, each wrapping meets every shape, and every shape is run
    with each warmup by two wrappings; so a run cut short by time loses whole points, never a kind."""
    out = []
    for k in range(len(WRAPS) * len(SHAPES)):
        w, s = k % len(WRAPS), (k % len(WRAPS) + k // len(WRAPS)) % len(SHAPES)
        out.append((WRAPS[w], *SHAPES[s], WARMUPS[(w + s) % len(WARMUPS)]))
    return out


def designed_runs() -> list[dict]:
    """The set's runs as field mappings, in their registered order: per design point, the two learning
    rates placed by the stack's own limit (one light probe of the point: the limit reads only the update
    gain and the relative update, which the lr does not change)."""
    runs = []
    for wrap, d, n, warmup in points():
        model = ModelConfig(**MODEL, wrap=wrap, d_model=d, n_layers=n)
        train = TrainConfig(**{**TRAIN, "lr": 1e-3, "warmup": warmup})
        limit = limit_of(probe_run(RunSpec(model, train), light=True))[0]
        for f in FACTORS:
            runs.append({"wrap": wrap, "d_model": d, "n_layers": n, "warmup": warmup,
                         "lr": float(f"{f * limit.lr_limit:.3g}")})  # fmt: skip
    return runs


def write_grid(runs: list[dict], path: str = GRID) -> None:
    """The grid file: its header says what it is and how it was placed, then every run in its order."""
    head = [
        "# The held-out set at real width for depthlab advise (lab/depthlab_lab/calibrate/heldout_width.py):",
        "# fixed, with every run's prediction (advise-heldout-width.registration.json), in a commit before",
        "# its first run; never used to choose a feature, a form or a threshold. Four wrappings x three",
        "# shapes (1024 x 24, 2048 x 12, 1024 x 48), a warmup of 0 or 300, 1,000 steps of 16 x 32 tokens,",
        "# seed 4, bf16 autocast, at x0.7 and x1.4 of the safe lr the probe gives each stack; the runs start",
        "# in this order. Run on one GPU: python benchmarks/gpu.py --all --out DIR (its doctor part).",
        "name: advise-heldout-width",
        f'description: "advise\'s held-out set at real width: {len(runs)} runs, 4 wrappings x 3 shapes x 2 lrs."',
        "model: " + json.dumps(MODEL).replace('"', ""),
        "train: " + json.dumps(TRAIN).replace('"', ""),
        "axes:",
        "  run:",
        *[f"    - {json.dumps(r).replace(chr(34), '')}" for r in runs],
    ]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(head) + "\n")


def specs(grid: str = GRID) -> list[RunSpec]:
    """The set's runs, in their registered order (the grid's)."""
    return StudyConfig.from_yaml(lab_file(grid)).expand()


def predictions(grid: str, atlas: Atlas, record: dict, say=print) -> list[dict]:
    """Every run of ``grid``: its hash, fields, advise's probability and call, each lookup's call, and the
    seconds its probe took on this machine (one thread, as measured)."""
    out = []
    for i, spec in enumerate(specs(grid)):
        start = time.perf_counter()
        result = probe_run(spec)
        seconds = time.perf_counter() - start
        out.append({"config_hash": spec.hash, "run": spec.label, **prediction(result, spec, atlas, record),
                    "probe_seconds": round(seconds, 1)})  # fmt: skip
        say(f"[{i + 1}] {spec.label}: P(trains) {out[-1]['p_trains']:.2f}, probe {seconds:.0f} s", flush=True)
    return out


RULES = {
    "outcome": DEPTH_RULES["outcome"],
    "advise": "the call of depthlab advise: 'trains' where P(trains) >= 0.5, frozen here before any run: the "
    "predictor of the record named below, on the atlas named below, from the study worker's probe of the "
    "run (fp32, on the CPU named under 'predicted_on', on the run's first batch of that machine's default "
    "corpus, the Python standard library's own source)",
    "lookups": DEPTH_RULES["lookups"],
    "accuracy": f"share of finished runs called right, with its 95% Wilson interval; advise passes when its "
    f"accuracy is at least {TARGET:.0%} and at least {MARGIN:.0%} (5 points) above the best lookup's on "
    "the same runs (paired difference with Newcombe's interval reported)",
    "brier": DEPTH_RULES["brier"],
    "where": "each run trains on one GPU (an H200) in `python benchmarks/gpu.py --all` (its doctor part): "
    "the registered configuration exactly (bf16 autocast, weights and Adam's state in fp32; TF32 off), on "
    "the corpus that command builds there from the Python sources on that machine (the standard library, "
    "then the installed packages' sources, in sorted order, up to the cap it records), several runs at a "
    "time, one process each",
    "order": "the runs start in the order of 'runs' below, as workers free up; a run starts only while the "
    "rate measured so far (or, before any run has ended, the measured step time of its shape) says it "
    "ends before the part's time is up; the first run that would not is not started, nor any run after "
    "it (a prefix of the order, never a choice among runs); a run still going when the time is up is "
    "ended and counted 'not finished'. Scored: the finished runs; the others are listed as not run",
    "gpu probe": "before it trains, each run is probed again on the GPU (the same code, the same seed, on "
    "its first batch of the GPU's corpus) and advise's probability from that probe is written to the "
    "output before training starts; it is reported beside the frozen prediction, never scored in its place",
}


def registration(atlas: Atlas, record: dict, say=print) -> dict:
    """Everything the set is scored under, and every run's prediction, computed before any run."""
    import torch

    from depthlab.corpus import load_corpus

    corpus = load_corpus(None, TRAIN["seq_len"]).info
    start = time.perf_counter()
    runs = predictions(GRID, atlas, record, say)
    return {
        "grid": GRID,
        "rules": RULES,
        "record": {
            "path": "depthlab/doctor/calibration.json",
            "sha256": digest(RECORD_PATH),
            "predictor_form": record["predictor"]["form"],
        },  # fmt: skip
        "atlas": {"path": "depthlab/doctor/atlas.csv.gz", "sha256": digest(ATLAS_PATH), "runs": len(atlas)},
        "predicted_on": {
            "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores (one torch thread)",
            "python": platform.python_version(),
            "torch": torch.__version__,
            "corpus": {"source": corpus["source"], "bytes": corpus["bytes"], "sha256": corpus["sha256"]},
            "seconds": round(time.perf_counter() - start),
        },
        "runs": runs,
        "within_2x_of_limit": sum(
            r["lr_over_limit"] is not None and 0.5 <= r["lr_over_limit"] <= 2 for r in runs
        ),
    }


def load_registration(path: str = REGISTRATION) -> dict:
    with open(lab_file(path), encoding="utf-8") as f:
        return json.load(f)


# -- scoring (after the runs) ----------------------------------------------------------------------------
def score(registered: list[dict], outcomes: dict[str, str]) -> dict:
    """The set's score under :data:`RULES`: ``registered`` the registration's runs, ``outcomes`` config hash
    -> outcome of each finished run. advise's accuracy (Wilson), each lookup's, advise against the best
    lookup (Newcombe's paired interval), the Brier scores, and whether advise passes."""
    done = [r for r in registered if r["config_hash"] in outcomes]
    truth = {r["config_hash"]: expected(outcomes[r["config_hash"]]) for r in done}
    n = len(done)
    calls = {"advise": {r["config_hash"]: r["advise"] for r in done}}
    for name in [*LOOKUPS, "always 'trains'"]:
        calls[name] = {r["config_hash"]: r["lookups"].get(name, "trains") for r in done}
    hits = {k: {h: c == truth[h] for h, c in v.items()} for k, v in calls.items()}
    out = {"runs": n, "registered": len(registered), "predictors": {}}
    for name, h in hits.items():
        right = sum(h.values())
        out["predictors"][name] = {"hits": right, "accuracy": right / n if n else None,
                                   "interval": wilson_interval(right, n) if n else None}  # fmt: skip
    brier = {"advise": _mean([(r["p_trains"] - (truth[r["config_hash"]] == "trains")) ** 2 for r in done])}
    for name in calls:
        if name != "advise":
            brier[name] = _mean([float(calls[name][h] != truth[h]) for h in truth])
    out["brier"] = brier
    lookups = [k for k in calls if k != "advise"]
    if n:
        best = max(lookups, key=lambda k: (out["predictors"][k]["hits"], k))
        a, b = hits["advise"], hits[best]
        cells = paired_counts([a[h] for h in a], [b[h] for h in a])
        d, lo, hi = paired_difference_interval(*cells)
        acc = out["predictors"]["advise"]["accuracy"]
        out["against_best_lookup"] = {"lookup": best, "difference": d, "interval": (lo, hi), "cells": cells}
        out["passes"] = {
            "accuracy": acc >= TARGET and acc >= out["predictors"][best]["accuracy"] + MARGIN,
            "brier": all(brier["advise"] < brier[k] for k in lookups),
        }
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def format_score(s: dict) -> list[str]:
    """The score as lines of text (the markdown section's code block)."""
    if not s["runs"]:
        return [f"0 of {s['registered']} registered runs finished: nothing to score"]
    lines = [f"{s['runs']} of {s['registered']} registered runs finished"]
    for name, p in s["predictors"].items():
        lo, hi = p["interval"]
        lines.append(f"{name:32s} {p['hits']:3d} right: {p['accuracy']:4.0%} (95% interval {lo:.0%}-{hi:.0%}); "
                     f"Brier {s['brier'][name]:.3f}")  # fmt: skip
    b = s["against_best_lookup"]
    lines.append(f"advise against the best lookup ({b['lookup']}): {b['difference']:+.0%} "
                 f"[{b['interval'][0]:+.0%}, {b['interval'][1]:+.0%}] (Newcombe; both right, only advise, "
                 f"only the lookup, neither: {', '.join(map(str, b['cells']))})")  # fmt: skip
    ok = s["passes"]
    lines.append(f"registered margin (>= {TARGET:.0%} and {MARGIN:.0%} above the best lookup): "
                 f"{'met' if ok['accuracy'] else 'not met'}; Brier below every lookup's: "
                 f"{'yes' if ok['brier'] else 'no'}")  # fmt: skip
    return lines


def finite(x) -> float | None:
    return x if isinstance(x, int | float) and math.isfinite(x) else None


def replace_train(spec: RunSpec, **changes) -> RunSpec:
    """``spec`` with its train config changed (the corpus, the device, a dry run's budget)."""
    return dataclasses.replace(spec, train=dataclasses.replace(spec.train, **changes))


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["design"]:
        runs = designed_runs()
        write_grid(runs)
        print(f"wrote {GRID}: {len(runs)} runs")
    elif sys.argv[1:] == ["register"]:
        reg = registration(Atlas.load(), load_record())
        with open(REGISTRATION, "w", encoding="utf-8") as f:
            json.dump(reg, f, indent=1)
        print(f"wrote {REGISTRATION}: {len(reg['runs'])} runs predicted")
    else:
        print("usage: python -m depthlab_lab.calibrate.heldout_width design|register", file=sys.stderr)
        sys.exit(2)
