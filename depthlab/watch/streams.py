"""The residual stream on a logged step: its values from block hooks, its gradient from tensor hooks.

On a logged forward, :class:`depthlab.probe.capture.StreamCapture` records x_0 .. x_L (the very tensors
the model passes on, so this works under activation checkpointing too: the recomputation in the
backward pass happens after the capture has stopped). Their forward statistics
(:func:`depthlab.probe.stats.stream_table`) are taken at once; a hook on each tensor then receives
d loss / d x_i in the backward pass (what ``retain_grad()`` would keep, without keeping it) and stores
its squared norm. Nothing here changes a value or a gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from depthlab.probe.capture import StreamCapture
from depthlab.probe.locate import StackInfo
from depthlab.probe.stats import angular_distance, stream_table
from depthlab.probe.topology import view_of
from depthlab.watch.dist import all_reduce
from depthlab.watch.keys import STREAM_KEYS


class StreamTap:
    """Captures one forward's streams between :meth:`start` and :meth:`stop`; ``on_grad`` is called on
    the first stream gradient of each backward (the watcher uses it to find the end of that pass)."""

    def __init__(self, model: nn.Module, stack: StackInfo, on_grad: Callable[[], None]):
        self.model, self.stack, self.on_grad = model, stack, on_grad
        self.capture: StreamCapture | None = None
        self.rows: list[dict] = []
        self.grad_sq: list[torch.Tensor | None] = []
        self._handles: list = []

    def start(self) -> None:
        self.remove()
        # no norm hooks (norms=([], [])): the structural facts StreamCapture can read are the probe's business
        self.capture = StreamCapture(self.model, self.stack, make_leaf=False, norms=([], []))
        self.capture.__enter__()

    def stop(self) -> None:
        """End the capture: the forward statistics now, a gradient hook on every stream for later."""
        if self.capture is None:
            return
        self.capture.__exit__(None, None, None)
        states, self.capture = self.capture.states, None
        view = view_of(self.model)  # a residual topology's n streams: their sum (depthlab.probe.topology)
        self.rows = stream_table([view(s.detach()) for s in states], None)
        self.grad_sq = [None] * len(states)
        for i, s in enumerate(states):
            if s.requires_grad:
                self._handles.append(s.register_hook(self._grad_hook(i)))

    def _grad_hook(self, i: int):
        def hook(grad: torch.Tensor) -> None:
            self.grad_sq[i] = grad.detach().float().pow(2).sum()  # stays on the device until the record
            self.on_grad()

        return hook

    def remove(self) -> None:
        """Drop the tensor hooks (a tensor's hooks go with it; this only frees them sooner)."""
        if self.capture is not None:
            self.capture.__exit__(None, None, None)
            self.capture = None
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def table(self, world: int) -> list[dict]:
        """stream_table rows of the last logged forward with their gradient norms, combined over the
        ``world`` processes of a DDP run; [] when nothing was captured."""
        if not self.rows:
            return []
        present = [g for g in self.grad_sq if g is not None]
        norms = iter(torch.stack(present).sqrt().tolist()) if present else iter(())
        rows = [
            {**r, "grad_norm": next(norms) if g is not None else None}
            for r, g in zip(self.rows, self.grad_sq)
        ]
        self.rows, self.grad_sq = [], []
        self.remove()
        return reduce_rows(rows, world) if world > 1 else rows


def reduce_rows(rows: list[dict], world: int) -> list[dict]:
    """Combine the per-process rows into the whole batch's numbers (equal shares of the batch).

    Process r's stream gradient is ``world`` times the one-process gradient of its rows (each process's
    loss is the mean over its own share, and DDP averages parameter gradients), so
    ||g||^2 = sum_r ||g_r||^2 / world^2. Mean squares, mean cosines and squared norms add over shares:
    rms^2 = mean_r rms_r^2, cos = mean_r cos_r, update_ratio^2 = sum_r ratio_r^2 rms_{i-1,r}^2 /
    sum_r rms_{i-1,r}^2.
    """
    prev_ms = [rows[i - 1]["stream_rms"] ** 2 if i else 0.0 for i in range(len(rows))]
    packed = torch.tensor(
        [
            [
                (r["grad_norm"] or 0.0) ** 2,
                r["stream_rms"] ** 2,
                (r["update_ratio"] or 0.0) ** 2 * prev_ms[i],
                prev_ms[i],
                r["cos_prev"] or 0.0,
            ]
            for i, r in enumerate(rows)
        ],
        dtype=torch.float64,
    )
    total = all_reduce(packed).tolist()
    out = []
    for r, (g2, ms, num, den, cos) in zip(rows, total):
        i = r["index"]
        values = (
            g2**0.5 / world if r["grad_norm"] is not None else None,
            (ms / world) ** 0.5,
            (num / den) ** 0.5 if i and den > 0 else (None if not i else 0.0),
            cos / world if i else None,
            angular_distance(cos / world) if i else None,
        )
        out.append({"index": i, **dict(zip(STREAM_KEYS, values))})
    return out
