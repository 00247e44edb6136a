"""The model library: every wrapping x arch x norm builds and trains at depth 1, 7 and 48; masks; formulas."""

import itertools
import math

import pytest
import torch

from depthlab import ConfigError, InputError, ModelConfig, build_model
from depthlab.config import ARCHS, WRAPPINGS, wrap_names
from depthlab.model.init import admin_omega, layerscale_init, lns_scale
from depthlab.model.norms import RMSNorm
from depthlab.model.stack import layer_wraps, uses_final_norm
from depthlab.model.wrappings import Wrapping

pytestmark = pytest.mark.usefixtures("one_thread")  # restored after each test (conftest.py)
NORMS = ("layernorm", "rmsnorm", "dyt", "none")
WRAPS = wrap_names()
NEEDS_NORM = [name for name, cls in WRAPPINGS.items() if cls.NEEDS_NORM]


def valid_combos():
    for arch, wrap, norm in itertools.product(ARCHS, WRAPS, NORMS):
        if wrap in NEEDS_NORM and norm == "none":
            continue
        yield arch, wrap, norm


def run(model, cfg, B=2, T=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    if cfg.arch == "encdec":
        return model(x, x[:, : T - 1], return_states=True)
    return model(x, return_states=True)


@pytest.mark.parametrize("arch,wrap,norm", list(valid_combos()))
@pytest.mark.parametrize("depth", [1, 7, 48])
def test_every_combination_runs_forward_and_backward_finite(arch, wrap, norm, depth):
    torch.manual_seed(0)
    d = 8 if depth == 48 else 16
    cfg = ModelConfig(
        arch=arch,
        n_layers=depth,
        d_model=d,
        n_heads=2,
        vocab_size=11,
        wrap=wrap,
        norm=norm,
        position="rope" if depth == 7 else "learned",
    )
    model = build_model(cfg)
    logits, states = run(model, cfg, T=4)
    assert logits.shape[-1] == 11 and torch.isfinite(logits).all()
    assert len(states) == depth + 1
    assert all(s.shape[-1] == d for s in states)  # each sublayer keeps width d_model (Vaswani et al. 2017)
    parallel = wrap in ("parallel", "parallel_shared")
    if (
        norm == "none"
        and (wrap in ("pre", "post") or parallel)
        and depth == 48
        and (arch != "encdec" or parallel)
    ):
        # no norm anywhere: nothing resets the scale (the residual-stream chapter, Q5). The stream explodes (~1e9
        # rms here), so attention scores overflow in backward; that is the lesson, not a bug. Check the
        # explosion.
        # (A parallel encdec decoder adds three unnormalised branches per layer: it explodes too.)
        assert states[-1].pow(2).mean().sqrt() > 1e6 * states[0].pow(2).mean().sqrt()
        return
    # the LM loss (bounded gradient at the logits), as training uses
    torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), torch.zeros(logits.shape[:2], dtype=torch.long).flatten()
    ).backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


def test_bad_combination_is_a_config_error_not_a_crash():
    with pytest.raises(ConfigError):
        ModelConfig(wrap="deepnorm", norm="none")


def test_final_norm_auto_follows_the_stream():
    assert not uses_final_norm(ModelConfig(wrap="post"))
    assert not uses_final_norm(ModelConfig(wrap="deepnorm"))
    for wrap in ("pre", "sandwich", "reorder", "layerscale", "mix", "lns", "rezero"):
        assert uses_final_norm(ModelConfig(wrap=wrap)), wrap
    assert not uses_final_norm(ModelConfig(wrap="pre", final_norm="off"))
    assert uses_final_norm(ModelConfig(wrap="post", final_norm="on"))
    assert uses_final_norm(ModelConfig(wrap="mix", mix_ratio=0.75))  # pre layers on top
    assert not uses_final_norm(ModelConfig(wrap="mix", mix_ratio=1.0))  # every layer post-LN


