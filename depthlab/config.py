"""Configs: frozen, validated dataclasses that round-trip through JSON exactly.

``ModelConfig`` says what stack to build, ``TrainConfig`` how to train it. Each validates itself in
``__post_init__`` and raises :class:`depthlab.ConfigError` naming the field, the value and what is
allowed. ``to_dict``/``from_dict`` (and ``to_json``/``from_json``) are exact inverses, and
``config_hash`` is a stable digest of the resolved values (the study store keys runs by it).

Keys stay stable as the configs grow: :meth:`_Config.key_dict` (what every hash is taken of) writes a
renamed field under its first name and leaves out a field added since the first release while it holds
its default, so a store's runs keep their keys when depthlab gains a field.

The wrappings are declared by their classes in :mod:`depthlab.model.wrappings`, which register
themselves in :data:`WRAPPINGS`; ``ModelConfig`` validates ``wrap`` (and whether it needs a real norm)
against that registry, so a new wrapping needs no edit here.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import typing
from dataclasses import dataclass, fields

from depthlab.errors import ConfigError
from depthlab.jsonable import digest

ARCHS = ("encoder", "decoder", "encdec")
# name -> wrapping class, filled by depthlab.model.wrappings.register (each class declares itself)
WRAPPINGS: dict[str, type] = {}
NORMS = ("layernorm", "rmsnorm", "dyt", "batchnorm", "none")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swiglu")
POSITIONS = ("sinusoidal", "learned", "rope", "none")
FINAL_NORMS = ("auto", "on", "off")
SUBLAYERS = ("attn", "cross", "ffn")
INITS = ("xavier", "gpt2")
QK_NORMS = ("layernorm", "rmsnorm")  # the norms that can normalise a head's queries and keys
# torch seeds a generator with any integer below 2**64; depthlab derives a few streams as seed + k, so
# a seed stays within a signed 64-bit integer (which is also what JSON readers and SQLite hold exactly)
SEED_MAX = 2**63 - 1


def wrap_names() -> tuple[str, ...]:
    """The registered wrappings, in declaration order."""
    return tuple(WRAPPINGS)


class _Config:
    """JSON round-trip, hashing and field-checking shared by every config dataclass.

    ``RENAMED`` maps a field's current name to the name it first had (old JSON still loads, and keys
    are taken under the first name); ``FIRST_FIELDS`` are the fields of the first release (others are
    left out of the key while they hold their default).
    """

    RENAMED: typing.ClassVar[dict[str, str]] = {}
    FIRST_FIELDS: typing.ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict:
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}

    def key_dict(self) -> dict:
        """The dict every hash of this config is taken of (see the module docstring)."""
        out = {}
        for f in fields(self):
            value = _jsonable(getattr(self, f.name))
            if f.name not in self.FIRST_FIELDS and f.name not in self.RENAMED:
                if value == _jsonable(f.default):
                    continue
            out[self.RENAMED.get(f.name, f.name)] = value
        return out

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: dict):
        if not isinstance(d, dict):
            raise ConfigError(cls.__name__, d, "a JSON object of fields")
        d = {current_name(cls, k): v for k, v in d.items()}
        known = {f.name: f for f in fields(cls)}
        for k in d:
            if k not in known:
                raise ConfigError(k, d[k], f"a field of {cls.__name__}: {', '.join(known)}")
        hints = field_types(cls)
        kwargs = {k: _from_json(hints[k], v) for k, v in d.items()}
        return cls(**kwargs)

    @classmethod
    def from_json(cls, s: str):
        try:
            return cls.from_dict(json.loads(s))
        except (TypeError, json.JSONDecodeError) as e:
            raise ConfigError(cls.__name__, str(s)[:40], f"JSON text ({e})") from None

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def config_hash(self) -> str:
        """16 hex digits of sha256 over :meth:`key_dict` (:func:`depthlab.jsonable.digest`)."""
        return digest(self.key_dict())

    # -- checks used by __post_init__ -------------------------------------------------------------
    def _check_choice(self, name: str, allowed: tuple) -> None:
        value = getattr(self, name)
        if value not in allowed:
            raise ConfigError(name, value, f"one of {', '.join(allowed)}")

    def _check_int(self, name: str, low: int = 1, optional: bool = False, high: int | None = None) -> None:
        value = getattr(self, name)
        if value is None and optional:
            return
        check_int(name, value, low, high)

    def _check_float(self, name: str, low: float = 0.0, high: float = math.inf, strict_low=False) -> None:
        value = getattr(self, name)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ok = ok and (value > low if strict_low else value >= low) and value <= high
        if not ok:
            bound = f"> {low}" if strict_low else f">= {low}"
            raise ConfigError(
                name, value, f"a finite number {bound}" + (f" and <= {high}" if high < math.inf else "")
            )

    def _check_bool(self, name: str) -> None:
        if not isinstance(getattr(self, name), bool):
            raise ConfigError(name, getattr(self, name), "true or false")


def check_int(name: str, value, low: int = 1, high: int | None = None) -> None:
    """ConfigError naming ``name`` unless ``value`` is an integer (not a bool) in [low, high]."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if not ok or (high is not None and value > high):
        raise ConfigError(name, value, f"an integer >= {low}" + ("" if high is None else f" and <= {high}"))


