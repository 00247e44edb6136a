"""BART (Lewis et al. 2020) and Marian: post-LN encoder-decoders, the original "Add & Norm" Transformer.

Both share one token table between encoder, decoder and head (plus ``final_logits_bias``: our head bias)
and give each side its own position table (``side_embeddings``). BART adds a LayerNorm on the embeddings
(``layernorm_embedding``) and offsets its learned positions by 2; Marian scales embeddings by sqrt(d)
and adds a fixed sinusoidal table whose sines fill the first half of each vector and cosines the second,
not interleaved as in depthlab's ``sinusoidal``: it is imported as a learned table with the same values.
"""

from __future__ import annotations

from depthlab.config import FamilyOptions, ModelConfig
from depthlab.errors import ConfigError
from depthlab.interop.hf.family import Family, activation, fused, put_linear, register, take


def _same(c, enc: str, dec: str):
    """The value both sides share (ConfigError when encoder and decoder differ: depthlab has one)."""
    a, b = getattr(c, enc), getattr(c, dec)
    if a != b:
        raise ConfigError(
            dec, b, f"{a} like {enc} (depthlab's encoder and decoder share their width and heads)"
        )
    return a


def seq2seq_config(c, embed_norm: bool) -> ModelConfig:
    return ModelConfig(
        arch="encdec",
        n_layers=c.encoder_layers,
        enc_layers=c.encoder_layers,
        dec_layers=c.decoder_layers,
        d_model=c.d_model,
        n_heads=_same(c, "encoder_attention_heads", "decoder_attention_heads"),
        d_ff=_same(c, "encoder_ffn_dim", "decoder_ffn_dim"),
        vocab_size=c.vocab_size,
        max_len=c.max_position_embeddings,
        wrap="post",
        norm="layernorm",
        activation=activation("activation_function", c.activation_function),
        position="learned",
        final_norm="off",
        embed_scale=bool(c.scale_embedding),
        tie_embeddings=True,
        dropout=float(c.dropout),
        init="normal",
        family=FamilyOptions(
            norm_eps=1e-5,  # nn.LayerNorm's default, which both use
            embed_norm=embed_norm,
            side_embeddings=True,
            biases=("qkv", "out", "ffn", "head"),
            init_std=float(c.init_std),
        ),
    )


def bart_config(c) -> ModelConfig:
    return seq2seq_config(c, embed_norm=True)


def marian_config(c) -> ModelConfig:
    if not getattr(c, "share_encoder_decoder_embeddings", True) or c.decoder_vocab_size not in (
        None,
        c.vocab_size,
    ):
        raise ConfigError("share_encoder_decoder_embeddings", False, "true (depthlab shares one token table)")
    return seq2seq_config(c, embed_norm=False)


def _attention(out: dict, ours: str, hf: dict, theirs: str, cross: bool) -> None:
    if cross:
        take(out, f"{ours}.q", hf, f"{theirs}.q_proj")
        fused(out, f"{ours}.kv", hf, [f"{theirs}.k_proj", f"{theirs}.v_proj"])
    else:
        fused(out, f"{ours}.qkv", hf, [f"{theirs}.{p}_proj" for p in "qkv"])
    take(out, f"{ours}.out", hf, f"{theirs}.out_proj")


def seq2seq_state(hf: dict, cfg: ModelConfig, offset: int) -> dict:
    """Our state dict from a BartForConditionalGeneration's or MarianMTModel's."""
    tok = hf["model.shared.weight"]
    out = {"embed.tok.weight": tok, "dec_embed.tok.weight": tok, "head.weight": tok}
    out["head.bias"] = hf["final_logits_bias"].reshape(-1)
    for side, ours in (("encoder", "embed"), ("decoder", "dec_embed")):
        out[f"{ours}.pos.weight"] = hf[f"model.{side}.embed_positions.weight"][offset:]
        if cfg.family.embed_norm:
            take(out, f"{ours}.norm", hf, f"model.{side}.layernorm_embedding")
        for i in range(cfg.enc_depth if side == "encoder" else cfg.dec_depth):
            h, d = f"model.{side}.layers.{i}", f"{side}.layers.{i}"
            _attention(out, f"{d}.attn.f", hf, f"{h}.self_attn", cross=False)
            take(out, f"{d}.attn.norm", hf, f"{h}.self_attn_layer_norm")
            if side == "decoder":
                _attention(out, f"{d}.cross.f", hf, f"{h}.encoder_attn", cross=True)
                take(out, f"{d}.cross.norm", hf, f"{h}.encoder_attn_layer_norm")
            put_linear(out, f"{d}.ffn.f.fc1", hf[f"{h}.fc1.weight"], hf[f"{h}.fc1.bias"])
            put_linear(out, f"{d}.ffn.f.fc2", hf[f"{h}.fc2.weight"], hf[f"{h}.fc2.bias"])
            take(out, f"{d}.ffn.norm", hf, f"{h}.final_layer_norm")
    return out


register(
    Family(
        "BART",
        ("bart",),
        {"BartForConditionalGeneration": "logits"},
        bart_config,
        lambda hf, cfg, c=None: seq2seq_state(hf, cfg, offset=2),
        "post-LN encoder-decoder, embedding LayerNorm per side, learned positions (offset 2) per side, "
        "one shared token table, final_logits_bias, padding",
        "approximated: final_logits_bias, a fixed buffer in HF, is a head bias that training updates; refused: "
        "encoder and decoder of different widths or head counts; mBART (pre-LN) is another model_type",
    )
)
register(
    Family(
        "Marian",
        ("marian",),
        {"MarianMTModel": "logits"},
        marian_config,
        lambda hf, cfg, c=None: seq2seq_state(hf, cfg, offset=0),
        "post-LN encoder-decoder, embeddings x sqrt(d), SiLU, one shared token table, final_logits_bias, "
        "padding",
        "approximated: Marian's fixed sinusoidal positions (sines then cosines) and final_logits_bias (a "
        "fixed buffer) become a learned table with the same values and a head bias, which training would "
        "update; refused: separate decoder embeddings",
    )
)
