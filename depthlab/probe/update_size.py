"""The relative update: how far Adam's first full-size step moves a block's weight matrices, against their own size.

Adam's first update (bias-corrected) moves every entry of a weight by the learning rate, whatever its
gradient's size: dW = lr sign(g). For an m x n matrix that is at most lr sqrt(m n) in spectral norm
(the Frobenius norm of dW, reached when the gradient has rank one, as a first gradient nearly does).
The spectral condition for feature learning (Yang, Simon & Bernstein 2023) asks ||dW|| / ||W|| to be
of order one at every width, which makes the ratio rho = lr sqrt(m n) / ||W||_2 a quantity comparable
across width and depth, unlike the output's step size (which grows about linearly with width at a
fixed learning rate). :func:`relative_update` returns its median over the block weight matrices
(a zero matrix, such as a zero-initialised projection, has no size to compare with and is skipped).
"""

from __future__ import annotations

import math
import statistics

import torch

POWER_ITERATIONS = 30  # the spectral norm's estimate converges to a few parts in 1e3 by then at init


@torch.no_grad()
def spectral_norm(w: torch.Tensor, gen: torch.Generator) -> float:
    """||w||_2 of a matrix (further dimensions are folded into the columns), by power iteration."""
    m = w.detach().float().reshape(w.shape[0], -1)
    v = torch.randn(m.shape[1], generator=gen)
    for _ in range(POWER_ITERATIONS):
        u = m @ v
        v = m.T @ u
        norm = float(v.norm())
        if norm == 0:
            return 0.0
        v = v / norm
    return float((m @ v).norm())


def relative_update(layer_params, lr: float, seed: int = 0) -> float | None:
    """The median over the block weight matrices (2 dimensions or more) of lr sqrt(m n) / ||W||_2;
    None when no block has a non-zero matrix. ``layer_params``: per block, its parameters."""
    gen = torch.Generator().manual_seed(seed)
    seen, ratios = set(), []
    for params in layer_params:
        for p in params:
            if p.ndim < 2 or id(p) in seen or not p.is_floating_point():
                continue
            seen.add(id(p))
            size = spectral_norm(p, gen)
            if size > 0:
                ratios.append(lr * math.sqrt(p.numel()) / size)
    return statistics.median(ratios) if ratios else None
