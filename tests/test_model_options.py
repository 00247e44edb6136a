"""The options released model families need, each checked against its formula written out here.

The parallel wrappings, head width, score scale and soft-caps, partial rotary, sliding windows (and
their own RoPE base), T5's relative buckets, QK-norm over the projection, RMSNorm (1 + w), bias sites,
side embeddings, a factorised embedding, the scaled head and the normal init scheme.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from depthlab import FamilyOptions, ModelConfig, build_model
from depthlab.model.attention import Context
from depthlab.model.norms import RMSNorm
from depthlab.model.positions import apply_rope, relative_bucket, rope_tables
from depthlab.model.stack import uses_final_norm

pytestmark = pytest.mark.usefixtures("one_thread")


def _gains(model, seed=0):
    """Non-trivial norm gains and biases, so that a missing norm or bias cannot hide."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
    return model


def _tokens(cfg, B=2, T=9, seed=0):
    return torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


# -- parallel -----------------------------------------------------------------------------------


@pytest.mark.parametrize("residual", [True, False])
def test_parallel_block_is_the_sum_of_its_branches(residual):
    cfg = ModelConfig(
        n_layers=3, d_model=16, n_heads=2, wrap="parallel", residual=("attn", "ffn") if residual else ()
    )
    block = _gains(build_model(cfg)).stack.layers[1]
    x, ctx = torch.randn(2, 5, 16) * 2, Context()
    r = 1.0 if residual else 0.0
    a, f = block.attn, block.ffn
    want = r * x + a.f(a.norm(x), ctx) + f.f(f.norm(x), ctx)  # GPT-NeoX: two norms, one stream
    torch.testing.assert_close(block(x, ctx), want)
    assert a.norm is not f.norm


def test_parallel_shared_block_reads_one_norm():
    cfg = ModelConfig(n_layers=3, d_model=16, n_heads=2, wrap="parallel_shared")
    block = _gains(build_model(cfg)).stack.layers[0]
    x, ctx = torch.randn(2, 5, 16) * 2, Context()
    h = block.norm(x)
    torch.testing.assert_close(block(x, ctx), x + block.attn.f(h, ctx) + block.ffn.f(h, ctx))  # GPT-J
    norms = [m for m in block.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms == [block.norm]  # one norm per block, no unused ones in the sublayers
    with pytest.raises(TypeError, match="block"):
        block.attn(x, ctx)


def test_parallel_differs_from_sequential_and_keeps_a_final_norm():
    kw = dict(n_layers=2, d_model=16, n_heads=2, vocab_size=20)
    seq, par = ModelConfig(wrap="pre", **kw), ModelConfig(wrap="parallel", **kw)
    torch.manual_seed(0)
    a = build_model(seq)
    b = build_model(par)
    b.load_state_dict(a.state_dict())  # same parameter names and shapes: only the wiring differs
    t = _tokens(seq)
    assert not torch.allclose(a(t), b(t), atol=1e-4)
    assert uses_final_norm(par) and uses_final_norm(ModelConfig(wrap="parallel_shared"))


def test_parallel_encdec_sums_cross_attention_too():
    cfg = ModelConfig(arch="encdec", n_layers=2, d_model=16, n_heads=2, wrap="parallel")
    model = _gains(build_model(cfg))
    block = model.decoder.layers[0]
    x, mem = torch.randn(2, 4, 16), torch.randn(2, 6, 16)
    ctx = Context(memory=mem)
    want = x + sum(w.f(w.norm(x), ctx) for w in (block.attn, block.cross, block.ffn))
    torch.testing.assert_close(block(x, ctx), want)


# -- attention options ----------------------------------------------------------------------------


def _one_attention(**kw):
    """One layer's attention and its config; ``kw`` names core fields and family options flat."""
    cfg = ModelConfig(n_layers=1, d_model=16, n_heads=2).replace(**kw)
    return _gains(build_model(cfg)).stack.layers[0].attn.f, cfg


def _manual_attention(attn, x, scale, softcap=None, mask=None, bias=None):
    """softmax(scale q k^T, capped, biased, causal) v, with q, k, v, out read from the module."""
    B, T, _ = x.shape
    h, hd = attn.n_heads, attn.head_dim
    q, k, v = attn.qkv(x).split([h * hd, h * hd, h * hd], dim=-1)
    q, k, v = (t.view(B, T, h, hd).transpose(1, 2) for t in (q, k, v))
    s = q @ k.transpose(-2, -1) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    if mask is not None:
        causal = causal & mask
    s = s.masked_fill(~causal, float("-inf"))
    y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, h * hd)
    return attn.out(y)


