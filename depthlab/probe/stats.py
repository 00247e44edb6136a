"""Per-stream statistics from a list of residual-stream states, shared by the probe and training telemetry.

``states[i]`` is stream i, (B, T, d): index 0 enters layer 1, index L leaves layer L (docs/design.md).
All functions return plain Python floats (None where a quantity is undefined, as for stream 0).
"""

from __future__ import annotations

import math

import torch


@torch.no_grad()
def stream_rms(x: torch.Tensor) -> float:
    """sqrt(mean(x^2)) over every element."""
    return float(x.float().pow(2).mean().sqrt())


@torch.no_grad()
def update_ratio(x: torch.Tensor, prev: torch.Tensor) -> float:
    """||x - prev|| / ||prev|| (Frobenius over the whole batch): how much one layer changed the stream."""
    prev = prev.float()
    return float((x.float() - prev).norm() / prev.norm().clamp_min(1e-30))


@torch.no_grad()
def cos_prev(x: torch.Tensor, prev: torch.Tensor) -> float:
    """Mean cosine similarity between each token's vector in x and in prev."""
    return float(torch.nn.functional.cosine_similarity(x.float(), prev.float(), dim=-1, eps=1e-30).mean())


def angular_distance(cos: float) -> float:
    """arccos(cos) / pi in [0, 1] (ShortGPT, Mix-LN): 0 = the layer left the direction unchanged."""
    return math.acos(max(-1.0, min(1.0, cos))) / math.pi


def stream_table(states: list[torch.Tensor], grads: list[torch.Tensor | None] | None = None) -> list[dict]:
    """One row per stream: index, grad_norm, stream_rms, update_ratio, cos_prev, angular_distance."""
    rows = []
    for i, x in enumerate(states):
        g = grads[i] if grads is not None else None
        row = {
            "index": i,
            "grad_norm": float(g.float().norm()) if g is not None else None,
            "stream_rms": stream_rms(x),
            "update_ratio": update_ratio(x, states[i - 1]) if i else None,
            "cos_prev": cos_prev(x, states[i - 1]) if i else None,
        }
        row["angular_distance"] = angular_distance(row["cos_prev"]) if i else None
        rows.append(row)
    return rows


@torch.no_grad()
def token_cosine(x: torch.Tensor) -> float | None:
    """Mean cosine similarity between the vectors of distinct positions of one sequence, x (B, T, d).

    1.0 means every position carries the same vector: the rank collapse of attention stacks without
    skip connections (Dong, Cordonnier & Loukas 2021). None when there is no position axis (T < 2).
    """
    if x.ndim != 3 or x.shape[1] < 2:
        return None
    xn = torch.nn.functional.normalize(x.float(), dim=-1, eps=1e-30)
    T = x.shape[1]
    gram_sum = (xn.sum(dim=1) ** 2).sum(dim=-1)  # (B,): sum over all (s, t) pairs of cos(x_s, x_t)
    return float(((gram_sum - T) / (T * (T - 1))).mean())
