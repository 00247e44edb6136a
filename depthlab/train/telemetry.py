"""Per-layer trainability telemetry, taken on logged steps only (cheap enough to leave on).

On a telemetry step the forward pass returns the residual-stream states and each gets ``retain_grad()``;
after the backward pass the statistics of :func:`depthlab.probe.stats.stream_table` (the probe's numbers,
now during training) are read from them, together with each layer's parameter gradients, and after the
optimizer step the relative update of each layer's parameters. Other steps pay nothing.

``layers[i]`` describes stream i (0 = entering layer 1, L = leaving layer L; docs/design.md):

| key          | what                                                                    |
|--------------|-------------------------------------------------------------------------|
| grad_norm    | ||d loss / d stream_i|| (the gradient reaching stream i)                           |
| stream_rms   | sqrt(mean(stream_i^2))                                                  |
| update_ratio | ||stream_i - stream_{i-1}|| / ||stream_{i-1}||                          |
| cos_prev     | mean cosine between each token's vector in stream_i and stream_{i-1}     |
| angular_distance | arccos(cos_prev) / pi: how far layer i turned the stream (ShortGPT)    |
| attn_grad_norm | ||d loss / d theta|| over layer i's attention weights (the probe's quantity, Xiong et al. 2020 Fig. 3) |
| cross_grad_norm | the same for cross-attention (None outside an encoder-decoder's decoder) |
| ffn_grad_norm  | the same for the feed-forward sublayer                                 |
| param_update | ||W_after - W_before|| / ||W_before|| over all of layer i's parameters   |

The per-layer keys are None at i = 0. The sublayer groups are the probe's
(:func:`depthlab.probe.locate.locate_stack`): a sublayer's own weights, not its wrapping's norm. Gradients are read before clipping. Under DDP each process holds a
share of the batch; the shares' statistics are combined so that the numbers equal a one-process run's
(see :meth:`Telemetry.reduce`).
"""

from __future__ import annotations

import torch
from torch import nn

from depthlab.probe.locate import SUBLAYER_KINDS, locate_stack
from depthlab.probe.stats import angular_distance, stream_table
from depthlab.train.distributed import Dist

# The keys of ``layers[i]`` after "index", in the documented order (the table above): the stream
# statistics of stream_table, then the layer's own parameters. events.py names its charts after them,
# and the study store's layer_metrics table has one column each.
STREAM_KEYS = ("grad_norm", "stream_rms", "update_ratio", "cos_prev", "angular_distance")
GRAD_KEYS = tuple(f"{kind}_grad_norm" for kind in SUBLAYER_KINDS)  # attn, cross, ffn
LAYER_KEYS = (*STREAM_KEYS, *GRAD_KEYS, "param_update")


def _norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of a list of tensors taken together, as a 0-dim float tensor."""
    if not tensors:
        return torch.zeros(())
    return torch.nn.utils.get_total_norm([t.float() for t in tensors], foreach=True)


class Telemetry:
    """Reads the per-layer numbers of the stack the probe would probe (the decoder of an encdec model)."""

    def __init__(self, model: nn.Module, dist: Dist):
        self.dist = dist
        # parameter lists per layer, gathered once (walking the modules on every logged step costs more)
        stack = locate_stack(model)
        self.params = stack.layer_params
        self.parts = [[group.get(kind, []) for kind in SUBLAYER_KINDS] for group in stack.groups]

    @staticmethod
    def watch(states: list[torch.Tensor]) -> None:
        """Keep the gradient of every stream state (call before backward)."""
        for s in states:
            if s.requires_grad:
                s.retain_grad()

    def streams(self, states: list[torch.Tensor]) -> list[dict]:
        """stream_table rows after backward, combined over processes."""
        rows = stream_table([s.detach() for s in states], [s.grad for s in states])
        return self.reduce(rows) if self.dist.world > 1 else rows

    def sublayer_grads(self) -> list[tuple[float | None, ...]]:
        """Per layer, the gradient norm of each sublayer kind of SUBLAYER_KINDS (None where the layer has
        no such sublayer); call after backward, before clipping."""
        norms = [
            _norm([p.grad for p in params if p.grad is not None]) for parts in self.parts for params in parts
        ]
        values = torch.stack(norms).tolist() if norms else []
        k = len(SUBLAYER_KINDS)
        return [
            tuple(v if params else None for v, params in zip(values[i * k : (i + 1) * k], parts))
            for i, parts in enumerate(self.parts)
        ]

    def snapshot(self) -> list[list[torch.Tensor]]:
        """A copy of each layer's parameters (call before the optimizer step)."""
        return [[p.detach().clone() for p in params] for params in self.params]

    def param_updates(self, before: list[list[torch.Tensor]]) -> list[float]:
        """||W_after - W_before|| / ||W_before|| per layer (call after the optimizer step)."""
        ratios = []
        for params, old in zip(self.params, before):
            new = [p.detach() for p in params]
            diff = _norm(torch._foreach_sub(new, old))
            ratios.append(diff / _norm(old).clamp_min(1e-30))
        return torch.stack(ratios).tolist()

    def rows(self, streams: list[dict], grads: list[tuple], updates: list[float] | None) -> list[dict]:
        """The metrics record's ``layers``: one dict per stream, in the documented key order."""
        out = []
        for row in streams:
            i = row["index"]
            sub = grads[i - 1] if i else (None,) * len(GRAD_KEYS)
            upd = updates[i - 1] if (i and updates is not None) else None
            stream = {k: row.get(k) for k in STREAM_KEYS}
            out.append({"index": i, **stream, **dict(zip(GRAD_KEYS, sub)), "param_update": upd})
        return out

    def reduce(self, rows: list[dict]) -> list[dict]:
        """Combine the per-process rows into the whole batch's numbers (equal shares of the batch).

        Process r's stream gradient is ``world`` times the one-process gradient of its rows (each process
        scales its summed loss by world / n_targets, and DDP averages parameter gradients), so
        ||g||^2 = sum_r ||g_r||^2 / world^2. Mean squares, mean cosines and squared norms add over shares:
        rms^2 = mean_r rms_r^2, cos = mean_r cos_r, update_ratio^2 = sum_r ratio_r^2 rms_{i-1,r}^2 /
        sum_r rms_{i-1,r}^2.
        """
        w = self.dist.world
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
        total = self.dist.all_reduce(packed).tolist()
        out = []
        for r, (g2, ms, num, den, cos) in zip(rows, total):
            i = r["index"]
            out.append(
                {
                    "index": i,
                    "grad_norm": g2**0.5 / w if r["grad_norm"] is not None else None,
                    "stream_rms": (ms / w) ** 0.5,
                    "update_ratio": (num / den) ** 0.5 if i and den > 0 else (None if not i else 0.0),
                    "cos_prev": cos / w if i else None,
                    "angular_distance": angular_distance(cos / w) if i else None,
                }
            )
        return out