@pytest.mark.parametrize(
    "kw, scale",
    [
        ({}, 8**-0.5),
        ({"attn_scale": 1.0}, 1.0),  # T5: no 1/sqrt(d_k)
        ({"d_head": 12}, 12**-0.5),  # heads wider than d_model / n_heads
        ({"attn_softcap": 2.0, "attn_scale": 0.5}, 0.5),  # Gemma 2's tanh cap
    ],
)
def test_attention_scale_head_width_and_softcap_follow_the_formula(kw, scale):
    attn, cfg = _one_attention(position="none", **kw)
    x = torch.randn(2, 7, 16) * 3
    assert (
        attn.qkv.out_features == 3 * cfg.n_heads * cfg.head_dim and attn.out.in_features == 2 * cfg.head_dim
    )
    want = _manual_attention(attn, x, scale, kw.get("attn_softcap"))
    torch.testing.assert_close(attn(x, Context()), want, rtol=1e-5, atol=1e-5)


def test_softcap_bounds_scores_and_logits():
    attn, _ = _one_attention(position="none", attn_softcap=0.5)
    x = torch.randn(1, 6, 16) * 10
    capped = _manual_attention(attn, x, 8**-0.5, softcap=0.5)
    uncapped = _manual_attention(attn, x, 8**-0.5)
    torch.testing.assert_close(attn(x, Context()), capped, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(capped, uncapped, atol=1e-3)  # the cap is active at this scale
    cfg = ModelConfig(n_layers=1, d_model=16, n_heads=2, family=FamilyOptions(logit_softcap=3.0))
    logits = build_model(cfg)(_tokens(cfg)) * 1.0
    assert logits.abs().max() < 3.0


def test_sliding_window_hides_what_is_further_back():
    cfg = ModelConfig(
        n_layers=1,
        d_model=16,
        n_heads=2,
        position="rope",
        vocab_size=30,
        family=FamilyOptions(sliding_window=3),
    )
    model = build_model(cfg).eval()
    t = _tokens(cfg, B=1, T=8)
    t2 = t.clone()
    t2[0, 1] = (t[0, 1] + 1) % 30
    diff = (model(t) - model(t2)).abs().amax(-1)[0]  # per position
    # one layer: position i sees i-2..i, so only positions 1, 2, 3 depend on token 1
    assert (diff[1:4] > 1e-6).all() and (diff[4:] == 0).all() and diff[0] == 0


def test_global_every_leaves_every_kth_layer_global():
    cfg = ModelConfig(
        n_layers=4,
        d_model=16,
        n_heads=2,
        position="rope",
        family=FamilyOptions(sliding_window=3, global_every=2),
    )
    windows = [layer.attn.f.window for layer in build_model(cfg).stack.layers]
    assert windows == [3, None, 3, None] and [cfg.window(i) for i in (1, 2, 3, 4)] == windows


def test_local_layers_read_their_own_rope_base():
    local = ModelConfig(n_layers=2, d_model=16, n_heads=2, position="rope", vocab_size=30).replace(
        sliding_window=4
    )
    torch.manual_seed(0)
    a = build_model(local.replace(rope_base=500.0))  # every layer local: all read the local base
    b = build_model(local.replace(rope_local_base=500.0))
    b.load_state_dict(a.state_dict())
    t = _tokens(a.cfg)
    torch.testing.assert_close(a(t), b(t))
    c = build_model(local)
    c.load_state_dict(a.state_dict())
    assert not torch.allclose(a(t), c(t), atol=1e-4)


@settings(max_examples=50, deadline=None)
@given(r=st.integers(1, 16).map(lambda n: 2 * n), T=st.integers(1, 9))
def test_partial_rope_rotates_only_the_first_features(r, T):
    hd = 32
    x = torch.randn(1, 2, T, hd)
    cos, sin = rope_tables(T, r, 10000.0)
    y = apply_rope(x, cos, sin)
    assert torch.equal(y[..., r:], x[..., r:])
    full = apply_rope(x[..., :r], cos, sin)
    torch.testing.assert_close(y[..., :r], full)
    torch.testing.assert_close(y[..., :r].norm(dim=-1), x[..., :r].norm(dim=-1))  # a rotation


# -- T5 relative positions ------------------------------------------------------------------------


def _t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """Mesh TensorFlow's relative_position_bucket, one integer at a time (Raffel et al. 2020)."""
    ret, n = 0, -rel
    if bidirectional:
        num_buckets //= 2
        ret += num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    val = max_exact + int(
        math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    )
    return ret + min(val, num_buckets - 1)


@settings(max_examples=200, deadline=None)
@given(rel=st.integers(-300, 300), bidirectional=st.booleans(), buckets=st.sampled_from([8, 32]))
def test_relative_buckets_match_t5(rel, bidirectional, buckets):
    got = relative_bucket(torch.tensor([rel]), bidirectional, buckets, 128)
    assert int(got) == _t5_bucket(rel, bidirectional, buckets, 128)


def test_relative_bias_enters_the_scores_of_every_layer():
    cfg = ModelConfig(
        n_layers=2,
        d_model=16,
        n_heads=2,
        position="relative",
        vocab_size=30,
        family=FamilyOptions(attn_scale=1.0),
    )
    model = _gains(build_model(cfg)).eval()
    stack = model.stack
    assert stack.rel_bias is not None and not stack.rel_bias.bidirectional
    x = torch.randn(2, 6, 16)
    bias = stack.rel_bias(6, 6)
    attn = stack.layers[1].attn.f
    want = _manual_attention(attn, x, 1.0, bias=bias)
    torch.testing.assert_close(attn(x, Context(position_bias=bias)), want, rtol=1e-5, atol=1e-5)
    t = _tokens(cfg, B=1, T=6)
    t2 = t.clone()
    t2[0, 4] = (t[0, 4] + 1) % 30
    assert torch.equal(model(t)[0, :4], model(t2)[0, :4])  # still causal with a float bias


# -- norms, biases, embeddings, head, init ----------------------------------------------------------


def test_rmsnorm_gain_offset_applies_one_plus_w():
    n = RMSNorm(6, eps=1e-6, offset=True)
    assert torch.equal(n.weight, torch.zeros(6))
    with torch.no_grad():
        n.weight.copy_(torch.linspace(-0.5, 0.5, 6))
    a = torch.randn(3, 6)
    want = a / torch.sqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + n.weight)
    torch.testing.assert_close(n(a), want)
    model = build_model(
        ModelConfig(norm="rmsnorm", qk_norm=True, n_layers=1, family=FamilyOptions(gain_offset=True))
    )
    offsets = [m.offset for m in model.modules() if isinstance(m, RMSNorm)]
    assert offsets and all(offsets)  # every norm, QK-norms and the final norm included