def test_constants_follow_the_published_tables():
    assert admin_omega(12) == pytest.approx(2.017, abs=1e-3)
    assert admin_omega(48) == pytest.approx(3.404, abs=1e-3)
    assert [layerscale_init(L) for L in (12, 18, 24, 36, 48)] == [0.1, 0.1, 1e-5, 1e-6, 1e-6]
    assert lns_scale(4) == 0.5
    assert layer_wraps(ModelConfig(wrap="mix"), 8) == ["post"] * 2 + ["pre"] * 6
    assert layer_wraps(ModelConfig(wrap="mix"), 3) == ["pre"] * 3  # floor(0.75) = 0 post layers


def _toy_wrap(wrap, residual=True):
    """A one-layer model's FFN wrapping, its F and norm, to check the formula from outside."""
    cfg = ModelConfig(
        n_layers=4, d_model=8, n_heads=2, wrap=wrap, residual=("attn", "ffn") if residual else ("attn",)
    )
    torch.manual_seed(1)
    w = build_model(cfg).stack.layers[2].ffn
    for p in w.parameters():  # make norm gains non-trivial, so a missing norm cannot hide
        if p.dim() == 1:
            p.data.uniform_(0.5, 1.5)
    return w, torch.randn(3, 5, 8) * 3


@pytest.mark.parametrize("residual", [True, False])
def test_each_wrapping_computes_its_formula(residual):
    r = 1.0 if residual else 0.0
    F = lambda w, h: w.f(h, None)  # noqa: E731
    cases = {
        "post": lambda w, x: w.norm(r * x + F(w, x)),
        "pre": lambda w, x: r * x + F(w, w.norm(x)),
        "sandwich": lambda w, x: r * x + w.norm_out(F(w, w.norm_in(x))),
        "reorder": lambda w, x: r * x + w.norm(F(w, x)),
        "deepnorm": lambda w, x: w.norm(w.alpha * r * x + F(w, x)),
        "admin": lambda w, x: w.norm(w.omega * r * x + F(w, x)),
        "rezero": lambda w, x: r * x + w.a * F(w, x),
        "layerscale": lambda w, x: r * x + w.gamma * F(w, w.norm(x)),
        "lns": lambda w, x: r * x + F(w, w.norm(x) / math.sqrt(3)),  # layer index 3 (1-based)
    }
    for wrap, formula in cases.items():
        w, x = _toy_wrap(wrap, residual)
        torch.testing.assert_close(w(x, None), formula(w, x), msg=wrap)


def test_deepnorm_alpha_is_the_decoder_only_constant():
    w, _ = _toy_wrap("deepnorm")
    assert w.alpha == pytest.approx((2 * 4) ** 0.25)


@pytest.mark.parametrize("wrap", ["pre", "post"])
def test_decoder_is_causal(wrap):
    cfg = ModelConfig(
        arch="decoder", n_layers=3, d_model=16, n_heads=2, vocab_size=20, wrap=wrap, position="rope"
    )
    model = build_model(cfg).eval()
    x = torch.randint(0, 20, (1, 8))
    y = x.clone()
    y[0, 5:] = (y[0, 5:] + 1) % 20
    torch.testing.assert_close(model(x)[:, :5], model(y)[:, :5])
    assert not torch.allclose(model(x)[:, 5:], model(y)[:, 5:])


def test_encoder_padding_is_ignored_at_real_positions():
    cfg = ModelConfig(arch="encoder", n_layers=2, d_model=16, n_heads=2, vocab_size=20, wrap="post")
    model = build_model(cfg).eval()
    x = torch.randint(0, 20, (2, 6))
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    y = x.clone()
    y[1, 4:] = (y[1, 4:] + 3) % 20
    a, b = model(x, padding_mask=pad), model(y, padding_mask=pad)
    torch.testing.assert_close(a[1, :4], b[1, :4])
    assert torch.isfinite(a).all()


def test_encdec_ignores_padded_source_and_is_causal_in_target():
    cfg = ModelConfig(arch="encdec", n_layers=2, d_model=16, n_heads=2, vocab_size=20, position="sinusoidal")
    model = build_model(cfg).eval()
    src, tgt = torch.randint(0, 20, (2, 7)), torch.randint(0, 20, (2, 5))
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, 5:] = True
    src2 = src.clone()
    src2[0, 5:] = (src2[0, 5:] + 1) % 20
    torch.testing.assert_close(model(src, tgt, src_padding_mask=pad), model(src2, tgt, src_padding_mask=pad))
    tgt2 = tgt.clone()
    tgt2[:, 3:] = (tgt2[:, 3:] + 1) % 20
    torch.testing.assert_close(model(src, tgt)[:, :3], model(src, tgt2)[:, :3])


