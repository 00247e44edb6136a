"""Reproductions: each recomputes a claim of the source texts or the papers and checks it against what
was stated.

Every claim module registers its reproduction (:func:`depthlab.reproduce.claim.register`) when it is
imported; this package imports them all, so ``REPRODUCTIONS`` holds every one by name. Expected outcomes
are written in each module before the run; the verdicts are computed from what was measured.
"""

from __future__ import annotations

from collections.abc import Callable

from depthlab.reproduce import (  # noqa: F401  (imported for their registrations)
    batchnorm,
    collapse,
    depth,
    dyt,
    final_norm,
    init_scaling,
    jacobian,
    lr_sensitivity,
    model_update,
    no_norm,
    no_residual,
    original_shape,
    post_depth,
    post_diverge,
    recipe,
    redundancy,
    seeds,
    shallow_post,
    skip_ablation,
    stream_growth,
    warmup,
)
from depthlab.reproduce.claim import REGISTRATIONS, REPRODUCTIONS, Check, Reproduction, register


def load_all() -> dict[str, Callable[..., Reproduction]]:
    """The registry of every reproduction, by name."""
    return REPRODUCTIONS


__all__ = ["REGISTRATIONS", "REPRODUCTIONS", "Check", "Reproduction", "load_all", "register"]
