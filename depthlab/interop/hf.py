"""Import Hugging Face GPT-2, BERT and Llama weights into depthlab models with the same outputs.

| HF model           | depthlab config                                                  | what agrees           |
|--------------------|------------------------------------------------------------------|-----------------------|
| ``GPT2LMHeadModel``  | decoder, pre-LN, learned positions, final norm (``ln_f``), tied head | logits                |
| ``BertModel``        | encoder, post-LN, embedding LayerNorm, no sqrt(d) embedding scale  | last_hidden_state = states[-1] |
| ``LlamaForCausalLM`` | decoder, pre-RMSNorm, SwiGLU, RoPE (rope_theta), GQA, no biases  | logits                |

Layouts that differ (each mapping below says where):
- GPT-2's ``Conv1D`` stores weights as (in, out): transpose into ``nn.Linear``'s (out, in).
- BERT and Llama keep q, k, v separate: stack them as rows of our fused ``qkv`` (q | k | v).
- BERT adds ``token_type_embeddings[token_type_ids]``; token_type_ids default to 0, so row 0 is
  folded into our learned position table (depthlab has no token types).
- Llama's MLP is down(silu(gate(x)) * up(x)): our SwiGLU ``fc1`` holds [gate; up], ``fc2`` = down.
- BERT's pooler and MLM head are not imported: our head is tied to the word embeddings.

Only ``model_type`` and class names are read, so this module does not import ``transformers``.
Dropout: the HF residual/hidden dropout becomes ``ModelConfig.dropout``; parity holds in eval mode.
"""

from __future__ import annotations

import torch
from torch import nn

from depthlab.config import ModelConfig
from depthlab.errors import ConfigError, InputError
from depthlab.interop.state import put_linear
from depthlab.model import build_model

# The HF model_type values this module imports (config_from_hf builds each, in this order).
MODEL_TYPES = ("gpt2", "bert", "llama")
# HF activation name -> ours. "gelu_new" and "gelu_pytorch_tanh" are the tanh approximation of GELU.
_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


def config_from_hf(hf_config) -> ModelConfig:
    """The :class:`ModelConfig` of an HF GPT-2, BERT or Llama config (ConfigError for anything else)."""
    builders = dict(zip(MODEL_TYPES, (_gpt2_config, _bert_config, _llama_config)))
    model_type = getattr(hf_config, "model_type", None)
    if model_type not in builders:
        raise ConfigError("model_type", model_type, f"one of {', '.join(builders)}")
    return builders[model_type](hf_config)


def from_hf(hf_model: nn.Module) -> nn.Module:
    """A depthlab model with ``hf_model``'s weights, in its dtype and train/eval mode.

    Returns a :class:`depthlab.model.LanguageModel`: ``model(tokens)`` gives (B, T, V) logits equal to
    GPT-2's and Llama's; for BERT, ``model(tokens, return_states=True)[1][-1]`` (B, T, d) equals
    ``last_hidden_state`` (pass ``padding_mask = attention_mask == 0``).
    """
    mappers = {"GPT2LMHeadModel": _gpt2_state, "BertModel": _bert_state, "LlamaForCausalLM": _llama_state}
    name = type(hf_model).__name__
    if name not in mappers:
        raise InputError(f"cannot import a {name}: depthlab imports {', '.join(mappers)}")
    cfg = config_from_hf(hf_model.config)
    hf_state = hf_model.state_dict()
    model = build_model(cfg).to(next(hf_model.parameters()).dtype)
    state = mappers[name](hf_state, cfg)
    # strict: every depthlab tensor must be filled and every shape must match, or this raises
    model.load_state_dict(state, strict=True)
    return model.train(hf_model.training)


# -- configs ---------------------------------------------------------------------------------------


