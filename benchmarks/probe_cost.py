"""What a probe costs, against one plain forward and backward of the same model.

A 96-layer pre-LN decoder, d_model 64, 4 heads, on a batch of 8 x 64 bytes: the median wall time of
``depthlab.probe.forward_backward`` (forward, backward to every stream and parameter, one more backward for the
position-varying gradient, one forward without grad for the output change, the statistics and the
verdicts) over the median of a plain ``loss.backward()`` step, timed in alternation.

    python benchmarks/probe_cost.py [--layers 96 --d-model 64 --rounds 7]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    Parser,
    add_model_flags,
    add_timing_flags,
    check_heads,
    median,
    pin_threads,
    positive_int,
    time_alternating,
)


def main(argv=None) -> None:
    p = Parser(description=__doc__.splitlines()[0])
    add_model_flags(p, layers=96, d_model=64)
    p.add_argument("--batch", type=positive_int, default=8)
    p.add_argument("--seq", type=positive_int, default=64)
    add_timing_flags(p, rounds=7)
    args = p.parse_args(argv)
    check_heads(p, args.heads, [args.d_model], "--d-model", f"--heads {args.heads}")
    threads = pin_threads()

    import torch
    import torch.nn.functional as F

    from depthlab import ModelConfig, build_model
    from depthlab.corpus import text_batch
    from depthlab.probe import probe

    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=args.layers, d_model=args.d_model, n_heads=args.heads)
    model = build_model(cfg).eval()
    tokens = text_batch(args.batch, args.seq, cfg.vocab_size, seed=0)

    def plain_step():
        model.zero_grad(set_to_none=True)
        logits = model(tokens)
        F.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size), tokens[:, 1:].reshape(-1)).backward()

    fns = {
        "forward+backward": plain_step,
        "probe": lambda: probe(model, tokens),
        "probe, no output change": lambda: probe(model, tokens, perturbation=0.0),
        "probe core (no extras)": lambda: probe(model, tokens, perturbation=0.0, context=False),
    }
    times = time_alternating(fns, rounds=args.rounds, warmup=1, budget_s=args.budget)
    base = median(times["forward+backward"])
    print(
        f"{args.layers} layers, d_model {args.d_model}, batch {args.batch} x {args.seq}, {threads} threads, "
        f"{len(times['probe'])} rounds (median)"
    )
    for name, ts in times.items():
        print(f"  {name:26} {median(ts) * 1e3:9.1f} ms   x{median(ts) / base:.2f}")
    print(f"probe / (forward + backward) = {median(times['probe']) / base:.2f}")


if __name__ == "__main__":
    main()
