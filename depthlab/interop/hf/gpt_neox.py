"""GPT-NeoX and the parallel-attention decoders built like it: GPT-NeoX / Pythia, GPT-J, Falcon, Phi-1/2.

Each block adds attention and FFN, both read from the same stream, to one skip:

| family   | block                                    | layout to undo                                      |
|----------|------------------------------------------|-----------------------------------------------------|
| GPT-NeoX | x + Attn(LN1(x)) + FFN(LN2(x)) (parallel); pre-LN with use_parallel_residual=False | fused qkv laid out per head [q_h; k_h; v_h]; partial rotary |
| GPT-J    | x + Attn(LN(x)) + FFN(LN(x)) (parallel_shared) | interleaved rotary on rotary_dim features: q and k rows permuted to the half-split layout |
| Falcon   | parallel_shared (7B), parallel with ln_attn/ln_mlp (new architecture), or pre-LN | fused qkv per head, multi-query q|k|v, or grouped (kv group: its queries, k, v) |
| Phi-1/2  | parallel_shared, biases everywhere (head too), partial rotary, optional per-head QK LayerNorm | - |
"""

from __future__ import annotations

import torch

from depthlab.config import FamilyOptions, ModelConfig
from depthlab.errors import ConfigError
from depthlab.interop.hf.family import (
    Family,
    activation,
    fused,
    head_dim,
    head_weight,
    interleaved_to_half,
    per_head_qkv,
    put_linear,
    register,
    require,
    rope_params,
    take,
)


def _decoder(c, **fields) -> ModelConfig:
    """Fields every family here shares (LayerNorm, RoPE, final norm, HF's normal init), then ``fields``
    (family options named flat, as :meth:`ModelConfig.from_dict` reads them)."""
    base = dict(
        arch="decoder",
        n_layers=c.num_hidden_layers,
        d_model=c.hidden_size,
        n_heads=c.num_attention_heads,
        vocab_size=c.vocab_size,
        max_len=c.max_position_embeddings,
        norm="layernorm",
        position="rope",
        final_norm="on",
        embed_scale=False,
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", False)),
        init="normal",
        init_std=float(c.initializer_range),
    )
    base.update(fields)
    return ModelConfig.from_dict(base)


def _rotary(c, factor: float) -> int | None:
    """rope_dims for a partial rotary factor (None when every feature is rotated)."""
    dims = int(head_dim(c) * factor)
    return None if dims == head_dim(c) else dims


# -- GPT-NeoX ------------------------------------------------------------------------------------


def neox_config(c) -> ModelConfig:
    rope = rope_params(c)
    ab = bool(getattr(c, "attention_bias", True))
    return _decoder(
        c,
        wrap="parallel" if c.use_parallel_residual else "pre",
        d_ff=c.intermediate_size,
        norm_eps=c.layer_norm_eps,
        activation=activation("hidden_act", c.hidden_act),
        rope_base=float(rope["rope_theta"]),
        rope_dims=_rotary(c, rope.get("partial_rotary_factor", 1.0)),
        dropout=float(c.hidden_dropout),
        **({} if ab else {"biases": ("ffn",)}),
    )


def neox_state(hf: dict, cfg: ModelConfig, c=None) -> dict:
    out, g = {"embed.tok.weight": hf["gpt_neox.embed_in.weight"]}, "gpt_neox"
    for i in range(cfg.n_layers):
        h, d = f"{g}.layers.{i}", f"decoder.layers.{i}"
        take(out, f"{d}.attn.norm", hf, f"{h}.input_layernorm")
        take(out, f"{d}.ffn.norm", hf, f"{h}.post_attention_layernorm")
        qkv = f"{h}.attention.query_key_value"
        bias = hf.get(f"{qkv}.bias")
        put_linear(
            out,
            f"{d}.attn.f.qkv",
            per_head_qkv(hf[f"{qkv}.weight"], cfg.n_heads, cfg.head_dim),
            None if bias is None else per_head_qkv(bias, cfg.n_heads, cfg.head_dim),
        )
        take(out, f"{d}.attn.f.out", hf, f"{h}.attention.dense")
        take(out, f"{d}.ffn.f.fc1", hf, f"{h}.mlp.dense_h_to_4h")
        take(out, f"{d}.ffn.f.fc2", hf, f"{h}.mlp.dense_4h_to_h")
    take(out, "decoder.norm", hf, f"{g}.final_layer_norm")
    head_weight(out, hf, cfg, "lm_head", "gpt_neox.embed_in")
    return out


# -- GPT-J -----------------------------------------------------------------------------------------


