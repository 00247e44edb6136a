"""Sinkhorn-Knopp: the projection of exp(logits) onto the doubly stochastic matrices (mHC's H_res).

    M_0 = exp(logits),  M_t = T_r(T_c(M_{t-1})),  t = 1 .. t_max        (Xie et al. 2025, arXiv 2512.24880)

T_c divides each column by its sum, T_r each row, so after the last step every row sums to 1 exactly and
every column to 1 within the iteration's convergence. Doubly stochastic matrices have spectral norm 1
and are closed under products, which is why the composite map of many layers cannot amplify the stream.

Computed in float32 whatever the model's dtype: the reviewers of Megatron-LM's mHC (PR #4483) warn that
bf16's 8-bit mantissa leaves sums visibly off 1 after a few iterations. ``tol`` > 0 stops as soon as every
column sum is within ``tol`` of 1 (one comparison per iteration); 0 runs all ``iters``.
"""

from __future__ import annotations

import torch


def sinkhorn_knopp(logits: torch.Tensor, iters: int = 20, tol: float = 0.0) -> torch.Tensor:
    """(..., n, n) logits -> (..., n, n) doubly stochastic matrices, in float32, cast back to the input's
    dtype. Rows are normalised last (exactly 1); columns within the convergence after ``iters``."""
    m = (logits.float() - logits.float().amax(dim=(-2, -1), keepdim=True)).exp()  # exp, shifted: no overflow
    for _ in range(iters):
        m = m / m.sum(dim=-2, keepdim=True)  # T_c: columns sum to 1
        m = m / m.sum(dim=-1, keepdim=True)  # T_r: rows sum to 1
        if tol and (m.sum(dim=-2) - 1).abs().max() <= tol:
            break
    return m.to(logits.dtype)


def stochastic_error(m: torch.Tensor) -> tuple[float, float]:
    """(max |row sum - 1|, max |column sum - 1|) of (..., n, n) matrices, in float64: how far from
    doubly stochastic they are."""
    m = m.double()
    return float((m.sum(-1) - 1).abs().max()), float((m.sum(-2) - 1).abs().max())
