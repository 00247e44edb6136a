"""Study throughput: the smoke preset with 1 worker vs 2 workers; prints the wall times and their ratio.

    .venv/bin/python benchmarks/study_throughput.py [--preset smoke] [--workers 2] [--repeat 1]

Each measurement runs the whole study into a fresh store (pool start-up included, report excluded),
so the ratio is what a user sees. On an idle 2-core machine 2 workers x 1 thread should beat 1 worker
x 2 threads for these tiny models (intra-op threads help little at d_model 16-32); on a busy machine
the ratio is noisy: run it with --repeat 3 and read the best.
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time

from depthlab.study import preset, run_study
from depthlab.study.executors import available_cores, threads_per_worker


def measure(preset_name: str, workers: int) -> float:
    """Wall seconds to run the preset from scratch with ``workers`` workers."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        res = run_study(
            preset(preset_name),
            db=os.path.join(tmp, "s.sqlite"),
            workers=workers,
            progress=False,
            out=io.StringIO(),
        )
        seconds = time.perf_counter() - start
    if res.failed:
        raise SystemExit(f"{res.failed} runs failed; the timing would mean nothing")
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="smoke")
    p.add_argument("--workers", type=int, default=2, help="the parallel setting compared with 1 worker")
    p.add_argument(
        "--repeat", type=int, default=1, help="measure each setting this many times; keep the best"
    )
    args = p.parse_args()
    cores = available_cores()
    runs = len(preset(args.preset).expand())
    print(f"preset {args.preset}: {runs} runs, {cores} cores, load average {os.getloadavg()[0]:.1f}")
    best = {}
    for w in (1, args.workers):
        times = [measure(args.preset, w) for _ in range(args.repeat)]
        best[w] = min(times)
        shown = ", ".join(f"{t:.1f}" for t in times)
        print(f"  {w} worker(s) x {threads_per_worker(w, cores)} threads: best {best[w]:.1f} s  ({shown})")
    print(f"speed-up of {args.workers} workers over 1: {best[1] / best[args.workers]:.2f}x")


if __name__ == "__main__":
    main()
