"""Step time and peak memory against depth, with and without activation checkpointing.

A DeepNorm decoder (d_model 64, 4 heads, seq 128, batch 16, vocab 256) trains for a
few AdamW steps at L in {6, 24, 96, 384}; each (L, checkpointing) runs in its own process, so that the
peak RSS (``ru_maxrss``; CUDA max allocated on a GPU) is that config's alone. Both should grow
linearly in L: the script prints the least-squares fit. Then the 1,000-layer stack trains with
``ModelConfig(activation_checkpointing=True)`` (goal: within 8 GB), and without it only if the fit predicts that
it fits safely in the memory this machine has free.

    python benchmarks/memory_depth.py            # full run (a few minutes)
    python benchmarks/memory_depth.py --quick    # L in {6, 24, 96}, 1,000 layers checkpointed only
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from common import (
    THREADS,
    Parser,
    available_memory_bytes,
    check_heads,
    current_rss_bytes,
    linear_fit,
    load_line,
    median,
    peak_rss_bytes,
    pin_threads,
    positive_float,
    positive_int,
    run_json_subprocess,
)

GIB = 2**30
LIMIT = 8e9  # the goal's "within 8 GB" (decimal gigabytes)
SAFETY = 0.6  # run a config without checkpointing only if its predicted peak is below this share


def parse_args(argv=None) -> argparse.Namespace:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="L in {6,24,96}; the deep stack checkpointed only")
    p.add_argument("--layers", help="comma-separated depths (default 6,24,96,384)")
    p.add_argument("--deep", type=positive_int, default=1000, help="depth of the deep DeepNorm stack")
    p.add_argument("--d", type=positive_int, default=64, help="d_model")
    p.add_argument("--heads", type=positive_int, default=4)
    p.add_argument("--seq", type=positive_int, default=128)
    p.add_argument("--batch", type=positive_int, default=16)
    p.add_argument("--wrap", default="deepnorm")
    p.add_argument("--steps", type=positive_int, default=2, help="timed steps per config (after one warm-up)")
    p.add_argument("--timeout", type=positive_float, default=600.0, help="seconds per child process")
    p.add_argument("--device", default="cpu")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)  # run one config: this many layers
    p.add_argument("--checkpoint", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    default = "6,24,96" if a.quick else "6,24,96,384"
    items = (a.layers or default).split(",")
    if not all(v.strip().isdigit() and int(v) >= 1 for v in items):
        p.error(f"--layers {a.layers!r}: depths as a comma list of whole numbers >= 1 (e.g. 6,24,96)")
    a.depths = [int(v) for v in items]
    check_heads(p, a.heads, [a.d], "--d", f"--heads {a.heads}")
    from depthlab.config import wrap_names

    if a.wrap not in wrap_names():
        p.error(f"--wrap {a.wrap!r}: unknown (one of {', '.join(wrap_names())})")
    return a


def child(a: argparse.Namespace) -> dict:
    """Train one config for 1 + ``steps`` steps; returns times and memory (printed as one JSON line)."""
    pin_threads(THREADS)
    import torch
    from peers import Shape, depthlab_config, train_step

    base = current_rss_bytes()
    s = Shape(d=a.d, layers=a.child, heads=a.heads, seq=a.seq, batch=a.batch)
    from depthlab import build_model

    torch.manual_seed(0)  # the same init with and without checkpointing: the losses must agree
    model = build_model(depthlab_config(s, a.wrap, activation_checkpointing=a.checkpoint)).to(a.device)
    step = train_step(model, s, device=a.device)
    times = []
    for _ in range(1 + a.steps):
        t0 = time.perf_counter()
        loss = step()
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    out = {"layers": a.child, "checkpoint": a.checkpoint, "warmup_s": times[0], "step_s": times[1:]}
    out["loss"] = float(loss)
    out.update(base_rss=base, peak_rss=peak_rss_bytes())
    if a.device.startswith("cuda"):
        out["cuda_peak"] = torch.cuda.max_memory_allocated()
    return out


def run_config(a: argparse.Namespace, layers: int, checkpoint: bool, steps: int | None = None) -> dict:
    args = [f"--child={layers}", f"--d={a.d}", f"--heads={a.heads}", f"--seq={a.seq}", f"--batch={a.batch}"]
    args += [f"--wrap={a.wrap}", f"--steps={steps or a.steps}", f"--device={a.device}"]
    res = run_json_subprocess(__file__, args + (["--checkpoint"] if checkpoint else []), a.timeout)
    res.setdefault("layers", layers)
    res.setdefault("checkpoint", checkpoint)
    return res


def format_row(r: dict) -> str:
    mode = "checkpointed" if r["checkpoint"] else "plain       "
    if "error" in r:
        return f"L={r['layers']:<5d} {mode} error: {r['error']}"
    mem = r.get("cuda_peak", r["peak_rss"])
    return (
        f"L={r['layers']:<5d} {mode} {median(r['step_s']):7.2f} s/step  peak RSS {r['peak_rss'] / GIB:6.2f} GiB"
        f"  (above start {(r['peak_rss'] - r['base_rss']) / GIB:5.2f} GiB)"
        + (f"  CUDA max allocated {mem / GIB:.2f} GiB" if "cuda_peak" in r else "")
        + f"  loss {r['loss']:.3f}"
    )


def fits(rows: list[dict]) -> dict[bool, dict]:
    """Per mode, least-squares fits of step time and of peak RSS against L (needs >= 2 good rows)."""
    out = {}
    for ckpt in (False, True):
        good = [r for r in rows if r["checkpoint"] == ckpt and "error" not in r]
        if len(good) < 2:
            continue
        xs = [r["layers"] for r in good]
        out[ckpt] = {
            "time": linear_fit(xs, [median(r["step_s"]) for r in good]),
            "rss": linear_fit(xs, [r["peak_rss"] for r in good]),
        }
    return out


def fit_lines(f: dict[bool, dict]) -> list[str]:
    lines = []
    for ckpt, fit in f.items():
        mode = "checkpointed" if ckpt else "plain"
        (ta, tb, tr2), (ma, mb, mr2) = fit["time"], fit["rss"]
        lines.append(
            f"fit {mode:<12s} step time = {ta:.3f} s + {tb * 1e3:.2f} ms x L (r2 {tr2:.3f});  "
            f"peak RSS = {ma / GIB:.2f} GiB + {mb / 2**20:.2f} MiB x L (r2 {mr2:.3f})"
        )
    return lines


def deep_runs(a: argparse.Namespace, f: dict[bool, dict]) -> list[str]:
    """The deep stack checkpointed, then plain if the fit says it fits safely; a met-or-missed line per goal."""
    lines = []
    ck = run_config(a, a.deep, True, steps=1)  # one timed step after the warm-up: the deep run is long
    lines.append(format_row(ck))
    ok = "error" not in ck and ck["peak_rss"] <= LIMIT
    got = f"{ck['peak_rss'] / 1e9:.2f} GB" if "error" not in ck else ck["error"]
    lines.append(
        f"goal {a.deep}-layer {a.wrap} trains checkpointed within 8 GB: {got} {'met' if ok else 'MISSED'}"
    )
    if False not in f or a.quick:
        lines.append(f"L={a.deep:<5d} plain        not run ({'quick' if a.quick else 'no fit'})")
        return lines
    ma, mb, _ = f[False]["rss"]
    predicted = ma + mb * a.deep
    room = SAFETY * min(LIMIT, available_memory_bytes())
    if predicted > room:
        lines.append(
            f"L={a.deep:<5d} plain        not run: the fit predicts {predicted / GIB:.2f} GiB peak RSS, "
            f"above {room / GIB:.2f} GiB ({SAFETY:.0%} of min(8 GB, free memory))"
        )
        return lines
    plain = run_config(a, a.deep, False, steps=1)
    lines.append(format_row(plain) + f"  (fit predicted {predicted / GIB:.2f} GiB)")
    if "error" not in plain and "error" not in ck:
        lines.append(
            f"checkpointing at L={a.deep}: {median(ck['step_s']) / median(plain['step_s']):.2f}x time, "
            f"{(ck['peak_rss'] - ck['base_rss']) / (plain['peak_rss'] - plain['base_rss']):.2f}x memory above start"
        )
    return lines


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.child is not None:
        print(json.dumps(child(a)))
        return 0
    print(
        f"# {a.wrap} decoder d={a.d} heads={a.heads} seq={a.seq} batch={a.batch}, {THREADS} threads, "
        f"1 warm-up + {a.steps} timed steps per config, one process per config; {load_line()}"
    )
    rows = []
    for L in a.depths:
        for ckpt in (False, True):
            rows.append(run_config(a, L, ckpt))
            print(format_row(rows[-1]), flush=True)
    f = fits(rows)
    for line in fit_lines(f) + deep_runs(a, f):
        print(line, flush=True)
    print(f"# end: {load_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
