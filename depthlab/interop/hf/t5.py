"""T5 (Raffel et al. 2020): a pre-LN encoder-decoder with RMSNorm (no mean, no bias), no position table
but a learned bias per head and log-spaced distance bucket on the attention scores (one per stack,
bidirectional in the encoder, causal in the decoder), scores not scaled by 1/sqrt(d_k), and a tied
head that reads the last stream x d_model^-1/2.

T5's own init draws each matrix with its own std (q: (d_model d_kv)^-1/2, embeddings: 1, ...); a model
built from a T5 config here uses xavier instead (the import of weights is exact).
"""

from __future__ import annotations

from depthlab.config import FamilyOptions, ModelConfig
from depthlab.errors import ConfigError
from depthlab.interop.hf.family import Family, fused, head_weight, register, take

_FFN = {
    "relu": "relu",
    "gelu": "gelu",
    "gated-gelu": "geglu_tanh",
    "gated-silu": "swiglu",
    "gated-relu": None,
}


def t5_config(c) -> ModelConfig:
    act = _FFN.get(c.feed_forward_proj)
    if act is None:
        allowed = ", ".join(k for k, v in _FFN.items() if v)
        raise ConfigError("feed_forward_proj", c.feed_forward_proj, f"one of {allowed}")
    return ModelConfig(
        arch="encdec",
        n_layers=c.num_layers,
        enc_layers=c.num_layers,
        dec_layers=c.num_decoder_layers,
        d_model=c.d_model,
        n_heads=c.num_heads,
        d_ff=c.d_ff,
        vocab_size=c.vocab_size,
        wrap="pre",
        norm="rmsnorm",
        activation=act,
        position="relative",
        final_norm="on",
        embed_scale=False,
        bias=False,
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", True)),
        dropout=float(c.dropout_rate),
        init="xavier",
        family=FamilyOptions(
            d_head=None if c.d_kv * c.num_heads == c.d_model else c.d_kv,
            attn_scale=1.0,
            rel_buckets=c.relative_attention_num_buckets,
            rel_max_distance=c.relative_attention_max_distance,
            norm_eps=c.layer_norm_epsilon,
            head_scale=bool(getattr(c, "scale_decoder_outputs", getattr(c, "tie_word_embeddings", True))),
        ),
    )


def t5_state(hf: dict, cfg: ModelConfig, c=None) -> dict:
    out = {"embed.tok.weight": hf["shared.weight"]}
    for side in ("encoder", "decoder"):
        out[f"{side}.rel_bias.bias.weight"] = hf[
            f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        ]
        take(out, f"{side}.norm", hf, f"{side}.final_layer_norm")
        for i in range(cfg.enc_depth if side == "encoder" else cfg.dec_depth):
            h, d = f"{side}.block.{i}.layer", f"{side}.layers.{i}"
            fused(out, f"{d}.attn.f.qkv", hf, [f"{h}.0.SelfAttention.{p}" for p in "qkv"])
            take(out, f"{d}.attn.f.out", hf, f"{h}.0.SelfAttention.o")
            take(out, f"{d}.attn.norm", hf, f"{h}.0.layer_norm")
            ffn = 1
            if side == "decoder":
                take(out, f"{d}.cross.f.q", hf, f"{h}.1.EncDecAttention.q")
                fused(out, f"{d}.cross.f.kv", hf, [f"{h}.1.EncDecAttention.k", f"{h}.1.EncDecAttention.v"])
                take(out, f"{d}.cross.f.out", hf, f"{h}.1.EncDecAttention.o")
                take(out, f"{d}.cross.norm", hf, f"{h}.1.layer_norm")
                ffn = 2
            dense = f"{h}.{ffn}.DenseReluDense"
            if f"{dense}.wi_0.weight" in hf:  # gated: act(wi_0 x) * wi_1 x = our [gate; up]
                fused(out, f"{d}.ffn.f.fc1", hf, [f"{dense}.wi_0", f"{dense}.wi_1"])
            else:
                take(out, f"{d}.ffn.f.fc1", hf, f"{dense}.wi")
            take(out, f"{d}.ffn.f.fc2", hf, f"{dense}.wo")
            take(out, f"{d}.ffn.norm", hf, f"{h}.{ffn}.layer_norm")
    head_weight(out, hf, cfg, "lm_head", "shared")
    return out


register(
    Family(
        "T5",
        ("t5",),
        {"T5ForConditionalGeneration": "logits"},
        t5_config,
        t5_state,
        "pre-RMSNorm encoder-decoder, relative position buckets per stack, unscaled scores, d_kv apart "
        "from d_model / heads, ReLU or gated-GELU FFN (T5 v1.1, Flan-T5), the scaled tied head, padding",
        "approximated: T5's per-matrix init (a model built from a T5 config uses xavier); "
        "refused: gated-relu",
    )
)