def gptj_config(c) -> ModelConfig:
    if not c.rotary_dim:
        raise ConfigError(
            "rotary_dim", c.rotary_dim, "a number of features per head (GPT-J rotates part of each head)"
        )
    return ModelConfig(
        arch="decoder",
        n_layers=c.n_layer,
        d_model=c.n_embd,
        n_heads=c.n_head,
        d_ff=c.n_inner,
        vocab_size=c.vocab_size,
        max_len=c.n_positions,
        wrap="parallel_shared",
        norm="layernorm",
        activation=activation("activation_function", c.activation_function),
        position="rope",
        final_norm="on",
        embed_scale=False,
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", False)),
        dropout=float(c.resid_pdrop),
        init="normal",
        family=FamilyOptions(
            norm_eps=c.layer_norm_epsilon,
            rope_dims=c.rotary_dim,
            biases=("ffn", "head"),
            init_std=float(c.initializer_range),
        ),
    )


def gptj_state(hf: dict, cfg: ModelConfig, c=None) -> dict:
    out, hd, r = {"embed.tok.weight": hf["transformer.wte.weight"]}, cfg.head_dim, cfg.rotary_dims
    for i in range(cfg.n_layers):
        h, d = f"transformer.h.{i}", f"decoder.layers.{i}"
        take(out, f"{d}.norm", hf, f"{h}.ln_1")
        q, k = (interleaved_to_half(hf[f"{h}.attn.{p}_proj.weight"], cfg.n_heads, hd, r) for p in "qk")
        put_linear(out, f"{d}.attn.f.qkv", torch.cat([q, k, hf[f"{h}.attn.v_proj.weight"]]))
        take(out, f"{d}.attn.f.out", hf, f"{h}.attn.out_proj")
        take(out, f"{d}.ffn.f.fc1", hf, f"{h}.mlp.fc_in")
        take(out, f"{d}.ffn.f.fc2", hf, f"{h}.mlp.fc_out")
    take(out, "decoder.norm", hf, "transformer.ln_f")
    head_weight(out, hf, cfg, "lm_head", "transformer.wte")
    return out


# -- Falcon ----------------------------------------------------------------------------------------


def falcon_wrap(c) -> str:
    """Falcon's block by its flags (HF FalconDecoderLayer)."""
    if c.new_decoder_architecture:
        require(c, "parallel_attn", True, "the new decoder architecture runs attention and MLP in parallel")
        return "parallel_shared" if c.num_ln_in_parallel_attn == 1 else "parallel"
    return "parallel_shared" if c.parallel_attn else "pre"


def falcon_config(c) -> ModelConfig:
    require(c, "alibi", False, "depthlab has RoPE, not ALiBi")
    kv = c.num_kv_heads if c.new_decoder_architecture else (1 if c.multi_query else c.num_attention_heads)
    return _decoder(
        c,
        wrap=falcon_wrap(c),
        n_kv_heads=None if kv == c.num_attention_heads else kv,
        d_ff=c.ffn_hidden_size,
        norm_eps=c.layer_norm_epsilon,
        activation=activation("activation", c.activation),
        rope_base=float(rope_params(c)["rope_theta"]),
        bias=bool(c.bias),
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", True)),
        dropout=float(c.hidden_dropout),
    )


