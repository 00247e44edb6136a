"""Flags shared by several commands: the model flags (docs/design.md) and --json."""

from __future__ import annotations

import argparse

from depthlab.config import (
    ACTIVATIONS,
    ARCHS,
    FINAL_NORMS,
    INITS,
    NORMS,
    PARAMS,
    POSITIONS,
    SUBLAYERS,
    WRAPPINGS,
    ModelConfig,
    wrap_names,
)
from depthlab.errors import ConfigError, InputError
from depthlab.interop.hf import imported_config, rewired_config
from depthlab.paths import check_path


class _Given(argparse.Action):
    """Store the value and remember that the flag was given: with --hf only the model flags given change
    the imported config (a flag left at its default must not undo the family's own value)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        namespace.given_flags = set(getattr(namespace, "given_flags", None) or ()) | {self.dest}


def _flag(g, *names, switch: bool = False, **kw):
    """``add_argument`` recording the flag as given (``switch``: a store-true flag)."""
    if switch:
        kw.update(nargs=0, const=True, default=False)
    g.add_argument(*names, action=_Given, **kw)


def add_model_flags(p: argparse.ArgumentParser, multi: bool = False) -> None:
    """The model flags. With ``multi``, --wrap/--norm/--no-residual take comma-separated lists (probe --compare)."""
    d = ModelConfig()
    g = p.add_argument_group("model")
    lst = " (comma-separated to compare several)" if multi else ""
    g.add_argument(
        "--hf",
        metavar="PATH",
        help="start from a Hugging Face model's shape and wiring: a save_pretrained folder or config.json "
        "(random weights; the model flags given change it: --wrap deepnorm asks 'my model, with DeepNorm')",
    )
    _flag(g, "--arch", default=d.arch, help=f"{'|'.join(ARCHS)} (default {d.arch})")
    _flag(g, "--layers", type=int, default=d.n_layers, help=f"layers per stack (default {d.n_layers})")
    _flag(g, "--enc-layers", type=int, help="encoder layers of an encdec model (default --layers)")
    _flag(g, "--dec-layers", type=int, help="decoder layers of an encdec model (default --layers)")
    _flag(g, "--d-model", type=int, default=d.d_model, help=f"stream width (default {d.d_model})")
    _flag(g, "--heads", type=int, default=d.n_heads, help=f"attention heads (default {d.n_heads})")
    _flag(g, "--kv-heads", type=int, help="key/value heads for grouped-query attention (default --heads)")
    _flag(g, "--d-ff", type=int, help="FFN inner width (default 4 x d-model)")
    _flag(
        g, "--vocab", type=int, default=d.vocab_size, help=f"vocabulary size (default {d.vocab_size}: bytes)"
    )
    _flag(g, "--max-len", type=int, default=d.max_len, help=f"longest sequence (default {d.max_len})")
    _flag(g, "--wrap", default=d.wrap, help=f"{'|'.join(wrap_names())} (default {d.wrap}){lst}")
    _flag(g, "--norm", default=d.norm, help=f"{'|'.join(NORMS)} (default {d.norm}){lst}")
    _flag(g, "--activation", default=d.activation, help=f"{'|'.join(ACTIVATIONS)} (default {d.activation})")
    _flag(g, "--position", default=d.position, help=f"{'|'.join(POSITIONS)} (default {d.position})")
    _flag(
        g,
        "--final-norm",
        default=d.final_norm,
        help=f"{'|'.join(FINAL_NORMS)} (default auto: on where the stream is never normalised)",
    )
    _flag(
        g,
        "--no-residual",
        default="none",
        metavar="SUBLAYERS",
        help=f"sublayers whose skip is turned off: {', '.join(SUBLAYERS)}, several joined by + (attn+ffn), "
        f"all, or none (default none; cross needs --arch encdec){lst}",
    )
    _add_init_flags(g, d)
    _add_param_flags(g, d)
    _add_topology_flags(p, d)
    _flag(g, "--qk-norm", switch=True, help="normalise queries and keys per head")
    _flag(g, "--no-bias", switch=True, help="linear layers without biases")
    _flag(g, "--checkpoint-activations", switch=True, help="recompute blocks in backward to save memory")
    _flag(g, "--seed", type=int, help="random seed (default 0)")


def _add_init_flags(g, d: ModelConfig) -> None:
    """The init conventions: scheme, std, tied head, embedding scale (they set the stream's scale at init)."""
    _flag(
        g,
        "--init",
        default=d.init,
        help=f"{'|'.join(INITS)} (default {d.init}; normal = N(0, --init-std) everywhere, Hugging Face's)",
    )
    _flag(
        g,
        "--init-std",
        type=float,
        default=d.family.init_std,
        help=f"std of gpt2 and normal (default {d.family.init_std})",
    )
    _flag(
        g,
        "--tie-embeddings",
        default="on",
        help="on|off: the output head is the token table (default on; most HF decoders are untied)",
    )
    _flag(g, "--embed-scale", default="on", help="on|off: token embeddings x sqrt(d_model) (default on)")


def _add_param_flags(g, d: ModelConfig) -> None:
    """The parametrization and the base shape it is relative to (docs/transfer.md)."""
    _flag(
        g,
        "--param",
        default=d.param,
        help=f"{'|'.join(PARAMS)}: how multipliers, init and per-group Adam lr/eps scale with width and "
        f"depth (default {d.param}, the standard parametrization)",
    )
    _flag(
        g, "--base-width", type=int, help="the d_model the parametrization is relative to (default --d-model)"
    )
    _flag(
        g, "--base-depth", type=int, help="the depth it is relative to (default --layers: no depth scaling)"
    )


TOPOLOGY_FLAGS = (  # flag: what it sets (its field of ModelConfig.topology has the same name)
    ("streams", "hc, dhc, mhc: n streams; frac: m fractions"),
    ("sinkhorn_iters", "mhc: Sinkhorn-Knopp iterations at most (the paper's t_max)"),
    ("sinkhorn_tol", "mhc: stop once every column sums to 1 within this (0: all iterations)"),
    ("attnres_blocks", "attnres_block: blocks of sublayers"),
    ("dwa_dilation", "denseformer: average every k-th earlier block output"),
    ("dwa_period", "denseformer: average after every p-th block"),
)


def _add_topology_flags(p: argparse.ArgumentParser, d: ModelConfig) -> None:
    """The residual topologies' options (docs/topologies.md); each refused with a wrapping that does not
    read it (:mod:`depthlab.config_topology`)."""
    g = p.add_argument_group("residual topology (docs/topologies.md)")
    for name, what in TOPOLOGY_FLAGS:
        default = getattr(d.topology, name)
        _flag(
            g,
            "--" + name.replace("_", "-"),
            type=type(default),
            default=default,
            help=f"{what} (default {default})",
        )


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


def check_given_paths(args: argparse.Namespace, *dests: str) -> None:
    """InputError for a path flag among ``dests`` given as '' (or another path no file can have): an
    empty --grid or --report must not fall back to the default as if it had not been given."""
    for dest in dests:
        value = getattr(args, dest, None)
        if value is not None:
            check_path(value, f"--{dest.replace('_', '-')}")


def residual_from_flag(value: str, arch: str = "encdec") -> tuple[str, ...]:
    """--no-residual attn+ffn -> the sublayers whose residual stays on (ConfigError for a bad value).

    Several skips are joined by '+', never ',': in probe a comma list compares several models, so the
    same text must not mean one model elsewhere. ``cross`` is refused unless ``arch`` is encdec: the
    other stacks have no cross-attention, and turning its skip off would silently change nothing.
    """
    if "," in value:
        raise ConfigError("no_residual", value, "one value; use attn+ffn to turn off several skips")
    items = [v.strip() for v in value.split("+")]
    if not value.strip() or any(not v for v in items):  # '' or 'attn+': refused, not read as none or attn
        raise ConfigError("no_residual", value, "a sublayer (attn, ffn, cross), several joined by + with none "
                          "empty (attn+ffn), all, or none")  # fmt: skip
    off = set(items)
    if off == {"none"}:
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


# model flag (argparse dest) -> the ModelConfig field it sets
FIELD_OF_FLAG = {
    "arch": "arch",
    "layers": "n_layers",
    "enc_layers": "enc_layers",
    "dec_layers": "dec_layers",
    "d_model": "d_model",
    "heads": "n_heads",
    "kv_heads": "n_kv_heads",
    "d_ff": "d_ff",
    "vocab": "vocab_size",
    "max_len": "max_len",
    "wrap": "wrap",
    "norm": "norm",
    "activation": "activation",
    "position": "position",
    "final_norm": "final_norm",
    "no_residual": "residual",
    "init": "init",
    "init_std": "init_std",
    "tie_embeddings": "tie_embeddings",
    "embed_scale": "embed_scale",
    "qk_norm": "qk_norm",
    "no_bias": "bias",
    "checkpoint_activations": "activation_checkpointing",
    "param": "param",
    "base_width": "base_width",
    "base_depth": "base_depth",
    **{name: name for name, _ in TOPOLOGY_FLAGS},
}


# A field -> the dest of the flag that sets it, where the two names differ (n_layers -> --layers). The
# flags that invert their field (--no-bias, --no-residual) are left out: their value is not the field's.
DEST_OF_FIELD = {
    **{field: flag for flag, field in FIELD_OF_FLAG.items() if flag != field and not flag.startswith("no_")},
    "jacobian_probes": "jacobian",  # probe --jacobian N
}


def as_typed(error: ConfigError, args: argparse.Namespace, flags: dict) -> str:
    """The error's line in the words the user typed: ``--layers 0 is not allowed: ...`` where a flag of
    this command (``flags``: dest -> its argparse action) set the field, else the error as it is (a
    field no flag sets, or one an imported --hf family set and no flag given changed)."""
    if error.field == "residual" and "no_residual" in (getattr(args, "given_flags", None) or ()):
        return f"--no-residual {args.no_residual} is not allowed: {error.allowed}"  # the skips it left on
    given = getattr(args, "given_flags", None) or set()
    typed_heads = "heads" in given or not getattr(args, "hf", None)  # else the --hf family's count
    if error.field == "base_width" and error.other == "n_heads" and "heads" in flags and typed_heads:
        said = f"a multiple of the {args.heads} heads (set by --heads): the proxy of that width has the model's heads"
        error = ConfigError("base_width", error.value, said)
    if error.field == "d_model" and error.other == "n_heads" and "heads" in flags:
        heads = getattr(args, "heads", None)
        if "heads" in given and "d_model" not in given:  # the heads typed do not split the width
            return f"--heads {heads} is not allowed: a divisor of d_model {error.value} ({fitting_heads(error.value, heads)})"
        if "heads" in given:  # the count typed, named as typed
            error = ConfigError("d_model", error.value, f"a multiple of --heads {heads}")  # no d_head flag
        elif not getattr(args, "hf", None):  # the default count: the flag that changes it
            said = f"a multiple of the {heads} heads (set by --heads)"
            error = ConfigError("d_model", error.value, said)
    dest = DEST_OF_FIELD.get(error.field, error.field)
    table_flag = "max_len" in given or ("max_len" in flags and not getattr(args, "hf", None))
    if error.other == "max_len" and table_flag:  # the position table's rows: --max-len's (not --hf's)
        said = error.allowed.replace(f"max_len={args.max_len}", f"--max-len {args.max_len}")
        error = ConfigError(error.field, error.value, said)
        length = flags.get(dest)
        typed = getattr(args, "typed", None) or ()
        if (
            "max_len" in given and length is not None and dest not in typed
        ):  # a default length: --max-len short
            flag = max(length.option_strings, key=len)
            return (f"--max-len {args.max_len} is not allowed: shorter than the default {flag} {error.value} "
                    f"(pass a longer --max-len or a shorter {flag})")  # fmt: skip
    action = flags.get(dest)
    from_family = getattr(args, "hf", None) and dest in FIELD_OF_FLAG and dest not in given_model_flags(args)
    if action is None or from_family:
        return str(error)
    flag = max(action.option_strings, key=len)
    if action.nargs == 0:  # a switch: its value is its presence
        return f"{flag} is not allowed: {error.allowed}"
    plain = isinstance(error.value, (int, float)) or (
        isinstance(error.value, str) and error.value and not any(c.isspace() for c in error.value)
    )
    shown = error.value if plain else repr(error.value)  # '' and 'a b' quoted, so the line reads
    return f"{flag} {shown} is not allowed: {error.allowed}"


def fitting_heads(d_model: int, heads: int) -> str:
    """The head counts nearest ``heads`` that split ``d_model``, for a refused --heads: 'ask for 2 or 4'."""
    below = max(h for h in range(1, min(heads, d_model) + 1) if d_model % h == 0)  # not up to 10**23
    above = next((h for h in range(heads + 1, d_model + 1) if d_model % h == 0), None)
    return f"ask for {below}" if above is None else f"ask for {below} or {above}"


def given_model_flags(args: argparse.Namespace) -> list[str]:
    """The model flags given on the command line (dests, in FIELD_OF_FLAG's order)."""
    given = getattr(args, "given_flags", None) or set()
    return [flag for flag in FIELD_OF_FLAG if flag in given]


def model_config_from_args(args: argparse.Namespace, **overrides) -> ModelConfig:
    """A validated ModelConfig from the model flags; ``overrides`` replace single flag values.

    With --hf: the imported family's config changed by the model flags given (and ``overrides``) only
    (:func:`depthlab.interop.hf.rewired_config`: --layers or --arch also reset an encoder-decoder
    family's own per-stack depths unless --enc-layers / --dec-layers are given)."""
    if not getattr(args, "hf", None):
        values = {field: flag_value(args, flag, args.arch) for flag, field in FIELD_OF_FLAG.items()}
        return _flags_apply(args, ModelConfig.from_dict({**values, **overrides}))  # family options named flat
    base, _ = imported_config(args.hf)
    arch = args.arch if "arch" in given_model_flags(args) else base.arch
    changes = {FIELD_OF_FLAG[f]: flag_value(args, f, arch) for f in given_model_flags(args)}
    if changes.get("bias") is False:
        changes["biases"] = None  # --no-bias: none anywhere, whatever sites the family had
    return _flags_apply(args, rewired_config(args.hf, {**changes, **overrides}))


def _flags_apply(args: argparse.Namespace, cfg: ModelConfig) -> ModelConfig:
    """``cfg``, unless --init-std was given for an init that reads no std (xavier: from each shape), or
    a topology flag for a wrapping that does not read it (given at its default value too: the config
    alone refuses only a value away from the default)."""
    given = given_model_flags(args)
    if "init_std" in given and cfg.init == "xavier":
        raise InputError("--init-std does nothing with --init xavier (its scale comes from each layer's shape); "
                         "use --init normal or gpt2")  # fmt: skip
    topology = tuple(name for name, _ in TOPOLOGY_FLAGS if name in given)
    if topology:
        cfg.topology.check_for(cfg.wrap, WRAPPINGS, names=topology)
    return cfg


def flag_value(args: argparse.Namespace, flag: str, arch: str):
    """The ModelConfig value that model flag ``flag`` (an argparse dest) gives, for an ``arch`` model."""
    value = getattr(args, flag)
    if flag == "no_residual":
        return residual_from_flag(value, arch)
    if flag in ("tie_embeddings", "embed_scale"):
        return on_off(flag, value)
    if flag == "no_bias":
        return not value
    return value


def on_off(field: str, value) -> bool:
    """True for "on", False for "off" (ConfigError naming ``field`` otherwise)."""
    if value not in ("on", "off"):
        raise ConfigError(field, value, "on or off")
    return value == "on"


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH ('-' for stdout)")


def comma_list(value: str, field: str) -> list[str]:
    """A comma list's values, each once, in the order given (``pre,pre,post`` compares two); a value
    without a comma is itself (an empty one is the flag's own check). ConfigError where a comma leaves
    an empty value: a typo, not one model fewer."""
    if "," not in value:
        return [value.strip() or value]
    values = [v.strip() for v in value.split(",")]
    if not all(values):
        raise ConfigError(field, value, "no empty value in the comma list")
    return list(dict.fromkeys(values))
