"""Each layer's parameters: their gradient norms by sublayer, and how much an update moved them.

Groups come from :func:`depthlab.probe.locate.locate_stack` (a sublayer's own weights, the probe's
definition), gathered once: walking the modules on every logged step costs more than the norms.
Every function does its arithmetic on the device and reads back one list (one synchronisation).
"""

from __future__ import annotations

import torch
from torch import nn

from depthlab.probe.locate import SUBLAYER_KINDS, StackInfo


def total_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of a list of tensors taken together, as a 0-dim float tensor (0 for an empty list)."""
    if not tensors:
        return torch.zeros(())
    return torch.nn.utils.get_total_norm([t.float() for t in tensors], foreach=True)


class LayerParams:
    """The parameters of the watched stack, per layer and per sublayer kind, and of the whole model."""

    def __init__(self, model: nn.Module, stack: StackInfo):
        self.all = [p for p in model.parameters() if p.requires_grad]
        self.layers = stack.layer_params
        self.parts = [[group.get(kind, []) for kind in SUBLAYER_KINDS] for group in stack.groups]

    def grad_norms(self) -> tuple[float, list[tuple[float | None, ...]]]:
        """(||grad|| over all parameters, per layer the gradient norm of each kind of SUBLAYER_KINDS, None
        where the layer has no such sublayer). Read the gradients as they are now (call before clipping)."""
        total = total_norm([p.grad for p in self.all if p.grad is not None])
        norms = [
            total_norm([p.grad for p in params if p.grad is not None])
            for parts in self.parts
            for params in parts
        ]
        values = torch.stack([total, *norms]).tolist()
        k = len(SUBLAYER_KINDS)
        per_layer = [
            tuple(v if params else None for v, params in zip(values[1 + i * k : 1 + (i + 1) * k], parts))
            for i, parts in enumerate(self.parts)
        ]
        return values[0], per_layer

    def snapshot(self) -> list[list[torch.Tensor]]:
        """A copy of each layer's parameters (take it before the optimizer step)."""
        return [[p.detach().clone() for p in params] for params in self.layers]

    def updates(self, before: list[list[torch.Tensor]]) -> list[float]:
        """||W_after - W_before|| / ||W_before|| per layer (call after the optimizer step)."""
        ratios = []
        for params, old in zip(self.layers, before):
            new = [p.detach() for p in params]
            diff = total_norm(torch._foreach_sub(new, old)) if new else torch.zeros(())
            ratios.append(diff / total_norm(old).clamp_min(1e-30))
        return torch.stack(ratios).tolist() if ratios else []