def test_residual_off_removes_the_identity_path():
    """With every skip off and F zeroed, nothing reaches the output: the stream is F's alone (Residual Connections Explained)."""
    for residual in [("attn", "ffn"), ()]:
        cfg = ModelConfig(n_layers=2, d_model=8, n_heads=2, wrap="pre", residual=residual, final_norm="off")
        model = build_model(cfg)
        for block in model.stack.layers:
            for sub in block.sublayers().values():
                for p in sub.f.parameters():
                    p.data.zero_()
        _, states = model(torch.randint(0, 256, (1, 4)), return_states=True)
        same = torch.allclose(states[-1], states[0])
        assert same == bool(residual)


def test_gqa_and_qk_norm_and_swiglu_build():
    cfg = ModelConfig(
        n_layers=2,
        d_model=32,
        n_heads=8,
        n_kv_heads=2,
        qk_norm=True,
        activation="swiglu",
        norm="rmsnorm",
        bias=False,
        position="rope",
        tie_embeddings=False,
    )
    model = build_model(cfg)
    logits = model(torch.randint(0, 256, (2, 9)))
    assert logits.shape == (2, 9, 256)
    attn = model.stack.layers[0].attn.f
    assert attn.qkv.weight.shape == (32 + 2 * 2 * 4, 32)


def test_activation_checkpointing_gives_the_same_gradients():
    grads = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        cfg = ModelConfig(n_layers=3, d_model=16, n_heads=2, wrap="deepnorm", activation_checkpointing=ckpt)
        model = build_model(cfg).train()
        model(torch.arange(12).view(2, 6)).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1])


def test_same_seed_same_model():
    cfg = ModelConfig(n_layers=2)
    torch.manual_seed(3)
    a = build_model(cfg).state_dict()
    torch.manual_seed(3)
    b = build_model(cfg).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_xavier_init_gives_unit_scale_embedding_stream():
    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=1, d_model=64, position="none")
    _, states = build_model(cfg)(torch.randint(0, 256, (4, 32)), return_states=True)
    assert 0.8 < states[0].pow(2).mean().sqrt().item() < 1.2


@pytest.mark.parametrize(("init", "std"), [("gpt2", 0.02), ("xavier", 256**-0.5)])
def test_untied_head_is_drawn_by_the_scheme(init, std):
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=1, d_model=256, n_heads=4, tie_embeddings=False, init=init))
    assert float(model.head.weight.detach().std()) == pytest.approx(std, rel=0.03)


def test_lns_takes_no_depth_scaled_init_and_pre_does():
    """docs/references.md: LayerNorm-Scaling is not combined with GPT-2's 0.02/sqrt(2L) residual init."""
    stds = {}
    for wrap in ("lns", "pre"):
        torch.manual_seed(0)
        model = build_model(ModelConfig(n_layers=8, d_model=64, n_heads=4, wrap=wrap, init="gpt2"))
        stds[wrap] = float(model.stack.layers[0].ffn.f.fc2.weight.detach().std())
    assert stds["lns"] == pytest.approx(0.02, rel=0.05)
    assert stds["pre"] == pytest.approx(0.02 / math.sqrt(16), rel=0.05)


def test_max_len_limits_only_position_tables():
    tokens = torch.zeros(2, 12, dtype=torch.long)
    for position in ("learned", "sinusoidal"):
        model = build_model(ModelConfig(n_layers=1, d_model=16, n_heads=2, max_len=8, position=position))
        with pytest.raises(InputError, match="exceeds max_len 8"):
            model(tokens)
    for position in ("rope", "none"):  # nothing of size max_len: any length runs
        model = build_model(ModelConfig(n_layers=1, d_model=16, n_heads=2, max_len=8, position=position))
        assert model(tokens).shape == (2, 12, 256)


