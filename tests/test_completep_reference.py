"""param="completep" and "depth_mup" against CompleteP's public code (EleutherAI/nanoGPT-mup, branch
completep, commit 6f8bc3b, model.py), rule by rule, on the model that code builds: a tied pre-LN GPT
with biases, learned positions, N(0, 0.02) init and no sqrt(d) on the embedding.

Their ``configure_optimizers`` sorts parameters by name into five groups (lines 318-330) with these
lr_scale and weight decay factors (lines 337-361), and one Adam eps for all (line 335); ``Block`` adds
``depth_multiplier**-depth_alpha_exp`` times each branch (113-118); the readout input is x 1/m_w (226);
hidden weights start at N(0, 0.02 / sqrt(m_w)) with no 1/sqrt(2L) (168-177); scores are q k / d_head (65).
"""

from __future__ import annotations

import math

import pytest
import torch

from depthlab import ModelConfig, build_model, param_groups
from depthlab.model import parametrization as P

pytestmark = pytest.mark.usefixtures("one_thread")

MW, ML = 4.0, 4.0  # d_model 64 at base 16, 8 layers at base 2


def their_class(name: str, p) -> str:
    """Which of nanoGPT-mup's groups a depthlab parameter is in (their names: wte/wpe, .ln_, c_*, ln_f)."""
    if name in ("embed.tok.weight", "embed.pos.weight"):
        return "emb"
    if ".layers." not in name:
        return "final_ln"
    if ".norm." in name:
        return "hidden_ln"
    return "hidden_weight" if p.dim() >= 2 else "hidden_bias"


def their_rule(cls: str, alpha: float) -> tuple[float, float]:
    """(lr_scale, weight decay factor) of their CompleteP branch (model.py lines 337-361)."""
    depth_lr = ML ** (alpha - 1)
    return {
        "emb": (1.0, 1.0),
        "hidden_ln": (depth_lr, 0.0),
        "hidden_weight": (depth_lr / MW, MW),
        "hidden_bias": (depth_lr, 0.0),
        "final_ln": (1.0, 0.0),
    }[cls]


def their_model(param: str) -> ModelConfig:
    return ModelConfig(
        n_layers=8, d_model=64, n_heads=4, vocab_size=64, max_len=16, param=param, base_width=16,
        base_depth=2, init="gpt2", embed_scale=False, tie_embeddings=True,
    )  # fmt: skip


@pytest.mark.parametrize("param,alpha", [("completep", 1.0), ("depth_mup", 0.5)])
def test_each_groups_lr_and_weight_decay_are_their_codes(param, alpha):
    model = build_model(their_model(param))
    of = {id(p): g for g in param_groups(model, 1.0, weight_decay=1.0, eps=1.0) for p in g["params"]}
    for name, p in model.named_parameters():
        cls = their_class(name, p)
        lr, wd = their_rule(cls, alpha)
        assert of[id(p)]["lr"] == pytest.approx(lr), name
        assert of[id(p)]["weight_decay"] == pytest.approx(wd), name
        eps = 1.0 / MW * ML**-alpha  # their one eps (line 335)
        if cls.startswith("hidden"):
            assert of[id(p)]["eps"] == pytest.approx(eps), name
        else:  # depthlab keeps the depth factor to the hidden groups (docs/transfer.md says why)
            assert of[id(p)]["eps"] == pytest.approx(eps * ML**alpha), name


@pytest.mark.parametrize("param,alpha", [("completep", 1.0), ("depth_mup", 0.5)])
def test_branches_readout_and_scores_are_their_codes(param, alpha):
    cfg = their_model(param)
    m = P.multipliers(cfg)
    assert m.branch == pytest.approx(ML**-alpha)  # residual_scaling (line 113)
    assert m.output == pytest.approx(1.0 / MW)  # x *= mup_output_alpha / mup_width_multiplier (226)
    model = build_model(cfg)
    attn = model.decoder.layers[0].attn.f
    # theirs 1 / d_head (line 65); depthlab's the same up to sqrt(d_head at the base width) = 2
    assert attn.scale == pytest.approx(math.sqrt(16 // 4) / attn.head_dim)


def test_init_is_their_codes():
    torch.manual_seed(0)
    model = build_model(their_model("completep"))
    layer = model.decoder.layers[0]
    for w in (
        layer.attn.f.qkv.weight,
        layer.attn.f.out.weight,
        layer.ffn.f.fc1.weight,
        layer.ffn.f.fc2.weight,
    ):
        assert w.std().item() == pytest.approx(0.02 / math.sqrt(MW), rel=0.1)  # no 1/sqrt(2L) on out, fc2
    for table in (model.embed.tok.weight, model.embed.pos.weight):
        assert table.std().item() == pytest.approx(0.02, rel=0.1)
    assert model.head.weight is model.embed.tok.weight  # lm_head tied to wte (line 162)
