"""DeepNorm's constants match the paper's Table 1, and its init scales exactly v, out, fc1, fc2 by beta.

Wang et al. 2022 (DeepNet), Table 1: encoder-only alpha=(2N)^1/4, beta=(8N)^-1/4; decoder-only
alpha=(2M)^1/4, beta=(8M)^-1/4; encoder-decoder encoder alpha=0.81(N^4 M)^1/16, beta=0.87(N^4 M)^-1/16,
decoder alpha=(3M)^1/4, beta=(12M)^-1/4. The expected values below are those formulas evaluated by
hand to 3-4 significant digits (docs/references.md's check: M=64 decoder-only -> 3.36, 0.210).
"""

from __future__ import annotations

import pytest
import torch

from depthlab import ModelConfig, build_model
from depthlab.model.wrappings import deepnorm_constants

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(
    "arch, side, n_enc, n_dec, alpha, beta",
    [
        ("decoder", "decoder", 0, 64, 3.36, 0.210),  # the paper's / docs/references.md check
        ("decoder", "decoder", 0, 1, 1.189, 0.595),
        ("encoder", "encoder", 12, 0, 2.213, 0.3195),
        ("encoder", "encoder", 100, 0, 3.761, 0.188),
        ("encdec", "encoder", 6, 6, 1.418, 0.497),  # 0.87, not torchscale's 1.15
        ("encdec", "decoder", 6, 6, 2.060, 0.3433),
        ("encdec", "encoder", 18, 18, 1.999, 0.3526),
        ("encdec", "decoder", 18, 18, 2.711, 0.2608),
        ("encdec", "encoder", 3, 5, 1.179, 0.598),  # N != M: catches N and M swapped
        ("encdec", "decoder", 3, 5, 1.968, 0.3593),
    ],
)
def test_constants_match_the_paper(arch, side, n_enc, n_dec, alpha, beta):
    got_alpha, got_beta = deepnorm_constants(arch, side, n_enc, n_dec)
    assert got_alpha == pytest.approx(alpha, rel=2e-3)
    assert got_beta == pytest.approx(beta, rel=2e-3)


def _pair(arch: str, **kw):
    """A deepnorm model and an otherwise identical post-LN one, from the same seed."""
    base = dict(arch=arch, n_layers=3, d_model=64, n_heads=4, d_ff=128, vocab_size=32, max_len=16, **kw)
    models = []
    for wrap in ("deepnorm", "post"):
        torch.manual_seed(0)
        models.append(build_model(ModelConfig(wrap=wrap, **base)))
    return models


def _stacks(model):
    return [(s, getattr(model, s)) for s in ("encoder", "decoder") if hasattr(model, s)]


def _check_attention(dn, post, beta: float) -> None:
    """q and k as post's (Xavier), v and out post's times beta (DeepNet, Algorithm 1 / Figure 2)."""
    fused_dn, fused_post = (dn.kv, post.kv) if dn.cross else (dn.qkv, post.qkv)
    d = dn.n_kv_heads * dn.head_dim
    torch.testing.assert_close(fused_dn.weight[:-d], fused_post.weight[:-d], rtol=0, atol=0)  # q, k
    torch.testing.assert_close(fused_dn.weight[-d:], beta * fused_post.weight[-d:])  # v
    torch.testing.assert_close(dn.out.weight, beta * post.out.weight)
    if dn.cross:
        torch.testing.assert_close(dn.q.weight, post.q.weight, rtol=0, atol=0)


@pytest.mark.parametrize(
    "arch, kw", [("encoder", {}), ("decoder", {}), ("encdec", {"enc_layers": 3, "dec_layers": 5})]
)
def test_init_scales_v_out_fc1_fc2_by_beta(arch, kw):
    dn, post = _pair(arch, **kw)
    cfg = dn.cfg
    for (side, dn_stack), (_, post_stack) in zip(_stacks(dn), _stacks(post), strict=True):
        alpha, beta = deepnorm_constants(arch, side, cfg.enc_depth, cfg.dec_depth)
        for dn_block, post_block in zip(dn_stack.layers, post_stack.layers, strict=True):
            for name, wrapped in dn_block.sublayers().items():
                assert (wrapped.name, wrapped.alpha, wrapped.beta) == ("deepnorm", alpha, beta)
                twin = post_block.sublayers()[name].f
                if name == "ffn":
                    torch.testing.assert_close(wrapped.f.fc1.weight, beta * twin.fc1.weight)
                    torch.testing.assert_close(wrapped.f.fc2.weight, beta * twin.fc2.weight)
                else:
                    _check_attention(wrapped.f, twin, beta)


def test_scaled_weights_have_beta_times_the_xavier_std():
    """The reference really is Xavier: v's std is sqrt(2/(d+d)), and DeepNorm's is beta times that."""
    dn, post = _pair("decoder", n_kv_heads=None)
    beta = deepnorm_constants("decoder", "decoder", 0, 3)[1]
    d = 64
    v_post = torch.cat([b.attn.f.qkv.weight[-d:] for b in post.stack.layers])
    v_dn = torch.cat([b.attn.f.qkv.weight[-d:] for b in dn.stack.layers])
    xavier = (2 / (d + d)) ** 0.5
    assert v_post.std().item() == pytest.approx(xavier, rel=0.05)
    assert v_dn.std().item() == pytest.approx(beta * xavier, rel=0.05)
    q_dn = torch.cat([b.attn.f.qkv.weight[:d] for b in dn.stack.layers])
    assert q_dn.std().item() == pytest.approx(xavier, rel=0.05)  # q untouched
