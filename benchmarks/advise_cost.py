"""What ``depthlab advise`` costs, in Adam steps of the same model, against the expected time it says.

A post-LN decoder (24 layers, d_model 128, 4 heads by default) on the run's batch, 32 x 64 bytes: the
median wall time of one Adam step (forward, backward, update), of the probe advise takes of your
stack (the study's probe at init), of the lighter probe it takes of each alternative, and of the
whole answer with the four default alternatives and with none (``--alternatives ''``), timed in
alternation. The probes' cost in steps is what :mod:`depthlab.train.cost` assumes (``PROBE_STEPS``,
``LIGHT_PROBE_STEPS``) to say advise's expected time; the last line sets that expectation beside the
measured answer.

    python benchmarks/advise_cost.py [--layers 24 --d-model 128 --rounds 3]
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
    check_names,
    median,
    pin_threads,
    time_alternating,
)


def main(argv=None) -> None:
    p = Parser(description=__doc__.splitlines()[0])
    add_model_flags(p, layers=24, d_model=128)
    p.add_argument("--wrap", default="post")
    add_timing_flags(p, rounds=3)
    args = p.parse_args(argv)
    check_heads(p, args.heads, [args.d_model], "--d-model", f"--heads {args.heads}")
    from depthlab.config import wrap_names  # the registered wrappings, checked before any work

    check_names(p, "--wrap", args.wrap, list(wrap_names()), "a wrapping: " + ", ".join(wrap_names()))
    threads = pin_threads()

    import torch
    import torch.nn.functional as F

    from depthlab import ModelConfig, TrainConfig, build_model
    from depthlab.advise import ALTERNATIVES, advise
    from depthlab.advise.advice import expected_seconds, probed
    from depthlab.doctor.atlas import Atlas
    from depthlab.study.grid import RunSpec
    from depthlab.study.worker import probe_run
    from depthlab.train.cost import LIGHT_PROBE_STEPS, PROBE_STEPS, probe_seconds
    from depthlab.train.tasks import make_task

    cfg = ModelConfig(n_layers=args.layers, d_model=args.d_model, n_heads=args.heads, wrap=args.wrap)
    run = TrainConfig(lr=1e-3, warmup=200, steps=2000)
    spec, atlas = RunSpec(cfg, run), Atlas.load()
    torch.manual_seed(0)
    model = build_model(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    tokens = make_task(cfg, run).train_batch(1).args[0]

    def adam_step():
        logits = model(tokens)
        F.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size), tokens[:, 1:].reshape(-1)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    fns = {
        "Adam step": adam_step,
        "probe (your stack)": lambda: probe_run(spec),
        "light probe (alternative)": lambda: probe_run(spec, light=True),
        "advise, 4 alternatives": lambda: advise(cfg, run, atlas),
        "advise, --alternatives ''": lambda: advise(cfg, run, atlas, alternatives=()),
    }
    times = time_alternating(fns, rounds=args.rounds, warmup=1, budget_s=args.budget)
    step = median(times["Adam step"])
    print(
        f"{args.wrap}, {args.layers} layers, d_model {args.d_model}, batch {run.batch_size} x {run.seq_len}, "
        f"{threads} threads, {len(times['Adam step'])} rounds (median)"
    )
    for name, ts in times.items():
        print(f"  {name:28} {median(ts):8.2f} s   x{median(ts) / step:.2f} steps")
    full, light = (median(times[k]) / step for k in ("probe (your stack)", "light probe (alternative)"))
    print(
        f"probe = {full:.2f} steps (assumed {PROBE_STEPS:g}); light probe = {light:.2f} (assumed {LIGHT_PROBE_STEPS:.2f})"
    )
    guess = sum(probe_seconds(m, run, light=i > 0) for i, (_, m) in enumerate(probed(cfg, ALTERNATIVES)))
    said = "says it" if expected_seconds(cfg, run, ALTERNATIVES) else "a quick answer: not said"
    print(
        f"advise's expected time {guess:.1f} s ({said}); measured {median(times['advise, 4 alternatives']):.1f} s"
    )


if __name__ == "__main__":
    main()
