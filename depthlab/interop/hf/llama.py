"""Llama and the RoPE decoders built like it: Llama, Mistral, Qwen2, Qwen3, OLMo 2, Gemma 2, Gemma 3.

All have ``model.embed_tokens``, ``model.layers.i.self_attn.{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj``
(our gated ``fc1`` holds [gate; up], ``fc2`` = down), ``model.norm`` and ``lm_head``; they differ in
where the norms sit (:data:`NORMS`, by wrapping) and in the options each family sets:

| family   | wrapping | what else                                                                      |
|----------|----------|--------------------------------------------------------------------------------|
| Llama    | pre      | SwiGLU, GQA, biases per attention_bias / mlp_bias                              |
| Mistral  | pre      | a sliding window on every layer                                                |
| Qwen2    | pre      | biases on q, k, v only                                                         |
| Qwen3    | pre      | per-head QK-norm (RMSNorm), a head width of its own                            |
| OLMo 2   | reorder  | QK-norm over the whole q and k projections                                     |
| Gemma 2  | sandwich | RMSNorm (1 + w), embeddings x sqrt(d), GeGLU (tanh), score scale from          |
|          |          | query_pre_attn_scalar, attention soft-cap 50 and logit soft-cap 30, a sliding  |
|          |          | window on every other layer                                                    |
| Gemma 3  | sandwich | Gemma 2's, less the soft-caps, plus per-head QK-norm (1 + w), a global layer   |
|          |          | every 6th, and the local layers' own RoPE base                                 |
"""

from __future__ import annotations

from depthlab.config import ModelConfig
from depthlab.errors import ConfigError
from depthlab.interop.hf.family import (
    Family,
    activation,
    fused,
    head_weight,
    own_head_dim,
    register,
    require,
    rope_params,
    take,
    window_pattern,
)

# our norm slot -> HF's name inside model.layers.i, by wrapping
NORMS = {
    "pre": {"attn.norm": "input_layernorm", "ffn.norm": "post_attention_layernorm"},
    "reorder": {"attn.norm": "post_attention_layernorm", "ffn.norm": "post_feedforward_layernorm"},
    "sandwich": {
        "attn.norm_in": "input_layernorm",
        "attn.norm_out": "post_attention_layernorm",
        "ffn.norm_in": "pre_feedforward_layernorm",
        "ffn.norm_out": "post_feedforward_layernorm",
    },
}


def bias_fields(qkv: bool, out: bool, ffn: bool) -> dict:
    """``bias``/``biases`` of a ModelConfig for linears with biases at these sites."""
    sites = tuple(s for s, on in (("qkv", qkv), ("out", out), ("ffn", ffn)) if on)
    if not sites:
        return {"bias": False}
    return {} if len(sites) == 3 else {"biases": sites}


def rope_decoder_config(c, **options) -> ModelConfig:
    """The fields these families share (RMSNorm, RoPE, GQA, gated FFN, HF's normal init), then ``options``
    (family options named flat, as :meth:`ModelConfig.from_dict` reads them)."""
    kv = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    act = getattr(c, "hidden_activation", None) or c.hidden_act
    fields = dict(
        arch="decoder",
        n_layers=c.num_hidden_layers,
        d_model=c.hidden_size,
        n_heads=c.num_attention_heads,
        n_kv_heads=None if kv == c.num_attention_heads else kv,
        d_head=own_head_dim(c),
        d_ff=c.intermediate_size,
        vocab_size=c.vocab_size,
        max_len=c.max_position_embeddings,
        wrap="pre",
        norm="rmsnorm",
        norm_eps=c.rms_norm_eps,
        activation=activation("hidden_act", act, gated=True),
        position="rope",
        rope_base=float(rope_params(c)["rope_theta"]),
        final_norm="on",
        embed_scale=False,
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", False)),
        dropout=float(getattr(c, "attention_dropout", 0.0)),
        init="normal",  # HF's _init_weights: N(0, initializer_range) for every linear and embedding
        init_std=float(c.initializer_range),
    )
    fields.update(options)
    return ModelConfig.from_dict(fields)


def llama_config(c) -> ModelConfig:
    require(c, "hidden_act", "silu", "depthlab's SwiGLU gates with SiLU")
    ab = bool(getattr(c, "attention_bias", False))
    return rope_decoder_config(c, **bias_fields(ab, ab, bool(getattr(c, "mlp_bias", False))))


def mistral_config(c) -> ModelConfig:
    window, every = window_pattern(c, c.num_hidden_layers)
    return rope_decoder_config(c, bias=False, sliding_window=window, global_every=every)


def qwen2_config(c) -> ModelConfig:
    window, every = window_pattern(c, c.num_hidden_layers)
    return rope_decoder_config(c, biases=("qkv",), sliding_window=window, global_every=every)


def qwen3_config(c) -> ModelConfig:
    window, every = window_pattern(c, c.num_hidden_layers)
    ab = bool(c.attention_bias)
    return rope_decoder_config(
        c, qk_norm=True, sliding_window=window, global_every=every, **bias_fields(ab, ab, False)
    )


def olmo2_config(c) -> ModelConfig:
    ab = bool(c.attention_bias)
    return rope_decoder_config(
        c, wrap="reorder", qk_norm=True, qk_norm_scope="projection", **bias_fields(ab, ab, False)
    )


