"""Residual/normalisation wrappings: one small class each, whose forward is its formula.

F is the wrapped sublayer (attention or FFN), x the residual stream, LN the configured norm.
With the residual turned off (seeds 003, 004) ``self.skip(x)`` is 0 and "x +" disappears from the
formula. Constants (alpha, beta, omega, lambda, 1/sqrt(l)) come from :mod:`depthlab.model.init`.

| name       | formula                         | source                                           |
|------------|---------------------------------|--------------------------------------------------|
| post       | x <- LN(x + F(x))               | Vaswani et al. 2017, "Add & Norm"                |
| pre        | x <- x + F(LN(x))               | Xiong et al. 2020; GPT-2, LLaMA                  |
| sandwich   | x <- x + LN_out(F(LN_in(x)))    | CogView 2021; Peri-LN 2025; Gemma 2/3            |
| reorder    | x <- x + LN(F(x))               | OLMo 2 2024 ("norm after")                       |
| deepnorm   | x <- LN(alpha x + F(x))         | Wang et al. 2022, DeepNet                        |
| admin      | x <- LN(omega * x + F(x))       | Liu et al. 2020, Admin                           |
| rezero     | x <- x + a F(x), a = 0 at init  | Bachlechner et al. 2020                          |
| layerscale | x <- x + lambda * F(LN(x))      | Touvron et al. 2021, CaiT                        |
| lns        | x <- x + F(LN(x) / sqrt(l))     | Sun et al. 2025, LayerNorm Scaling               |

``mix`` (Mix-LN, Li et al. 2024) is not a class: the stack gives its bottom quarter ``post`` and the
rest ``pre`` (see :func:`depthlab.model.stack.layer_wraps`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

WRAPPINGS: dict[str, type[Wrapping]] = {}


def register(name: str):
    def deco(cls):
        cls.name = name
        WRAPPINGS[name] = cls
        return cls

    return deco


class Wrapping(nn.Module):
    """Base: holds the sublayer ``f`` and whether the skip connection is on.

    Class attributes describe the wiring for ``depthlab explain``: where norms sit relative to F and
    to the addition, and whether the stream itself is renormalised after every sublayer.
    """

    name = "?"
    NORM_IN = False  # a norm on F's input
    NORM_OUT = False  # a norm on F's output, before the addition
    NORM_AFTER_ADD = False  # a norm on the sum (the stream itself is renormalised)

    def __init__(self, f: nn.Module, make_norm: Callable[[], nn.Module], residual: bool = True, **constants):
        super().__init__()
        self.f, self.residual = f, residual

    def skip(self, x: torch.Tensor):
        """The identity path, or 0 when this sublayer's residual is turned off."""
        return x if self.residual else 0

    def constants(self) -> dict:
        """alpha / beta / omega / scale values of this wrapping (None where the formula has none)."""
        return {"alpha": None, "beta": None}


@register("post")
class PostLN(Wrapping):
    """x <- LN(x + F(x)): the original "Add & Norm" (Vaswani et al. 2017)."""

    NORM_AFTER_ADD = True

    def __init__(self, f, make_norm, residual=True, **constants):
        super().__init__(f, make_norm, residual)
        self.norm = make_norm()

    def forward(self, x, ctx):
        return self.norm(self.skip(x) + self.f(x, ctx))


@register("pre")
class PreLN(Wrapping):
    """x <- x + F(LN(x)): the norm inside the branch (Xiong et al. 2020; GPT-2, LLaMA)."""

    NORM_IN = True

    def __init__(self, f, make_norm, residual=True, **constants):
        super().__init__(f, make_norm, residual)
        self.norm = make_norm()

    def forward(self, x, ctx):
        return self.skip(x) + self.f(self.norm(x), ctx)


