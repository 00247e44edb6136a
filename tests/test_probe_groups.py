"""The probe's learning-rate measurements (the update gain and the relative update the doctor reads) take
Adam's first step with the per-group lr and eps of training (depthlab.param_groups): under sp exactly
the numbers of before, under mup and the depth rules each group's own lr."""

from __future__ import annotations

import statistics

import pytest
import torch

from depthlab import ModelConfig, build_model, param_groups
from depthlab.probe.capture import find_norms
from depthlab.probe.forward_backward import (
    ADAM_EPS,
    GAIN_LR,
    _first_update_change,
    _forward_backward,
    _rel,
    measure,
    model_output,
    probe_mode,
)
from depthlab.probe.locate import locate_stack
from depthlab.probe.update_size import group_scales, relative_update, spectral_norm

pytestmark = pytest.mark.usefixtures("one_thread")
LR = 3e-3


def _model(**kw):
    base = dict(n_layers=4, d_model=32, n_heads=2, vocab_size=64, max_len=16, wrap="pre", init="normal")
    torch.manual_seed(0)
    return build_model(ModelConfig(**{**base, **kw}))


def _batch():
    return torch.randint(0, 64, (4, 12), generator=torch.Generator().manual_seed(3))


def _run(model, batch):
    stack = locate_stack(model)
    with probe_mode(model), torch.enable_grad():
        return stack, _forward_backward(
            model, batch, "lm", stack, find_norms(model, stack), 0, 0, False, True
        )


@torch.no_grad()
def _gain_as_before(model, batch, run, lr1):
    """The update gain's step as the probe took it before per-group lrs: every parameter lr1, eps fixed."""
    params = [p for p in model.parameters() if run.param_grads.get(id(p)) is not None]
    saved = [p.detach().clone() for p in params]
    for p in params:
        g = run.param_grads[id(p)]
        p.sub_(lr1 * g / (g.abs() + ADAM_EPS))
    out = model_output(model(batch))
    for p, s in zip(params, saved, strict=True):
        p.copy_(s)
    return _rel(out, run.output)


def _rho_as_before(layer_params, lr, seed):
    gen = torch.Generator().manual_seed(seed)
    seen, ratios = set(), []
    for params in layer_params:
        for p in params:
            if p.ndim >= 2 and id(p) not in seen:
                seen.add(id(p))
                size = spectral_norm(p, gen)
                if size > 0:
                    ratios.append(lr * p.numel() ** 0.5 / size)
    return statistics.median(ratios)


@pytest.mark.parametrize("wrap", ["pre", "post"])
def test_under_sp_the_gain_and_the_relative_update_are_those_of_before(wrap):
    model, batch = _model(wrap=wrap), _batch()
    assert group_scales(model) == {}
    stack, run = _run(model, batch)
    with probe_mode(model):
        assert _first_update_change(model, batch, run, GAIN_LR) == _gain_as_before(model, batch, run, GAIN_LR)
    pr = measure(model, batch, lr=LR).config["probe"]
    assert pr["relative_update"] == _rho_as_before(stack.layer_params, LR, 0)
    assert pr["update_gain"] == _first_update_change(model, batch, run, GAIN_LR) / GAIN_LR


@torch.no_grad()
def _adam_step_change(model, batch, run, lr):
    """The output's relative change after one real torch Adam step over param_groups (training's
    groups), from the probe's gradients."""
    saved = {id(p): p.detach().clone() for p in model.parameters()}
    for p in model.parameters():
        p.grad = run.param_grads.get(id(p))
    torch.optim.Adam(param_groups(model, lr, eps=ADAM_EPS), lr=lr).step()
    out = model_output(model(batch))
    for p in model.parameters():
        p.copy_(saved[id(p)])
        p.grad = None
    return _rel(out, run.output)


@pytest.mark.parametrize(
    "kw",
    [
        dict(param="mup", base_width=8),
        dict(param="depth_mup", base_width=8, base_depth=2, n_layers=8),
        dict(param="completep", base_width=8, base_depth=2, n_layers=8),
    ],
    ids=["mup", "depth_mup", "completep"],
)
def test_beyond_sp_the_probes_step_is_trainings_step(kw):
    model, batch = _model(**kw), _batch()
    _, run = _run(model, batch)
    with probe_mode(model):
        probe_change = _first_update_change(model, batch, run, GAIN_LR)
        adam = _adam_step_change(model, batch, run, GAIN_LR)
        uniform = _gain_as_before(model, batch, run, GAIN_LR)
    assert probe_change == pytest.approx(adam, rel=1e-4)
    assert abs(uniform - adam) > 0.1 * adam  # one lr for every parameter would have measured another gain


def test_beyond_sp_the_relative_update_takes_the_hidden_lr():
    """Every block matrix is a hidden matrix: its lr is lr / m_w (x m_L^-1/2 under depth-muP)."""
    for kw, factor in [
        (dict(param="mup", base_width=8), 1 / 4),
        (dict(param="depth_mup", base_width=8, base_depth=2, n_layers=8), 1 / 4 / 2),
    ]:
        model = _model(**kw)
        stack = locate_stack(model)
        rho = measure(model, _batch(), lr=LR).config["probe"]["relative_update"]
        assert rho == pytest.approx(_rho_as_before(stack.layer_params, LR * factor, 0), rel=1e-12)
        assert rho == pytest.approx(relative_update(stack.layer_params, LR, 0) * factor, rel=1e-6)