def test_qk_norm_over_the_projection_normalises_all_heads_together():
    attn, cfg = _one_attention(position="none", norm="rmsnorm", qk_norm=True, qk_norm_scope="projection")
    assert attn.q_norm.weight.shape == (16,) and attn.k_norm.weight.shape == (16,)  # OLMo 2
    x = torch.randn(2, 5, 16)
    q, k, v = attn.qkv(x).split([16, 16, 16], dim=-1)
    q, k = attn.q_norm(q), attn.k_norm(k)
    B, T = 2, 5
    q, k, v = (t.view(B, T, 2, 8).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, 16)
    torch.testing.assert_close(attn(x, Context()), attn.out(y), rtol=1e-5, atol=1e-5)
    head, _ = _one_attention(position="none", norm="rmsnorm", qk_norm=True)
    assert head.q_norm.weight.shape == (8,)


@pytest.mark.parametrize(
    "biases, has",
    [
        (None, {"qkv", "out", "ffn"}),
        (("qkv",), {"qkv"}),  # Qwen2
        (("ffn", "head"), {"ffn", "head"}),  # GPT-J
        ((), set()),
    ],
)
def test_bias_sites(biases, has):
    model = build_model(ModelConfig(n_layers=1, d_model=16, n_heads=2, family=FamilyOptions(biases=biases)))
    layer = model.stack.layers[0]
    found = {
        "qkv": layer.attn.f.qkv.bias is not None,
        "out": layer.attn.f.out.bias is not None,
        "ffn": layer.ffn.f.fc1.bias is not None and layer.ffn.f.fc2.bias is not None,
        "head": model.head.bias is not None,
    }
    assert {k for k, v in found.items() if v} == has


