"""depthlab advise: the expected outcome of a run, the safe learning rate, the alternatives ranked, and
the measured runs behind them, on one screen."""

from __future__ import annotations

import dataclasses
import os

from depthlab.advise import ALTERNATIVES, advise
from depthlab.advise.advice import check_alternatives, check_schedule, expected_seconds
from depthlab.advise.evidence import load_atlas
from depthlab.advise.target import transfer_advice
from depthlab.cli.common import (
    add_json_flag,
    add_memory_flag,
    add_model_flags,
    comma_list,
    given_model_flags,
    model_config_from_args,
    seed_from_args,
)
from depthlab.cli.train import add_recipe_flags, recipe_from_args
from depthlab.config import TrainConfig
from depthlab.errors import ConfigError, InputError
from depthlab.interop.hf import imported_config
from depthlab.model.memory import available_memory, check_memory, estimate_memory
from depthlab.paths import check_output_file, write_json
from depthlab.probe.from_config import check_batch
from depthlab.progress import Progress, duration, say
from depthlab.study.store import check_store_path
from depthlab.study.transfer import heads_text
from depthlab.train.tasks import check_task


def add_parser(sub) -> None:
    p = sub.add_parser(
        "advise",
        help="will this run train? its probability, the safe lr, the alternatives ranked, the evidence",
        description="Probe the model at init as a study would, then predict whether it trains at the given "
        "learning rate, warmup and budget (a calibrated probability, from the probe's learning-rate limit "
        "and the nearest runs depthlab measured), give the safe learning-rate range for this stack and "
        "warmup, rank other wrappings of the same stack, and show the measured runs behind the answer.",
    )
    add_model_flags(p)
    d = TrainConfig()  # the run's defaults are depthlab train's
    g = p.add_argument_group("training (as depthlab train takes them)")
    g.add_argument("--lr", type=float, default=d.lr, help=f"Adam's peak learning rate (default {d.lr:g})")
    g.add_argument("--warmup", type=int, default=d.warmup, help=f"linear warmup steps (default {d.warmup})")
    g.add_argument(
        "--steps", type=int, default=d.steps, help=f"the run's budget of steps (default {d.steps})"
    )
    g.add_argument(
        "--batch-size", type=int, default=d.batch_size, help=f"sequences per step (default {d.batch_size})"
    )
    g.add_argument(
        "--seq-len", type=int, default=d.seq_len, help=f"tokens per sequence (default {d.seq_len})"
    )
    add_recipe_flags(g, d)  # a measured run is evidence only for a run of the same recipe
    p.add_argument(
        "--alternatives",
        default=",".join(ALTERNATIVES),
        metavar="WRAPS",
        help=f"the wrappings ranked beside yours, each probed (default {','.join(ALTERNATIVES)}; '' for none)",
    )
    p.add_argument(
        "--atlas",
        action="append",
        default=[],
        metavar="DB",
        help="a study store whose finished runs join the measured runs as evidence (repeat for several)",
    )
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-depth", type=int, metavar="L", help="the depth you will train: the lr to use there")
    to.add_argument("--to-width", type=int, metavar="D", help="the width you will train: the lr to use there")
    p.add_argument(
        "--transfer",
        metavar="DB",
        help="with --to-depth/--to-width: a store holding a transfer study run at your width (or depth)",
    )
    p.add_argument("--transfer-study", metavar="NAME", help="that study's name (default: the latest in DB)")
    add_json_flag(p)
    add_memory_flag(p)
    p.set_defaults(run=run)


def run(args) -> int:
    check_output_file(args.json, "--json", ("json",))
    model = model_config_from_args(args)
    train = TrainConfig(lr=args.lr, warmup=args.warmup, steps=args.steps, batch_size=args.batch_size,
                        seq_len=args.seq_len, seed=seed_from_args(args), **recipe_from_args(args))  # fmt: skip
    model.check_length(train.seq_len)  # the model reads seq_len tokens (the next one is a target only)
    check_schedule(train, model.d_model)
    if model.arch != "decoder":
        why = "advise answers for decoder language models (every run it measured is one)"
        if args.hf and "arch" not in given_model_flags(args):  # the family's own arch: no flag said it
            _, family = imported_config(args.hf)
            kind = "an encoder-decoder" if model.arch == "encdec" else "an encoder"
            raise InputError(f"--hf {args.hf}: the {family.name} config is {kind} model; {why} (add --arch "
                             f"decoder to ask about its shape as one)")  # fmt: skip
        raise ConfigError("arch", model.arch, f"{why}; --arch decoder")
    check_task(model, train)  # the probe is of the run's first batch: a vocabulary of bytes, at least
    check_batch(train.batch_size, train.seq_len)  # its lm loss needs two tokens a sequence
    wraps = tuple(comma_list(args.alternatives, "alternatives")) if args.alternatives.strip() else ()
    check_alternatives(model, wraps)  # every alternative a stack this model can be: before any probe
    probe = estimate_memory(model, "probe", train.batch_size, train.seq_len)
    check_memory(
        probe,
        available_memory(),
        args.force_memory,
        "a smaller --batch-size, fewer --layers or a smaller --d-model",
    )
    target = args.to_depth if args.to_depth is not None else args.to_width
    if target is not None and target < 1:
        raise ConfigError("to_depth" if args.to_depth is not None else "to_width", target, "an integer >= 1")
    heads = (
        heads_text(args.to_width, model.n_heads) if args.to_width and model.family.d_head is None else None
    )
    if heads:  # the model at the width you will train keeps its heads: they must split that width too
        raise ConfigError("to_width", args.to_width, heads)
    if args.transfer is not None and target is None:
        raise ConfigError("transfer", args.transfer, "unset without --to-depth or --to-width")
    if args.transfer_study is not None and args.transfer is None:  # '' too: it names no study
        raise ConfigError(
            "transfer_study", args.transfer_study, "unset without --transfer (the store it is in)"
        )
    transfer = None
    if target is not None:  # read (and refused) before any probe: it needs the model, not its probe
        if args.transfer is not None:
            check_store_path(args.transfer, "--transfer")
        axis = "depth" if args.to_depth is not None else "width"
        transfer = transfer_advice(model, axis, target, args.transfer, args.transfer_study, train=train)
    atlas = load_atlas(args.atlas)
    n = 1 + len([w for w in wraps if w != model.wrap])
    expected = expected_seconds(model, train, wraps)  # None where the answer is quick
    total = sum(expected.values()) if expected else None
    took = f"; expected time: about {duration(total)} (step times measured now)" if expected else ""
    say(f"advise: probing {n} stack{'s' if n > 1 else ''} at init ({model.n_layers} layers, d_model {model.d_model}); "
        f"{len(atlas):,} measured runs as evidence{took}")  # fmt: skip
    # with an expected time, a line per stack probed (redrawn on a terminal) says the time left
    bar = Progress(n, "advise", unit="stack", expected_s=total, plain=True) if expected else None
    probed = (lambda wrap: bar.advance(expected_s=expected[wrap])) if bar else None
    try:
        advice = dataclasses.replace(advise(model, train, atlas, wraps, on_probed=probed), transfer=transfer)
    finally:
        if bar:
            bar.close()
    if args.json != "-":  # with --json -, stdout holds the JSON alone
        print(advice.format())
    if args.json:
        write_json(advice.to_dict(), args.json)
        if args.json != "-":
            say(f"wrote {os.path.normpath(args.json)}")
    return 0
