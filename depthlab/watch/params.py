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
    """The parameters of the watched stack, per layer and per sublayer kind, and of the whole model.

    The gradient norms of every group come from one batched norm over each parameter's gradient
    (``torch._foreach_norm``) and one read-back: a group's squared norm is the sum of its members'.
    """

    def __init__(self, model: nn.Module, stack: StackInfo):
        self.all = [p for p in model.parameters() if p.requires_grad]
        self.layers = stack.layer_params
        self.parts = [[group.get(kind, []) for kind in SUBLAYER_KINDS] for group in stack.groups]
        self._index = {id(p): i for i, p in enumerate(self.all)}

    def grad_norms(self) -> tuple[float, list[tuple[float | None, ...]]]:
        """(||grad|| over all parameters, per layer the gradient norm of each kind of SUBLAYER_KINDS, None
        where the layer has no such sublayer). Read the gradients as they are now (call before clipping)."""
        present = [(i, p.grad) for i, p in enumerate(self.all) if p.grad is not None]
        sq = [0.0] * len(self.all)
        if present:
            norms = torch._foreach_norm([g.float() if g.dtype != torch.float32 else g for _, g in present])
            for (i, _), v in zip(present, torch.stack(norms).double().pow(2).tolist()):
                sq[i] = v
        total = sum(sq) ** 0.5
        per_layer = [
            tuple(
                sum(sq[self._index[id(p)]] for p in params if id(p) in self._index) ** 0.5 if params else None
                for params in parts
            )
            for parts in self.parts
        ]
        return total, per_layer

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
