"""Flags shared by several commands: the model flags (docs/design.md) and --json."""

from __future__ import annotations

import argparse

from depthlab.config import (
    ACTIVATIONS,
    ARCHS,
    FINAL_NORMS,
    INITS,
    NORMS,
    POSITIONS,
    SUBLAYERS,
    ModelConfig,
    wrap_names,
)
from depthlab.errors import ConfigError, InputError


def add_model_flags(p: argparse.ArgumentParser, multi: bool = False) -> None:
    """The model flags. With ``multi``, --wrap/--norm/--no-residual take comma-separated lists (probe --compare)."""
    d = ModelConfig()
    g = p.add_argument_group("model")
    lst = " (comma-separated to compare several)" if multi else ""
    g.add_argument("--arch", default=d.arch, help=f"{'|'.join(ARCHS)} (default {d.arch})")
    g.add_argument("--layers", type=int, default=d.n_layers, help=f"layers per stack (default {d.n_layers})")
    g.add_argument("--enc-layers", type=int, help="encoder layers of an encdec model (default --layers)")
    g.add_argument("--dec-layers", type=int, help="decoder layers of an encdec model (default --layers)")
    g.add_argument("--d-model", type=int, default=d.d_model, help=f"stream width (default {d.d_model})")
    g.add_argument("--heads", type=int, default=d.n_heads, help=f"attention heads (default {d.n_heads})")
    g.add_argument(
        "--kv-heads", type=int, help="key/value heads for grouped-query attention (default --heads)"
    )
    g.add_argument("--d-ff", type=int, help="FFN inner width (default 4 x d-model)")
    g.add_argument(
        "--vocab", type=int, default=d.vocab_size, help=f"vocabulary size (default {d.vocab_size}: bytes)"
    )
    g.add_argument("--max-len", type=int, default=d.max_len, help=f"longest sequence (default {d.max_len})")
    g.add_argument("--wrap", default=d.wrap, help=f"{'|'.join(wrap_names())} (default {d.wrap}){lst}")
    g.add_argument("--norm", default=d.norm, help=f"{'|'.join(NORMS)} (default {d.norm}){lst}")
    g.add_argument(
        "--activation", default=d.activation, help=f"{'|'.join(ACTIVATIONS)} (default {d.activation})"
    )
    g.add_argument("--position", default=d.position, help=f"{'|'.join(POSITIONS)} (default {d.position})")
    g.add_argument(
        "--final-norm",
        default=d.final_norm,
        help=f"{'|'.join(FINAL_NORMS)} (default auto: on where the stream is never normalised)",
    )
    g.add_argument(
        "--no-residual",
        default="none",
        metavar="SUBLAYERS",
        help=f"sublayers whose skip is turned off: {', '.join(SUBLAYERS)}, several joined by + (attn+ffn), "
        f"all, or none (default none; cross needs --arch encdec){lst}",
    )
    g.add_argument("--init", default=d.init, help=f"{'|'.join(INITS)} (default {d.init})")
    g.add_argument("--qk-norm", action="store_true", help="normalise queries and keys per head")
    g.add_argument("--no-bias", action="store_true", help="linear layers without biases")
    g.add_argument(
        "--checkpoint-activations", action="store_true", help="recompute blocks in backward to save memory"
    )
    g.add_argument("--seed", type=int, help="random seed (default 0)")


def seed_from_args(args: argparse.Namespace) -> int:
    """--seed, 0 when not given (explain, which no seed changes, refuses it: :func:`refuse_flags`)."""
    return 0 if args.seed is None else args.seed


def add_memory_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--force-memory",
        action="store_true",
        help="run even when the memory estimate exceeds the free memory (default: refuse, with the estimate)",
    )


def refuse_flags(args: argparse.Namespace, why: str, **given) -> None:
    """InputError for the first flag of ``given`` (flag name -> whether it was given) that was given:
    a flag that would do nothing here is refused, not ignored. ``why`` ends the message."""
    for flag, present in given.items():
        if present:
            raise InputError(f"--{flag.replace('_', '-')} {why}")


def residual_from_flag(value: str, arch: str = "encdec") -> tuple[str, ...]:
    """--no-residual attn+ffn -> the sublayers whose residual stays on (ConfigError for a bad value).

    Several skips are joined by '+', never ',': in probe a comma list compares several models, so the
    same text must not mean one model elsewhere. ``cross`` is refused unless ``arch`` is encdec: the
    other stacks have no cross-attention, and turning its skip off would silently change nothing.
    """
    if "," in value:
        raise ConfigError("no_residual", value, "one value; use attn+ffn to turn off several skips")
    off = {v.strip() for v in value.split("+") if v.strip()} or {""}
    if off in ({"none"}, {""}):
        return SUBLAYERS
    if off == {"all"}:
        return ()
    for v in sorted(off):
        if v not in SUBLAYERS:
            allowed = f"{', '.join(SUBLAYERS)}, several joined by + (attn+ffn), all, or none"
            raise ConfigError("no_residual", v, allowed)
    if "cross" in off and arch != "encdec":
        raise ConfigError("no_residual", value, f"--arch {arch} has no cross-attention (only encdec has)")
    return tuple(s for s in SUBLAYERS if s not in off)


def model_config_from_args(args: argparse.Namespace, **overrides) -> ModelConfig:
    """A validated ModelConfig from the model flags; ``overrides`` replace single flag values."""
    values = {
        "arch": args.arch,
        "n_layers": args.layers,
        "enc_layers": args.enc_layers,
        "dec_layers": args.dec_layers,
        "d_model": args.d_model,
        "n_heads": args.heads,
        "n_kv_heads": args.kv_heads,
        "d_ff": args.d_ff,
        "vocab_size": args.vocab,
        "max_len": args.max_len,
        "wrap": args.wrap,
        "norm": args.norm,
        "activation": args.activation,
        "position": args.position,
        "final_norm": args.final_norm,
        "residual": residual_from_flag(args.no_residual, args.arch),
        "init": args.init,
        "qk_norm": args.qk_norm,
        "bias": not args.no_bias,
        "activation_checkpointing": args.checkpoint_activations,
    }
    values.update(overrides)
    return ModelConfig(**values)


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH ('-' for stdout)")
