"""The residual topologies against their reference implementations, from the same weights, to 1e-5.

hyper-connections 0.4.11 (lucidrains) for hc, dhc and mhc, sublayer by sublayer; x-transformers 2.31.10
for the value residual, whole decoders. Where a reference departs from its paper (x-transformers' H_res,
hyper-connections' fractions), a test pins the departure that docs/topologies.md describes; each parity
test has a negative control that must fail. Skipped where a reference is not installed.
"""

from __future__ import annotations

import pytest
import torch

from depthlab import ModelConfig, build_model
from depthlab.model.attention import Context
from tests.topology_refs import from_x_transformers, load_hyper_mix

pytestmark = pytest.mark.usefixtures("one_thread")
N, D = 4, 16


def sublayer(wrap: str, norm: str = "rmsnorm", index: int = 1):
    """The ffn sublayer of layer 1 of a tiny depthlab model under ``wrap`` (its mix reads stream index)."""
    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=2, d_model=D, n_heads=2, vocab_size=32, max_len=16, wrap=wrap, norm=norm)
    return build_model(cfg).stack.layers[0].ffn


def reference(cls, w, **kw):
    """hyper-connections' module of class ``cls`` around our sublayer's branch F(LN(.)), randomised."""
    branch = lambda h: w.f(w.norm(h), Context())  # noqa: E731
    ref = cls(N, dim=D, branch=branch, layer_index=w.index, **kw)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return ref


def compare(w, ref, assert_parity, B=2, T=5):
    g = torch.Generator().manual_seed(4)
    H = torch.randn(B, T, N, D, generator=g)
    ours = w(H, Context())  # (B, T, n, d)
    theirs = ref(H.permute(0, 2, 1, 3).reshape(B * N, T, D))  # their (b s) t d
    theirs = theirs.reshape(B, N, T, D).permute(0, 2, 1, 3)
    return assert_parity(ours, theirs)


@pytest.mark.parametrize("wrap", ["hc", "dhc"])
def test_hyper_connections_equal_the_reference(wrap, assert_parity):
    hc = pytest.importorskip("hyper_connections")
    w = sublayer(wrap)
    ref = reference(hc.HyperConnections, w)
    if wrap == "hc":  # static: the reference's dynamic maps at 0
        with torch.no_grad():
            ref.dynamic_alpha_fn.zero_(), ref.dynamic_beta_fn.zero_()
    load_hyper_mix(w.mix, ref)
    compare(w, ref, assert_parity)
    with torch.no_grad():  # negative control: H_res transposed is another model
        w.mix.res.copy_(w.mix.res.view(N, N).T.reshape(-1))
    with pytest.raises(AssertionError):
        compare(w, ref, assert_parity)


def test_mhc_equals_the_reference_static_part(assert_parity):
    hc = pytest.importorskip("hyper_connections")
    w = sublayer("mhc")
    ref = reference(hc.ManifoldConstrainedHyperConnections, w, sinkhorn_iters=20)
    with torch.no_grad():
        ref.dynamic_alpha_fn.zero_(), ref.dynamic_beta_fn.zero_()
    load_hyper_mix(w.mix, ref)
    compare(w, ref, assert_parity)
    with torch.no_grad():
        w.mix.post.add_(0.5)
    with pytest.raises(AssertionError):
        compare(w, ref, assert_parity)


def test_the_references_fractions_follow_another_formula():
    """hyper-connections' num_fracs: at init its branch reads [h_1, h_1] (not [h_1, h_2]) and every
    fraction receives the sum of the branch's fractions; Frac-Connections' init reproduces pre-LN, as
    depthlab's frac does (docs/topologies.md)."""
    hc = pytest.importorskip("hyper_connections")
    ref = hc.HyperConnections(1, dim=4, num_fracs=2, layer_index=0)
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]])
    branch_input, add = ref(x)
    assert branch_input.flatten().tolist() == [1.0, 2.0, 1.0, 2.0]
    assert add(torch.tensor([[[1.0, 2.0, 10.0, 20.0]]])).flatten().tolist() == [12.0, 24.0, 14.0, 26.0]
    w = sublayer("frac", index=0)
    H = torch.randn(2, 3, N, D // N)
    with torch.no_grad():
        pre, post, res = w.mix(H)
    assert torch.equal(pre @ H, H) and torch.equal(res @ H, H) and bool((post == 1).all())


def test_x_transformers_hyper_connection_h_res_is_not_doubly_stochastic():
    """x-transformers 2.31.10 projects each row of H_res as a 1 x n matrix, which Sinkhorn ends at all
    ones: every stream becomes the sum of the streams (rows and columns sum to n, not 1)."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    conn = xt.HyperConnection(D, layer_index=0, num_residual_streams=N, sinkhorn_iters=5)
    H = torch.randn(2 * N, 3, D)
    _, residuals, _ = conn.prepare(H)
    streams = H.reshape(2, N, 3, D).transpose(1, 2)
    torch.testing.assert_close(residuals, streams.sum(dim=2, keepdim=True).expand_as(residuals))


def x_decoder(**kw):
    xt = pytest.importorskip("x_transformers")
    torch.manual_seed(0)
    dec = xt.Decoder(dim=D, depth=3, heads=2, attn_dim_head=8, **kw)
    return xt.TransformerWrapper(num_tokens=32, max_seq_len=16, attn_layers=dec, tie_embedding=True).eval()


@pytest.mark.parametrize(
    "wrap,kw",
    [
        ("pre", {}),
        ("vres", {"add_value_residual": True, "learned_value_residual_mix": False}),
        ("vres_learned", {"add_value_residual": True, "learned_value_residual_mix": True}),
    ],
)
def test_x_transformers_decoders_equal_ours(wrap, kw, randomize, assert_parity):
    ref = x_decoder(**kw)
    randomize(ref)
    if wrap == "vres_learned":  # a constant mix per layer: ResFormer's learned scalars
        for layer in ref.attn_layers.layers[2::2]:
            lin = layer[1].to_value_residual_mix[0]
            with torch.no_grad():
                lin.weight.zero_(), lin.bias.fill_(float(torch.randn(())))
    ours = from_x_transformers(ref, wrap).eval()
    tokens = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(1))
    assert_parity(ours(tokens), ref(tokens))
    if wrap != "pre":  # negative control: the plain decoder on the same weights differs
        with pytest.raises(AssertionError):
            assert_parity(from_x_transformers(ref, "pre")(tokens), ref(tokens))
