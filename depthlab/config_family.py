"""The options released model families need, apart from the research core: ``ModelConfig.family``.

Every Hugging Face family depthlab imports sets some of these to reproduce its outputs exactly (all off,
or at the usual value, by default; docs/design.md tabulates which family uses which). A depth study
rarely changes them, so they sit in one nested group instead of among the fields it varies:
``ModelConfig().family.d_head``. They are still named flat wherever a person writes them: a grid key
(``d_head: 8``), ``cfg.replace(d_head=8)``, the flat JSON written before they were grouped, and every
config hash (:meth:`depthlab.config_base.ConfigBase.key_dict` flattens them back).

:class:`FamilyOptions` checks each of its values alone; what an option needs of the rest of the model
(``rope_dims`` only with RoPE, ``sliding_window`` only in a decoder) is checked by ``ModelConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass

from depthlab.config_base import ConfigBase
from depthlab.errors import ConfigError

QK_NORM_SCOPES = ("head", "projection")  # per head (Qwen3, Gemma 3) or the whole q/k projection (OLMo 2)
BIAS_SITES = ("qkv", "out", "ffn", "head")  # where a linear layer may carry a bias


@dataclass(frozen=True)
class FamilyOptions(ConfigBase):
    """A released family's own settings: head width and score scale, soft-caps, partial and local
    rotary, sliding windows, T5's relative buckets, QK-norm scope, norm epsilon and (1 + w) gains, bias
    sites, embedding norm, factorised embeddings, a scaled head input, the normal init's std."""

    # attention: head width, score scale and cap, windows
    d_head: int | None = None  # width of one head; None = d_model / n_heads (T5's d_kv, Gemma, Qwen3)
    attn_scale: float | None = (
        None  # score scale; None = head_dim^-1/2 (T5: 1; Gemma: query_pre_attn_scalar^-1/2)
    )
    attn_softcap: float | None = None  # scores -> c tanh(scores / c) (Gemma 2: 50)
    sliding_window: int | None = None  # causal self-attention sees the last N positions, itself included
    global_every: int | None = None  # with sliding_window: layers k, 2k, ... attend to all (Gemma 2: k=2)
    qk_norm_scope: str = "head"  # qk_norm over each head (Qwen3, Gemma 3) or the projection (OLMo 2)
    # positions
    rope_dims: int | None = None  # features of each head that RoPE rotates; None = all (GPT-NeoX: 1/4)
    rope_local_base: float | None = None  # RoPE base on sliding-window layers; None = rope_base (Gemma 3)
    rel_buckets: int = 32  # position="relative": T5's log-spaced distance buckets, one bias per head each
    rel_max_distance: int = 128  # position="relative": distances from here on share the last bucket
    # norms and biases
    norm_eps: float = 1e-5  # every norm's epsilon (Llama 1e-6, BERT 1e-12)
    gain_offset: bool = False  # RMSNorm gains applied as (1 + w), w = 0 at init (Gemma)
    biases: tuple[str, ...] | None = None  # linears with a bias (qkv, out, ffn, head); None = bias
    # embeddings and head
    embed_norm: bool = False  # a norm on the embedded tokens (BERT, BART)
    side_embeddings: bool = False  # encdec: the decoder has its own position table and embedding norm
    d_embed: int | None = None  # token embedding width, projected to d_model and back (OPT-350m)
    head_scale: bool = False  # the head reads the last stream x d_model^-1/2 (T5 with its tied head)
    logit_softcap: float | None = None  # logits -> c tanh(logits / c) (Gemma 2: 30)
    # init
    init_std: float = 0.02  # std of the normal and gpt2 init schemes (HF's initializer_range)

    def __post_init__(self):
        self._check_choice("qk_norm_scope", QK_NORM_SCOPES)
        for name in ("d_head", "rope_dims", "d_embed", "sliding_window", "global_every"):
            self._check_int(name, optional=True)
        self._check_int("rel_buckets", low=4)
        self._check_int("rel_max_distance", low=1)
        for name in ("attn_scale", "attn_softcap", "logit_softcap"):
            self._check_float(name, 0.0, strict_low=True, optional=True)
        self._check_float("rope_local_base", 1.0, strict_low=True, optional=True)
        self._check_float("norm_eps", 0.0, 1.0, strict_low=True)
        self._check_float("init_std", 0.0, 1.0, strict_low=True)
        for name in ("gain_offset", "embed_norm", "side_embeddings", "head_scale"):
            self._check_bool(name)
        if self.biases is not None and (
            not isinstance(self.biases, tuple)
            or any(b not in BIAS_SITES for b in self.biases)
            or len(set(self.biases)) != len(self.biases)
        ):
            raise ConfigError("biases", self.biases, f"a list drawn from {', '.join(BIAS_SITES)}, each once")
