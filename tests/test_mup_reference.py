"""param="mup" against microsoft/mup itself: its ``set_base_shapes`` marks each parameter's width
dimensions, and the test reads from them the rules ``MuAdam``, ``MuReadout`` and ``mup.init`` apply
(mup 1.0.0: optim.py, layer.py, init.py), per parameter, against depthlab's groups, multipliers and init.

mup is not a dependency: ``pip install mup`` pulls torchvision and with it another torch build, so it
is installed without its dependencies (``pip install --no-deps mup``; the Makefile's dev install does)
and these tests are skipped when it is absent. Importing mup needs only torch and PyYAML.

How mup sees a depthlab parameter: Adam's step does not depend on the gradient's scale, so a table E
used as c E (the token embedding's sqrt(d) under ``embed_scale``) is the table W = c E with a c times
larger lr. mup's rules are stated for W (its nn.Embedding has no multiplier); the test translates.
"""

from __future__ import annotations

import math

import pytest
import torch

from depthlab import ModelConfig, build_model, param_groups
from depthlab.config_family import FamilyOptions
from depthlab.model import parametrization as P

try:
    import mup
except ImportError:  # pragma: no cover - depends on the environment
    pytest.skip(
        "microsoft/mup is not installed (pip install --no-deps mup): the reference comparison needs it",
        allow_module_level=True,
    )

pytestmark = pytest.mark.usefixtures("one_thread")

BASE, TARGET = 32, 128
CASES = {
    "default (tied, sqrt(d) embedding, xavier)": {},
    "untied head": {"tie_embeddings": False},
    "no embedding scale": {"embed_scale": False},
    "untied, normal init": {"tie_embeddings": False, "init": "normal"},
    "tied, gpt2 init": {"init": "gpt2"},
    "factorised embedding (d_embed)": {"family": FamilyOptions(d_embed=16), "tie_embeddings": False},
    "sandwich, rope, no bias": {"wrap": "sandwich", "position": "rope", "bias": False},
}


def pair(**kw) -> tuple[torch.nn.Module, torch.nn.Module, ModelConfig]:
    """(the target model with mup's infshapes set against the base model, the base model, its config)."""
    shape = dict(n_layers=2, n_heads=4, vocab_size=64, max_len=32, param="mup", base_width=BASE)
    cfg = ModelConfig(**{**shape, **kw, "d_model": TARGET})
    torch.manual_seed(0)
    target = build_model(cfg)
    base = build_model(cfg.replace(d_model=BASE))
    mup.set_base_shapes(target, base, rescale_params=False, do_assert=False)  # depthlab does its own init
    return target, base, cfg


def embed_mult(cfg: ModelConfig, width: int) -> float:
    """The token table's own multiplier in depthlab's forward: sqrt(d) under embed_scale."""
    return math.sqrt(width) if cfg.embed_scale else 1.0


def lr_by_name(model) -> dict[str, tuple[float, float]]:
    """parameter name -> (lr, weight decay) of its group, at lr 1 and weight decay 1."""
    of = {
        id(p): (g["lr"], g["weight_decay"])
        for g in param_groups(model, 1.0, weight_decay=1.0)
        for p in g["params"]
    }
    return {name: of[id(p)] for name, p in model.named_parameters()}


def mup_rule(p) -> tuple[float, float]:
    """MuAdam's (lr factor, weight-decay factor) for ``p``: 1/width_mult and x width_mult when both its
    dimensions are width (``ninf() == 2``), else unchanged (mup/optim.py)."""
    if p.infshape.ninf() == 2:
        return 1.0 / p.infshape.width_mult(), p.infshape.width_mult()
    return 1.0, 1.0


@pytest.mark.parametrize("kw", CASES.values(), ids=CASES.keys())
def test_each_parameters_adam_lr_and_weight_decay_are_muadams(kw):
    target, _, cfg = pair(**kw)
    groups = lr_by_name(target)
    token = "embed.tok.weight"
    c = embed_mult(cfg, TARGET) / embed_mult(cfg, BASE) if cfg.family.d_embed is None else 1.0
    for name, p in target.named_parameters():
        lr, wd = groups[name]
        want_lr, want_wd = mup_rule(p)
        effective = lr * (c if name == token else 1.0)  # W = c E steps c times as far as E
        assert effective == pytest.approx(want_lr), name
        if p.dim() < 2:  # vectors are never decayed (nanoGPT's choice): mup leaves their wd as given
            assert wd == 0.0, name
        else:
            assert wd == pytest.approx(want_wd), name


@pytest.mark.parametrize("kw", CASES.values(), ids=CASES.keys())
def test_the_readout_multiplier_is_mureadouts(kw):
    target, _, cfg = pair(**kw)
    readout = target.head_proj if target.head_proj is not None else target.head
    want = 1.0 / readout.weight.infshape.width_mult()  # MuReadout: output_mult * x / width_mult
    got = P.multipliers(cfg).output
    if cfg.tie_embeddings and target.head_proj is None:
        # MuSharedReadout reads W = c E; depthlab's head reads E: x / c on W
        got /= embed_mult(cfg, TARGET) / embed_mult(cfg, BASE)
    assert got == pytest.approx(want)
    tokens = torch.randint(0, cfg.vocab_size, (2, 7))
    _, states = target(tokens, return_states=True)
    x = target.decoder.norm(states[-1]) * P.multipliers(cfg).output
    x = target.head_proj(x) if target.head_proj is not None else x
    assert torch.allclose(target(tokens), target.head(x), atol=1e-6)


@pytest.mark.parametrize("kw", CASES.values(), ids=CASES.keys())
def test_attention_scores_scale_as_one_over_d_head(kw):
    target, base, _ = pair(**kw)
    t, b = target.decoder.layers[0].attn.f, base.decoder.layers[0].attn.f
    b_scale = b.scale if b.scale is not None else b.head_dim**-0.5
    # mup's 1/d (its README's 8/d: a constant chosen so that a common head width keeps SP's scale);
    # depthlab's constant makes the base width's the configured one
    assert t.scale / b_scale == pytest.approx(b.head_dim / t.head_dim)


def effective_std(model, name: str, cfg: ModelConfig, width: int) -> float:
    p = dict(model.named_parameters())[name]
    return p.std().item() * (embed_mult(cfg, width) if name == "embed.tok.weight" else 1.0)


@pytest.mark.parametrize("kw", CASES.values(), ids=CASES.keys())
def test_init_stds_scale_as_mup_init(kw):
    """mup.init: a width x width weight's std x width_mult^-1/2, every other weight's std unchanged
    (mup/init.py ``constant_std_init_``); biases start at 0 in depthlab, which any rule keeps."""
    target, base, cfg = pair(**kw)
    if cfg.family.d_embed is not None:
        pytest.skip("xavier's projections of the fixed d_embed: see docs/transfer.md")
    for name, p in target.named_parameters():
        if p.dim() < 2 or p.infshape.ninf() == 0:
            continue  # norm gains (ones), biases (zeros); no width
        want = p.infshape.width_mult() ** -0.5 if p.infshape.ninf() == 2 else 1.0
        got = effective_std(target, name, cfg, TARGET) / effective_std(base, name, cfg, BASE)
        assert got == pytest.approx(want, rel=0.15), name


def test_the_group_table_covers_every_parameter_once():
    target, _, _ = pair()
    ids = [id(p) for g in param_groups(target, 1.0) for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in target.parameters())
