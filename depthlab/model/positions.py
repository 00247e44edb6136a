"""Where a token is: sinusoidal tables, rotary embeddings (whole or partial) and T5's relative buckets.

| position   | what it adds                                                        | source                  |
|------------|---------------------------------------------------------------------|-------------------------|
| sinusoidal | PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)     | Vaswani et al. 2017, 3.5 |
| learned    | a trained table of max_len rows (the stack's Embedding)             | GPT-2, BERT             |
| rope       | q and k rotated by position, on the first ``rotary_dims`` features  | Su et al. 2021; GPT-NeoX (partial) |
| relative   | a learned bias per head and log-spaced distance bucket on the scores| Raffel et al. 2020, T5  |
"""

from __future__ import annotations

import math

import torch
from torch import nn


def sinusoid_table(n: int, d: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani et al. 2017, 3.5)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(n, d)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)[:, : d // 2]
    return table


def rope_tables(seq_len: int, dims: int, base: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, each (T, dims), in the half-split layout of HF Llama / GPT-NeoX: frequencies
    base^(-2i/dims), i < dims/2, each used for features i and i + dims/2 (``dims`` = the rotated width)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dims, 2, device=device, dtype=torch.float32) / dims))
    freqs = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first cos.shape[-1] features of (B, h, T, hd) by position, x * cos + rotate_half(x) * sin
    (Su et al. 2021); the features beyond pass through unchanged (partial rotary, GPT-NeoX)."""
    r = cos.shape[-1]
    rot, rest = (x, None) if r == x.shape[-1] else (x[..., :r], x[..., r:])
    x1, x2 = rot.chunk(2, dim=-1)
    out = rot * cos.to(x.dtype) + torch.cat((-x2, x1), dim=-1) * sin.to(x.dtype)
    return out if rest is None else torch.cat((out, rest), dim=-1)


def relative_bucket(
    relative: torch.Tensor, bidirectional: bool, buckets: int, max_distance: int
) -> torch.Tensor:
    """T5's bucket of each relative position (key - query): exact below buckets/2 (or /4 when
    bidirectional, where the sign takes half the buckets), log-spaced up to ``max_distance``, beyond
    which all share the last bucket (Raffel et al. 2020; Mesh TensorFlow's relative_position_bucket).
    A causal stack only sees keys at or before the query, so its distances are -min(rel, 0)."""
    out = torch.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        out = out + (relative > 0).long() * buckets
        distance = relative.abs()
    else:
        distance = -torch.clamp(relative, max=0)
    exact = buckets // 2
    far = (
        exact
        + (
            torch.log(distance.float().clamp_min(1) / exact)
            / math.log(max_distance / exact)
            * (buckets - exact)
        ).long()
    )
    far = far.clamp(max=buckets - 1)
    return out + torch.where(distance < exact, distance, far)


class RelativeBias(nn.Module):
    """A learned bias per head and distance bucket, added to the attention scores of every layer of one
    stack (T5 computes it in the first layer and shares it): ``forward(T, S)`` gives (1, heads, T, S).
    ``d_model``, the stream width, sets its init (:func:`depthlab.model.init.init_weights`)."""

    def __init__(self, n_heads: int, buckets: int, max_distance: int, bidirectional: bool, d_model: int):
        super().__init__()
        self.buckets, self.max_distance, self.bidirectional = buckets, max_distance, bidirectional
        self.d_model = d_model
        self.bias = nn.Embedding(buckets, n_heads)

    def forward(self, T: int, S: int) -> torch.Tensor:
        device = self.bias.weight.device
        relative = torch.arange(S, device=device)[None, :] - torch.arange(T, device=device)[:, None]
        bucket = relative_bucket(relative, self.bidirectional, self.buckets, self.max_distance)
        return self.bias(bucket).permute(2, 0, 1).unsqueeze(0)  # (1, heads, T, S)
