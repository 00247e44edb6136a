"""Configs: frozen, validated dataclasses that round-trip through JSON exactly.

``ModelConfig`` says what stack to build, ``TrainConfig`` how to train it. Each validates itself in
``__post_init__`` and raises :class:`depthlab.ConfigError` naming the field, the value and what is
allowed. ``to_dict``/``from_dict`` (and ``to_json``/``from_json``) are exact inverses, and
``config_hash`` is a stable digest of the resolved values (the study store keys runs by it).

``ModelConfig``'s top level is the research core, grouped under short headers; the options released
model families need for parity are one nested group, ``ModelConfig.family``
(:class:`depthlab.config_family.FamilyOptions`), named flat wherever a person writes them
(``cfg.replace(d_head=8)``, a grid's ``d_head: 8``, the flat JSON written before they were grouped).
Its checks, one method per concern: each core value alone, the shape, the wiring, and what each family
option needs of the model.

Keys stay stable as the configs grow: :meth:`depthlab.config_base.ConfigBase.key_dict` (what every
hash is taken of) names every field flat (the family options as before they were grouped), writes a
renamed field under its first name and leaves out a field added since the first release while it holds
its default, so a store's runs keep their keys when depthlab gains or groups a field.

The wrappings are declared by their classes in :mod:`depthlab.model.wrappings`, which register
themselves in :data:`WRAPPINGS`; ``ModelConfig`` validates ``wrap`` (and whether it needs a real norm)
against that registry, so a new wrapping needs no edit here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from depthlab.config_base import (  # noqa: F401 (study.grid and the CLI read them here)
    SEED_MAX,
    ConfigBase,
    check_int,
    check_seed,
    current_name,
    field_types,
    flat_field_names,
    flat_field_types,
)
from depthlab.config_family import BIAS_SITES, QK_NORM_SCOPES, FamilyOptions  # noqa: F401 (re-exported)
from depthlab.config_topology import TopologyOptions
from depthlab.errors import ConfigError

ARCHS = ("encoder", "decoder", "encdec")
# name -> wrapping class, filled by depthlab.model.wrappings.register (each class declares itself)
WRAPPINGS: dict[str, type] = {}
NORMS = ("layernorm", "rmsnorm", "dyt", "batchnorm", "none")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu", "geglu_tanh")
POSITIONS = ("sinusoidal", "learned", "rope", "relative", "none")
FINAL_NORMS = ("auto", "on", "off")
SUBLAYERS = ("attn", "cross", "ffn")
INITS = ("xavier", "gpt2", "normal")
QK_NORMS = ("layernorm", "rmsnorm")  # the norms that can normalise a head's queries and keys
PARAMS = ("sp", "mup", "depth_mup", "completep")  # parametrizations (depthlab.model.parametrization)
# checks a parametrization's rules add to ModelConfig validation (filled by depthlab.model.parametrization:
# which wrappings refuse which parametrization is declared there, next to the rules)
PARAM_CHECKS: list = []


def wrap_names() -> tuple[str, ...]:
    """The registered wrappings, in declaration order."""
    return tuple(WRAPPINGS)


@dataclass(frozen=True)
class ModelConfig(ConfigBase):
    """What stack to build. Every field is a plain JSON value, or a group of them (``family``).

    ``n_layers`` is the depth of an encoder or decoder; for ``encdec`` it is the depth of both sides
    unless ``enc_layers``/``dec_layers`` say otherwise. ``residual`` lists the sublayer kinds whose
    skip connection is on (a stack without its attention skip is ``residual=("ffn", "cross")``).
    ``qk_norm`` normalises each head's queries and keys before their dot product (Dehghani et al.
    2023; OLMo 2), with the configured norm (layernorm or rmsnorm).

    ``family`` holds the options released model families need for exact parity (head width, soft-caps,
    partial rotary, sliding windows, norm epsilon, bias sites, ...: :class:`FamilyOptions`). They are
    named flat everywhere a person writes them: ``cfg.replace(d_head=8)``, a grid's ``d_head: 8``.
    ``topology`` holds the residual topologies' options (``streams``, Sinkhorn-Knopp's iterations, ...:
    :class:`TopologyOptions`), named flat the same way: ``cfg.replace(streams=8)``.
    """

    RENAMED = {"activation_checkpointing": "checkpoint"}

    # shape
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
    # wrapping and norm
    wrap: str = "pre"
    norm: str = "layernorm"
    final_norm: str = "auto"
    residual: tuple[str, ...] = ("attn", "cross", "ffn")
    qk_norm: bool = False
    dyt_alpha: float = 0.5  # DyT's alpha_0 (Zhu et al. 2025, default)
    mix_ratio: float = 0.25  # Mix-LN: share of the bottom layers that are post-LN
    # sublayers
    activation: str = "gelu"
    bias: bool = True
    # positions
    position: str = "learned"
    rope_base: float = 10000.0
    # embeddings and head
    tie_embeddings: bool = True
    embed_scale: bool = True  # multiply token embeddings by sqrt(d_model) (Vaswani 2017, sec. 3.4)
    # init and regularisation
    init: str = "xavier"
    dropout: float = 0.0
    # runtime
    activation_checkpointing: bool = False  # recompute each block in backward (saves memory, costs a forward)
    # parametrization (depthlab.model.parametrization; docs/transfer.md)
    param: str = "sp"  # sp | mup | depth_mup | completep
    base_width: int | None = None  # the d_model the parametrization is relative to; None = d_model
    base_depth: int | None = None  # the depth it is relative to; None = n_layers (no depth scaling)
    # what released families need for parity
    family: FamilyOptions = FamilyOptions()
    # the residual topologies' options (hc, mhc, frac, denseformer, attnres: depthlab.config_topology)
    topology: TopologyOptions = TopologyOptions()

    def __post_init__(self):
        if isinstance(self.residual, list):  # a list, as JSON gives it, is the same as the tuple
            object.__setattr__(self, "residual", tuple(self.residual))
        self._check_values()
        self._check_shape()
        self._check_wiring()
        self._check_family()
        self._check_param()

    def _check_values(self) -> None:
        """Each core field alone: a known name, an integer or number in range, a bool."""
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
        for name in ("n_layers", "d_model", "n_heads", "max_len"):
            self._check_int(name)
        self._check_int("vocab_size", 2)  # one token leaves nothing to predict: every loss and gradient is 0
        for name in ("enc_layers", "dec_layers", "n_kv_heads", "d_ff"):
            self._check_int(name, optional=True)
        for name in ("bias", "qk_norm", "tie_embeddings", "embed_scale", "activation_checkpointing"):
            self._check_bool(name)
        self._check_float("dropout", 0.0, 0.99)
        self._check_float("rope_base", 1.0, strict_low=True)
        self._check_float("dyt_alpha", 0.0, strict_low=True)
        self._check_float("mix_ratio", 0.0, 1.0)
        if not isinstance(self.family, FamilyOptions):
            raise ConfigError("family", self.family, "a FamilyOptions (or its fields, named flat)")
        if not isinstance(self.topology, TopologyOptions):
            raise ConfigError("topology", self.topology, "a TopologyOptions (or its fields, named flat)")
        if not isinstance(self.residual, tuple) or any(r not in SUBLAYERS for r in self.residual):
            raise ConfigError("residual", self.residual, f"a tuple or list drawn from {', '.join(SUBLAYERS)}")
        if len(set(self.residual)) != len(self.residual):
            raise ConfigError("residual", self.residual, "each sublayer kind at most once")

    def _check_shape(self) -> None:
        """Widths and depths that fit together: heads split d_model, kv heads split heads, one stack's
        depth unless encdec."""
        if self.family.d_head is None and self.d_model % self.n_heads:
            raise ConfigError(
                "d_model",
                self.d_model,
                f"a multiple of n_heads={self.n_heads} (or set d_head in a config file)",
                other="n_heads",
            )
        if self.n_heads % self.kv_heads:
            raise ConfigError("n_kv_heads", self.n_kv_heads, f"a divisor of n_heads={self.n_heads}")
        if self.arch != "encdec" and (self.enc_layers is not None or self.dec_layers is not None):
            bad = "enc_layers" if self.enc_layers is not None else "dec_layers"
            raise ConfigError(
                bad,
                getattr(self, bad),
                f"unset unless arch=encdec (arch={self.arch} has one stack: use n_layers)",
            )

    def _check_wiring(self) -> None:
        """What the wrapping, the norm and the positions need of each other."""
        if self.position == "rope" and self.head_dim % 2:
            raise ConfigError("position", "rope", f"an even head dim (d_model/n_heads = {self.head_dim})")
        if WRAPPINGS[self.wrap].NEEDS_NORM and self.norm == "none":
            raise ConfigError("norm", "none", f"a real norm with wrap={self.wrap} (its formula normalises)")
        wrapping = WRAPPINGS[self.wrap]
        self.topology.check_for(self.wrap, WRAPPINGS)  # each option only with a wrapping that reads it
        wrapping.check_config(self)  # what else the wrapping's own declaration requires
        if self.qk_norm and self.norm not in QK_NORMS:
            raise ConfigError(
                "qk_norm",
                True,
                f"false unless norm is {' or '.join(QK_NORMS)} (it normalises queries and keys)",
            )

    def _check_family(self) -> None:
        """The family options each only where it means something in this model (one ConfigError
        naming the option); :class:`FamilyOptions` has checked each value alone."""
        fam = self.family
        needs = [
            ("rope_dims", self.position == "rope", "position=rope"),
            (
                "rope_local_base",
                self.position == "rope" and fam.sliding_window,
                "position=rope and a sliding_window",
            ),
            ("sliding_window", self.arch == "decoder", "arch=decoder (its window is causal)"),
            ("global_every", fam.sliding_window is not None, "a sliding_window"),
            ("biases", self.bias, "bias true (no_bias turns every bias off)"),
        ]
        for name, ok, what in needs:
            if getattr(fam, name) is not None and not ok:
                raise ConfigError(name, getattr(fam, name), f"unset unless {what}")
        for name, ok, what in (
            ("gain_offset", self.norm == "rmsnorm", "norm=rmsnorm"),
            ("side_embeddings", self.arch == "encdec", "arch=encdec"),
        ):
            if getattr(fam, name) and not ok:
                raise ConfigError(name, True, f"false unless {what}")
        if fam.rope_dims is not None and (fam.rope_dims % 2 or fam.rope_dims > self.head_dim):
            raise ConfigError("rope_dims", fam.rope_dims, f"an even number <= the head width {self.head_dim}")
        if self.position == "relative" and fam.rel_max_distance <= fam.rel_buckets // 2:
            why = f"> rel_buckets / 2 = {fam.rel_buckets // 2}"
            raise ConfigError("rel_max_distance", fam.rel_max_distance, why)

    def _check_param(self) -> None:
        """param, base_width and base_depth: each base only where the parametrization scales that axis,
        never above the model's own (a proxy is the smaller model); then the parametrization's own rules."""
        self._check_choice("param", PARAMS)
        for name, axis, scales, most, what in (
            ("base_width", "width", self.param != "sp", self.d_model, "d_model"),
            ("base_depth", "depth", self.param in ("depth_mup", "completep"), min(self.side_depths), "depth"),
        ):
            value = getattr(self, name)
            self._check_int(name, optional=True)
            if value is not None and not scales:
                raise ConfigError(name, value, f"unset: param={self.param} does not scale {axis}")
            if value is not None and value > most:
                raise ConfigError(
                    name, value, f"<= the model's {what} {most} (the base is the smaller proxy)"
                )
        bw = self.base_width
        if bw is not None and self.family.d_head is None and bw % self.n_heads:  # no such proxy exists
            why = f"a multiple of n_heads={self.n_heads}: the proxy of that width has the model's heads"
            raise ConfigError("base_width", bw, why, other="n_heads")
        for check in PARAM_CHECKS:
            check(self)

    def check_length(self, n_tokens: int, field: str = "seq_len", value=None) -> None:
        """ConfigError naming ``field`` (and ``value``, default ``n_tokens``) unless a sequence of
        ``n_tokens`` fits the position table: learned and sinusoidal positions have ``max_len`` rows,
        rope and none have no limit. The one rule for every sequence length depthlab is given."""
        if self.position in ("learned", "sinusoidal") and n_tokens > self.max_len:
            shown = n_tokens if value is None else value
            what = "" if value is None else f" ({n_tokens} tokens)"
            raise ConfigError(
                field, shown, f"a length that fits max_len={self.max_len}{what}", other="max_len"
            )

    # -- resolved values ------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        d_head = self.family.d_head
        return d_head if d_head is not None else self.d_model // self.n_heads

    @property
    def rotary_dims(self) -> int:
        """Features of each head that RoPE rotates (the first ``rotary_dims``; the rest pass through)."""
        return self.family.rope_dims if self.family.rope_dims is not None else self.head_dim

    def has_bias(self, site: str) -> bool:
        """Whether the linears at ``site`` (one of BIAS_SITES) carry a bias."""
        if self.family.biases is not None:
            return site in self.family.biases
        return self.bias and site != "head"

    def window(self, layer: int) -> int | None:
        """The sliding window of self-attention in ``layer`` (1-based), or None where it sees everything."""
        window, every = self.family.sliding_window, self.family.global_every
        if window is None or (every and layer % every == 0):
            return None
        return window

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

    @property
    def side_depths(self) -> tuple[int, ...]:
        """The depth of each stack the model has (one, or the encoder's and the decoder's)."""
        return tuple(d for d in (self.enc_depth, self.dec_depth) if d)

    def has_residual(self, sublayer: str) -> bool:
        return sublayer in self.residual


# The fields of the first release, by their flat names (embed_norm and norm_eps now sit in ``family``):
# a field added since joins the key only when set (see key_dict).
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
class TrainConfig(ConfigBase):
    """How to train: task and data, optimiser, schedule, logging, divergence thresholds.

    ``warmup`` is in steps. ``clip`` 0 turns clipping off. ``spike_factor`` and ``stall_share`` are the
    divergence/stall thresholds documented in ``depthlab.watch.outcome``. ``z_loss`` adds
    z_loss * (log Z)^2 per target token to the objective, log Z the log-sum-exp of the output logits
    (PaLM, Chowdhery et al. 2022; Wortsman et al. 2023 use 1e-4); the reported loss stays the
    cross-entropy. ``independent_wd`` (with adamw) makes the weight decay independent of the learning
    rate: each update shrinks the weights by ``weight_decay`` times the schedule's factor, not by
    lr x weight_decay (Wortsman et al. 2023, sec. 3.2.2).
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
    telemetry: bool = True  # per-layer telemetry on logged steps (depthlab.watch)
    symbols: int = 16  # alphabet size of the copy/reverse/sort tasks
    bf16: bool = False  # bf16 autocast for forward passes
    device: str = "auto"  # auto = cuda when available, else cpu
    z_loss: float = 0.0  # coefficient of (log Z)^2 in the objective; 0 = off
    independent_wd: bool = False  # adamw's decay independent of the learning rate (see the docstring)

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
        self._check_float("beta1", 0.0, 1.0, strict_high=True)
        self._check_float("beta2", 0.0, 1.0, strict_high=True)
        self._check_float("eps", 0.0, 1.0, strict_low=True)
        self._check_float("weight_decay", 0.0)
        self._check_float("clip", 0.0)
        self._check_float("min_lr_ratio", 0.0, 1.0)
        self._check_float("spike_factor", 1.0, strict_low=True)
        self._check_float("stall_share", 0.0, 1.0)
        self._check_float("z_loss", 0.0, 1.0)
        for name in ("compile", "telemetry", "bf16", "independent_wd"):
            self._check_bool(name)
        if self.independent_wd and self.optimizer != "adamw":
            raise ConfigError(
                "independent_wd", True, "false unless optimizer=adamw (it scales a decoupled decay)"
            )
        if self.schedule == "constant" and self.warmup:
            raise ConfigError(
                "warmup", self.warmup, "0 with schedule=constant (linear = warmup then constant)"
            )
        if self.schedule == "noam" and self.warmup == 0:
            raise ConfigError("warmup", 0, "> 0 with schedule=noam (its formula divides by the warmup)")
        if self.data is not None and (not isinstance(self.data, str) or not self.data.strip()):
            raise ConfigError("data", self.data, "a file path, or null for the default corpus")
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
