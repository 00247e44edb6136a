"""How much per-layer telemetry costs: training with it at the default interval vs without.

Two measurements, both alternating the two arms so that a busy machine slows both alike:

1. per step: one run whose every other step is a telemetry step; the median CPU time of telemetry
   steps and of plain steps gives the cost of one telemetry step, hence the overhead at the default
   ``log_every`` (one telemetry step in ``log_every``);
2. whole runs with ``telemetry=True`` and ``telemetry=False`` (median of ``--repeats`` each): the ratio
   of CPU time, wall time and training throughput (evaluation excluded).

The goal is an overhead under 5% at the default ``log_every``.

    .venv/bin/python benchmarks/telemetry_overhead.py [--layers 12] [--steps 40] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from depthlab import ModelConfig, TrainConfig
from depthlab.train import train


def measure(model_cfg: ModelConfig, train_cfg: TrainConfig) -> tuple[float, float, float]:
    """(training tokens per second, wall seconds, CPU seconds of this process) of one run writing nothing.

    CPU time is the steadier figure on a shared machine: other processes stretch the wall clock, not it.
    """
    start, cpu = time.perf_counter(), time.process_time()
    result = train(model_cfg, train_cfg)
    return result.tokens_per_s, time.perf_counter() - start, time.process_time() - cpu


def per_step(model_cfg: ModelConfig, base: TrainConfig, steps: int) -> tuple[float, float]:
    """Median CPU seconds of (a telemetry step, a plain step), interleaved in one run (log_every=2)."""
    from depthlab.train.distributed import Dist
    from depthlab.train.loop import Trainer

    trainer = Trainer(model_cfg, base.replace(log_every=2, steps=steps, eval_every=10**9), None, Dist())
    times = {True: [], False: []}
    for t in range(1, steps + 1):
        start = time.process_time()
        trainer.train_step(t)
        if t > 4:  # skip the first steps: allocations, first-call overheads
            times[trainer.logged(t)].append(time.process_time() - start)
    return statistics.median(times[True]), statistics.median(times[False])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model_cfg = ModelConfig(n_layers=args.layers, d_model=args.d_model, n_heads=4, max_len=args.seq_len)
    base = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        eval_every=args.steps,  # one evaluation, at the end, in both arms
        eval_batches=1,
    )
    tele_step, plain_step = per_step(model_cfg, base, 2 * args.steps)
    extra = (tele_step - plain_step) / (base.log_every * plain_step)
    print(
        f"per step: telemetry step {tele_step * 1e3:.1f} ms CPU, plain step {plain_step * 1e3:.1f} ms CPU "
        f"(+{tele_step / plain_step - 1:.1%}); at log_every {base.log_every}: overhead {extra:+.2%}"
    )
    arms = {"telemetry": base.replace(telemetry=True), "none": base.replace(telemetry=False)}
    measure(model_cfg, base.replace(steps=3))  # warm-up: first-call imports and allocations
    runs = {name: [] for name in arms}
    for _ in range(args.repeats):
        for name, cfg in arms.items():
            runs[name].append(measure(model_cfg, cfg))
    tps, wall, cpu = (
        {name: statistics.median(r[i] for r in rs) for name, rs in runs.items()} for i in range(3)
    )
    print(
        f"whole runs: decoder {args.layers} layers, d_model {args.d_model}, {args.steps} steps of "
        f"{args.batch_size}x{args.seq_len}, log_every {base.log_every}, {args.threads} thread(s), "
        f"median of {args.repeats}"
    )
    for name in arms:
        print(f"  {name:10} {tps[name]:10,.0f} tokens/s   {wall[name]:7.2f} s wall   {cpu[name]:7.2f} s CPU")
    print(
        f"telemetry costs: CPU time x{cpu['telemetry'] / cpu['none']:.3f}, "
        f"wall time x{wall['telemetry'] / wall['none']:.3f}, throughput x{tps['none'] / tps['telemetry']:.3f}"
    )


if __name__ == "__main__":
    main()
