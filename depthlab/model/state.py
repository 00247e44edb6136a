"""The residual state a stack carries between its blocks, for the topologies that widen it or read back.

Every single-stream wrapping carries x, one (B, T, d) tensor, and declares no state (``STATE = None``):
the stack passes x from block to block exactly as before. A topology's wrapping class names one of the
classes below as its ``STATE``; the stack (:class:`depthlab.model.stack.Stack`) then

    x_0 ─► expand ─► state ─► block 1 ─► state ─► ... ─► block L ─► state ─► reduce ─► x ─► [final norm]

and each wrapped sublayer reads the state and writes it (its ``forward(state, ctx)``, in
:mod:`depthlab.model.hyper`, :mod:`depthlab.model.aggregate`, :mod:`depthlab.model.value_residual`).
Each class's ``forward`` is the reduction (a module call, so that a hook sees the reduced stream);
``view(state)`` is the one (B, T, d) stream per layer boundary that ``return_states``, the probe and
the watcher report (docs/topologies.md says what it is for each design).

    Streams (hc, dhc, mhc)       Fractions (frac)          Dense (denseformer)     Depth (attnres)
    H: (B, T, n, d)              H: (B, T, m, d/m)         stream: (B, T, d)       h: (B, T, d)
    ┌ x_0 ┐ n copies            [x_0 split in m]          outputs: X_0 .. X_i     values: b_0 .. b_k
    │ ... │                                                                        (block summaries)
    └ x_0 ┘                                                                        filled: int
    reduce: sum of the streams   reduce: concatenate       reduce: the stream      reduce: a last read
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from depthlab.model.norms import RMSNorm


class Streams(nn.Module):
    """n copies of the stream (Zhu et al. 2024, Hyper-Connections): expanded by copying x_0 into every
    stream, reduced by summing them (their sec. 3.1), before the final norm."""

    WORDS = "{n} streams of d_model, expanded by copying the embedding, reduced by summing them"

    def __init__(self, cfg, n_layers: int):
        super().__init__()
        self.n = cfg.topology.streams

    def expand(self, x: torch.Tensor) -> torch.Tensor:
        return x.unsqueeze(-2).expand(*x.shape[:-1], self.n, x.shape[-1])  # (B, T, n, d)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h.sum(dim=-2)  # (B, T, d)

    view = forward


class Fractions(Streams):
    """The stream cut into m fractions of d/m (Zhu et al. 2025, Frac-Connections): expanded by a
    reshape, reduced by concatenating them back; nothing is copied."""

    WORDS = "{n} fractions of d_model / {n}, cut from the embedding, concatenated back"

    def expand(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.n, -1))  # (B, T, m, d/m)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h.flatten(-2)  # (B, T, d)

    view = forward


class Dense(NamedTuple):
    """DenseFormer's state: ``stream`` is what the next sublayer reads (after block i: its weighted
    average Y_i); ``outputs`` every block's output so far, X_0 (the embedding) .. X_i."""

    stream: torch.Tensor
    outputs: tuple[torch.Tensor, ...]


class DenseHistory(nn.Module):
    """Pagliardini et al. 2024 (DenseFormer): Y_0 = X_0; each block's output joins the history."""

    WORDS = "the stream and every block's output so far (X_0 = the embedding)"

    def __init__(self, cfg, n_layers: int):
        super().__init__()

    def expand(self, x: torch.Tensor) -> Dense:
        return Dense(x, (x,))

    def forward(self, state: Dense) -> torch.Tensor:
        return state.stream  # Y_L: the last block's weighted average

    def view(self, state: Dense) -> torch.Tensor:
        return state.stream


class Depth(NamedTuple):
    """Attention Residuals' state: ``h`` the last aggregate a sublayer read; ``values`` the block
    summaries b_0 (the embedding), b_1, ..., the last of them still open while ``filled`` < the block
    size (its sublayers' outputs summed so far)."""

    h: torch.Tensor
    values: tuple[torch.Tensor, ...]
    filled: int


class DepthAttention(nn.Module):
    """sum_i softmax_i(w . RMSNorm(v_i)) v_i over depth (Kimi Team 2026, Attention Residuals): one learned
    pseudo-query w per reader, zero at init (a uniform average). Returns (h (B, T, d), the weights
    (k, B, T)): the weights are this named point's output, which the probe reads."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.query = nn.Parameter(torch.zeros(d, 1))  # w: (d, 1), a readout of width d (mup: a matrix)
        self.keys = RMSNorm(d, eps=eps)

    def forward(self, values: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        v = torch.stack(values)  # (k, B, T, d)
        weights = (self.keys(v) @ self.query).squeeze(-1).softmax(dim=0)  # (k, B, T)
        return (weights.unsqueeze(-1) * v).sum(dim=0), weights


class DepthHistory(nn.Module):
    """The block summaries and the stack's last read: the output is one more aggregate, with its own
    pseudo-query, of everything written (the paper's h_{L+1})."""

    WORDS = "the embedding and a summary per block of sublayers (full: per sublayer), read by attention over depth"

    def __init__(self, cfg, n_layers: int):
        super().__init__()
        self.read = DepthAttention(cfg.d_model, cfg.family.norm_eps)

    def expand(self, x: torch.Tensor) -> Depth:
        return Depth(x, (x,), filled=-1)  # b_0 = the embedding, a closed block of its own

    def forward(self, state: Depth) -> torch.Tensor:
        return self.read(state.values)[0]

    def view(self, state: Depth) -> torch.Tensor:
        return state.h


class Valued(NamedTuple):
    """The value residual's state: the stream x and the first self-attention layer's values V_1
    (B, kv_heads, T, head_dim), None until that layer has run."""

    x: torch.Tensor
    v1: torch.Tensor | None


class FirstValue(nn.Module):
    """Zhou et al. 2024 (ResFormer): the stream, plus the first layer's values carried to every later one."""

    WORDS = "the stream and the first layer's attention values"

    def __init__(self, cfg, n_layers: int):
        super().__init__()

    def expand(self, x: torch.Tensor) -> Valued:
        return Valued(x, None)

    def forward(self, state: Valued) -> torch.Tensor:
        return state.x

    def view(self, state: Valued) -> torch.Tensor:
        return state.x
