"""The relative update: how far Adam's first full-size step moves a block's weight matrices, against their own size.

Adam's first update (bias-corrected) moves every entry of a weight by the learning rate, whatever its
gradient's size: dW = lr sign(g). For an m x n matrix that is at most lr sqrt(m n) in spectral norm
(the Frobenius norm of dW, reached when the gradient has rank one, as a first gradient nearly does).
The spectral condition for feature learning (Yang, Simon & Bernstein 2023) asks ||dW|| / ||W|| to be
of order one at every width, which makes the ratio rho = lr sqrt(m n) / ||W||_2 a quantity comparable
across width and depth, unlike the output's step size (which grows about linearly with width at a
fixed learning rate). :func:`relative_update` returns its median over the block weight matrices
(a zero matrix, such as a zero-initialised projection, has no size to compare with and is skipped).

Both this and the probe's update gain take Adam's first step as training would take it: each parameter
with its own group's lr and eps (:func:`depthlab.param_groups`, which gives a hidden matrix lr / m_w
under muP and CompleteP). :func:`group_scales` is that per-parameter factor on the base lr and eps; it is
empty under sp and for a model depthlab did not build, where every parameter takes the base lr, and the
numbers are those of the standard parametrization exactly.
"""

from __future__ import annotations

import math
import statistics

import torch
from torch import nn

from depthlab.model.param_groups import param_groups

POWER_ITERATIONS = 30  # the spectral norm's estimate converges to a few parts in 1e3 by then at init


@torch.no_grad()
def spectral_norm(w: torch.Tensor, gen: torch.Generator) -> float:
    """||w||_2 of a matrix (further dimensions are folded into the columns), by power iteration."""
    m = w.detach().float().reshape(w.shape[0], -1)
    v = torch.randn(m.shape[1], generator=gen).to(m.device)  # the generator is a CPU one; m may be on a GPU
    for _ in range(POWER_ITERATIONS):
        u = m @ v
        v = m.T @ u
        norm = float(v.norm())
        if norm == 0:
            return 0.0
        v = v / norm
    return float((m @ v).norm())


def group_scales(model: nn.Module) -> dict[int, tuple[float, float]]:
    """id(parameter) -> (its group's lr / the base lr, its group's eps / the base eps) under the model's
    parametrization (``model.cfg.param``); empty under sp or without a depthlab config."""
    cfg = getattr(model, "cfg", None)
    if getattr(cfg, "param", "sp") == "sp":
        return {}
    return {id(p): (g["lr"], g["eps"]) for g in param_groups(model, 1.0, eps=1.0) for p in g["params"]}


def relative_update(layer_params, lr: float, seed: int = 0, scales: dict | None = None) -> float | None:
    """The median over the block weight matrices (2 dimensions or more) of lr_W sqrt(m n) / ||W||_2,
    lr_W the matrix's own lr (lr times its factor in ``scales``, :func:`group_scales`; lr without one);
    None when no block has a non-zero matrix. ``layer_params``: per block, its parameters."""
    scales = scales or {}
    gen = torch.Generator().manual_seed(seed)
    seen, ratios = set(), []
    for params in layer_params:
        for p in params:
            if p.ndim < 2 or id(p) in seen or not p.is_floating_point():
                continue
            seen.add(id(p))
            size = spectral_norm(p, gen)
            if size > 0:
                lr_w = lr * scales[id(p)][0] if id(p) in scales else lr
                ratios.append(lr_w * math.sqrt(p.numel()) / size)
    return statistics.median(ratios) if ratios else None
