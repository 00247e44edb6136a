"""The training-step cost of each residual topology against pre-LN at the same shape, and against
x-transformers' implementation of the same design, all in one process.

For one shape every model runs forward + backward + AdamW steps on one fixed batch (``peers.train_step``),
the models alternating step by step in rounds (the order rotated each round) after a warm-up. Per round
each design's step time is divided by the pre-LN step time of its own library in that round; the table
gives the median of those ratios (cost against pre-LN; 1.20 = 20% slower) and the median over rounds of
x-transformers' step time over depthlab's for the same design (>= 1: depthlab is at least as fast).

x-transformers 2.31.10's counterparts: ``num_residual_streams=4`` (its hyper-connection, with Sinkhorn
on H_res, 20 iterations here) for hc, dhc and mhc; ``add_value_residual`` (with and without
``learned_value_residual_mix``) for the value residuals; ``attn_aggregated_residuals`` for attnres;
``integrate_layers`` (LIMe, a softmax mix of the earlier layers: the nearest to DenseFormer, another
formula). Where its formula departs from the paper's (docs/topologies.md) the comparison is of cost only.

    python benchmarks/topologies.py --quick      # < 2 min
    python benchmarks/topologies.py              # the run for RESULTS.md
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import (
    Parser,
    check_heads,
    check_names,
    load_line,
    median,
    pin_threads,
    positive_float,
    positive_int,
    time_alternating,
)
from peers import Shape, build, depthlab_config, train_step

from depthlab import build_model

XT_HC = {"num_residual_streams": 4, "hyper_conn_sinkhorn_iters": 20}
PAIRS = {  # depthlab wrap -> x-transformers Decoder options of the same design (None: it has none)
    "hc": XT_HC,
    "dhc": XT_HC,
    "mhc": XT_HC,
    "frac": None,
    "denseformer": {"integrate_layers": True},
    "attnres": {"attn_aggregated_residuals": True},
    "attnres_block": None,
    "vres": {"add_value_residual": True, "learned_value_residual_mix": False},
    "vres_learned": {"add_value_residual": True, "learned_value_residual_mix": True},
}


# printed under the table, so that every copy of it says what its ratios are
LEGEND = (
    "# ms: median step over the rounds; x pre-LN, x its pre-LN, x-transf./depthlab: per round the one step's "
    "time over the other's, then the median over rounds (so not the ratio of the ms columns)"
)


def parse_args(argv=None) -> argparse.Namespace:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a small shape, 3 rounds")
    p.add_argument("--designs", help=f"comma list (default all: {','.join(PAIRS)})")
    p.add_argument("--d-model", type=positive_int, help="width (default 128; quick 64)")
    p.add_argument("--layers", type=positive_int, help="depth (default 12; quick 4)")
    p.add_argument("--seq", type=positive_int, help="tokens per sequence (default 128; quick 64)")
    p.add_argument("--batch", type=positive_int, help="sequences per step (default 16; quick 8)")
    p.add_argument("--rounds", type=positive_int, help="alternation rounds (default 8; quick 3)")
    p.add_argument(
        "--budget", type=positive_float, help="no new round after this many seconds (default 300; quick 60)"
    )
    a = p.parse_args(argv)
    q = a.quick
    a.shape = Shape(d=a.d_model or (64 if q else 128), layers=a.layers or (4 if q else 12),
                    seq=a.seq or (64 if q else 128), batch=a.batch or (8 if q else 16))  # fmt: skip
    check_heads(p, a.shape.heads, [a.shape.d], "--d-model", f"the {a.shape.heads} heads")
    a.rounds = a.rounds or (3 if q else 8)
    a.budget = a.budget or (60.0 if q else 300.0)
    hint = f"one of {', '.join(PAIRS)}"
    a.designs = check_names(p, "--designs", a.designs, list(PAIRS), hint) if a.designs else list(PAIRS)
    return a


def x_transformers(s: Shape, **options):
    from x_transformers import Decoder, TransformerWrapper

    if options.get("attn_aggregated_residuals"):  # its query's low-rank map must be narrower than d
        options["attn_aggregated_residual_kwargs"] = {"lora_rank": min(64, s.d // 2)}

    dec = Decoder(
        dim=s.d, depth=s.layers, heads=s.heads, attn_dim_head=s.d // s.heads, attn_flash=True, **options
    )
    return TransformerWrapper(num_tokens=s.vocab, max_seq_len=s.seq, attn_layers=dec, tie_embedding=True)


def models(s: Shape, designs: list[str]) -> dict:
    """name -> a freshly built model: both libraries' pre-LN, then each design in each library."""
    out = {"depthlab pre": build("depthlab-pre", s), "x-transformers pre": x_transformers(s)}
    for d in designs:
        out[f"depthlab {d}"] = build_model(depthlab_config(s, d))
        if PAIRS[d] is not None:
            out[f"x-transformers {d}"] = x_transformers(s, **PAIRS[d])
    return out


def table(times: dict[str, list[float]], designs: list[str]) -> list[str]:
    """One line per design: its cost against its library's pre-LN, and x-transformers' time over ours."""

    def over(a: str, b: str) -> float | None:
        if a not in times or b not in times:
            return None
        return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))

    def cell(v) -> str:
        return "-" if v is None else f"{v:.2f}"

    lines = [
        f"{'design':14} {'depthlab ms':>11} {'x pre-LN':>9} {'x-transf. ms':>12} {'x its pre-LN':>12} {'x-transf./depthlab':>19}"
    ]
    for d in designs:
        ours, theirs = f"depthlab {d}", f"x-transformers {d}"
        ms = lambda k: f"{1000 * median(times[k]):.0f}" if k in times else "-"  # noqa: E731
        lines.append(
            f"{d:14} {ms(ours):>11} {cell(over(ours, 'depthlab pre')):>9} {ms(theirs):>12} "
            f"{cell(over(theirs, 'x-transformers pre')):>12} {cell(over(theirs, ours)):>19}"
        )
    return lines


def main(argv=None) -> int:
    a = parse_args(argv)
    pin_threads()
    s = a.shape
    print(f"# start: {load_line()}")
    t0 = time.perf_counter()
    steps = {name: train_step(m, s) for name, m in models(s, a.designs).items()}
    times = time_alternating(steps, rounds=a.rounds, warmup=1, budget_s=a.budget, min_rounds=1)
    n = len(next(iter(times.values())))
    print(f"# d={s.d} L={s.layers} seq={s.seq} batch={s.batch}: {n} rounds, {time.perf_counter() - t0:.0f} s, "
          f"end {load_line()}")  # fmt: skip
    print("\n".join(table(times, a.designs)))
    print(LEGEND)
    pre = {k: f"{1000 * median(times[k]):.0f} ms" for k in ("depthlab pre", "x-transformers pre")}
    print(f"# pre-LN step: depthlab {pre['depthlab pre']}, x-transformers {pre['x-transformers pre']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
