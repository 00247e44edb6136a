"""How much per-layer telemetry costs: training with it at the default interval vs without.

Two measurements, both alternating the two arms so that a busy machine slows both alike:

1. per step: one run whose every other step is a telemetry step; the median CPU time of telemetry
   steps and of plain steps gives the cost of one telemetry step, hence the overhead at the default
   ``log_every`` (one telemetry step in ``log_every``);
2. whole runs with ``telemetry=True`` and ``telemetry=False`` (median of ``--repeats`` each): the ratio
   of CPU time, wall time and training throughput (evaluation excluded).

The goal is an overhead under 5% at the default ``log_every``.

3. ``depthlab.watch`` on a Hugging Face GPT-2 (from a config) in a plain PyTorch loop: rounds of 10
   steps without a watcher and with one (``every``: one logged step per round) alternate; the ratio of
   round times is the overhead at every=10 (goal <= 3%), and the median step that is *not* logged,
   with and without the watcher attached, shows what the hooks cost between logged steps (goal:
   indistinguishable from none). Ratios are medians over rounds, with their interquartile range. A
   third arm sends the logged steps to a tracker (a TensorBoard ``SummaryWriter``, trackers=[writer]):
   what trackers cost when on; off (the default) the watcher's code path is the second arm's.

    .venv/bin/python benchmarks/telemetry_overhead.py [--layers 12] [--steps 40] [--repeats 3] [--hf-rounds 30]
    .venv/bin/python benchmarks/telemetry_overhead.py --hf-only
"""

from __future__ import annotations

import statistics
import tempfile
import time

import torch
from common import Parser, check_heads, positive_int

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


def hf_plain_loop(layers: int, d_model: int, batch: int, seq: int, rounds: int, every: int = 10) -> dict:
    """Part 3: per-round seconds with and without a watcher, and per-step seconds of unlogged steps."""
    import transformers
    from torch.utils.tensorboard import SummaryWriter

    import depthlab

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=layers, n_embd=d_model, n_head=4, vocab_size=256, n_positions=seq,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    model = transformers.GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, 256, (batch, seq), generator=torch.Generator().manual_seed(0))

    def one_step() -> float:
        start = time.perf_counter()
        model(input_ids=tokens, labels=tokens).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    for _ in range(5):  # warm-up
        one_step()
    out = {"none": [], "watch": [], "tracked": [], "none_step": [], "watch_unlogged": [], "watch_logged": []}
    arms = ("none", "watch", "tracked")
    writer = SummaryWriter(tempfile.mkdtemp(prefix="depthlab-bench-"))
    for r in range(rounds):
        for arm in arms[r % 3 :] + arms[: r % 3]:  # rotate which arm goes first
            trackers = [writer] if arm == "tracked" else None
            w = (
                depthlab.watch(model, opt, when=lambda t: t % every == 1, echo=None, trackers=trackers)
                if arm != "none"
                else None
            )
            times = [one_step() for _ in range(every)]
            if w is not None:
                w.close()
                if arm == "watch":
                    out["watch_logged"].append(times[0])
                    out["watch_unlogged"] += times[1:]
            else:
                out["none_step"] += times[1:]
            out[arm].append(sum(times))
    writer.close()
    return out


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4)
    return q[0], statistics.median(xs), q[2]


def report_hf(args) -> None:
    t = hf_plain_loop(args.hf_layers, args.d_model, args.batch_size, args.seq_len, args.hf_rounds)
    ratios = [w / n for w, n in zip(t["watch"], t["none"])]
    lo, med, hi = _quartiles(ratios)
    print(
        f"HF GPT-2 {args.hf_layers} layers, d_model {args.d_model}, {args.batch_size}x{args.seq_len}, plain loop, "
        f"{args.hf_rounds} rounds of 10 steps per arm, {args.threads} thread(s)"
    )
    print(f"  overhead at every=10: round time x{med:.3f} (interquartile x{lo:.3f} .. x{hi:.3f})")
    lo_t, med_t, hi_t = _quartiles([w / n for w, n in zip(t["tracked"], t["none"])])
    print(
        f"  with a TensorBoard tracker on: round time x{med_t:.3f} (interquartile x{lo_t:.3f} .. x{hi_t:.3f})"
    )
    a, b = statistics.median(t["none_step"]), statistics.median(t["watch_unlogged"])
    lo_n, _, hi_n = _quartiles(t["none_step"])
    lo_w, _, hi_w = _quartiles(t["watch_unlogged"])
    print(
        f"  unlogged step: {b * 1e3:.2f} ms with the watcher (IQR {lo_w * 1e3:.2f}..{hi_w * 1e3:.2f}), "
        f"{a * 1e3:.2f} ms without (IQR {lo_n * 1e3:.2f}..{hi_n * 1e3:.2f}): x{b / a:.3f}"
    )
    print(
        f"  logged step: {statistics.median(t['watch_logged']) * 1e3:.2f} ms (x{statistics.median(t['watch_logged']) / a:.2f} a plain step)"
    )


def main(argv=None) -> None:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=positive_int, default=12)
    p.add_argument("--d-model", type=positive_int, default=64)
    p.add_argument("--steps", type=positive_int, default=40)
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--seq-len", type=positive_int, default=64)
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--threads", type=positive_int, default=1)
    p.add_argument("--hf-layers", type=positive_int, default=6)
    p.add_argument("--hf-rounds", type=positive_int, default=30)
    p.add_argument("--hf-only", action="store_true", help="only part 3 (the HF model in a plain loop)")
    args = p.parse_args(argv)
    check_heads(p, 4, [args.d_model], "--d-model", "the 4 heads")
    if args.steps < 3:  # part 1 times steps 5..2*steps, one in two logged: it needs both kinds
        p.error(f"--steps {args.steps}: at least 3 (part 1 skips the first 4 of its 2 x steps)")
    if args.hf_rounds < 2:
        p.error(f"--hf-rounds {args.hf_rounds}: at least 2 (the ratios' quartiles need two rounds)")
    torch.set_num_threads(args.threads)
    if args.hf_only:
        report_hf(args)
        return
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
    report_hf(args)


if __name__ == "__main__":
    main()