def _falcon_qkv(t: torch.Tensor, cfg: ModelConfig, new_arch: bool) -> torch.Tensor:
    """Falcon's fused qkv rows (or bias) in our q | k | v order."""
    hd, h, kv = cfg.head_dim, cfg.n_heads, cfg.kv_heads
    if new_arch:  # (kv groups, its h/kv queries then k then v, hd)
        g = t.reshape(kv, h // kv + 2, hd, *t.shape[1:])
        parts = [g[:, : h // kv], g[:, -2], g[:, -1]]
        return torch.cat([p.reshape(-1, *t.shape[1:]) for p in parts])
    return t if kv == 1 else per_head_qkv(t, h, hd)  # multi-query is q | k | v already


def falcon_state(hf: dict, cfg: ModelConfig, c) -> dict:
    new_arch = bool(c.new_decoder_architecture)
    out = {"embed.tok.weight": hf["transformer.word_embeddings.weight"]}
    for i in range(cfg.n_layers):
        h, d = f"transformer.h.{i}", f"decoder.layers.{i}"
        if cfg.wrap == "parallel":
            take(out, f"{d}.attn.norm", hf, f"{h}.ln_attn")
            take(out, f"{d}.ffn.norm", hf, f"{h}.ln_mlp")
        elif cfg.wrap == "parallel_shared":
            take(out, f"{d}.norm", hf, f"{h}.input_layernorm")
        else:
            take(out, f"{d}.attn.norm", hf, f"{h}.input_layernorm")
            take(out, f"{d}.ffn.norm", hf, f"{h}.post_attention_layernorm")
        qkv, bias = f"{h}.self_attention.query_key_value", hf.get(f"{h}.self_attention.query_key_value.bias")
        put_linear(
            out,
            f"{d}.attn.f.qkv",
            _falcon_qkv(hf[f"{qkv}.weight"], cfg, new_arch),
            None if bias is None else _falcon_qkv(bias, cfg, new_arch),
        )
        take(out, f"{d}.attn.f.out", hf, f"{h}.self_attention.dense")
        take(out, f"{d}.ffn.f.fc1", hf, f"{h}.mlp.dense_h_to_4h")
        take(out, f"{d}.ffn.f.fc2", hf, f"{h}.mlp.dense_4h_to_h")
    take(out, "decoder.norm", hf, "transformer.ln_f")
    head_weight(out, hf, cfg, "lm_head", "transformer.word_embeddings")
    return out


# -- Phi -------------------------------------------------------------------------------------------


def phi_config(c) -> ModelConfig:
    kv = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    return _decoder(
        c,
        wrap="parallel_shared",
        n_kv_heads=None if kv == c.num_attention_heads else kv,
        d_ff=c.intermediate_size,
        norm_eps=c.layer_norm_eps,
        activation=activation("hidden_act", c.hidden_act),
        rope_base=float(rope_params(c)["rope_theta"]),
        rope_dims=_rotary(c, rope_params(c).get("partial_rotary_factor", 1.0)),
        qk_norm=bool(c.qk_layernorm),
        biases=("qkv", "out", "ffn", "head"),
        dropout=float(c.resid_pdrop),
    )


def phi_state(hf: dict, cfg: ModelConfig, c=None) -> dict:
    out = {"embed.tok.weight": hf["model.embed_tokens.weight"]}
    for i in range(cfg.n_layers):
        h, d = f"model.layers.{i}", f"decoder.layers.{i}"
        take(out, f"{d}.norm", hf, f"{h}.input_layernorm")
        fused(out, f"{d}.attn.f.qkv", hf, [f"{h}.self_attn.{p}_proj" for p in "qkv"])
        take(out, f"{d}.attn.f.out", hf, f"{h}.self_attn.dense")
        if cfg.qk_norm:
            take(out, f"{d}.attn.f.q_norm", hf, f"{h}.self_attn.q_layernorm")
            take(out, f"{d}.attn.f.k_norm", hf, f"{h}.self_attn.k_layernorm")
        take(out, f"{d}.ffn.f.fc1", hf, f"{h}.mlp.fc1")
        take(out, f"{d}.ffn.f.fc2", hf, f"{h}.mlp.fc2")
    take(out, "decoder.norm", hf, "model.final_layernorm")
    head_weight(out, hf, cfg, "lm_head", "model.embed_tokens")
    return out


register(
    Family(
        "GPT-NeoX",
        ("gpt_neox",),
        {"GPTNeoXForCausalLM": "logits"},
        neox_config,
        neox_state,
        "parallel (two LayerNorms) or pre-LN by use_parallel_residual, partial rotary, fused per-head qkv, "
        "untied output layer",
        "refused: RoPE scaling variants; a partial rotary width that is odd",
    )
)
register(
    Family(
        "GPT-J",
        ("gptj",),
        {"GPTJForCausalLM": "logits"},
        gptj_config,
        gptj_state,
        "parallel with one shared LayerNorm, interleaved rotary on rotary_dim features (q and k rows "
        "permuted to the half-split layout: the same dot products), biases on the MLP and the head",
        "refused: rotary_dim unset",
    )
)
register(
    Family(
        "Falcon",
        ("falcon",),
        {"FalconForCausalLM": "logits"},
        falcon_config,
        falcon_state,
        "parallel with one shared LayerNorm (7B) or two (new architecture, 40B/180B), sequential pre-LN, "
        "multi-query and grouped-query attention, RoPE",
        "refused: ALiBi; the new architecture without parallel attention (HF cannot run it either)",
    )
)
register(
    Family(
        "Phi",
        ("phi",),
        {"PhiForCausalLM": "logits"},
        phi_config,
        phi_state,
        "parallel with one shared LayerNorm, partial rotary, biases everywhere (the head too), "
        "optional per-head QK LayerNorm",
        "refused: RoPE scaling variants (Phi-3 has its own module layout and is probed, not imported)",
    )
)