def _activation(field: str, name) -> str:
    """Our activation for the HF config's ``field`` (activation_function or hidden_act)."""
    if name not in _ACTIVATIONS:
        raise ConfigError(field, name, f"one of {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]


def _require(hf_config, field: str, wanted, why: str) -> None:
    """Raise ConfigError unless ``hf_config.field`` (default: ``wanted``) equals ``wanted``."""
    value = getattr(hf_config, field, wanted)
    if value != wanted:
        raise ConfigError(field, value, f"{wanted!r} ({why})")


def _gpt2_config(c) -> ModelConfig:
    """GPT-2: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)); logits = ln_f(x) @ wte^T (Radford et al. 2019)."""
    _require(c, "scale_attn_weights", True, "depthlab scales scores by 1/sqrt(head_dim)")
    _require(c, "scale_attn_by_inverse_layer_idx", False, "depthlab has no per-layer score scaling")
    _require(c, "add_cross_attention", False, "GPT2LMHeadModel is imported as a decoder-only LM")
    return ModelConfig(
        arch="decoder",
        n_layers=c.n_layer,
        d_model=c.n_embd,
        n_heads=c.n_head,
        d_ff=c.n_inner,  # None = 4 * d_model, as in GPT-2
        vocab_size=c.vocab_size,
        max_len=c.n_positions,
        wrap="pre",
        norm="layernorm",
        norm_eps=c.layer_norm_epsilon,
        activation=_activation("activation_function", c.activation_function),
        position="learned",
        final_norm="on",
        embed_scale=False,
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", True)),
        dropout=float(c.resid_pdrop),
        init="gpt2",
    )


def _bert_config(c) -> ModelConfig:
    """BERT: x = LN(x + attn(x)); x = LN(x + ffn(x)), after LN(word + position + token type) (Devlin 2019)."""
    _require(c, "is_decoder", False, "BertModel is imported as a bidirectional encoder")
    _require(c, "add_cross_attention", False, "BertModel is imported as an encoder")
    _require(c, "position_embedding_type", "absolute", "depthlab's learned positions are absolute")
    return ModelConfig(
        arch="encoder",
        n_layers=c.num_hidden_layers,
        d_model=c.hidden_size,
        n_heads=c.num_attention_heads,
        d_ff=c.intermediate_size,
        vocab_size=c.vocab_size,
        max_len=c.max_position_embeddings,
        wrap="post",
        norm="layernorm",
        norm_eps=c.layer_norm_eps,
        activation=_activation("hidden_act", c.hidden_act),
        position="learned",
        final_norm="off",  # post-LN: the stream is already normalised by every sublayer
        embed_norm=True,
        embed_scale=False,
        tie_embeddings=True,
        dropout=float(c.hidden_dropout_prob),
    )


def _llama_config(c) -> ModelConfig:
    """Llama: pre-RMSNorm, SwiGLU, RoPE, GQA, no biases, final RMSNorm (Touvron et al. 2023)."""
    _require(c, "hidden_act", "silu", "depthlab's SwiGLU gates with SiLU")
    _require(c, "mlp_bias", c.attention_bias, "depthlab's bias flag covers attention and MLP together")
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if head_dim * c.num_attention_heads != c.hidden_size:
        raise ConfigError("head_dim", head_dim, f"hidden_size / num_attention_heads = {c.hidden_size}")
    kv = c.num_key_value_heads or c.num_attention_heads
    return ModelConfig(
        arch="decoder",
        n_layers=c.num_hidden_layers,
        d_model=c.hidden_size,
        n_heads=c.num_attention_heads,
        n_kv_heads=None if kv == c.num_attention_heads else kv,
        d_ff=c.intermediate_size,
        vocab_size=c.vocab_size,
        max_len=c.max_position_embeddings,
        wrap="pre",
        norm="rmsnorm",
        norm_eps=c.rms_norm_eps,
        activation="swiglu",
        position="rope",
        rope_base=_rope_theta(c),
        final_norm="on",
        bias=bool(c.attention_bias),
        embed_scale=False,
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", False)),
        dropout=float(c.attention_dropout),
        init="gpt2",  # N(0, 0.02) like Llama's initializer_range, for models built from this config
    )


def _rope_theta(c) -> float:
    """rope_theta from ``rope_parameters`` (transformers 5) or the older ``rope_theta``/``rope_scaling``."""
    params = dict(getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {})
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ConfigError("rope_type", rope_type, "'default' (depthlab's RoPE has no scaling variants)")
    return float(params.get("rope_theta", getattr(c, "rope_theta", 10000.0)))


# -- weights ---------------------------------------------------------------------------------------


def _take(out: dict, name: str, hf: dict, prefix: str) -> None:
    put_linear(out, name, hf[f"{prefix}.weight"], hf.get(f"{prefix}.bias"))


def _gpt2_state(hf: dict, cfg: ModelConfig) -> dict:
    """depthlab state dict from a GPT2LMHeadModel's (Conv1D weights are (in, out): transposed)."""
    out = {"embed.tok.weight": hf["transformer.wte.weight"], "embed.pos.weight": hf["transformer.wpe.weight"]}
    for i in range(cfg.n_layers):
        h, d = f"transformer.h.{i}", f"decoder.layers.{i}"
        _take(out, f"{d}.attn.norm", hf, f"{h}.ln_1")
        # c_attn's output is q | k | v, each d_model wide, heads contiguous within each: our qkv layout
        put_linear(out, f"{d}.attn.f.qkv", hf[f"{h}.attn.c_attn.weight"].t(), hf[f"{h}.attn.c_attn.bias"])
        put_linear(out, f"{d}.attn.f.out", hf[f"{h}.attn.c_proj.weight"].t(), hf[f"{h}.attn.c_proj.bias"])
        _take(out, f"{d}.ffn.norm", hf, f"{h}.ln_2")
        put_linear(out, f"{d}.ffn.f.fc1", hf[f"{h}.mlp.c_fc.weight"].t(), hf[f"{h}.mlp.c_fc.bias"])
        put_linear(out, f"{d}.ffn.f.fc2", hf[f"{h}.mlp.c_proj.weight"].t(), hf[f"{h}.mlp.c_proj.bias"])
    _take(out, "decoder.norm", hf, "transformer.ln_f")
    out["head.weight"] = hf["transformer.wte.weight"] if cfg.tie_embeddings else hf["lm_head.weight"]
    return out


def _bert_state(hf: dict, cfg: ModelConfig) -> dict:
    """depthlab state dict from a BertModel's (q, k, v stacked; token type 0 folded into positions)."""
    e = "embeddings"
    out = {
        "embed.tok.weight": hf[f"{e}.word_embeddings.weight"],
        # token_type_ids default to 0, so every position gets token_type_embeddings[0] added
        "embed.pos.weight": hf[f"{e}.position_embeddings.weight"]
        + hf[f"{e}.token_type_embeddings.weight"][0],
        "head.weight": hf[f"{e}.word_embeddings.weight"],
    }
    _take(out, "embed.norm", hf, f"{e}.LayerNorm")
    for i in range(cfg.n_layers):
        h, d = f"encoder.layer.{i}", f"encoder.layers.{i}"
        qkv = [f"{h}.attention.self.{p}" for p in ("query", "key", "value")]
        put_linear(
            out,
            f"{d}.attn.f.qkv",
            torch.cat([hf[f"{p}.weight"] for p in qkv]),
            torch.cat([hf[f"{p}.bias"] for p in qkv]),
        )
        _take(out, f"{d}.attn.f.out", hf, f"{h}.attention.output.dense")
        _take(out, f"{d}.attn.norm", hf, f"{h}.attention.output.LayerNorm")
        _take(out, f"{d}.ffn.f.fc1", hf, f"{h}.intermediate.dense")
        _take(out, f"{d}.ffn.f.fc2", hf, f"{h}.output.dense")
        _take(out, f"{d}.ffn.norm", hf, f"{h}.output.LayerNorm")
    return out


def _llama_state(hf: dict, cfg: ModelConfig) -> dict:
    """depthlab state dict from a LlamaForCausalLM's (q|k|v fused; SwiGLU fc1 = [gate; up])."""
    out = {"embed.tok.weight": hf["model.embed_tokens.weight"]}
    for i in range(cfg.n_layers):
        h, d = f"model.layers.{i}", f"decoder.layers.{i}"
        out[f"{d}.attn.norm.weight"] = hf[f"{h}.input_layernorm.weight"]
        _fused(out, f"{d}.attn.f.qkv", hf, [f"{h}.self_attn.{p}_proj" for p in "qkv"])
        _take(out, f"{d}.attn.f.out", hf, f"{h}.self_attn.o_proj")
        out[f"{d}.ffn.norm.weight"] = hf[f"{h}.post_attention_layernorm.weight"]
        # our FeedForward chunks fc1's output into (gate, up) in that order: silu(gate) * up
        _fused(out, f"{d}.ffn.f.fc1", hf, [f"{h}.mlp.gate_proj", f"{h}.mlp.up_proj"])
        _take(out, f"{d}.ffn.f.fc2", hf, f"{h}.mlp.down_proj")
    out["decoder.norm.weight"] = hf["model.norm.weight"]
    out["head.weight"] = hf["model.embed_tokens.weight"] if cfg.tie_embeddings else hf["lm_head.weight"]
    return out


def _fused(out: dict, name: str, hf: dict, prefixes: list[str]) -> None:
    """Stack separate projections as row blocks of one fused linear (biases too, where present)."""
    weight = torch.cat([hf[f"{p}.weight"] for p in prefixes])
    has_bias = f"{prefixes[0]}.bias" in hf
    put_linear(out, name, weight, torch.cat([hf[f"{p}.bias"] for p in prefixes]) if has_bias else None)
