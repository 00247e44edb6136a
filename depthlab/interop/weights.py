"""Filling a depthlab state dict from another library's tensors (shared by the HF and torch.nn imports)."""

from __future__ import annotations

import torch


def put_linear(state: dict, name: str, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    """``state[name.weight]`` (and ``name.bias`` when there is one), detached: a Linear's or a norm's."""
    state[f"{name}.weight"] = weight.detach()
    if bias is not None:
        state[f"{name}.bias"] = bias.detach()
