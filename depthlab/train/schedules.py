"""The optimiser (Adam / AdamW) and the learning-rate schedules.

A schedule is a multiplier of the base ``lr`` at update t = 1, 2, ..., steps:

| name     | factor(t)                                                        | source                      |
|----------|------------------------------------------------------------------|-----------------------------|
| constant | 1                                                                |                             |
| linear   | min(1, t / w): linear warmup over w steps, then constant (w=0: 1) | Goyal et al. 2017           |
| noam     | d^-0.5 * min(t^-0.5, t * w^-1.5)                                 | Vaswani et al. 2017, eq. 3  |
| cosine   | t / w during warmup, then r + (1 - r) (1 + cos(pi p)) / 2,       | Loshchilov & Hutter 2017    |
|          | p = (t - w') / (steps - w'), w' = max(w, 1), r = min_lr_ratio    |                             |

``noam`` is the original recipe's whole learning rate, so ``lr`` multiplies it: ``--lr 1 --schedule noam
--warmup 4000`` is Vaswani et al.'s rate; its peak, at t = w, is lr * (d w)^-0.5.
"""

from __future__ import annotations

import math

import torch

from depthlab.config import TrainConfig
from depthlab.model.param_groups import param_groups


def lr_factor(name: str, t: int, warmup: int, steps: int, d_model: int, min_ratio: float) -> float:
    """The schedule's multiplier of the base learning rate at update ``t`` (1-based)."""
    if name == "constant":
        return 1.0
    if name == "linear":
        return min(1.0, t / warmup) if warmup else 1.0
    if name == "noam":
        return d_model**-0.5 * min(t**-0.5, t * warmup**-1.5)
    if name == "cosine":
        if t <= warmup:
            return t / warmup
        start = max(warmup, 1)  # the first update after warmup (or the very first) takes the peak
        p = min(1.0, (t - start) / max(1, steps - start))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p))
    raise ValueError(f"unknown schedule {name!r}")


class Schedule:
    """The callable given to ``LambdaLR``. Its state is plain numbers, so the scheduler's state_dict loads
    with ``weights_only=True``. LambdaLR calls it with k = 0, 1, ... for update k + 1."""

    def __init__(self, name: str, warmup: int, steps: int, d_model: int, min_ratio: float):
        self.name, self.warmup, self.steps, self.d_model, self.min_ratio = (
            name,
            warmup,
            steps,
            d_model,
            min_ratio,
        )

    def __call__(self, k: int) -> float:
        return lr_factor(self.name, k + 1, self.warmup, self.steps, self.d_model, self.min_ratio)


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig, d_model: int):
    """A LambdaLR applying ``cfg.schedule``; step it once after every optimizer step."""
    fn = Schedule(cfg.schedule, cfg.warmup, cfg.steps, d_model, cfg.min_lr_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam or AdamW with (beta1, beta2), eps and weight decay.

    Weight decay applies to matrices (and embeddings) only, not to biases, norm gains or scalar gates
    (nanoGPT's ``configure_optimizers``): decaying a LayerNorm gain toward 0 would shrink the stream.
    With ``adam`` the decay is an L2 term in the gradient; with ``adamw`` it is decoupled (Loshchilov &
    Hutter 2019): each update multiplies the weights by 1 - lr_t * weight_decay. With ``independent_wd``
    AdamW's coefficient is weight_decay / lr, so the factor is 1 - (lr_t / lr) * weight_decay: the
    decay follows the schedule but not the peak learning rate (Wortsman et al. 2023). The groups, and
    their per-group lr, eps and decay under a parametrization, are :func:`depthlab.param_groups`'s.
    """
    decay = cfg.weight_decay / cfg.lr if cfg.independent_wd else cfg.weight_decay
    groups = param_groups(model, cfg.lr, weight_decay=decay, eps=cfg.eps)
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return cls(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)


def run_lr(optimizer: torch.optim.Optimizer, peak: float) -> float:
    """The run's learning rate now: its peak ``lr`` times the schedule's factor, what the records log.
    Under sp the first group has it; under a parametrization the first group is the hidden matrices',
    whose lr is the peak's x hidden_lr (lr / m_w under muP), so the factor is read from it (LambdaLR
    keeps each group's ``initial_lr``)."""
    g = optimizer.param_groups[0]
    start = g.get("initial_lr", g["lr"])
    return g["lr"] if start == peak else peak * (g["lr"] / start)
