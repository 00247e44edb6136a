"""Flags shared by several commands: the model flags (DESIGN.md), and the checks and writes of output files."""

from __future__ import annotations

import argparse
import json
import os
import sys

from depthlab.config import (
    ACTIVATIONS,
    ARCHS,
    FINAL_NORMS,
    INITS,
    NORMS,
    POSITIONS,
    SUBLAYERS,
    WRAPS,
    ModelConfig,
)
from depthlab.errors import ConfigError, InputError

# The plot formats of --plot (matplotlib writes each with the Agg backend; others are not tested here).
PLOT_FORMATS = ("png", "pdf", "svg")
# Errors that mean the user named a path that cannot be written: bad input (exit 2). Others, such as a
# full disk (ENOSPC) or an I/O error, are not the user's input and stay exit 1.
BAD_PATH = (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError)


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
    g.add_argument("--wrap", default=d.wrap, help=f"{'|'.join(WRAPS)} (default {d.wrap}){lst}")
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
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")


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
        "checkpoint": args.checkpoint_activations,
    }
    values.update(overrides)
    if values["arch"] != "encdec":
        for name in ("enc_layers", "dec_layers"):
            if values[name] is not None:  # ignoring it would hide a mistaken --arch
                why = f"only with --arch encdec (--arch {values['arch']} has one stack: use --layers)"
                raise ConfigError(name, values[name], why)
    return ModelConfig(**values)


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH ('-' for stdout)")


def check_output_file(path: str | None, flag: str, formats: tuple[str, ...] = ()) -> bool:
    """Make sure, before any work, that the file ``path`` given to ``flag`` can be written.

    Its extension must be one of ``formats`` (when given); it must not be a folder; its folder is
    created here when missing. Returns whether ``path`` exists (it will be replaced). InputError names
    the flag otherwise. None and '-' (stdout) pass.
    """
    if path is None or path == "-":
        return False
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if formats and ext not in formats:
        kinds = ", ".join("." + f for f in formats)
        got = f"the file type .{ext} is" if ext else "a name without a file type is"
        raise InputError(f"{flag} {path}: {got} not supported; use {kinds}")
    if os.path.isdir(path):
        raise InputError(f"{flag} {path} is a folder; name a file")
    folder = os.path.dirname(os.path.abspath(path))
    make_folder(folder, flag, path)
    if not os.access(folder, os.W_OK):
        raise InputError(f"{flag} {path}: the folder {folder} is not writable")
    exists = os.path.lexists(path)
    if exists and not os.access(path, os.W_OK):
        raise InputError(f"{flag} {path} is read-only; it is not replaced")
    return exists


def make_folder(folder: str, flag: str, path: str) -> None:
    """Create ``folder`` and its parents for the ``path`` given to ``flag``; InputError when it cannot be."""
    from depthlab.train.rundir import existing_ancestor

    existing = existing_ancestor(folder)
    if not existing.is_dir():
        raise InputError(f"{flag} {path}: {existing} is a file, not a folder")
    try:
        os.makedirs(folder, exist_ok=True)
    except BAD_PATH as e:
        raise InputError(f"{flag} {path}: cannot create the folder {folder}: {e.strerror}") from None


def check_output_dir(path: str | None, flag: str) -> None:
    """Make sure, without creating anything, that a folder can be made at ``path`` (InputError if not)."""
    from depthlab.train.rundir import check_folder

    if path is not None:
        check_folder(path, flag)


def note_replaced(path: str, existed: bool) -> None:
    """Say on stderr that a user's file was replaced: replacing is expected on a rerun, but never silent."""
    if existed:
        sys.stderr.write(f"replaced existing {path}\n")


def write_json(obj, path: str | None, flag: str = "--json") -> None:
    """Write ``obj`` to ``path`` ('-' = stdout; None = nowhere). An existing file is replaced, with a line on
    stderr saying so; the new text goes to a temporary file first, so a failed write keeps the old one."""
    if path is None:
        return
    text = json.dumps(obj, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
        return
    existed = check_output_file(path, flag)
    target = os.path.realpath(path)  # a symlink stays a link: its target is replaced
    tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, target)
    except BAD_PATH as e:
        raise InputError(f"cannot write {path}: {e.strerror}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    note_replaced(path, existed)
