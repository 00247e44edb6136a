"""Training throughput of depthlab's wrappings against three peers, and the distance to the matmul limit.

For each shape (d_model, layers) at seq 128, batch 16, vocab 256, every model
(see ``peers.py``) runs forward + backward + AdamW steps on one fixed batch, the models alternating
step by step in rounds (the order rotated each round) after a warm-up. tokens/s is from the median
round. Each line ends with the ratio to the fastest peer at that shape (goal: >= 1.00): the median over
rounds of the peer's step time over the model's, so that both sides of every ratio saw the same load.
``best-step ratio`` compares the best steps instead (load only ever slows a step down). MFU = model
FLOPs/s (6 N tokens + attention) over the fp32 ``torch.mm`` peak sampled at the end of the same round.

    python benchmarks/throughput.py --quick      # < 2 min: 3 shapes, few rounds
    python benchmarks/throughput.py              # the full run for RESULTS.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from common import (
    THREADS,
    Parser,
    check_heads,
    check_names,
    load_line,
    matmul_flops_per_s,
    median,
    pin_threads,
    positive_float,
    positive_int,
    shape_list,
    time_alternating,
)
from peers import (
    DEPTHLAB,
    NAMES_HINT,
    PEERS,
    Shape,
    build,
    check_param_counts,
    model_names,
    train_flops,
    train_step,
)

CONFIGS = ((128, 6), (128, 24), (64, 96))
WIDE = ((256, 6),)  # full run only: goal 2 asks for >= 75% of peak at d_model >= 256
# full run only: does torch.compile of each block pay on this CPU? (measured, not assumed)
COMPILED = {(128, 24): "depthlab-pre+compile"}
GOAL_RATIO, GOAL_FUSED = 1.00, 1.10
GOAL_MFU = {(128, 24): 0.70, "wide": 0.75}


def parse_args(argv=None) -> argparse.Namespace:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 shapes, <= 3 rounds (fewer on a busy machine)")
    p.add_argument(
        "--configs", type=shape_list, help="shapes as DxL,DxL (default 128x6,128x24,64x96 [+256x6 full])"
    )
    p.add_argument(
        "--models", help="comma-separated model names (default: all; NAME+compile compiles blocks)"
    )
    p.add_argument("--rounds", type=positive_int, help="alternation rounds (default 3 quick, 12 full)")
    p.add_argument("--steps", type=positive_int, help="timed steps per model per round (default 1)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per model first")
    p.add_argument(
        "--budget", type=positive_float, help="stop adding rounds after this many seconds per shape"
    )
    p.add_argument("--seq", type=positive_int, default=128)
    p.add_argument("--batch", type=positive_int, default=16)
    p.add_argument("--heads", type=positive_int, default=4)
    p.add_argument("--peak-n", type=positive_int, default=2048, help="matrix size of the matmul-peak sample")
    a = p.parse_args(argv)
    full = not a.quick
    a.rounds = a.rounds or (12 if full else 3)
    a.steps = a.steps or 1
    a.budget = a.budget or (75.0 if full else 25.0)
    a.min_rounds = 2 if full else 1
    a.shapes = a.configs or list(CONFIGS) + (list(WIDE) if full else [])
    where = "--configs" if a.configs else "the default shapes'"
    check_heads(p, a.heads, [d for d, _ in a.shapes], where, f"--heads {a.heads}")
    if a.models is not None:
        a.models = check_names(p, "--models", a.models, model_names(), NAMES_HINT)
    if a.warmup < 0:
        p.error(f"--warmup {a.warmup}: a number of steps >= 0")
    a.full = full
    return a


def measure(s: Shape, names: list[str], a: argparse.Namespace) -> dict:
    """Build, check and time every model at shape ``s``; per model, its mean step time in each round.

    ``peaks[r]`` is the matmul peak sampled right after round r, so MFU pairs each round's step time
    with the load of that moment.
    """
    models = {n: build(n, s) for n in names}
    totals = check_param_counts(models, s)
    steps = {n: train_step(m, s) for n, m in models.items()}
    peaks: list[float] = []
    t0 = time.perf_counter()
    times = time_alternating(
        steps,
        rounds=a.rounds,
        steps=a.steps,
        warmup=a.warmup,
        between=lambda: peaks.append(matmul_flops_per_s(a.peak_n)),
        budget_s=a.budget,
        min_rounds=a.min_rounds,
    )
    k = a.steps
    rounds = {n: [sum(ts[i : i + k]) / k for i in range(0, len(ts), k)] for n, ts in times.items()}
    return {"rounds": rounds, "params": totals, "peaks": peaks, "wall": time.perf_counter() - t0}


def paired(rounds: dict[str, list[float]], model: str, other: str) -> list[float]:
    """Per round, other's step time / model's (> 1 when ``model`` is faster).

    Pairing within a round cancels the load that both saw (the machine is shared); a ratio of two
    medians would not.
    """
    return [b / a for a, b in zip(rounds[model], rounds[other])]


def spread(xs: list[float]) -> tuple[float, float, float]:
    """(lower quartile, median, upper quartile) of ``xs``."""
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def report(s: Shape, res: dict) -> list[dict]:
    """One row per model: tokens/s and MFU (medians over rounds), paired ratio to the fastest peer."""
    rounds = res["rounds"]
    peers = [n for n in rounds if n in PEERS]
    fastest = max(peers, key=lambda p: median(paired(rounds, p, peers[0]))) if peers else None
    rows = []
    for name, ts in rounds.items():
        flops = train_flops(s, res["params"][name])
        row = {"name": name, "tps": s.tokens / median(ts), "n": len(ts), "fastest": fastest or "-"}
        row["mfu"] = spread([flops / t / peak for t, peak in zip(ts, res["peaks"])])
        row["ratio"] = spread(paired(rounds, name, fastest)) if fastest else (float("nan"),) * 3
        best_peer = min(min(rounds[p]) for p in peers) if peers else float("nan")
        row["best_ratio"] = best_peer / min(ts)
        rows.append(row)
    return rows


def format_row(s: Shape, r: dict) -> str:
    (q1, ratio, q3), mfu = r["ratio"], r["mfu"][1]
    return (
        f"d={s.d:<4d} L={s.layers:<3d} {r['name']:<24s} {r['tps']:7,.0f} tok/s  MFU {mfu:4.0%}  "
        f"best-step {r['best_ratio']:.2f}  n={r['n']:<2d} IQR {q1:.2f}-{q3:.2f}  vs {r['fastest']:<14s} "
        f"ratio {ratio:.2f}"
    )


def goal_lines(results: list[tuple[Shape, list[dict]]]) -> list[str]:
    """One line per goal (met or missed) of items 1-2, from this run's numbers (median, with its quartiles)."""
    ours = [(s, r) for s, rows in results for r in rows if r["name"].startswith("depthlab-")]
    if not ours:
        return []
    lo_s, lo = min(ours, key=lambda sr: sr[1]["ratio"][1])
    hi_s, hi = max(ours, key=lambda sr: sr[1]["ratio"][1])
    lines = [
        _goal_line(f"goal ratio >= {GOAL_RATIO:.2f} everywhere", lo["ratio"], GOAL_RATIO)
        + f" (lowest: {lo['name']} at d={lo_s.d} L={lo_s.layers})",
        _goal_line(f"goal ratio >= {GOAL_FUSED:.2f} somewhere (fusion)", hi["ratio"], GOAL_FUSED)
        + f" (highest: {hi['name']} at d={hi_s.d} L={hi_s.layers})",
    ]
    for s, rows in results:
        goal = GOAL_MFU.get((s.d, s.layers)) or (GOAL_MFU["wide"] if s.d >= 256 else None)
        pre = next((r for r in rows if r["name"] == "depthlab-pre"), None)
        if goal and pre:
            lines.append(
                _goal_line(f"goal MFU >= {goal:.0%} at d={s.d} L={s.layers} (depthlab-pre)", pre["mfu"], goal)
            )
    return lines