def check_seed(value, name: str = "seed") -> None:
    """ConfigError unless ``value`` is a seed depthlab can use: an integer in [0, SEED_MAX]."""
    check_int(name, value, 0, SEED_MAX)


@functools.cache
def field_types(cls) -> dict:
    """A config class's field types (cached: studies build thousands of configs)."""
    return typing.get_type_hints(cls)


def current_name(cls, name: str) -> str:
    """A field's current name, given its current or first name (``checkpoint`` -> ``activation_checkpointing``)."""
    return {v: k for k, v in cls.RENAMED.items()}.get(name, name)


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


def _from_json(hint, v):
    """Undo JSON's tuple -> list for tuple-typed fields; everything else is stored as is."""
    if typing.get_origin(hint) is tuple and isinstance(v, list):
        return tuple(v)
    return v


@dataclass(frozen=True)
class ModelConfig(_Config):
    """What stack to build. Every field is a plain JSON value.

    ``n_layers`` is the depth of an encoder or decoder; for ``encdec`` it is the depth of both sides
    unless ``enc_layers``/``dec_layers`` say otherwise. ``residual`` lists the sublayer kinds whose
    skip connection is on (a stack without its attention skip is ``residual=("ffn", "cross")``).
    ``qk_norm`` normalises each head's queries and keys before their dot product (Dehghani et al.
    2023; OLMo 2), with the configured norm (layernorm or rmsnorm).
    """

    RENAMED = {"activation_checkpointing": "checkpoint"}

    arch: str = "decoder"
    n_layers: int = 6
    enc_layers: int | None = None
    dec_layers: int | None = None
    d_model: int = 64
    n_heads: int = 4
    n_kv_heads: int | None = None  # grouped-query attention; None = n_heads (plain multi-head)
    d_ff: int | None = None  # None = 4 * d_model
    vocab_size: int = 256
    max_len: int = 256
    wrap: str = "pre"
    norm: str = "layernorm"
    activation: str = "gelu"
    position: str = "learned"
    final_norm: str = "auto"
    residual: tuple[str, ...] = ("attn", "cross", "ffn")
    bias: bool = True
    qk_norm: bool = False
    tie_embeddings: bool = True
    embed_norm: bool = False
    embed_scale: bool = True  # multiply token embeddings by sqrt(d_model) (Vaswani 2017, sec. 3.4)
    norm_eps: float = 1e-5
    dropout: float = 0.0
    init: str = "xavier"
    rope_base: float = 10000.0
    dyt_alpha: float = 0.5  # DyT's alpha_0 (Zhu et al. 2025, default)
    mix_ratio: float = 0.25  # Mix-LN: share of the bottom layers that are post-LN
    activation_checkpointing: bool = False  # recompute each block in backward (saves memory, costs a forward)

    def __post_init__(self):
        for name, allowed in (
            ("arch", ARCHS),
            ("wrap", wrap_names()),
            ("norm", NORMS),
            ("activation", ACTIVATIONS),
            ("position", POSITIONS),
            ("final_norm", FINAL_NORMS),
            ("init", INITS),
        ):
            self._check_choice(name, allowed)
        for name in ("n_layers", "d_model", "n_heads", "vocab_size", "max_len"):
            self._check_int(name)
        for name in ("enc_layers", "dec_layers", "n_kv_heads", "d_ff"):
            self._check_int(name, optional=True)
        for name in (
            "bias",
            "qk_norm",
            "tie_embeddings",
            "embed_norm",
            "embed_scale",
            "activation_checkpointing",
        ):
            self._check_bool(name)
        self._check_float("norm_eps", 0.0, 1.0, strict_low=True)
        self._check_float("dropout", 0.0, 0.99)
        self._check_float("rope_base", 1.0, strict_low=True)
        self._check_float("dyt_alpha", 0.0, strict_low=True)
        self._check_float("mix_ratio", 0.0, 1.0)
        self._check_structure()

    def _check_structure(self) -> None:
        if not isinstance(self.residual, tuple) or any(r not in SUBLAYERS for r in self.residual):
            raise ConfigError("residual", self.residual, f"a list drawn from {', '.join(SUBLAYERS)}")
        if len(set(self.residual)) != len(self.residual):
            raise ConfigError("residual", self.residual, "each sublayer kind at most once")
        if self.d_model % self.n_heads:
            raise ConfigError("d_model", self.d_model, f"a multiple of n_heads={self.n_heads}")
        if self.n_heads % self.kv_heads:
            raise ConfigError("n_kv_heads", self.n_kv_heads, f"a divisor of n_heads={self.n_heads}")
        if self.position == "rope" and self.head_dim % 2:
            raise ConfigError("position", "rope", f"an even head dim (d_model/n_heads = {self.head_dim})")
        if WRAPPINGS[self.wrap].NEEDS_NORM and self.norm == "none":
            raise ConfigError("norm", "none", f"a real norm with wrap={self.wrap} (its formula normalises)")
        if self.qk_norm and self.norm not in QK_NORMS:
            raise ConfigError(
                "qk_norm",
                True,
                f"false unless norm is {' or '.join(QK_NORMS)} (it normalises queries and keys)",
            )
        if self.arch != "encdec" and (self.enc_layers is not None or self.dec_layers is not None):
            bad = "enc_layers" if self.enc_layers is not None else "dec_layers"
            raise ConfigError(
                bad,
                getattr(self, bad),
                f"unset unless arch=encdec (arch={self.arch} has one stack: use n_layers)",
            )

    def check_length(self, n_tokens: int, field: str = "seq_len", value=None) -> None:
        """ConfigError naming ``field`` (and ``value``, default ``n_tokens``) unless a sequence of
        ``n_tokens`` fits the position table: learned and sinusoidal positions have ``max_len`` rows,
        rope and none have no limit. The one rule for every sequence length depthlab is given."""
        if self.position in ("learned", "sinusoidal") and n_tokens > self.max_len:
            shown = n_tokens if value is None else value
            what = "" if value is None else f" ({n_tokens} tokens)"
            raise ConfigError(field, shown, f"a length that fits max_len={self.max_len}{what}")

    # -- resolved values ------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def ffn_dim(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def enc_depth(self) -> int:
        """Encoder layers (0 for a decoder-only model)."""
        if self.arch == "decoder":
            return 0
        return self.enc_layers if self.enc_layers is not None else self.n_layers

    @property
    def dec_depth(self) -> int:
        """Decoder layers (0 for an encoder-only model)."""
        if self.arch == "encoder":
            return 0
        return self.dec_layers if self.dec_layers is not None else self.n_layers

    def has_residual(self, sublayer: str) -> bool:
        return sublayer in self.residual


