"""The sublayers F of a Transformer layer: attention (self, causal, cross) and the feed-forward net.

Each sublayer maps (B, T, d_model) -> (B, T, d_model), so a wrapping can add it to the stream
(the "+" needs both sides to have the same shape). Every sublayer's forward takes ``(x, ctx)``, where
``ctx`` carries what a sublayer may need beyond its input: masks, the encoder's output, RoPE tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Context:
    """Per-forward information shared by the sublayers of one stack.

    padding_mask: (B, T) bool, True where the token is padding (self-attention keys).
    memory: (B, S, d) the encoder's output, for cross-attention.
    memory_padding_mask: (B, S) bool, True where the source token is padding.
    rope: (cos, sin), each (T, head_dim), or None.
    """

    padding_mask: torch.Tensor | None = None
    memory: torch.Tensor | None = None
    memory_padding_mask: torch.Tensor | None = None
    rope: tuple[torch.Tensor, torch.Tensor] | None = None


def rope_tables(seq_len: int, head_dim: int, base: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, each (T, head_dim), in the half-split layout of HF Llama / GPT-NeoX."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, h, T, hd) by position: x * cos + rotate_half(x) * sin (Su et al. 2021)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat((-x2, x1), dim=-1) * sin.to(x.dtype)


class Attention(nn.Module):
    """Multi-head scaled dot-product attention on ``F.scaled_dot_product_attention``.

    Self-attention uses one fused QKV projection; cross-attention projects queries from the stream
    and keys/values from ``ctx.memory``. ``n_kv_heads < n_heads`` is grouped-query attention;
    ``q_norm``/``k_norm`` normalise each head's queries and keys before the dot product (QK-norm:
    Dehghani et al. 2023; OLMo 2, Gemma 3).
    """

    def __init__(
        self,
        d: int,
        n_heads: int,
        n_kv_heads: int,
        *,
        bias: bool = True,
        causal: bool = False,
        cross: bool = False,
        rope: bool = False,
        q_norm: nn.Module | None = None,
        k_norm: nn.Module | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d // n_heads
        self.causal, self.cross, self.rope, self.dropout = causal, cross, rope and not cross, dropout
        kv_dim = n_kv_heads * self.head_dim
        if cross:
            self.q = nn.Linear(d, d, bias=bias)
            self.kv = nn.Linear(d, 2 * kv_dim, bias=bias)
        else:
            self.qkv = nn.Linear(d, d + 2 * kv_dim, bias=bias)
        self.out = nn.Linear(d, d, bias=bias)
        self.q_norm, self.k_norm = q_norm, k_norm

    def forward(self, x: torch.Tensor, ctx: Context) -> torch.Tensor:
        B, T, d = x.shape
        kv_dim = self.n_kv_heads * self.head_dim
        if self.cross:
            q, (k, v) = self.q(x), self.kv(ctx.memory).split([kv_dim, kv_dim], dim=-1)
        else:
            q, k, v = self.qkv(x).split([d, kv_dim, kv_dim], dim=-1)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, h, T, hd)
        k = k.view(B, k.shape[1], self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, kv, S, hd)
        v = v.view(B, v.shape[1], self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, kv, S, hd)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            cos, sin = ctx.rope
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.n_kv_heads != self.n_heads:  # GQA: each kv head serves n_heads / n_kv_heads queries
            rep = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        pad = ctx.memory_padding_mask if self.cross else ctx.padding_mask
        mask = None if pad is None else self._mask(pad, T, k.shape[2], x.device)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=self.causal and mask is None,
        )
        return self.out(y.transpose(1, 2).reshape(B, T, d))  # (B, T, d)

    def _mask(self, pad: torch.Tensor, T: int, S: int, device) -> torch.Tensor:
        """A boolean (B, 1, T, S) mask from the (B, S) padding mask, True = may attend.

        Built only when there is padding; otherwise sdpa's ``is_causal`` (or no mask) is enough.
        """
        mask = ~pad[:, None, None, :]
        if self.causal:
            mask = mask & torch.ones(T, S, dtype=torch.bool, device=device).tril()
        # a query that may see nothing (a padding query under a causal mask) attends to itself,
        # so that its (ignored) output stays finite instead of NaN
        if T == S:
            lonely = ~mask.any(-1, keepdim=True)
            mask = mask | (lonely & torch.eye(T, dtype=torch.bool, device=device))
        return mask


ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda h: F.gelu(h, approximate="tanh")}


class FeedForward(nn.Module):
    """Position-wise FFN: fc2(act(fc1(x))), or SwiGLU fc2(silu(gate) * up) with gate|up fused in fc1."""

    def __init__(self, d: int, d_ff: int, activation: str, *, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        self.swiglu = activation == "swiglu"
        self.act = None if self.swiglu else ACTIVATIONS[activation]
        self.fc1 = nn.Linear(d, 2 * d_ff if self.swiglu else d_ff, bias=bias)
        self.fc2 = nn.Linear(d_ff, d, bias=bias)
        # p = 0 is the identity: skip the module call (Python overhead per layer, benchmarks/RESULTS.md)
        self.drop = nn.Dropout(dropout) if dropout > 0 else None

    def forward(self, x: torch.Tensor, ctx: Context | None = None) -> torch.Tensor:
        h = self.fc1(x)  # (B, T, d_ff) or (B, T, 2 d_ff)
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = self.act(h)
        return self.fc2(h if self.drop is None else self.drop(h))


class Block(nn.Module):
    """One Transformer layer: each sublayer wrapped in its residual/norm wrapping.

        x ─► attn (self, causal in a decoder) ─► [cross over the encoder output] ─► ffn ─► x'

    ``attn``, ``cross`` and ``ffn`` are :class:`depthlab.model.wrappings.Wrapping` modules;
    ``cross`` is None except in an encoder-decoder's decoder.
    """

    def __init__(self, attn: nn.Module, ffn: nn.Module, cross: nn.Module | None = None):
        super().__init__()
        self.attn, self.cross, self.ffn = attn, cross, ffn

    def forward(self, x: torch.Tensor, ctx: Context) -> torch.Tensor:
        x = self.attn(x, ctx)
        if self.cross is not None:
            x = self.cross(x, ctx)
        return self.ffn(x, ctx)

    def sublayers(self) -> dict[str, nn.Module]:
        subs = {"attn": self.attn, "cross": self.cross, "ffn": self.ffn}
        return {k: v for k, v in subs.items() if v is not None}
