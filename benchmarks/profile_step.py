"""Where a training step's time goes: torch.profiler self time by kind of op, depthlab vs nanoGPT.

The evidence behind RESULTS.md's explanations: for each shape, one forward + backward + AdamW step
of depthlab ``pre`` and of the minimal reference is profiled (after warm-up; the two alternate over
``--rounds`` profiled steps each) and the operators' self CPU time is summed into kinds: matmul,
attention, GELU, norm, layout copies, optimiser, other elementwise; ``outside ops`` is the step's
wall time not spent inside any operator (Python, autograd engine, dispatch).

    python benchmarks/profile_step.py
"""

from __future__ import annotations

import sys
import time

from common import THREADS, Parser, check_heads, check_names, median, pin_threads, positive_int, shape_list
from peers import NAMES_HINT, Shape, build, model_names, train_step
from torch.profiler import ProfilerActivity, profile

KINDS = (  # first match wins
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")),
    ("attention", ("scaled_dot_product", "flash_attention")),
    ("gelu", ("gelu",)),
    ("norm", ("layer_norm", "rsqrt")),
    ("layout copies", ("aten::copy_", "aten::cat", "aten::clone", "aten::contiguous")),
    ("optimiser", ("adam", "_foreach", "zero_")),
)


def kind_of(op: str) -> str:
    op = op.lower()
    for kind, keys in KINDS:
        if any(k in op for k in keys):
            return kind
    return "other ops"


def profile_once(step) -> dict[str, float]:
    """Seconds of one profiled step by kind (operators' self CPU time), plus ``outside ops`` and ``step``."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        step()
        wall = time.perf_counter() - t0
    sums: dict[str, float] = {}
    for ev in prof.key_averages():
        sums[kind_of(ev.key)] = sums.get(kind_of(ev.key), 0.0) + ev.self_cpu_time_total / 1e6
    sums["outside ops"] = wall - sum(sums.values())
    sums["step"] = wall
    return sums


def profile_alternating(steps: dict, rounds: int) -> dict[str, dict[str, float]]:
    """Per model, the median over ``rounds`` of each kind's seconds; the models alternate."""
    samples: dict[str, list[dict[str, float]]] = {n: [] for n in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            samples[name].append(profile_once(step))
    out = {}
    for name, runs in samples.items():
        keys = {k for r in runs for k in r}
        out[name] = {k: median([r.get(k, 0.0) for r in runs]) for k in keys}
    return out


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", type=shape_list, default="128x24,64x96", help="shapes as DxL,DxL")
    p.add_argument("--models", default="depthlab-pre,nanogpt")
    p.add_argument("--rounds", type=positive_int, default=3)
    p.add_argument("--seq", type=positive_int, default=128)
    p.add_argument("--batch", type=positive_int, default=16)
    p.add_argument("--heads", type=positive_int, default=4)
    a = p.parse_args(argv)
    check_heads(p, a.heads, [d for d, _ in a.configs], "--configs", f"--heads {a.heads}")
    models = check_names(p, "--models", a.models, model_names(), NAMES_HINT)
    pin_threads(THREADS)
    for d, L in a.configs:
        s = Shape(d=d, layers=L, heads=a.heads, seq=a.seq, batch=a.batch)
        steps = {n: train_step(build(n, s), s) for n in models}
        for step in steps.values():
            step()
        res = profile_alternating(steps, a.rounds)
        first = res[next(iter(res))]
        kinds = sorted((k for k in first if k != "step"), key=lambda k: -first[k])
        print(f"# d={d} L={L}: median profiled step, ms by kind (share of the step)")
        print(f"{'kind':<15s}" + "".join(f"{n:>22s}" for n in res))
        for k in kinds + ["step"]:
            print(
                f"{k:<15s}"
                + "".join(f"{r.get(k, 0) * 1e3:13.1f} ({r.get(k, 0) / r['step']:4.0%})" for r in res.values())
            )
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
