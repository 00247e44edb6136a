"""BERT (Devlin et al. 2019): x = LN(x + attn(x)); x = LN(x + ffn(x)), after LN(word + position + type).

BERT keeps q, k, v separate: stacked as rows of our fused qkv. It adds
``token_type_embeddings[token_type_ids]``; token_type_ids default to 0, so row 0 is folded into our
learned position table (depthlab has no token types). The pooler and MLM head are not imported.
"""

from __future__ import annotations

from depthlab.config import FamilyOptions, ModelConfig
from depthlab.interop.hf.family import Family, activation, fused, register, require, take


def bert_config(c) -> ModelConfig:
    """BERT's config as ours: post-LN encoder with an embedding LayerNorm, no sqrt(d) scale."""
    require(c, "is_decoder", False, "BertModel is imported as a bidirectional encoder")
    require(c, "add_cross_attention", False, "BertModel is imported as an encoder")
    require(c, "position_embedding_type", "absolute", "depthlab's learned positions are absolute")
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
        activation=activation("hidden_act", c.hidden_act),
        position="learned",
        final_norm="off",  # post-LN: the stream is already normalised by every sublayer
        embed_scale=False,
        tie_embeddings=True,
        dropout=float(c.hidden_dropout_prob),
        init="normal",
        family=FamilyOptions(norm_eps=c.layer_norm_eps, embed_norm=True, init_std=float(c.initializer_range)),
    )


def bert_state(hf: dict, cfg: ModelConfig, c=None) -> dict:
    """Our state dict from a BertModel's (q, k, v stacked; token type 0 folded into positions)."""
    e = "embeddings"
    out = {
        "embed.tok.weight": hf[f"{e}.word_embeddings.weight"],
        # token_type_ids default to 0, so every position gets token_type_embeddings[0] added
        "embed.pos.weight": hf[f"{e}.position_embeddings.weight"]
        + hf[f"{e}.token_type_embeddings.weight"][0],
        "head.weight": hf[f"{e}.word_embeddings.weight"],
    }
    take(out, "embed.norm", hf, f"{e}.LayerNorm")
    for i in range(cfg.n_layers):
        h, d = f"encoder.layer.{i}", f"encoder.layers.{i}"
        fused(out, f"{d}.attn.f.qkv", hf, [f"{h}.attention.self.{p}" for p in ("query", "key", "value")])
        take(out, f"{d}.attn.f.out", hf, f"{h}.attention.output.dense")
        take(out, f"{d}.attn.norm", hf, f"{h}.attention.output.LayerNorm")
        take(out, f"{d}.ffn.f.fc1", hf, f"{h}.intermediate.dense")
        take(out, f"{d}.ffn.f.fc2", hf, f"{h}.output.dense")
        take(out, f"{d}.ffn.norm", hf, f"{h}.output.LayerNorm")
    return out


register(
    Family(
        name="BERT",
        model_types=("bert",),
        classes={"BertModel": "states"},
        config=bert_config,
        state=bert_state,
        exact="post-LN encoder, embedding LayerNorm, learned positions (token type 0 folded in), padding",
        approximated="approximated: token type 0 and the positions are one table, which training moves as "
        "one; not imported: token types other than 0, the pooler and the MLM head",
    )
)
