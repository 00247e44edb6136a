"""bf16 training throughput and MFU on a GPU, depthlab against the minimal reference.

At d_model 1024, 24 layers, 16 heads, seq 1024 (batch 8, vocab 256), depthlab ``pre`` and the
nanoGPT-style reference train under bf16 autocast (fp32 weights, fused AdamW), alternating after a
warm-up; tokens/s from the median step (CUDA-synchronised). MFU is model FLOPs/s over the GPU's
nominal dense bf16 peak (and over a measured bf16 ``torch.mm`` peak). ``--compile`` adds
``torch.compile``d copies of both. Without a GPU it prints so and exits 0: nothing is assumed.

``--reproduce`` instead launches the reproductions' large scale on the GPU (``depthlab reproduce all
--scale large``: d_model >= 256, >= 2,000 steps, several seeds per claim; each claim prints its expected
time before it starts) and writes docs/reproductions-large.md. Its ``--dry-run`` lists, per claim, the
runs the claim would train (recorded from its own announcement, nothing trained: benchmarks/large_plan.py),
their tokens, passes over the corpus, FLOP and the cost model's expected time on this device.
``--ladder`` runs the scale ladder (``depthlab reproduce ladder``: widths 32, 64, 128) on the GPU into
its study store and writes docs/reproductions-ladder.md; with ``--dry-run`` it prints its plan.

``--all`` runs the prepared ten-minute suite on one GPU (benchmarks/gpu_suite.py): speed at three shapes
against the reference, the held-out set at real width for ``depthlab advise`` (registered with its
predictions before it runs) and the residual topologies at 48 layers; its results go to files in
``--out``. With ``--dry-run`` it prints its plan with each part's expected time on an H200, then runs
every part at toy size on the CPU.

    python benchmarks/gpu.py --all --out runs/gpu        # on one H200: at most ten minutes
    python benchmarks/gpu.py --all --dry-run --out /tmp/gpu-dry   # the plan, then every part at toy size
    python benchmarks/gpu.py                 # on a machine with CUDA
    python benchmarks/gpu.py --reproduce     # the reproductions' large scale (hours on one GPU)
    python benchmarks/gpu.py --reproduce --dry-run   # what it would run, from the registrations; trains nothing
    python benchmarks/gpu.py --reproduce depth,warmup --doc runs/large.md   # some claims only
    python benchmarks/gpu.py --ladder        # the scale ladder on the GPU (resumes its store)
    python benchmarks/gpu.py --ladder --dry-run   # its runs and expected time per claim; trains nothing
    python benchmarks/gpu.py --device cpu --shape 32x2x2x16 --batch 2 --rounds 2   # a smoke test
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time

import torch
from common import THREADS, check_heads, check_names, median, pin_threads, positive_int, time_alternating
from gpu_suite import BUDGET_S, PARTS, plan
from gpu_suite import run_all as run_suite
from large_plan import claim_cost
from peers import NAMES_HINT, Shape, build, check_param_counts, model_names, train_flops, train_step

from depthlab.corpus import load_corpus
from depthlab_lab.docgen.ladder_doc import DEFAULT_DB as LADDER_DB
from depthlab_lab.docgen.ladder_doc import DEFAULT_DOC as LADDER_DOC
from depthlab_lab.docgen.ladder_doc import write_ladder
from depthlab_lab.docgen.reproductions import names_to_run, run_all
from depthlab_lab.reproduce import REGISTRATIONS, load_all
from depthlab_lab.reproduce.cost import device_for
from depthlab_lab.reproduce.ladder_run import check_db, chosen, print_plan, rungs
from depthlab_lab.reproduce.lm_runs import LARGE_TRAIN, configs

# The H200's fp32 (no tensor core) peak from its data sheet, FLOP/s: depthlab trains in fp32 unless bf16
# is asked for, so this bounds the large scale's time on one H200 from below.
H200_FP32 = 67e12
# Dense (no sparsity) bf16 tensor-core peaks from the vendors' data sheets, FLOP/s.
NOMINAL_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12, "L4": 121e12}
GOAL_MFU, GOAL_RATIO = 0.40, 1.00


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr and exit code 2."""

    def error(self, message):
        sys.stderr.write(f"gpu.py: error: {message}\n")
        raise SystemExit(2)