@register("sandwich")
class SandwichLN(Wrapping):
    """x <- x + LN_out(F(LN_in(x))) (CogView Sandwich-LN; Peri-LN; Gemma 2/3)."""

    NORM_IN = NORM_OUT = True

    def __init__(self, f, make_norm, residual=True, **constants):
        super().__init__(f, make_norm, residual)
        self.norm_in, self.norm_out = make_norm(), make_norm()

    def forward(self, x, ctx):
        return self.skip(x) + self.norm_out(self.f(self.norm_in(x), ctx))


@register("reorder")
class ReorderLN(Wrapping):
    """x <- x + LN(F(x)): normalise the update, not the stream (OLMo 2 "norm after")."""

    NORM_OUT = True

    def __init__(self, f, make_norm, residual=True, **constants):
        super().__init__(f, make_norm, residual)
        self.norm = make_norm()

    def forward(self, x, ctx):
        return self.skip(x) + self.norm(self.f(x, ctx))


@register("deepnorm")
class DeepNorm(Wrapping):
    """x <- LN(alpha * x + F(x)), with F's v/out/fc weights scaled by beta at init (Wang et al. 2022)."""

    NORM_AFTER_ADD = True

    def __init__(self, f, make_norm, residual=True, *, alpha: float, beta: float, **constants):
        super().__init__(f, make_norm, residual)
        self.norm, self.alpha, self.beta = make_norm(), alpha, beta

    def forward(self, x, ctx):
        # F(x) + alpha * x in one kernel (torch.add's alpha): one elementwise pass fewer per sublayer
        return self.norm(torch.add(self.f(x, ctx), self.skip(x), alpha=self.alpha))

    def constants(self):
        return {"alpha": self.alpha, "beta": self.beta}


@register("admin")
class Admin(Wrapping):
    """x <- LN(omega * x + F(x)), omega learnable per feature, closed-form init (Liu et al. 2020)."""

    NORM_AFTER_ADD = True

    def __init__(self, f, make_norm, residual=True, *, omega: float, d_model: int, **constants):
        super().__init__(f, make_norm, residual)
        self.norm = make_norm()
        self.omega = nn.Parameter(torch.full((d_model,), float(omega)))

    def forward(self, x, ctx):
        return self.norm(self.omega * self.skip(x) + self.f(x, ctx))

    def constants(self):
        return {"alpha": float(self.omega.detach().mean()), "beta": None}


@register("rezero")
class ReZero(Wrapping):
    """x <- x + a * F(x), a scalar a = 0 at init and no norm (Bachlechner et al. 2020)."""

    def __init__(self, f, make_norm, residual=True, **constants):
        super().__init__(f, make_norm, residual)
        self.a = nn.Parameter(torch.zeros(1))

    def forward(self, x, ctx):
        return self.skip(x) + self.a * self.f(x, ctx)

    def constants(self):
        return {"alpha": None, "beta": float(self.a.detach())}


@register("layerscale")
class LayerScale(Wrapping):
    """x <- x + diag(lambda) F(LN(x)), lambda per feature, small at init (CaiT, Touvron et al. 2021)."""

    NORM_IN = True

    def __init__(self, f, make_norm, residual=True, *, layerscale: float, d_model: int, **constants):
        super().__init__(f, make_norm, residual)
        self.norm = make_norm()
        self.gamma = nn.Parameter(torch.full((d_model,), float(layerscale)))

    def forward(self, x, ctx):
        return self.skip(x) + self.gamma * self.f(self.norm(x), ctx)

    def constants(self):
        return {"alpha": None, "beta": float(self.gamma.detach().mean())}


@register("lns")
class LayerNormScaling(Wrapping):
    """x <- x + F(LN(x) * 1/sqrt(l)), l = 1..L the layer index (Sun et al. 2025)."""

    NORM_IN = True

    def __init__(self, f, make_norm, residual=True, *, lns_scale: float, **constants):
        super().__init__(f, make_norm, residual)
        self.norm, self.scale = make_norm(), lns_scale

    def forward(self, x, ctx):
        return self.skip(x) + self.f(self.norm(x) * self.scale, ctx)

    def constants(self):
        return {"alpha": None, "beta": self.scale}
