"""The residual topologies compute their papers' formulas: every design builds and trains in every arch,
reproduces pre-LN at init where its paper says so, equals a direct transcription of its formula with
random weights, and mHC's H_res is doubly stochastic. Their options validate like any config field."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from depthlab import ConfigError, ModelConfig, build_model
from depthlab.model.attention import Context
from depthlab.model.sinkhorn import sinkhorn_knopp, stochastic_error

pytestmark = pytest.mark.usefixtures("one_thread")
TOPOLOGIES = ("hc", "dhc", "mhc", "frac", "denseformer", "attnres", "attnres_block", "vres", "vres_learned")
TINY = dict(n_layers=3, d_model=16, n_heads=2, vocab_size=32, max_len=16)


def model_of(wrap: str, seed: int = 0, **kw):
    torch.manual_seed(seed)
    return build_model(ModelConfig(**{**TINY, "wrap": wrap, **kw}))


def tokens(B=2, T=7, seed=1):
    return torch.randint(0, 32, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("wrap", TOPOLOGIES)
@pytest.mark.parametrize("arch", ["decoder", "encoder", "encdec"])
def test_every_topology_builds_runs_and_reports_one_stream_per_boundary(wrap, arch):
    m, t = model_of(wrap, arch=arch), tokens()
    if arch == "encdec":
        logits = m(t, t)
    else:
        logits, states = m(t, return_states=True)
        assert len(states) == TINY["n_layers"] + 1 and all(s.shape == (2, 7, 16) for s in states)
    logits.logsumexp(-1).mean().backward()
    assert torch.isfinite(logits).all()
    grads = [p.grad for p in m.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("wrap", ["hc", "mhc", "denseformer", "attnres_block"])
def test_activation_checkpointing_gives_the_same_gradients(wrap):
    t = tokens()
    grads = []
    for ckpt in (False, True):
        m = model_of(wrap, activation_checkpointing=ckpt).train()
        m(t).logsumexp(-1).mean().backward()
        grads.append([p.grad.clone() for p in m.parameters() if p.grad is not None])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    "wrap,exact", [("frac", True), ("denseformer", True), ("hc", False), ("dhc", False), ("mhc", False)]
)
def test_init_reproduces_pre_ln(wrap, exact):
    """Zhu et al. 2024 (sec. 3.3), Zhu et al. 2025 and Pagliardini et al. 2024 start at pre-LN: the n
    copies of hc/mhc sum to n x_L, which the final norm maps to x_L's norm up to its eps."""
    t = tokens()
    ours, pre = model_of(wrap)(t), model_of("pre")(t)
    if exact:
        assert torch.equal(ours, pre)
    else:
        torch.testing.assert_close(ours, pre, rtol=1e-4, atol=1e-4)


@torch.no_grad()
def _randomize_mixing(m, seed=5):
    g = torch.Generator().manual_seed(seed)
    for name, p in m.named_parameters():
        if any(k in name for k in ("mix.", "alpha", "query", "state.")):
            p.add_(0.5 * torch.randn(p.shape, generator=g))


def test_denseformer_is_its_formula():
    """Y_i = sum_{j in i, i-k, ..} alpha_ij X_j after every p-th block, X_i = block_i(Y_{i-1}) (pre-LN)."""
    cfg = ModelConfig.from_dict(
        {**TINY, "n_layers": 5, "wrap": "denseformer", "dwa_dilation": 2, "dwa_period": 2}
    )
    torch.manual_seed(0)
    m = build_model(cfg)
    _randomize_mixing(m)
    t = tokens()
    x = y = m.embed(t)
    X, ctx = [x], Context()
    for i, layer in enumerate(m.stack.layers, 1):
        x = y + layer.attn.f(layer.attn.norm(y), ctx)
        x = x + layer.ffn.f(layer.ffn.norm(x), ctx)
        X.append(x)
        y = x
        if i % 2 == 0:  # period 2, dilation 2: j = i, i - 2, ...
            js = list(range(i % 2, i + 1, 2))
            y = sum(a * X[j] for a, j in zip(layer.ffn.alpha, js, strict=True))
    assert [len(layer.ffn.sources) for layer in m.stack.layers] == [0, 2, 0, 3, 0]
    torch.testing.assert_close(m(t), m.head(m.stack.norm(y)), rtol=1e-6, atol=1e-6)