def parse_args(argv=None) -> argparse.Namespace:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--shape", default="1024x24x16x1024", help="DxLxHEADSxSEQ")
    p.add_argument("--batch", type=positive_int, default=8)
    p.add_argument("--models", default="depthlab-pre,nanogpt")
    p.add_argument("--rounds", type=positive_int, default=10)
    p.add_argument("--steps", type=positive_int, default=3, help="timed steps per model per round")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="also time torch.compile'd copies")
    p.add_argument("--peak-n", type=positive_int, default=8192, help="matrix size of the bf16 matmul peak")
    p.add_argument(
        "--reproduce",
        nargs="?",
        const="all",
        metavar="NAMES",
        help="run the reproductions' large scale instead (comma-separated claims; default all)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="with --reproduce: print each claim's registered large regime, tokens per run and passes over "
        "the corpus, and the command; train nothing (no GPU needed); with --all: print the plan, then run "
        "every part at toy size on the CPU",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="the prepared ten-minute suite on one GPU: speed, the doctor at real width, the topologies",
    )
    p.add_argument("--parts", default=",".join(PARTS), help=f"with --all: comma list of {', '.join(PARTS)}")
    p.add_argument(
        "--budget", type=float, default=BUDGET_S, help=f"with --all: seconds in all (default {BUDGET_S:.0f})"
    )
    p.add_argument("--workers", type=int, help="with --all: held-out runs at a time (default 8; dry run 2)")
    p.add_argument("--work", help="with --all: folder for the corpus (default $TMPDIR/depthlab-gpu-work)")
    p.add_argument(
        "--ladder",
        nargs="?",
        const="all",
        metavar="NAMES",
        help="run the scale ladder instead (comma-separated claims; default all), resuming --db",
    )
    p.add_argument("--db", default=LADDER_DB, help=f"with --ladder: its study store (default {LADDER_DB})")
    p.add_argument(
        "--doc",
        help="with --reproduce: the Markdown file (default docs/reproductions-large.md); with --ladder: "
        f"its page (default {LADDER_DOC})",
    )
    p.add_argument(
        "--out",
        help="with --reproduce: folder for the plots (default runs/reproduce-large); with --all: folder for "
        "the results (default runs/gpu)",
    )
    a = p.parse_args(argv)
    check_args(p, a)
    d, L, h, t = (int(v) for v in a.shape.split("x"))
    a.s = Shape(d=d, layers=L, heads=h, seq=t, batch=a.batch)
    return a


def check_args(p: Parser, a: argparse.Namespace) -> None:
    """Refuse what cannot run, in one line each (exit 2)."""
    if not re.fullmatch(r"[1-9]\d*x[1-9]\d*x[1-9]\d*x[1-9]\d*", a.shape):
        p.error(f"--shape {a.shape!r}: four positive integers DxLxHEADSxSEQ, e.g. 1024x24x16x1024")
    d, _, heads, _ = (int(v) for v in a.shape.split("x"))
    check_heads(p, heads, [d], "--shape", f"its {heads} heads")
    if a.warmup < 0:
        p.error(f"--warmup {a.warmup}: a number of steps >= 0")
    check_names(p, "--models", a.models, model_names(), NAMES_HINT)
    modes = [m for m in ("--all", "--reproduce", "--ladder") if getattr(a, m[2:])]
    if len(modes) > 1:
        p.error(f"{' and '.join(modes)} cannot be combined: choose one")
    if not a.all:
        if a.workers is not None or a.work is not None or a.parts != ",".join(PARTS) or a.budget != BUDGET_S:
            p.error("--parts, --budget, --workers and --work go with --all")
        a.out = a.out or "runs/reproduce-large"
        return
    a.out = a.out or os.path.join("runs", "gpu")
    parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    bad = [x for x in parts if x not in PARTS]
    if bad or not parts:
        p.error(f"--parts {a.parts!r}: a comma list of {', '.join(PARTS)}")
    a.parts = tuple(x for x in PARTS if x in parts)
    if not (math.isfinite(a.budget) and 60 <= a.budget <= 3600):
        p.error(f"--budget {a.budget:g}: seconds between 60 and 3600")
    if a.workers is not None and not 1 <= a.workers <= 32:
        p.error(f"--workers {a.workers}: between 1 and 32")
    for flag, path in (("--out", a.out), ("--work", a.work)):
        if path is not None and os.path.exists(path) and not os.path.isdir(path):
            p.error(f"{flag} {path}: exists and is not a folder")


