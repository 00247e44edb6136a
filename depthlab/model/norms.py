"""Normalisations over the feature dimension, chosen by name.

| name        | formula                                         | source                         |
|-------------|-------------------------------------------------|--------------------------------|
| layernorm   | g * (a - mean(a)) / sqrt(var(a) + eps) + b      | Ba et al. 2016                 |
| rmsnorm     | g * a / sqrt(mean(a^2) + eps)                   | Zhang & Sennrich 2019          |
|             | g = 1 + w with ``gain_offset`` (w = 0 at init)  | Gemma (Team et al. 2024)       |
| dyt         | g * tanh(alpha * a) + b, alpha_0 = 0.5          | Zhu et al. 2025 (DyT)          |
| batchnorm   | statistics over batch and time (comparison only)| Ioffe & Szegedy 2015           |
| none        | a                                               |                                |

LayerNorm and RMSNorm take their statistics from one token's features alone; BatchNorm is
here only so that depthlab can show why Transformers do not use it.
"""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """a / sqrt(mean(a^2) + eps) * g, computed in at least float32 (as HF Llama does) and cast back.

    ``offset``: the gain is stored as w and applied as g = 1 + w, w = 0 at init (Gemma's RMSNorm, which
    also multiplies before casting back: the same numbers in float32). At init both are g = 1; they
    differ under weight decay, which pulls w, and so g, toward 0 without the offset and toward 1 with it.
    """

    def __init__(self, d: int, eps: float = 1e-6, offset: bool = False):
        super().__init__()
        self.eps, self.offset = eps, offset
        self.weight = nn.Parameter(torch.zeros(d) if offset else torch.ones(d))

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        a32 = a.to(torch.promote_types(a.dtype, torch.float32))  # float64 stays float64
        out = a32 * torch.rsqrt(a32.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.offset:
            return (out * (1.0 + self.weight.to(out.dtype))).to(a.dtype)
        return self.weight * out.to(a.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}" + (", gain 1 + w" if self.offset else "")


class DyT(nn.Module):
    """Dynamic Tanh: gamma * tanh(alpha * a) + beta, a scalar alpha (Zhu et al. 2025)."""

    def __init__(self, d: int, alpha0: float = 0.5):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), float(alpha0)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return self.weight * torch.tanh(self.alpha * a) + self.bias


class BatchNorm(nn.Module):
    """BatchNorm1d over (batch, time) for (B, T, d) inputs. For comparison only (see module doc)."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.bn = nn.BatchNorm1d(d, eps=eps)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        shape = a.shape
        return self.bn(a.reshape(-1, shape[-1])).reshape(shape)


def make_norm(
    name: str, d: int, eps: float = 1e-5, dyt_alpha: float = 0.5, gain_offset: bool = False
) -> nn.Module:
    """A fresh norm module of width ``d`` by name (``none`` gives ``nn.Identity``); ``gain_offset``
    (RMSNorm only): the gain applied as 1 + w."""
    if name == "layernorm":
        return nn.LayerNorm(d, eps=eps)
    if name == "rmsnorm":
        return RMSNorm(d, eps=eps, offset=gain_offset)
    if name == "dyt":
        return DyT(d, alpha0=dyt_alpha)
    if name == "batchnorm":
        return BatchNorm(d, eps=eps)
    if name == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {name!r}")
