"""The few collectives the watcher needs, on whatever process group the user's loop joined.

Every process of a DDP run computes its share's statistics at the same logged steps; these functions
combine them (sums and maxima over processes) so that every rank holds the whole batch's numbers, and
rank 0 writes. Outside a process group they are no-ops.
"""

from __future__ import annotations

import torch
import torch.distributed as tdist


def world_size() -> int:
    """The number of processes in the default group (1 when there is none)."""
    return tdist.get_world_size() if tdist.is_available() and tdist.is_initialized() else 1


def rank() -> int:
    """This process's rank in the default group (0 when there is none)."""
    return tdist.get_rank() if tdist.is_available() and tdist.is_initialized() else 0


def all_reduce(t: torch.Tensor, op: str = "sum", device: torch.device | None = None) -> torch.Tensor:
    """The elementwise sum (or ``op="max"``) of ``t`` over processes, returned on t's device.

    NCCL reduces CUDA tensors only: a CPU tensor goes through ``device`` (default: the current CUDA
    device) there and comes back."""
    if world_size() == 1:
        return t
    if device is None and tdist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    buf = t.to(device) if device is not None and device.type == "cuda" else t.clone()
    tdist.all_reduce(buf, op=tdist.ReduceOp.MAX if op == "max" else tdist.ReduceOp.SUM)
    return buf.to(t.device)