def _graph_nodes(t: torch.Tensor) -> int:
    seen, todo = set(), [t.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo.extend(n for n, _ in node.next_functions)
    return len(seen)


def test_denseformer_averages_in_one_node_per_block_with_the_formulas_bits():
    """Summed term by term, each average left two autograd nodes per term, which pinned the freed terms'
    memory: a 300-layer DenseFormer held 6 GB after its forward (pre-LN: 0.6 GB). One node per average
    now, computing sum(a * X for a, X in zip(alpha, xs)) to the bit, gradients too."""
    from depthlab.model.aggregate import WeightedSum

    t, depth = tokens(), 24
    extra = _graph_nodes(model_of("denseformer", n_layers=depth)(t)) - _graph_nodes(
        model_of("pre", n_layers=depth)(t)
    )
    assert extra <= 4 * depth, extra  # term by term: over 600 at 24 layers
    g = torch.Generator().manual_seed(3)
    alpha = torch.randn(5, generator=g).requires_grad_()
    xs = [torch.randn(2, 3, 4, generator=g).requires_grad_() for _ in range(5)]
    up = torch.randn(2, 3, 4, generator=g)
    got = WeightedSum.apply(alpha, *xs)
    grads = torch.autograd.grad(got, [alpha, *xs], up)
    want = sum(a * x for a, x in zip(alpha, xs, strict=True))
    assert torch.equal(got, want)
    for a, b in zip(grads, torch.autograd.grad(want, [alpha, *xs], up), strict=True):
        assert torch.equal(a, b)


def _depth_read(read, values):
    logits = torch.stack([read.keys(v) @ read.query[:, 0] for v in values])  # (k, B, T)
    return sum(a.unsqueeze(-1) * v for a, v in zip(logits.softmax(0), values, strict=True))


@pytest.mark.parametrize("wrap", ["attnres", "attnres_block"])
def test_attention_residuals_are_their_formula(wrap):
    """Full: h_l = sum_{i<l} softmax(w_l . RMSNorm(v_i)) v_i over the embedding and every earlier output.
    Block (the official block_attn_res): the closed block sums and the open block's partial sum."""
    cfg = ModelConfig.from_dict(
        {**TINY, "n_layers": 4, "wrap": wrap, **({"attnres_blocks": 3} if "block" in wrap else {})}
    )
    torch.manual_seed(0)
    m = build_model(cfg)
    _randomize_mixing(m)
    size = 3 if wrap == "attnres_block" else 1  # ceil(8 sublayers / 3 blocks)
    t, ctx = tokens(), Context()
    blocks, partial, n = [m.embed(t)], None, 0
    for layer in m.stack.layers:
        for w in (layer.attn, layer.ffn):
            h = _depth_read(w.read, blocks + ([partial] if partial is not None else []))
            v = w.f(w.norm(h), ctx)
            partial, n = (v, 1) if partial is None else (partial + v, n + 1)
            if n == size:
                blocks, partial, n = blocks + [partial], None, 0
    out = _depth_read(m.stack.state.read, blocks + ([partial] if partial is not None else []))
    torch.testing.assert_close(m(t), m.head(m.stack.norm(out)), rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(
    scale=st.floats(1e-6, 1e6),
    shift=st.floats(-1e3, 1e3),
    seed=st.integers(0, 2**16),
)
def test_mhc_h_res_is_doubly_stochastic_for_any_input(scale, shift, seed):
    """At init, and with its dynamic map moved away from 0, every H_res an mHC layer projects has rows and
    columns summing to 1 within 1e-6, whatever the state's scale: vec(H) is RMS-normalised first."""
    w = model_of("mhc").stack.layers[0].attn
    g = torch.Generator().manual_seed(seed)
    H = torch.randn(2, 5, 4, 16, generator=g) * scale + shift
    with torch.no_grad():
        w.mix.phi_res.copy_(torch.randn(w.mix.phi_res.shape, generator=g) / 64)  # a moved dynamic map
        _, _, res = w.mix(H)
    assert max(stochastic_error(res)) <= 1e-6


@settings(max_examples=60, deadline=None)
@given(spread=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_sinkhorn_at_t_max_20_is_doubly_stochastic_for_logits_within_one(spread, seed):
    logits = (torch.rand(64, 4, 4, generator=torch.Generator().manual_seed(seed)) * 2 - 1) * spread
    assert max(stochastic_error(sinkhorn_knopp(logits, 20))) <= 1e-6


def test_sinkhorn_rows_are_exact_and_the_tolerance_runs_until_columns_converge():
    logits = (torch.rand(256, 4, 4, generator=torch.Generator().manual_seed(0)) * 2 - 1) * 3
    rows, cols = stochastic_error(sinkhorn_knopp(logits, 20))
    assert rows <= 1e-6 and cols > 1e-4  # t_max = 20 leaves spread logits' columns off 1 (the probe says so)
    assert max(stochastic_error(sinkhorn_knopp(logits, 1000, tol=1e-7))) <= 1e-6
    assert sinkhorn_knopp(logits.to(torch.bfloat16), 20).dtype == torch.bfloat16  # computed in float32


@pytest.mark.parametrize(
    "field,value,wrap",
    [
        ("streams", 8, "pre"),
        ("sinkhorn_iters", 5, "hc"),
        ("sinkhorn_tol", 1e-6, "dhc"),
        ("attnres_blocks", 4, "attnres"),
        ("dwa_dilation", 2, "hc"),
        ("dwa_period", 2, "attnres_block"),
    ],
)
def test_an_option_the_wrapping_does_not_read_is_refused(field, value, wrap):
    with pytest.raises(ConfigError, match=field):
        ModelConfig.from_dict({"wrap": wrap, field: value})


@pytest.mark.parametrize("field", ["dwa_period", "dwa_dilation"])
def test_a_denseformer_period_or_dilation_past_the_depth_is_refused(field):
    """Past the depth no block averages earlier outputs: the stack would be pre-LN under another name."""
    with pytest.raises(ConfigError, match=rf"^{field}=5 is not allowed: at most the depth \(4 layers\)"):
        ModelConfig.from_dict({"wrap": "denseformer", "n_layers": 4, field: 5})
    assert (
        getattr(ModelConfig.from_dict({"wrap": "denseformer", "n_layers": 4, field: 4}).topology, field) == 4
    )


def test_a_denseformer_whose_dilation_passes_its_last_averaging_block_is_refused():
    """Period 3 at 4 layers averages after block 3 only; a dilation of 4 leaves it X_3 alone."""
    grid = {"wrap": "denseformer", "n_layers": 4, "dwa_period": 3}
    with pytest.raises(ConfigError, match=r"^dwa_dilation=4 is not allowed: at most 3, the last block"):
        ModelConfig.from_dict({**grid, "dwa_dilation": 4})
    assert ModelConfig.from_dict({**grid, "dwa_dilation": 3}).topology.dwa_dilation == 3


def test_topologies_refuse_what_their_state_cannot_carry():
    with pytest.raises(ConfigError, match="residual"):
        ModelConfig(wrap="hc", residual=("ffn",))
    with pytest.raises(ConfigError, match="streams"):
        ModelConfig.from_dict({"wrap": "frac", "streams": 3, "d_model": 64})
    with pytest.raises(ConfigError, match="norm"):
        ModelConfig(wrap="mhc", norm="none")
    with pytest.raises(ConfigError, match="param"):
        ModelConfig(wrap="attnres", param="completep", n_layers=4, base_depth=2)


@settings(max_examples=80, deadline=None)
@given(
    wrap=st.sampled_from(TOPOLOGIES),
    streams=st.integers(-2, 70),
    iters=st.integers(-1, 1200),
    tol=st.one_of(st.floats(-1, 1), st.just(float("nan"))),
    blocks=st.integers(-1, 20),
)
def test_topology_options_validate_and_round_trip(wrap, streams, iters, tol, blocks):
    """Any values: either a ConfigError naming a field, or a config that round-trips through JSON with its
    hash; at their defaults the options leave the key of a config that had none."""
    d = {"wrap": wrap, "d_model": 64}
    for name, value, readers in (
        ("streams", streams, ("hc", "dhc", "mhc", "frac")),
        ("sinkhorn_iters", iters, ("mhc",)),
        ("sinkhorn_tol", tol, ("mhc",)),
        ("attnres_blocks", blocks, ("attnres_block",)),
    ):
        if wrap in readers:
            d[name] = value
    try:
        cfg = ModelConfig.from_dict(d)
    except ConfigError as e:
        assert any(name in str(e) for name in ("streams", "sinkhorn", "attnres_blocks"))
        return
    again = ModelConfig.from_json(cfg.to_json())
    assert again == cfg and again.config_hash() == cfg.config_hash()
    default = ModelConfig.from_dict({"wrap": wrap, "d_model": 64})
    assert ("streams" in cfg.key_dict()) == (cfg.topology.streams != 4)
    assert default.key_dict().keys() == ModelConfig(d_model=64, wrap=wrap).key_dict().keys()


@pytest.mark.parametrize("wrap", ["hc", "mhc", "frac", "denseformer", "vres"])
def test_a_depth_rule_multiplies_the_branch_at_f(wrap):
    """Under completep (m = m_L^-1) the sublayer writes m F(.): the state with m equals the state built from
    the hooked F output scaled by m (the topologies' place for the multiplier is F, as in pre-LN)."""
    cfg = ModelConfig.from_dict({**TINY, "n_layers": 8, "wrap": wrap, "param": "completep", "base_depth": 2})
    torch.manual_seed(0)
    w = build_model(cfg).stack.layers[0].ffn
    assert w.branch_multiplier == pytest.approx(0.25) and w.BRANCH_END == "f"
    seen = []
    w.f.register_forward_hook(lambda mod, a, out: seen.append(out))
    x = torch.randn(2, 5, 16)
    state = build_model(cfg).stack.state.expand(x) if wrap not in ("denseformer", "vres") else None
    with torch.no_grad():
        if wrap in ("hc", "mhc", "frac"):
            got = w(state, Context())
            pre, post, res = w.mix(state)
            want = res @ state + post.unsqueeze(-1) * (0.25 * seen[0]).unflatten(-1, (-1, state.shape[-1]))
        else:
            from depthlab.model.state import Dense, Valued

            s = Dense(x, (x,)) if wrap == "denseformer" else Valued(x, None)
            got, want = w(s, Context())[0], x + 0.25 * seen[0]
    torch.testing.assert_close(got, want)


def test_mixing_parameters_take_their_rule_under_each_parametrization():
    """mup: static maps are vectors (base lr), dynamic maps matrices (lr / m_w); a depth rule: H_res's maps
    and DenseFormer's alphas take m_L^-1 on top of their group's lr."""
    from depthlab import param_groups

    def groups(**kw):
        torch.manual_seed(0)
        m = build_model(ModelConfig.from_dict({**TINY, "d_model": 32, **kw}))
        return m, {g["name"]: g for g in param_groups(m, 1.0)}

    m, g = groups(wrap="dhc", param="mup", base_width=16)
    w = m.stack.layers[0].attn.mix
    by_id = {id(p): name for name, grp in g.items() for p in grp["params"]}
    assert by_id[id(w.w_pre)] == "decoder hidden" and g["decoder hidden"]["lr"] == pytest.approx(0.5)
    assert (
        by_id[id(w.pre)] == "decoder hidden vectors" and by_id[id(w.res)] == "decoder residual mixing vectors"
    )
    assert g["decoder residual mixing vectors"]["lr"] == 1.0 and g["decoder residual mixing"]["lr"] == 0.5
    m, g = groups(wrap="mhc", n_layers=8, param="completep", base_depth=2, base_width=16)
    assert g["decoder residual mixing"]["lr"] == pytest.approx(0.5 / 4)  # phi_res: lr / m_w / m_L
    assert g["decoder residual mixing vectors"]["lr"] == pytest.approx(1 / 4)  # b_res: lr / m_L
    m, g = groups(wrap="denseformer", n_layers=8, param="depth_mup", base_depth=2)
    alphas = {id(layer.ffn.alpha) for layer in m.stack.layers}
    assert alphas == {id(p) for p in g["decoder residual mixing vectors"]["params"]}
    assert g["decoder residual mixing vectors"]["lr"] == pytest.approx(4**-0.5 / 4)


def test_the_depth_coordinate_check_runs_on_hc_and_mhc():
    from depthlab.probe.coord import CoordSpec, coord_check

    spec = CoordSpec(axis="depth", sizes=(2, 4), fixed=16, wraps=("hc", "mhc"), params=("sp", "completep"),
                     steps=2, seeds=(0, 1), heads=2, batch_size=2, seq_len=8)  # fmt: skip
    result = coord_check(spec)
    for setting in result.to_dict()["settings"]:
        assert {"attn", "ffn", "stream@L"} <= set(setting["modules"])
        assert all(v > 0 for row in setting["modules"]["stream@L"]["mean_abs"] for v in row)
