"""GPT-2 (Radford et al. 2019): x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)); logits = ln_f(x) @ wte^T.

GPT-2's ``Conv1D`` stores weights as (in, out): transposed into ``nn.Linear``'s (out, in). ``c_attn``'s
output is q | k | v, each d_model wide, heads contiguous within each: our qkv layout.
"""

from __future__ import annotations

from depthlab.config import FamilyOptions, ModelConfig
from depthlab.interop.hf.family import Family, activation, put_linear, register, require, take


def gpt2_config(c) -> ModelConfig:
    """GPT-2's config as ours: pre-LN decoder, learned positions, final ln_f, GPT-2's scaled init."""
    require(c, "scale_attn_weights", True, "depthlab scales scores by 1/sqrt(head_dim)")
    require(c, "scale_attn_by_inverse_layer_idx", False, "depthlab has no per-layer score scaling")
    require(c, "add_cross_attention", False, "GPT2LMHeadModel is imported as a decoder-only LM")
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
        activation=activation("activation_function", c.activation_function),
        position="learned",
        final_norm="on",
        embed_scale=False,
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", True)),
        dropout=float(c.resid_pdrop),
        init="gpt2",
        family=FamilyOptions(norm_eps=c.layer_norm_epsilon, init_std=float(c.initializer_range)),
    )


def gpt2_state(hf: dict, cfg: ModelConfig, c=None) -> dict:
    """Our state dict from a GPT2LMHeadModel's (Conv1D weights are (in, out): transposed)."""
    out = {"embed.tok.weight": hf["transformer.wte.weight"], "embed.pos.weight": hf["transformer.wpe.weight"]}
    for i in range(cfg.n_layers):
        h, d = f"transformer.h.{i}", f"decoder.layers.{i}"
        take(out, f"{d}.attn.norm", hf, f"{h}.ln_1")
        put_linear(out, f"{d}.attn.f.qkv", hf[f"{h}.attn.c_attn.weight"].t(), hf[f"{h}.attn.c_attn.bias"])
        put_linear(out, f"{d}.attn.f.out", hf[f"{h}.attn.c_proj.weight"].t(), hf[f"{h}.attn.c_proj.bias"])
        take(out, f"{d}.ffn.norm", hf, f"{h}.ln_2")
        put_linear(out, f"{d}.ffn.f.fc1", hf[f"{h}.mlp.c_fc.weight"].t(), hf[f"{h}.mlp.c_fc.bias"])
        put_linear(out, f"{d}.ffn.f.fc2", hf[f"{h}.mlp.c_proj.weight"].t(), hf[f"{h}.mlp.c_proj.bias"])
    take(out, "decoder.norm", hf, "transformer.ln_f")
    out["head.weight"] = hf["transformer.wte.weight"] if cfg.tie_embeddings else hf["lm_head.weight"]
    return out


register(
    Family(
        name="GPT-2",
        model_types=("gpt2",),
        classes={"GPT2LMHeadModel": "logits"},
        config=gpt2_config,
        state=gpt2_state,
        exact="pre-LN decoder, learned positions, ln_f, tied or untied head, GPT-2's init",
        approximated="refused: per-layer score scaling (scale_attn_by_inverse_layer_idx), cross-attention",
    )
)