def _goal_line(label: str, q: tuple[float, float, float], goal: float) -> str:
    """met / MISSED by the median; says so when the quartiles straddle the goal (noise decides)."""
    q1, med, q3 = q
    noisy = "; noisy: the quartiles straddle the goal" if q1 < goal <= q3 else ""
    head = f"{label}: {med:.2f} (quartiles {q1:.2f}-{q3:.2f})"
    if med >= goal:
        return f"{head} met{noisy}"
    return f"{head} MISSED by {(goal - med) / goal:.0%}{noisy}"


def main(argv=None) -> int:
    a = parse_args(argv)
    pin_threads(THREADS)
    names = [f"depthlab-{w}" for w in DEPTHLAB] + list(PEERS)
    if a.models:
        names = a.models
    results = []
    print(f"# start: {load_line()}")
    for d, L in a.shapes:
        s = Shape(d=d, layers=L, heads=a.heads, seq=a.seq, batch=a.batch)
        extra = [COMPILED[(d, L)]] if a.full and not a.models and (d, L) in COMPILED else []
        res = measure(s, names + extra, a)
        rows = report(s, res)
        print(
            f"# d={d} L={L} seq={s.seq} batch={s.batch}: matmul peak {median(res['peaks']) / 1e9:.0f} GFLOP/s, "
            f"{load_line()}, "
            f"{res['wall']:.0f} s"
        )
        for r in rows:
            print(format_row(s, r), flush=True)
        results.append((s, rows))
    for line in goal_lines(results):
        print(line)
    print(f"# end: {load_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
