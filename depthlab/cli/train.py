"""depthlab train: one training run with per-layer telemetry; says whether it trained, undertrained, stalled or diverged."""

from __future__ import annotations

import argparse
import signal
import sys

from depthlab.cli.common import (
    add_memory_flag,
    add_model_flags,
    model_config_from_args,
    refuse_flags,
    seed_from_args,
)
from depthlab.config import DEVICES, OPTIMIZERS, SCHEDULES, TASKS, TrainConfig
from depthlab.paths import printable
from depthlab.train import train
from depthlab.train.checkpoint import checkpoint_paths
from depthlab.train.distributed import Dist, set_torch_threads

# flag -> TrainConfig field, for the flags that map one to one
TRAIN_FLAGS = {
    "task": "task",
    "data": "data",
    "steps": "steps",
    "batch_size": "batch_size",
    "seq_len": "seq_len",
    "lr": "lr",
    "warmup": "warmup",
    "log_every": "log_every",
    "eval_every": "eval_every",
    "eval_batches": "eval_batches",
    "checkpoint_every": "checkpoint_every",
    "spike_factor": "spike_factor",
    "stall_share": "stall_share",
    "symbols": "symbols",
    "device": "device",
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a stack with per-layer telemetry; trained, undertrained, stalled or diverged",
        description="Train one model on a task (byte-level lm on the Python standard library by default) "
        "and record, every --log-every steps, the loss and per-layer gradient, stream and update "
        "statistics. The run ends 'trained', 'undertrained' (above the unigram band and still falling), "
        "'stalled' (at the unigram plateau, or above it and flat) or 'diverged' (rules: "
        "depthlab.watch.outcome); all four "
        "exit 0. Under torchrun it trains with DDP.",
    )
    add_model_flags(p)
    add_train_flags(p)
    add_memory_flag(p)
    p.set_defaults(run=run)


