"""``PassRecord``: what the probe's hooked forward and backward pass recorded (:mod:`depthlab.probe.forward_backward`).

It lives between the pass and the probe's outputs: :func:`depthlab.probe.forward_backward.measure` turns it into
the per-stream rows and the ``config`` of a :class:`~depthlab.probe.result.ProbeResult`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PassRecord:
    """What the hooked forward and backward pass recorded, before it becomes the rows and the config.

    states: every stream x_0 .. x_L (detached); grads: d loss / d x_i per stream (None where the loss
    does not depend on it); context_grads: the position-varying part carried down (None when not
    measured); param_grads: id(parameter) -> its gradient; loss: the loss's value; output: the model's
    main output tensor (detached); jacobian: the mean squared singular value per stream, or None;
    final_norm, normalised, norms_on_input: what the capture saw of the norms (see
    :class:`depthlab.probe.capture.StreamCapture`); position_axis: the axis of ``states`` over positions
    (1, or 0 for a stack that carries its stream sequence-first: :func:`depthlab.probe.capture.position_axis`).
    """

    states: list[torch.Tensor]
    grads: list[torch.Tensor | None]
    context_grads: list | None
    param_grads: dict[int, torch.Tensor | None]
    loss: float
    output: torch.Tensor
    jacobian: list[float] | None
    final_norm: bool
    normalised: list[bool]
    norms_on_input: list[int]
    position_axis: int = 1
