"""depthlab equals the decoder families people train today, with imported weights (float32, 1e-5).

Mistral, Qwen2, Qwen3, OLMo 2, Gemma 2, Gemma 3, GPT-NeoX, GPT-J, Falcon (three block shapes), Phi and
OPT (pre-LN and the 350m's post-LN with a projected embedding): tiny configs, random weights
re-randomised with a gain (conftest ``randomize``) so that a mis-mapped weight shows, compared on the
logits with and without padding; a swapped pair of query heads must fail (the negative control).
"""

from __future__ import annotations

import types

import hf_families as H
import pytest
import torch

from depthlab import ConfigError
from depthlab.interop import config_from_hf

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

B, T = 2, 13
# name -> (builder, the wrapping it is in depthlab's terms, the options that make it that family)
CASES = {
    "mistral": (H.mistral, "pre", {"sliding_window": 5, "global_every": None, "bias": False}),
    "qwen2": (H.qwen2, "pre", {"biases": ("qkv",)}),
    "qwen3": (H.qwen3, "pre", {"qk_norm": True, "qk_norm_scope": "head", "d_head": 12}),
    "olmo2": (H.olmo2, "reorder", {"qk_norm": True, "qk_norm_scope": "projection"}),
    "gemma2": (
        H.gemma2,
        "sandwich",
        {
            "gain_offset": True,
            "embed_scale": True,
            "attn_softcap": 5.0,
            "logit_softcap": 3.0,
            "global_every": 2,
        },
    ),
    "gemma3": (
        H.gemma3,
        "sandwich",
        {"qk_norm": True, "rope_base": 1e6, "rope_local_base": 1e4, "global_every": 3, "attn_softcap": None},
    ),
    "neox": (H.neox, "parallel", {"rope_dims": 4, "tie_embeddings": False}),
    "neox_sequential": (lambda: H.neox(use_parallel_residual=False), "pre", {"rope_dims": 4}),
    "gptj": (H.gptj, "parallel_shared", {"rope_dims": 4, "biases": ("ffn", "head")}),
    "falcon_7b": (
        lambda: H.falcon(multi_query=True, parallel_attn=True),
        "parallel_shared",
        {"n_kv_heads": 1},
    ),
    "falcon_40b": (
        lambda: H.falcon(new_decoder_architecture=True, num_kv_heads=2),
        "parallel",
        {"n_kv_heads": 2},
    ),
    "falcon_sequential": (
        lambda: H.falcon(multi_query=False, parallel_attn=False, bias=True),
        "pre",
        {"bias": True},
    ),
    "phi": (H.phi, "parallel_shared", {"rope_dims": 4, "biases": ("qkv", "out", "ffn", "head")}),
    "phi_qk_norm": (
        lambda: H.phi(qk_layernorm=True),
        "parallel_shared",
        {"qk_norm": True, "norm": "layernorm"},
    ),
    "opt": (H.opt, "pre", {"final_norm": "on", "d_embed": None}),
    "opt_350m": (
        lambda: H.opt(do_layer_norm_before=False, word_embed_proj_dim=16),
        "post",
        {"final_norm": "off", "d_embed": 16},
    ),
}


def _tokens(seed: int = 0) -> torch.Tensor:
    return torch.randint(3, H.VOCAB, (B, T), generator=torch.Generator().manual_seed(seed))


def _imported(name, randomize):
    make, wrap, options = CASES[name]
    hf = randomize(make())
    if name.startswith("gemma"):
        H.unit_offset_gains(hf)
    return hf, H.imported(hf, wrap, options)


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match(name, randomize, assert_parity):
    hf, ours = _imported(name, randomize)
    tokens = _tokens()
    with torch.no_grad():
        assert_parity(ours(tokens), hf(tokens).logits)
    assert config_from_hf(hf.config).wrap == ours.cfg.wrap  # the config alone gives the same wiring


@pytest.mark.parametrize("name", sorted(CASES))
def test_padded_logits_match_at_real_tokens(name, randomize, assert_parity):
    hf, ours = _imported(name, randomize)
    tokens, keep = _tokens(1), torch.ones(B, T, dtype=torch.long)
    keep[0, 9:] = 0  # right padding
    keep[1, :3] = 0  # left padding
    rows = [0] if name.startswith("opt") else [0, 1]  # OPT counts positions from the first real token
    with torch.no_grad():
        mine = ours(tokens, padding_mask=keep == 0)
        ref = hf(tokens, attention_mask=keep).logits
    for r in rows:
        real = keep[r].bool()
        assert_parity(mine[r][real], ref[r][real])


@pytest.mark.parametrize("name", sorted(CASES))
def test_train_mode_logits_and_gradients_match(name, randomize, assert_parity):
    """Imported from a model in train mode (no dropout), ours is in train mode, gives the same logits, and
    its parameters get gradients of the same total norm (fused or permuted layouts keep it)."""
    hf, _ = _imported(name, randomize)
    ours = H.imported(hf.train(), *CASES[name][1:])
    assert ours.training
    tokens = _tokens(3)
    ref, mine = hf(tokens).logits, ours(tokens)
    assert_parity(mine.detach(), ref.detach())
    assert H.grad_norm(ours, mine, tokens) == pytest.approx(H.grad_norm(hf, ref, tokens), rel=1e-5)


def test_opt_left_padding_shifts_its_positions(randomize):
    """The documented approximation: OPT numbers a left-padded row's positions from its first real token."""
    hf, ours = _imported("opt", randomize)
    tokens, keep = _tokens(1), torch.ones(B, T, dtype=torch.long)
    keep[1, :3] = 0
    with torch.no_grad():
        mine, ref = ours(tokens, padding_mask=keep == 0)[1, 3:], hf(tokens, attention_mask=keep).logits[1, 3:]
    assert not torch.allclose(mine, ref, atol=1e-3)


@pytest.mark.parametrize("name", sorted(CASES))
def test_swapped_heads_are_detected(name, randomize, assert_parity, swap_query_heads):
    hf, ours = _imported(name, randomize)
    swap_query_heads(ours)
    tokens = _tokens(2)
    with torch.no_grad(), pytest.raises(AssertionError, match="not close"):
        assert_parity(ours(tokens), hf(tokens).logits)


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: H.falcon(alibi=True), "alibi"),
        (lambda: H.gemma3(use_bidirectional_attention=True), "use_bidirectional_attention"),
        (lambda: H.qwen2(use_sliding_window=True, sliding_window=4, max_window_layers=1), "layer_types"),
        (
            lambda: H.mistral(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}),
            "rope_type",
        ),
        (lambda: H.opt(layer_norm_elementwise_affine=False), "layer_norm_elementwise_affine"),
    ],
)
def test_what_is_not_imported_is_refused_by_name(make, field):
    with pytest.raises(ConfigError) as e:
        config_from_hf(make().config)
    assert e.value.field == field


def test_gptj_without_a_rotary_width_is_refused():
    # transformers' own config refuses rotary_dim=None today; a config written by another version may not
    with pytest.raises(ConfigError, match="rotary_dim"):
        config_from_hf(types.SimpleNamespace(model_type="gptj", rotary_dim=None))
