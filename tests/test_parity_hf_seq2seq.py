"""depthlab equals the encoder-decoder families with imported weights (float32, 1e-5): BART and Marian
(post-LN, "Add & Norm"), T5 (pre-RMSNorm, relative position buckets; ReLU with the scaled tied head,
and gated GELU as in T5 v1.1), with padded sources and targets; a swapped pair of query heads fails.
"""

from __future__ import annotations

import hf_families as H
import pytest
import torch

from depthlab import ConfigError
from depthlab.interop import config_from_hf

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

B, S, T = 2, 11, 9
CASES = {
    "bart": (H.bart, "post", {"embed_norm": True, "side_embeddings": True, "enc_layers": 2, "dec_layers": 3}),
    "marian": (H.marian, "post", {"embed_norm": False, "embed_scale": True, "activation": "silu"}),
    "t5": (H.t5, "pre", {"position": "relative", "attn_scale": 1.0, "d_head": 12, "head_scale": True}),
    "t5_gated": (
        lambda: H.t5(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
        "pre",
        {"activation": "geglu_tanh", "head_scale": False},
    ),
}


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, H.VOCAB, (B, S), generator=g), torch.randint(3, H.VOCAB, (B, T), generator=g)


def _imported(name, randomize):
    make, wrap, options = CASES[name]
    hf = randomize(make())
    if name.startswith("t5"):
        H.t5_query_scale(hf)
    ours = H.imported(hf, wrap, options)
    assert ours.cfg.arch == "encdec"
    return hf, ours


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("padded", [False, True])
def test_logits_match(name, padded, randomize, assert_parity):
    hf, ours = _imported(name, randomize)
    src, tgt = _batch()
    src_keep, tgt_keep = torch.ones(B, S, dtype=torch.long), torch.ones(B, T, dtype=torch.long)
    if padded:
        src_keep[0, 7:] = 0  # right padding
        src_keep[1, :2] = 0  # left padding
        tgt_keep[0, 6:] = 0
    with torch.no_grad():
        mine = ours(src, tgt, src_padding_mask=src_keep == 0, tgt_padding_mask=tgt_keep == 0)
        ref = hf(
            input_ids=src, attention_mask=src_keep, decoder_input_ids=tgt, decoder_attention_mask=tgt_keep
        )
    real = tgt_keep.bool()
    assert_parity(mine[real], ref.logits[real])
    assert config_from_hf(hf.config).wrap == ours.cfg.wrap


@pytest.mark.parametrize("name", sorted(CASES))
def test_train_mode_logits_and_gradients_match(name, randomize, assert_parity):
    """Imported from a model in train mode (no dropout), ours is in train mode, gives the same logits, and
    the same next-token loss gives its parameters gradients of the same total norm, but where depthlab
    trains what HF holds fixed (the documented approximations): BART's and Marian's final_logits_bias (an
    HF buffer), Marian's sinusoidal positions."""
    hf, _ = _imported(name, randomize)
    ours = H.imported(hf.train(), *CASES[name][1:])
    assert ours.training
    src, tgt = _batch(2)
    ref, mine = hf(input_ids=src, decoder_input_ids=tgt).logits, ours(src, tgt)
    assert_parity(mine.detach(), ref.detach())
    fixed_in_hf = {
        "bart": ("head.bias",),
        "marian": ("head.bias", "embed.pos.weight", "dec_embed.pos.weight"),
    }
    skip = fixed_in_hf.get(name, ())
    assert H.grad_norm(ours, mine, tgt, skip) == pytest.approx(H.grad_norm(hf, ref, tgt), rel=1e-5)
    if skip:  # what HF holds fixed gets a gradient here: training would move it
        assert H.grad_norm(ours, ours(src, tgt), tgt) > H.grad_norm(ours, ours(src, tgt), tgt, skip)


@pytest.mark.parametrize("name", sorted(CASES))
def test_swapped_heads_are_detected(name, randomize, assert_parity, swap_query_heads):
    hf, ours = _imported(name, randomize)
    swap_query_heads(ours)  # in the decoder's first layer
    src, tgt = _batch(1)
    with torch.no_grad(), pytest.raises(AssertionError, match="not close"):
        assert_parity(ours(src, tgt), hf(input_ids=src, decoder_input_ids=tgt).logits)


def test_t5_relative_bias_is_per_stack(randomize):
    hf, ours = _imported("t5", randomize)
    assert ours.encoder.rel_bias.bidirectional and not ours.decoder.rel_bias.bidirectional
    enc = hf.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight
    torch.testing.assert_close(ours.encoder.rel_bias.bias.weight, enc)


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: H.bart(decoder_attention_heads=2), "decoder_attention_heads"),
        (lambda: H.bart(decoder_ffn_dim=40), "decoder_ffn_dim"),
        (lambda: H.marian(share_encoder_decoder_embeddings=False), "share_encoder_decoder_embeddings"),
        (lambda: H.t5(feed_forward_proj="gated-relu"), "feed_forward_proj"),
    ],
)
def test_what_is_not_imported_is_refused_by_name(make, field):
    with pytest.raises(ConfigError) as e:
        config_from_hf(make().config)
    assert e.value.field == field
