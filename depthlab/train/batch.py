"""One batch of a task, and how it is cut between processes and seeded by step.

A task hands out the *global* batch of a step, the same on every process; :func:`shard` cuts one
process's rows from it. Batches are a pure function of (seed, step) (:func:`step_generator`), so a
resumed run sees exactly the batches the uninterrupted run would have seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from depthlab.corpus import step_generator  # one seeding of every batch, the probe's first too

IGNORE = -100  # target value that carries no loss (F.cross_entropy's ignore_index)


@dataclass
class Batch:
    """One batch. ``args``/``kwargs`` are the model's inputs (``(tokens,)`` or ``(src, tgt)``; masks);
    ``targets`` (B, T) long, IGNORE where no loss is taken; ``n_targets`` counts the target tokens of the
    *global* batch, so that every process normalises its share's summed loss by the same number."""

    args: tuple
    targets: torch.Tensor
    kwargs: dict = field(default_factory=dict)
    n_targets: int = 0

    def __post_init__(self):
        if not self.n_targets:
            self.n_targets = int((self.targets != IGNORE).sum())

    @property
    def n_tokens(self) -> int:
        """Input tokens of this batch (for throughput)."""
        return sum(a.numel() for a in self.args)

    def to(self, device) -> Batch:
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        kwargs = {k: move(v) for k, v in self.kwargs.items()}
        return Batch(tuple(move(a) for a in self.args), move(self.targets), kwargs, self.n_targets)


def shard(batch: Batch, rank: int, world: int) -> Batch:
    """Rows ``[rank * B/world, (rank+1) * B/world)`` of a global batch; ``n_targets`` stays global."""
    if world == 1:
        return batch
    b = batch.targets.shape[0] // world
    rows = slice(rank * b, (rank + 1) * b)
    kwargs = {k: v[rows] for k, v in batch.kwargs.items()}
    return Batch(tuple(a[rows] for a in batch.args), batch.targets[rows], kwargs, batch.n_targets)


__all__ = ["IGNORE", "Batch", "shard", "step_generator"]