def add_train_flags(p: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    g = p.add_argument_group("training")
    g.add_argument("--task", default=d.task, help=f"{'|'.join(TASKS)} (default {d.task})")
    g.add_argument(
        "--data", help="lm corpus: any text or binary file (default: the Python stdlib's .py files)"
    )
    g.add_argument("--steps", type=int, default=d.steps, help=f"optimizer updates (default {d.steps})")
    g.add_argument(
        "--batch-size", type=int, default=d.batch_size, help=f"global batch (default {d.batch_size})"
    )
    g.add_argument(
        "--seq-len",
        type=int,
        default=d.seq_len,
        help=f"lm: tokens per sequence; copy/reverse/sort: longest source (default {d.seq_len})",
    )
    g.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate (default {d.lr:g})")
    g.add_argument("--warmup", type=int, default=d.warmup, help=f"warmup steps (default {d.warmup})")
    add_recipe_flags(g, d)
    g.add_argument(
        "--symbols", type=int, default=d.symbols, help=f"copy/reverse/sort alphabet (default {d.symbols})"
    )
    add_run_flags(g, d)


# flag -> TrainConfig field: the optimiser and schedule beyond lr and warmup (a run's recipe, with the model's)
RECIPE_FLAGS = ("schedule", "optimizer", "beta1", "beta2", "eps", "weight_decay", "clip", "min_lr_ratio", "z_loss",
                "independent_wd")  # fmt: skip


def add_recipe_flags(g, d: TrainConfig) -> None:
    """The flags of :data:`RECIPE_FLAGS` (``depthlab train`` and ``depthlab advise`` take them alike)."""
    g.add_argument("--schedule", default=d.schedule, help=f"{'|'.join(SCHEDULES)} (default {d.schedule})")
    g.add_argument("--optimizer", default=d.optimizer, help=f"{'|'.join(OPTIMIZERS)} (default {d.optimizer})")
    g.add_argument("--beta1", type=float, default=d.beta1, help=f"Adam beta1 (default {d.beta1})")
    g.add_argument("--beta2", type=float, default=d.beta2, help=f"Adam beta2 (default {d.beta2})")
    g.add_argument("--eps", type=float, default=d.eps, help=f"Adam eps (default {d.eps:g})")
    g.add_argument("--weight-decay", type=float, default=d.weight_decay, help="on matrices only (default 0)")
    g.add_argument(
        "--clip", type=float, default=d.clip, help="clip the gradient norm to this (default 0: off)"
    )
    g.add_argument("--min-lr-ratio", type=float, default=d.min_lr_ratio, help="cosine's floor (default 0.1)")
    g.add_argument(
        "--z-loss",
        type=float,
        default=d.z_loss,
        help="z-loss coefficient on (log Z)^2 (default 0: off; 1e-4 in PaLM)",
    )
    g.add_argument(
        "--independent-wd",
        action="store_true",
        help="with --optimizer adamw: weight decay independent of the learning rate (Wortsman et al. 2023)",
    )


def add_run_flags(g, d: TrainConfig) -> None:
    g.add_argument(
        "--log-every",
        type=int,
        default=d.log_every,
        help=f"log loss and per-layer telemetry every N steps (default {d.log_every})",
    )
    g.add_argument(
        "--eval-every",
        type=int,
        default=d.eval_every,
        help=f"validate every N steps and at the end (default {d.eval_every})",
    )
    g.add_argument(
        "--eval-batches",
        type=int,
        default=d.eval_batches,
        help=f"validation batches of --batch-size (default {d.eval_batches})",
    )
    g.add_argument(
        "--checkpoint-every",
        type=int,
        help=f"checkpoint interval in steps, with --out (default {d.checkpoint_every})",
    )
    g.add_argument(
        "--spike-factor",
        type=float,
        default=d.spike_factor,
        help="diverged when the smoothed loss exceeds this x its minimum (default 3)",
    )
    g.add_argument(
        "--stall-share",
        type=float,
        default=d.stall_share,
        help="the trend (still falling: undertrained; flat: stalled) of a run that ends at or above the unigram "
        "loss is read after this share of the steps (default 0.5)",
    )
    g.add_argument("--no-telemetry", action="store_true", help="log losses only, no per-layer numbers")
    g.add_argument("--compile", action="store_true", help="torch.compile the model")
    g.add_argument("--bf16", action="store_true", help="bf16 autocast (for GPUs)")
    g.add_argument("--device", default=d.device, help=f"{'|'.join(DEVICES)} (default {d.device})")
    g.add_argument(
        "--threads", type=int, help="torch threads (default min(cores, 2); 1 per torchrun process)"
    )
    g.add_argument("--out", metavar="DIR", help="write config, metrics, events, checkpoints and result here")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    g.add_argument("--force", action="store_true", help="delete the results in --out and start over")
    g.add_argument("--quiet", action="store_true", help="no progress bar")


def recipe_from_args(args: argparse.Namespace) -> dict:
    """The TrainConfig fields of :data:`RECIPE_FLAGS` as the flags give them."""
    return {name: getattr(args, name) for name in RECIPE_FLAGS}


def train_config_from_args(args: argparse.Namespace) -> TrainConfig:
    values = {field: getattr(args, flag) for flag, field in TRAIN_FLAGS.items()}
    values.update(recipe_from_args(args))
    values.update(
        seed=seed_from_args(args),
        telemetry=not args.no_telemetry,
        compile=args.compile,
        bf16=args.bf16,
    )
    if values["checkpoint_every"] is None:
        values["checkpoint_every"] = TrainConfig().checkpoint_every
    return TrainConfig(**values)


def run(args) -> int:
    model_cfg, train_cfg = model_config_from_args(args), train_config_from_args(args)
    refuse_flags(
        args,
        "needs --out DIR (checkpoints are written there)",
        checkpoint_every=args.checkpoint_every is not None and not args.out,
    )
    set_torch_threads(args.threads)
    alone = Dist.from_env().world == 1  # under torchrun the launcher's SIGTERM stops a process as it is
    previous = signal.signal(signal.SIGTERM, _interrupted) if alone else None
    try:
        result = train(
            model_cfg,
            train_cfg,
            args.out,
            resume=args.resume,
            force=args.force,
            progress=not args.quiet,
            force_memory=args.force_memory,
        )
    except KeyboardInterrupt:  # Ctrl-C, or `kill PID`: say what is kept and how to go on
        if Dist.from_env().is_main:
            sys.stderr.write(f"interrupted: {_kept(args.out)}\n")
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if Dist.from_env().is_main:  # under torchrun, rank 0 speaks for the run
        print(result.summary())
        if args.out:
            print(
                f"wrote {printable(args.out)}/ (config.json, metrics.jsonl, result.json, checkpoints/, TensorBoard events)"
            )
    return 0


def _interrupted(signum, frame):
    """SIGTERM handler: raise KeyboardInterrupt, so `kill PID` stops a run as Ctrl-C does, with a line."""
    raise KeyboardInterrupt


def _kept(out: str | None) -> str:
    """What an interrupted run leaves, and how to go on from it."""
    if not out:
        return "nothing was kept (no --out)"
    found = checkpoint_paths(out)
    if not found:
        return f"{printable(out)} holds no checkpoint yet; the same command with --resume starts it over"
    step = int(found[-1].stem.split("-")[-1])
    return f"{printable(out)} keeps the checkpoint of step {step}; the same command with --resume continues from it"
