"""The sublayers F of a Transformer layer: attention (self, causal, cross) and the feed-forward net.

Each sublayer maps (B, T, d_model) -> (B, T, d_model), so a wrapping can add it to the stream
(the "+" needs both sides to have the same shape). Every sublayer's forward takes ``(x, ctx)``, where
``ctx`` carries what a sublayer may need beyond its input: masks, the encoder's output, RoPE tables.
Attention and the Context are in :mod:`depthlab.model.attention` (re-exported here).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.model.attention import Attention, Context

__all__ = ["Attention", "Block", "Context", "FeedForward"]


ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda h: F.gelu(h, approximate="tanh"),
    "silu": F.silu,
}
# gated units: act(gate) * up (Shazeer 2020); SwiGLU (LLaMA), GeGLU with exact or tanh GELU (T5 v1.1, Gemma)
GATED = {"swiglu": F.silu, "geglu": F.gelu, "geglu_tanh": ACTIVATIONS["gelu_tanh"]}


class FeedForward(nn.Module):
    """Position-wise FFN: fc2(act(fc1(x))), or a gated unit fc2(act(gate) * up) with gate|up fused in fc1
    (``swiglu``, ``geglu``, ``geglu_tanh``)."""

    def __init__(self, d: int, d_ff: int, activation: str, *, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        self.gated = activation in GATED
        self.act = GATED[activation] if self.gated else ACTIVATIONS[activation]
        self.fc1 = nn.Linear(d, 2 * d_ff if self.gated else d_ff, bias=bias)
        self.fc2 = nn.Linear(d_ff, d, bias=bias)
        # p = 0 is the identity: skip the module call (Python overhead per layer, benchmarks/RESULTS.md)
        self.drop = nn.Dropout(dropout) if dropout > 0 else None

    def forward(self, x: torch.Tensor, ctx: Context | None = None) -> torch.Tensor:
        h = self.fc1(x)  # (B, T, d_ff) or (B, T, 2 d_ff)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            h = self.act(gate) * up
        else:
            h = self.act(h)
        return self.fc2(h if self.drop is None else self.drop(h))


class Block(nn.Module):
    """One Transformer layer: self-attention, [cross-attention over the encoder output], FFN, each
    sublayer in its wrapping (:mod:`depthlab.model.wrappings`), combined in one of two forms, as the
    wrapping declares (``PARALLEL``, ``SHARED_NORM``). Drawn for pre-LN, whose formula is
    x = x + F(LN(x)), and for the parallel forms:

        sequential (PARALLEL False)           parallel (PARALLEL True)
          x = attn(x)                           h = LN(x) once if SHARED_NORM, else h = x
          x = cross(x)   [encdec decoder]       x = x + attn.branch(h) [+ cross.branch(h)] + ffn.branch(h)
          x = ffn(x)                            branch: F_i(LN_i(h)), or F_i(h) under the shared norm

        pre-LN (GPT-2, LLaMA)                 parallel (GPT-NeoX)        SHARED_NORM (GPT-J, PaLM):
        ┌─ x                                  ┌─ x ─────────────┐        one LN, the block's, computed
        │  ↓                                  │  ↓              ↓        once and read by attn and ffn
        │  LN_1                               │  LN_1           LN_2     in place of LN_1 and LN_2
        │  ↓                                  │  ↓              ↓
        │  attn                               │  attn           ffn
        │  ↓                                  │  ↓              │
        └► +                                  └► + ◄────────────┘
        ┌─ x                                     ↓
        │  ↓                                     x
        │  LN_2
        │  ↓
        │  ffn
        │  ↓
        └► +
           ↓
           x

    ``attn``, ``cross`` and ``ffn`` are :class:`depthlab.model.wrappings.Wrapping` modules, all of the
    layer's one wrapping; ``cross`` is None except in an encoder-decoder's decoder (where it sits between
    attn and ffn, in either form). ``norm`` is the shared norm (SHARED_NORM), else None.
    """

    def __init__(
        self, attn: nn.Module, ffn: nn.Module, cross: nn.Module | None = None, norm: nn.Module | None = None
    ):
        super().__init__()
        self.attn, self.cross, self.ffn, self.norm = attn, cross, ffn, norm

    def forward(self, x: torch.Tensor, ctx: Context) -> torch.Tensor:
        """The layer's output stream: its sublayers in sequence, or their branches summed in parallel."""
        wrapping = self.attn  # every sublayer of a layer has the same wrapping, which declares the form
        if not wrapping.PARALLEL:
            x = self.attn(x, ctx)
            if self.cross is not None:
                x = self.cross(x, ctx)
            return self.ffn(x, ctx)
        h = self.norm(x) if wrapping.SHARED_NORM else x  # the shared norm, computed once
        out = wrapping.skip(x) + self.attn.branch(h, ctx)  # one skip for the whole block
        if self.cross is not None:
            out = out + self.cross.branch(h, ctx)
        return out + self.ffn.branch(h, ctx)

    def sublayers(self) -> dict[str, nn.Module]:
        """The wrapped sublayers by name ("attn", ["cross"], "ffn"), in the order the stream meets them."""
        subs = {"attn": self.attn, "cross": self.cross, "ffn": self.ffn}
        return {k: v for k, v in subs.items() if v is not None}