def gemma_options(c) -> dict:
    """What Gemma 2 and 3 share: sandwich norms, (1 + w) gains, scaled embeddings, their score scale."""
    window, every = window_pattern(c, c.num_hidden_layers)
    ab = bool(getattr(c, "attention_bias", False))
    return dict(
        wrap="sandwich",
        gain_offset=True,
        embed_scale=True,  # x sqrt(hidden_size), Gemma's normalizer
        attn_scale=float(c.query_pre_attn_scalar) ** -0.5,
        attn_softcap=getattr(c, "attn_logit_softcapping", None),
        logit_softcap=getattr(c, "final_logit_softcapping", None),
        sliding_window=window,
        global_every=every,
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", True)),
        **bias_fields(ab, ab, False),
    )


def gemma2_config(c) -> ModelConfig:
    return rope_decoder_config(c, **gemma_options(c))


def gemma3_config(c) -> ModelConfig:
    """Gemma 3's text model (a multimodal config is read through its ``text_config``)."""
    c = getattr(c, "text_config", None) or c
    require(c, "use_bidirectional_attention", False, "depthlab's sliding window is causal")
    options = gemma_options(c)
    rope_base = float(rope_params(c, "full_attention")["rope_theta"])
    local = float(rope_params(c, "sliding_attention")["rope_theta"])
    if options["sliding_window"] is not None and local != rope_base:
        options["rope_local_base"] = local
    return rope_decoder_config(c, qk_norm=True, rope_base=rope_base, **options)


def rope_decoder_state(hf: dict, cfg: ModelConfig, c=None) -> dict:
    """Our state dict from the *ForCausalLM of any family above (q|k|v fused; gated fc1 = [gate; up])."""
    if cfg.wrap not in NORMS:
        raise ConfigError("wrap", cfg.wrap, f"one of {', '.join(NORMS)} to import these weights")
    out = {"embed.tok.weight": hf["model.embed_tokens.weight"]}
    for i in range(cfg.n_layers):
        h, d = f"model.layers.{i}", f"decoder.layers.{i}"
        for ours, theirs in NORMS[cfg.wrap].items():
            out[f"{d}.{ours}.weight"] = hf[f"{h}.{theirs}.weight"]
        fused(out, f"{d}.attn.f.qkv", hf, [f"{h}.self_attn.{p}_proj" for p in "qkv"])
        take(out, f"{d}.attn.f.out", hf, f"{h}.self_attn.o_proj")
        if cfg.qk_norm:
            for p in ("q_norm", "k_norm"):
                out[f"{d}.attn.f.{p}.weight"] = hf[f"{h}.self_attn.{p}.weight"]
        fused(out, f"{d}.ffn.f.fc1", hf, [f"{h}.mlp.gate_proj", f"{h}.mlp.up_proj"])
        take(out, f"{d}.ffn.f.fc2", hf, f"{h}.mlp.down_proj")
    out["decoder.norm.weight"] = hf["model.norm.weight"]
    head_weight(out, hf, cfg, "lm_head", "model.embed_tokens")
    return out


def _family(name, types, cls, config, exact, approximated="") -> Family:
    return register(Family(name, types, {cls: "logits"}, config, rope_decoder_state, exact, approximated))


ROPE_SCALING = "refused: RoPE scaling variants (linear, dynamic, yarn, llama3)"
_family(
    "Llama",
    ("llama",),
    "LlamaForCausalLM",
    llama_config,
    "pre-RMSNorm, SwiGLU, RoPE, GQA, attention and MLP biases, tied or untied head",
    ROPE_SCALING,
)
_family(
    "Mistral",
    ("mistral",),
    "MistralForCausalLM",
    mistral_config,
    "Llama's, plus a sliding window on every layer",
    ROPE_SCALING,
)
_family(
    "Qwen2",
    ("qwen2",),
    "Qwen2ForCausalLM",
    qwen2_config,
    "Llama's, with biases on q, k and v only",
    ROPE_SCALING + "; a sliding window only above max_window_layers",
)
_family(
    "Qwen3",
    ("qwen3",),
    "Qwen3ForCausalLM",
    qwen3_config,
    "Llama's, plus per-head QK-norm (RMSNorm) and a head width apart from d_model / n_heads",
    ROPE_SCALING + "; a sliding window only above max_window_layers",
)
_family(
    "OLMo 2",
    ("olmo2",),
    "Olmo2ForCausalLM",
    olmo2_config,
    "reordered post-norm x + LN(F(x)), QK-norm over the whole q and k projections, SwiGLU, RoPE",
    ROPE_SCALING,
)
_family(
    "Gemma 2",
    ("gemma2",),
    "Gemma2ForCausalLM",
    gemma2_config,
    "sandwich norms, RMSNorm (1 + w), embeddings x sqrt(d), GeGLU (tanh), query_pre_attn_scalar, "
    "attention and logit soft-caps, a sliding window on every other layer",
    ROPE_SCALING,
)
_family(
    "Gemma 3",
    ("gemma3_text", "gemma3"),
    "Gemma3ForCausalLM",
    gemma3_config,
    "Gemma 2's (soft-caps where set) plus per-head QK-norm (1 + w), a global layer every 6th and the "
    "local layers' own RoPE base",
    ROPE_SCALING + "; the vision tower of the multimodal model (its text model is imported); "
    "bidirectional attention",
)
