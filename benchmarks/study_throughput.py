"""Study throughput: a grid with 1 worker vs 2 workers; prints the wall times, their ratio, and why.

    .venv/bin/python benchmarks/study_throughput.py [--preset smoke] [--workers 2] [--repeat 2]
                                                    [--long-steps 1000]

Each measurement runs the whole study into a fresh store (pool start-up included, report excluded),
so the ratio is what a user sees. The fair comparison on a 2-core machine is 1 worker x 2 threads
against 2 workers x 1 thread (workers x threads <= cores either way).

A study's wall time is F + W / workers: F is paid once per worker process, in parallel (spawning it,
importing torch, and the first run's one-time costs: torch.optim imports torch._dynamo, the first
backward initialises autograd), W is the runs' own work. The script measures F (a study of one
1-step run) and prints (F + W) / (F + W / 2), the speed-up of a perfect pool if a run is as fast on
1 thread as on 2 (tiny models are often faster on 1, so the measured speed-up can exceed it). The smoke preset's
runs take about 0.1 s each, so F dominates and no pool can reach 1.7x on it; the same grid with
``--long-steps`` steps per run (default 1000) shows the speed-up once the runs dominate, as they do in
the default study (30 runs of 2-20 s).
"""

from __future__ import annotations

import copy
import io
import os
import tempfile
import time

from common import Parser

from depthlab.study import run_study
from depthlab.study.executors import available_cores, threads_per_worker
from depthlab.study.grid import StudyConfig
from depthlab.study.presets import PRESETS

GOAL = 1.7


def grid(preset_name: str, steps: int | None = None, n_runs: int | None = None) -> StudyConfig:
    """The preset's grid, with ``steps`` training steps per run and only the first ``n_runs`` wrap values
    if given (``n_runs`` 1 keeps a single run: the fixed-cost probe)."""
    d = copy.deepcopy(PRESETS[preset_name])
    if steps is not None:
        d["train"]["steps"] = steps
        d["train"]["log_every"] = min(d["train"].get("log_every", steps), steps)
    if n_runs == 1:
        d["axes"] = {k: v[:1] for k, v in d["axes"].items()}
    return StudyConfig.from_dict(d)


def measure(study: StudyConfig, workers: int) -> float:
    """Wall seconds to run ``study`` from scratch with ``workers`` workers."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        res = run_study(
            study, db=os.path.join(tmp, "s.sqlite"), workers=workers, progress=False, out=io.StringIO()
        )
        seconds = time.perf_counter() - start
    if res.failed:
        raise SystemExit(f"{res.failed} runs failed; the timing would mean nothing")
    return seconds


def compare(label: str, study: StudyConfig, workers: int, repeat: int, cores: int, fixed: float) -> float:
    """Time the study with 1 and ``workers`` workers (alternating, ``repeat`` times); print; return the
    speed-up of the best times."""
    runs = len(study.expand())
    times: dict[int, list[float]] = {1: [], workers: []}
    for _ in range(repeat):
        for w in times:
            times[w].append(measure(study, w))
    best = {w: min(ts) for w, ts in times.items()}
    print(f"{label}: {runs} runs of {study.train['steps']} steps")
    for w, ts in times.items():
        shown = ", ".join(f"{t:.1f}" for t in ts)
        print(f"  {w} worker(s) x {threads_per_worker(w, cores)} threads: best {best[w]:5.1f} s  ({shown})")
    speedup = best[1] / best[workers]
    work = max(best[1] - fixed, 0.0)
    bound = (fixed + work) / (fixed + work / workers)
    print(
        f"  speed-up of {workers} workers over 1: {speedup:.2f}x   (runs' own work W = {work:.1f} s, fixed "
        f"cost F = {fixed:.1f} s; a perfect pool at equal speed per run: {bound:.2f}x)"
    )
    return speedup


def main(argv=None) -> None:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="smoke", choices=sorted(PRESETS))
    p.add_argument("--workers", type=int, default=2, help="the parallel setting compared with 1 worker")
    p.add_argument(
        "--repeat", type=int, default=2, help="measure each setting this many times; keep the best"
    )
    p.add_argument(
        "--long-steps", type=int, default=1000, help="steps per run of the long variant (0: skip it)"
    )
    args = p.parse_args(argv)
    for flag, value, least in (("--workers", args.workers, 2), ("--repeat", args.repeat, 1),
                               ("--long-steps", args.long_steps, 0)):  # fmt: skip
        if value < least:
            p.error(f"{flag} {value}: at least {least}")
    cores = available_cores()
    print(f"{cores} cores, load average {os.getloadavg()[0]:.1f}")
    fixed = min(measure(grid(args.preset, steps=1, n_runs=1), 1) for _ in range(args.repeat))
    print(
        f"fixed cost F (a study of one 1-step run, 1 worker: pool start, imports, first-run set-up): {fixed:.1f} s"
    )
    short = compare(f"preset {args.preset}", grid(args.preset), args.workers, args.repeat, cores, fixed)
    met_or_missed = "met" if short >= GOAL else f"MISSED by {1 - short / GOAL:.0%} (F dominates these runs)"
    lines = [
        f"goal {args.workers} workers >= {GOAL}x on the {args.preset} grid: {short:.2f}x {met_or_missed}"
    ]
    if args.long_steps:
        study = grid(args.preset, steps=args.long_steps)
        long = compare(
            f"preset {args.preset}, {args.long_steps} steps per run",
            study,
            args.workers,
            args.repeat,
            cores,
            fixed,
        )
        met_or_missed = "met" if long >= GOAL else f"MISSED by {1 - long / GOAL:.0%}"
        lines.append(
            f"goal {args.workers} workers >= {GOAL}x with {args.long_steps}-step runs: {long:.2f}x {met_or_missed}"
        )
    print("\n".join(lines))
    print(f"# end: load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