def bf16_mm_peak(n: int, device: str, reps: int = 10) -> float:
    """Measured bf16 ``torch.mm`` FLOP/s on n x n matrices (best of ``reps``)."""
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    best = float("inf")
    for _ in range(reps + 1):
        _sync(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def nominal_peak(device: str) -> tuple[str, float | None]:
    if not device.startswith("cuda"):
        return "cpu", None
    name = torch.cuda.get_device_name(device)
    peak = next((v for k, v in NOMINAL_BF16.items() if k in name), None)
    return name, peak


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def build_models(a: argparse.Namespace) -> tuple[dict, dict]:
    """Models on the device (+ compiled copies), their params, and one synced step closure each."""
    names = a.models.split(",")
    models = {n: build(n, a.s).to(a.device) for n in names}
    params = check_param_counts(models, a.s)
    steps = {}
    for n, m in models.items():
        steps[n] = _synced(train_step(m, a.s, device=a.device, dtype=torch.bfloat16), a.device)
        if a.compile:
            twin = build(n, a.s).to(a.device)
            steps[n + "+compile"] = _synced(
                train_step(torch.compile(twin), a.s, device=a.device, dtype=torch.bfloat16), a.device
            )
            params[n + "+compile"] = params[n]
    return steps, params


def _synced(step, device: str):
    def run():
        step()
        _sync(device)

    return run


def reproduce_large(names: str, doc: str | None, out: str) -> int:
    """``depthlab reproduce all --scale large`` (or the named claims), on whatever device training picks
    (CUDA when available); prints the counts and where the document is."""
    chosen = None if names == "all" else names.split(",")
    result = run_all(out_dir=out, doc=doc, names=chosen, scale="large")
    print(result.format().splitlines()[-1])
    return 0


def plan_large(names: str) -> list[str]:
    """The large scale's plan: per claim, its steps, seeds, tokens per run (steps x batch x sequence
    length) and passes over the default corpus's training split, its runs (recorded from the claim's own
    announcement; nothing trains), their FLOP and the cost model's expected time on this device; a
    header with the totals and the floor on one H200; then the command that runs it."""
    chosen_names = None if names == "all" else names.split(",")
    todo = names_to_run(load_all(), chosen_names, "large")
    corpus_bytes = int(load_corpus(None, LARGE_TRAIN["seq_len"]).train.numel())
    device = device_for(configs({}, {}, "large")[1]).type
    lines, total = [], {"runs": 0, "tokens": 0, "flop": 0.0, "seconds": 0.0}
    for name in todo:
        regime = REGISTRATIONS[name].regimes["large"]
        steps = regime.get("steps", LARGE_TRAIN["steps"])
        tokens = (
            steps
            * regime.get("batch_size", LARGE_TRAIN["batch_size"])
            * regime.get("seq_len", LARGE_TRAIN["seq_len"])
        )
        seeds = regime.get("seeds", [])
        n_seeds = len(seeds) if isinstance(seeds, list) else sum(len(v) for v in seeds.values())
        c = claim_cost(name)
        for k, v in (("runs", c.runs), ("tokens", c.tokens), ("flop", c.flop), ("seconds", c.seconds)):
            total[k] += v
        lines.append(
            f"{name}: {steps} steps, {n_seeds} seeds, {tokens / 1e6:.1f}M tokens per run "
            f"({tokens / corpus_bytes:.1f} passes over the corpus); {c.runs} runs, {c.flop:.2g} FLOP, "
            f"about {c.seconds / 3600:.1f} h on this {device}"
        )
    cores = f", {total['seconds'] / 7200:.0f} h on two cores" if device == "cpu" else ""
    header = (
        f"# the registered large scale: {len(todo)} claims; corpus training split {corpus_bytes:,} bytes; "
        f"{total['runs']} runs, {total['tokens'] / 1e9:.2f}B tokens, {total['flop']:.2g} FLOP; cost model "
        f"(step times measured now): about {total['seconds'] / 3600:.0f} h of one {device} thread{cores}; "
        f"on one H200 at least {total['flop'] / H200_FP32 / 3600:.1f} h at its fp32 peak (more in practice: "
        "steps this small are launch-bound; this dry run on the GPU measures it)"
    )
    command = "python benchmarks/gpu.py --reproduce" + ("" if names == "all" else f" {names}")
    return [header, *lines, f"run it with: {command}"]


def ladder(names: str, db: str, doc: str | None, dry_run: bool) -> int:
    """The scale ladder on this device: its plan (``dry_run``) or its runs and page."""
    check_db(db)
    picked = chosen(None if names == "all" else names)
    if dry_run:
        print_plan(rungs(picked), db, 1)
        print("run it with: python benchmarks/gpu.py --ladder" + ("" if names == "all" else f" {names}"))
        return 0
    write_ladder(db, doc or LADDER_DOC, picked, workers=1)
    print(f"wrote {doc or LADDER_DOC}")
    return 0


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.all:
        return suite(a)
    if a.reproduce and a.dry_run:
        print("\n".join(plan_large(a.reproduce)))
        return 0
    if a.ladder and a.dry_run:
        return ladder(a.ladder, a.db, a.doc, dry_run=True)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("No GPU: torch.cuda.is_available() is False on this machine, so nothing was measured.")
        what = "python benchmarks/gpu.py" + (
            " --reproduce" if a.reproduce else " --ladder" if a.ladder else ""
        )
        print(f"No GPU was lent to this task; run `{what}` where one is.")
        if not a.reproduce and not a.ladder:
            print(
                "The prepared ten-minute suite (speed at three shapes, the doctor at real width, the topologies "
                "at depth): python benchmarks/gpu.py --all --out DIR; its plan: --all --dry-run."
            )
        return 0
    if a.reproduce:
        return reproduce_large(a.reproduce, a.doc, a.out)
    if a.ladder:
        return ladder(a.ladder, a.db, a.doc, dry_run=False)
    pin_threads(THREADS)  # only matters with --device cpu (the smoke test)
    torch.backends.cuda.matmul.allow_tf32 = True  # as nanoGPT's train.py sets
    gpu, nominal = nominal_peak(a.device)
    measured = bf16_mm_peak(a.peak_n, a.device)
    steps, params = build_models(a)
    times = time_alternating(steps, rounds=a.rounds, steps=a.steps, warmup=a.warmup)
    s = a.s
    print(
        f"# {gpu}: d={s.d} L={s.layers} heads={s.heads} seq={s.seq} batch={s.batch}, bf16 autocast; "
        f"bf16 mm peak measured {measured / 1e12:.0f} TFLOP/s, nominal "
        + (f"{nominal / 1e12:.0f}" if nominal else "unknown")
    )
    ref = s.tokens / median(times["nanogpt"]) if "nanogpt" in times else None
    mem = peak_memory(steps, a.device)
    for name, ts in times.items():
        tps, fl = s.tokens / median(ts), train_flops(s, params[name]) / median(ts)
        mfu = f"MFU {fl / nominal:4.0%} (nominal)" if nominal else "MFU n/a"
        ratio = f"ratio {tps / ref:.2f}" if ref else "ratio n/a"
        print(
            f"{name:<24s} {tps:10,.0f} tok/s  {fl / 1e12:6.1f} TFLOP/s  {mfu}  "
            f"{fl / measured:4.0%} of measured mm peak  {mem[name] / 2**30:6.2f} GiB  vs nanogpt {ratio}",
            flush=True,
        )
    for line in goal_lines(times, params, s, nominal, ref):
        print(line)
    return 0


def peak_memory(steps: dict, device: str) -> dict[str, float]:
    """CUDA max allocated bytes during one more step of each model (0 on CPU)."""
    out = {}
    for name, step in steps.items():
        if not device.startswith("cuda"):
            out[name] = 0.0
            continue
        torch.cuda.reset_peak_memory_stats(device)
        step()
        out[name] = torch.cuda.max_memory_allocated(device)
    return out


def goal_lines(times: dict, params: dict, s: Shape, nominal: float | None, ref: float | None) -> list[str]:
    """Whether item 6 is met: the best depthlab variant's MFU (>= 40%) and ratio to the reference."""
    ours = {n: ts for n, ts in times.items() if n.startswith("depthlab-")}
    if not ours or not nominal or not ref:
        return []
    name = min(ours, key=lambda n: median(ours[n]))
    mfu = train_flops(s, params[name]) / median(ours[name]) / nominal
    ratio = s.tokens / median(ours[name]) / ref
    return [
        f"goal MFU >= {GOAL_MFU:.0%} ({name}): {mfu:.0%} " + ("met" if mfu >= GOAL_MFU else "MISSED"),
        f"goal ratio >= {GOAL_RATIO:.2f} vs nanogpt ({name}): {ratio:.2f} "
        + ("met" if ratio >= GOAL_RATIO else "MISSED"),
    ]


def suite(a: argparse.Namespace) -> int:
    """``--all``: the prepared suite on one GPU (or, with ``--dry-run``, its plan and a toy run here)."""
    if not a.dry_run and not torch.cuda.is_available():
        for line in plan(a.parts):
            print(line)
        print("No GPU: torch.cuda.is_available() is False on this machine, so nothing was measured.")
        print(f"run it where one is: python benchmarks/gpu.py --all --out {a.out}")
        return 0
    return run_suite(a.out, a.parts, a.dry_run, a.workers, a.budget, a.work)


if __name__ == "__main__":
    sys.exit(main())
