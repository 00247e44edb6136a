"""OPT (Zhang et al. 2022): a decoder with learned positions (offset 2), pre-LN, except the 350m shape:
post-LN (``do_layer_norm_before=False``), no final norm, and a 512-wide token table projected in and
out of the 1024-wide stream (``word_embed_proj_dim``: our ``d_embed``).

OPT numbers positions by counting real tokens (cumsum of the attention mask): with right padding or
none that is the index depthlab uses; with left padding OPT's real tokens start at position 0 and
ours do not.
"""

from __future__ import annotations

from depthlab.config import FamilyOptions, ModelConfig
from depthlab.interop.hf.family import Family, activation, fused, head_weight, register, require, take

OFFSET = 2  # OPTLearnedPositionalEmbedding's first two rows are never used for real positions


def opt_config(c) -> ModelConfig:
    require(c, "layer_norm_elementwise_affine", True, "depthlab's LayerNorm has a gain and a bias")
    pre = bool(c.do_layer_norm_before)
    return ModelConfig(
        arch="decoder",
        n_layers=c.num_hidden_layers,
        d_model=c.hidden_size,
        n_heads=c.num_attention_heads,
        d_ff=c.ffn_dim,
        vocab_size=c.vocab_size,
        max_len=c.max_position_embeddings,
        wrap="pre" if pre else "post",
        norm="layernorm",
        activation=activation("activation_function", c.activation_function),
        position="learned",
        final_norm="on" if pre and not getattr(c, "_remove_final_layer_norm", False) else "off",
        embed_scale=False,
        bias=bool(c.enable_bias),
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", True)),
        dropout=float(c.dropout),
        init="normal",
        family=FamilyOptions(
            norm_eps=1e-5,  # nn.LayerNorm's default, which OPT uses
            d_embed=c.word_embed_proj_dim if c.word_embed_proj_dim != c.hidden_size else None,
            init_std=float(c.init_std),
        ),
    )


def opt_state(hf: dict, cfg: ModelConfig, c=None) -> dict:
    g = "model.decoder"
    out = {
        "embed.tok.weight": hf[f"{g}.embed_tokens.weight"],
        "embed.pos.weight": hf[f"{g}.embed_positions.weight"][OFFSET:],
    }
    if cfg.family.d_embed:
        out["embed.proj.weight"] = hf[f"{g}.project_in.weight"]
        out["head_proj.weight"] = hf[f"{g}.project_out.weight"]
    for i in range(cfg.n_layers):
        h, d = f"{g}.layers.{i}", f"decoder.layers.{i}"
        fused(out, f"{d}.attn.f.qkv", hf, [f"{h}.self_attn.{p}_proj" for p in "qkv"])
        take(out, f"{d}.attn.f.out", hf, f"{h}.self_attn.out_proj")
        take(out, f"{d}.attn.norm", hf, f"{h}.self_attn_layer_norm")
        take(out, f"{d}.ffn.f.fc1", hf, f"{h}.fc1")
        take(out, f"{d}.ffn.f.fc2", hf, f"{h}.fc2")
        take(out, f"{d}.ffn.norm", hf, f"{h}.final_layer_norm")  # the layer's FFN norm, despite its name
    if cfg.final_norm == "on":
        take(out, "decoder.norm", hf, f"{g}.final_layer_norm")
    head_weight(out, hf, cfg, "lm_head", f"{g}.embed_tokens")
    return out


register(
    Family(
        "OPT",
        ("opt",),
        {"OPTForCausalLM": "logits"},
        opt_config,
        opt_state,
        "pre-LN with a final norm, or post-LN without (do_layer_norm_before=False, the 350m shape), "
        "learned positions, the 350m's projected 512-wide embedding, biases, right padding",
        "approximated: with left padding OPT counts positions from the first real token, depthlab from the "
        "sequence start; refused: LayerNorms without gain and bias",
    )
)