def test_side_embeddings_share_tokens_not_positions():
    cfg = ModelConfig(
        arch="encdec",
        n_layers=1,
        d_model=16,
        n_heads=2,
        family=FamilyOptions(embed_norm=True, side_embeddings=True),
    )
    model = build_model(cfg)
    assert model.dec_embed.tok is model.embed.tok
    assert model.dec_embed.pos is not model.embed.pos and model.dec_embed.norm is not model.embed.norm
    shared = build_model(cfg.replace(side_embeddings=False))
    assert not hasattr(shared, "dec_embed") and not any(
        k.startswith("dec_embed") for k in shared.state_dict()
    )


def test_factorised_embedding_and_scaled_head():
    cfg = ModelConfig(
        n_layers=1, d_model=16, n_heads=2, vocab_size=30, tie_embeddings=True, family=FamilyOptions(d_embed=8)
    )
    model = build_model(cfg)
    assert model.embed.tok.weight.shape == (30, 8) and model.head.weight is model.embed.tok.weight
    t = _tokens(cfg)
    logits, states = model(t, return_states=True)
    out = model.stack.norm(states[-1])
    torch.testing.assert_close(logits, model.head(model.head_proj(out)))
    t5 = build_model(ModelConfig(n_layers=1, d_model=16, n_heads=2, family=FamilyOptions(head_scale=True)))
    logits, states = t5(t, return_states=True)
    torch.testing.assert_close(logits, t5.head(t5.stack.norm(states[-1]) * 16**-0.5))


@pytest.mark.parametrize(
    "activation, gate", [("geglu", F.gelu), ("geglu_tanh", lambda h: F.gelu(h, approximate="tanh"))]
)
def test_gated_units(activation, gate):
    ffn = build_model(ModelConfig(n_layers=1, activation=activation, d_ff=24)).stack.layers[0].ffn.f
    x = torch.randn(2, 3, 64)
    g, u = ffn.fc1(x).chunk(2, dim=-1)
    torch.testing.assert_close(ffn(x), ffn.fc2(gate(g) * u))


def test_normal_init_is_hf_style():
    cfg = ModelConfig(
        n_layers=12,
        d_model=64,
        n_heads=4,
        init="normal",
        tie_embeddings=False,
        family=FamilyOptions(init_std=0.05),
    )
    model = build_model(cfg)
    layer = model.stack.layers[11]
    for w in (layer.attn.f.out.weight, layer.ffn.f.fc2.weight, model.embed.tok.weight, model.head.weight):
        assert float(w.detach().std()) == pytest.approx(0.05, rel=0.1)  # no depth scaling of residual outputs
    gpt2 = build_model(cfg.replace(init="gpt2"))
    assert float(gpt2.stack.layers[11].ffn.f.fc2.weight.detach().std()) == pytest.approx(
        0.05 / math.sqrt(24), rel=0.1
    )