# The fields of the first release: a field added since joins the key only when set (see key_dict).
ModelConfig.FIRST_FIELDS = (
    "arch", "n_layers", "enc_layers", "dec_layers", "d_model", "n_heads", "n_kv_heads", "d_ff",
    "vocab_size", "max_len", "wrap", "norm", "activation", "position", "final_norm", "residual", "bias",
    "qk_norm", "tie_embeddings", "embed_norm", "embed_scale", "norm_eps", "dropout", "init", "rope_base",
    "dyt_alpha", "mix_ratio",
)  # fmt: skip


SCHEDULES = ("constant", "linear", "noam", "cosine")
OPTIMIZERS = ("adam", "adamw")
TASKS = ("lm", "copy", "reverse", "sort")
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class TrainConfig(_Config):
    """How to train: task and data, optimiser, schedule, logging, divergence thresholds.

    ``warmup`` is in steps. ``clip`` 0 turns clipping off. ``spike_factor`` and ``stall_share`` are the
    divergence/stall thresholds documented in ``depthlab.train.outcome``.
    """

    task: str = "lm"
    data: str | None = None  # a text file; None = the Python standard library's own source
    steps: int = 150
    batch_size: int = 32
    seq_len: int = 64
    lr: float = 1e-3
    warmup: int = 0
    schedule: str = "linear"
    optimizer: str = "adam"
    beta1: float = 0.9
    beta2: float = 0.98
    eps: float = 1e-9  # the original recipe (Vaswani 2017): Adam eps 1e-9
    weight_decay: float = 0.0
    clip: float = 0.0
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    log_every: int = 10
    eval_batches: int = 8
    checkpoint_every: int = 50
    seed: int = 0
    spike_factor: float = 3.0
    stall_share: float = 0.5
    compile: bool = False
    eval_every: int = 50  # validation every N steps (and at the last step); eval steps are logged
    telemetry: bool = True  # per-layer telemetry on logged steps (depthlab.train.telemetry)
    symbols: int = 16  # alphabet size of the copy/reverse/sort tasks
    bf16: bool = False  # bf16 autocast for forward passes
    device: str = "auto"  # auto = cuda when available, else cpu

    def __post_init__(self):
        for name, allowed in (("task", TASKS), ("schedule", SCHEDULES), ("optimizer", OPTIMIZERS)):
            self._check_choice(name, allowed)
        for name in ("steps", "batch_size", "seq_len", "log_every", "eval_batches", "checkpoint_every"):
            self._check_int(name)
        self._check_int("eval_every")
        self._check_int("symbols", low=2)
        self._check_choice("device", DEVICES)
        self._check_int("warmup", low=0)
        check_seed(self.seed)
        self._check_float("lr", 0.0, 10.0, strict_low=True)
        self._check_float("beta1", 0.0, 1.0)
        self._check_float("beta2", 0.0, 1.0)
        if self.beta2 >= 1.0 or self.beta1 >= 1.0:
            bad = "beta1" if self.beta1 >= 1.0 else "beta2"
            raise ConfigError(bad, getattr(self, bad), "a number in [0, 1)")
        self._check_float("eps", 0.0, 1.0, strict_low=True)
        self._check_float("weight_decay", 0.0)
        self._check_float("clip", 0.0)
        self._check_float("min_lr_ratio", 0.0, 1.0)
        self._check_float("spike_factor", 1.0, strict_low=True)
        self._check_float("stall_share", 0.0, 1.0)
        for name in ("compile", "telemetry", "bf16"):
            self._check_bool(name)
        if self.schedule == "constant" and self.warmup:
            raise ConfigError(
                "warmup", self.warmup, "0 with schedule=constant (linear = warmup then constant)"
            )
        if self.schedule == "noam" and self.warmup == 0:
            raise ConfigError("warmup", 0, "> 0 with schedule=noam (its formula divides by the warmup)")
        if self.data is not None and not isinstance(self.data, str):
            raise ConfigError("data", self.data, "a file path or null")
        if self.data is not None and self.task != "lm":
            raise ConfigError("data", self.data, f"unset for task {self.task} (data is the lm corpus)")
        self._check_applies()

    def _check_applies(self) -> None:
        """A field set away from its default where nothing reads it is refused: a flag that silently
        does nothing misleads (``--symbols`` on the lm task, ``--min-lr-ratio`` without cosine)."""
        default = {f.name: f.default for f in fields(self)}
        if self.task == "lm" and self.symbols != default["symbols"]:
            raise ConfigError(
                "symbols", self.symbols, "unset for task lm (the alphabet of copy, reverse, sort)"
            )
        if self.schedule != "cosine" and self.min_lr_ratio != default["min_lr_ratio"]:
            why = f"unset unless schedule=cosine (its floor), not {self.schedule}"
            raise ConfigError("min_lr_ratio", self.min_lr_ratio, why)


TrainConfig.FIRST_FIELDS = (
    "task", "data", "steps", "batch_size", "seq_len", "lr", "warmup", "schedule", "optimizer", "beta1",
    "beta2", "eps", "weight_decay", "clip", "min_lr_ratio", "log_every", "eval_batches", "checkpoint_every",
    "seed", "spike_factor", "stall_share", "compile", "eval_every", "telemetry", "symbols", "bf16", "device",
)  # fmt: skip
