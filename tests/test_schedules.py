"""Learning-rate schedules and the optimiser against their formulas and the published constants."""

from __future__ import annotations

import io
import math

import pytest
import torch

from depthlab import ConfigError, TrainConfig
from depthlab.train.schedules import lr_factor, make_optimizer, make_scheduler


def test_linear_warmup_then_constant():
    f = [lr_factor("linear", t, 4, 10, 64, 0.1) for t in range(1, 8)]
    assert f == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0]
    assert lr_factor("linear", 1, 0, 10, 64, 0.1) == 1.0
    assert lr_factor("constant", 3, 0, 10, 64, 0.1) == 1.0


def test_noam_is_the_original_formula():
    # Vaswani et al. 2017, eq. 3 with d_model 512, warmup 4000: the peak at t = 4000 is (512 * 4000)^-0.5
    assert lr_factor("noam", 4000, 4000, 100_000, 512, 0.1) == pytest.approx(6.9877e-4, rel=1e-4)
    assert lr_factor("noam", 100, 4000, 100_000, 512, 0.1) == pytest.approx(512**-0.5 * 100 * 4000**-1.5)
    assert lr_factor("noam", 16000, 4000, 100_000, 512, 0.1) == pytest.approx(512**-0.5 * 16000**-0.5)
    ramp = [lr_factor("noam", t, 4000, 10**5, 512, 0.1) for t in (1000, 4000, 8000)]
    assert ramp[0] < ramp[1] > ramp[2]


def test_cosine_without_warmup_starts_at_the_peak_and_ends_at_the_floor():
    f = [lr_factor("cosine", t, 0, 10, 64, 0.1) for t in range(1, 11)]
    assert f[0] == 1.0 and f[-1] == pytest.approx(0.1)
    assert all(a > b for a, b in zip(f, f[1:]))


def test_cosine_warms_up_then_decays_to_the_floor():
    f = [lr_factor("cosine", t, 10, 110, 64, 0.1) for t in range(1, 111)]
    assert f[4] == pytest.approx(0.5) and f[9] == pytest.approx(1.0)
    assert f[59] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert f[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(f[9:], f[10:]))


def _optimizer(cfg: TrainConfig):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    return model, make_optimizer(model, cfg)


def test_scheduler_gives_update_t_its_factor():
    cfg = TrainConfig(lr=2e-3, warmup=4, schedule="linear")
    model, opt = _optimizer(cfg)
    sched = make_scheduler(opt, cfg, d_model=64)
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])  # the rate the next update uses
        opt.step()
        sched.step()
    assert seen == pytest.approx([2e-3 * f for f in (0.25, 0.5, 0.75, 1, 1, 1)])


def test_scheduler_state_loads_with_weights_only():
    cfg = TrainConfig(lr=1.0, warmup=10, schedule="noam")
    _, opt = _optimizer(cfg)
    sched = make_scheduler(opt, cfg, d_model=64)
    for _ in range(3):
        opt.step()
        sched.step()
    buf = io.BytesIO()
    torch.save({"s": sched.state_dict(), "o": opt.state_dict()}, buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    _, opt2 = _optimizer(cfg)
    sched2 = make_scheduler(opt2, cfg, d_model=64)
    opt2.load_state_dict(state["o"])
    sched2.load_state_dict(state["s"])
    opt.step(), sched.step(), opt2.step(), sched2.step()
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"] == pytest.approx(64**-0.5 * 5 * 10**-1.5)


def test_optimizer_recipe():
    cfg = TrainConfig(optimizer="adamw", weight_decay=0.1, beta1=0.8, beta2=0.95, eps=1e-8)
    _, opt = _optimizer(cfg)
    assert isinstance(opt, torch.optim.AdamW)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and [p.dim() for p in decay["params"]] == [2]  # the Linear weight
    assert no_decay["weight_decay"] == 0.0 and len(no_decay["params"]) == 3  # bias, LN gain and bias
    assert decay["betas"] == (0.8, 0.95) and decay["eps"] == 1e-8
    _, adam = _optimizer(TrainConfig(optimizer="adam"))
    assert type(adam) is torch.optim.Adam


def test_schedule_config_errors():
    with pytest.raises(ConfigError, match="warmup"):
        TrainConfig(schedule="constant", warmup=10)
    with pytest.raises(ConfigError, match="warmup"):
        TrainConfig(schedule="noam", warmup=0)