def test_rmsnorm_keeps_float64():
    norm = RMSNorm(8).double()
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    assert norm(x).dtype == torch.float64
    assert torch.autograd.gradcheck(norm, (x,))


def test_padding_masks_are_checked_not_guessed():
    model = build_model(ModelConfig(n_layers=1, d_model=16, n_heads=2))
    tokens = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(InputError, match="shape"):
        model(tokens, padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(InputError, match="must be bool"):  # HF's attention_mask means the opposite
        model(tokens, padding_mask=torch.ones(2, 5, dtype=torch.long))
    assert model(tokens, padding_mask=torch.zeros(2, 5, dtype=torch.bool)).shape == (2, 5, 256)


class _Halfway(Wrapping):
    """x = x + beta*F(LN(x)): a wrapping defined here alone, to show that one class is all it takes."""

    FORMULA = "x = x + beta*F(LN(x))"
    SOURCE = "a test"
    NORM_IN = NEEDS_NORM = True
    CONSTANTS = ("beta",)
    CONSTANTS_AT = staticmethod(lambda site: {"beta": 1.0 / site.layer})

    def __init__(self, f, make_norm, residual=True, d_model=None, **constants):
        super().__init__(f, make_norm, residual, d_model, **constants)
        self.norm, self.beta = make_norm(), constants["beta"]

    def forward(self, x, ctx):
        return self.skip(x) + self.beta * self.f(self.norm(x), ctx)

    def constant_values(self):
        return {"beta": self.beta}


@pytest.fixture
def halfway():
    from depthlab.model.wrappings import register

    register("halfway")(_Halfway)
    yield _Halfway
    WRAPPINGS.pop("halfway")


def test_a_new_wrapping_is_one_class(halfway, capsys):
    """Declared in this file only: config, build, explain (text and JSON), probe and the CLI accept it."""
    from depthlab.cli import main
    from depthlab.model.explain import explain, format_explain
    from depthlab.probe.from_config import probe_config

    cfg = ModelConfig(wrap="halfway", n_layers=3, d_model=16, n_heads=2)
    with pytest.raises(ConfigError, match="norm"):
        ModelConfig(wrap="halfway", norm="none")  # NEEDS_NORM is read from the class
    model = build_model(cfg)
    betas = [block.attn.beta for block in model.stack.layers]
    assert betas == [1.0, 0.5, pytest.approx(1 / 3)]
    info = explain(cfg)
    sub = info["layers"][1]["sublayers"][0]
    assert (sub["wrap"], sub["formula"], sub["constants"]) == (
        "halfway",
        "x = x + beta*F(LN(x))",
        {"beta": 0.5},
    )
    assert info["final_norm"] is True  # the default policy: the stream is never renormalised
    assert "beta=0.5" in format_explain(info)
    result = probe_config(cfg, batch_size=2, seq_len=8)
    assert result.n_layers == 3 and result.verdicts
    assert main(["probe", "--wrap", "halfway", "--layers", "2", "--d-model", "16", "--heads", "2"]) == 0
    assert "halfway" not in ModelConfig.__dataclass_fields__  # nothing restated elsewhere


def test_a_misspelt_or_missing_constant_raises():
    from depthlab.model.layers import FeedForward
    from depthlab.model.wrappings import DeepNorm, PostLN

    f = FeedForward(8, 16, "gelu")
    with pytest.raises(TypeError, match="alpha, beta"):
        DeepNorm(f, lambda: torch.nn.LayerNorm(8), alpha=2.0, bta=0.5)
    with pytest.raises(TypeError, match="alpha, beta"):
        DeepNorm(f, lambda: torch.nn.LayerNorm(8), alpha=2.0)
    with pytest.raises(TypeError):
        PostLN(f, lambda: torch.nn.LayerNorm(8), alpha=2.0)


def test_formula_without_the_skip():
    from depthlab.model.wrappings import Admin, DeepNorm, PostLN, ReZero

    assert PostLN.formula_for(False) == "x = LN(F(x))"
    assert DeepNorm.formula_for(False) == "x = LN(F(x))"
    assert Admin.formula_for(False) == "x = LN(F(x))"
    assert ReZero.formula_for(False) == "x = a*F(x)"
