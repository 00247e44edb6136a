"""Multi-head attention and what it reads from the forward pass (:class:`Context`).

    scores = s (q k^T)  [-> c tanh(scores / c)]  [+ position bias]  [masked]  -> softmax -> @ v

s is ``scale`` (default head_dim^-1/2; T5 uses 1), c the soft-cap (Gemma 2), the bias T5's relative
buckets; the mask combines padding, causality and a sliding window. Without a soft-cap the whole
computation is ``F.scaled_dot_product_attention``; with one it is the same formula written out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.model.positions import apply_rope


@dataclass
class Context:
    """Per-forward information shared by the sublayers of one stack.

    padding_mask: (B, T) bool, True where the token is padding (self-attention keys).
    memory: (B, S, d) the encoder's output, for cross-attention.
    memory_padding_mask: (B, S) bool, True where the source token is padding.
    rope: (cos, sin), each (T, rotary_dims), or None; rope_local: the same for sliding-window layers
    when they have their own RoPE base (Gemma 3), else None.
    position_bias: (1, heads, T, T) added to self-attention scores (T5's relative buckets), or None.
    """

    padding_mask: torch.Tensor | None = None
    memory: torch.Tensor | None = None
    memory_padding_mask: torch.Tensor | None = None
    rope: tuple[torch.Tensor, torch.Tensor] | None = None
    rope_local: tuple[torch.Tensor, torch.Tensor] | None = None
    position_bias: torch.Tensor | None = None


class Attention(nn.Module):
    """Multi-head scaled dot-product attention.

    Self-attention uses one fused QKV projection (q | k | v row blocks); cross-attention projects
    queries from the stream and keys/values from ``ctx.memory``. ``n_kv_heads < n_heads`` is
    grouped-query attention; ``head_dim`` may differ from d / n_heads (T5, Gemma, Qwen3). ``q_norm``/
    ``k_norm`` normalise queries and keys before the dot product (QK-norm: Dehghani et al. 2023), per
    head (``qk_scope="head"``: Qwen3, Gemma 3) or over the whole projection (``"projection"``: OLMo 2).
    ``window``: each query sees the last ``window`` positions, itself included (Mistral; Gemma's local
    layers), and such a layer reads ``ctx.rope_local`` when there is one.
    """

    def __init__(
        self,
        d: int,
        n_heads: int,
        n_kv_heads: int,
        *,
        head_dim: int | None = None,
        bias: bool = True,
        out_bias: bool | None = None,
        causal: bool = False,
        cross: bool = False,
        rope: bool = False,
        q_norm: nn.Module | None = None,
        k_norm: nn.Module | None = None,
        qk_scope: str = "head",
        scale: float | None = None,
        softcap: float | None = None,
        window: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = head_dim if head_dim is not None else d // n_heads
        self.causal, self.cross, self.rope, self.dropout = causal, cross, rope and not cross, dropout
        self.scale, self.softcap, self.qk_scope = scale, softcap, qk_scope
        self.window = None if cross else window
        inner, kv_dim = n_heads * self.head_dim, n_kv_heads * self.head_dim
        if cross:
            self.q = nn.Linear(d, inner, bias=bias)
            self.kv = nn.Linear(d, 2 * kv_dim, bias=bias)
        else:
            self.qkv = nn.Linear(d, inner + 2 * kv_dim, bias=bias)
        self.out = nn.Linear(inner, d, bias=bias if out_bias is None else out_bias)
        self.q_norm, self.k_norm = q_norm, k_norm

    def forward(self, x: torch.Tensor, ctx: Context, first=None, mix=(0.5, 0.5)) -> torch.Tensor:
        """(B, T, d) -> (B, T, d). With ``first`` (the first layer's values, :meth:`values`), the values
        attended are l1 first + l2 v, (l1, l2) = ``mix`` (ResFormer, Zhou et al. 2024: the value residual)."""
        B, T, _ = x.shape
        hd = self.head_dim
        inner, kv_dim = self.n_heads * hd, self.n_kv_heads * hd
        if self.cross:
            q, (k, v) = self.q(x), self.kv(ctx.memory).split([kv_dim, kv_dim], dim=-1)
        else:
            q, k, v = self.qkv(x).split([inner, kv_dim, kv_dim], dim=-1)
        if self.q_norm is not None and self.qk_scope == "projection":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, self.n_heads, hd).transpose(1, 2)  # (B, h, T, hd)
        k = k.view(B, k.shape[1], self.n_kv_heads, hd).transpose(1, 2)  # (B, kv, S, hd)
        v = v.view(B, v.shape[1], self.n_kv_heads, hd).transpose(1, 2)  # (B, kv, S, hd)
        if first is not None:
            v = mix[0] * first + mix[1] * v  # V' = l1 V_1 + l2 V_n
        if self.q_norm is not None and self.qk_scope == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            local = self.window is not None and ctx.rope_local is not None
            cos, sin = ctx.rope_local if local else ctx.rope
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.n_kv_heads != self.n_heads:  # GQA: each kv head serves n_heads / n_kv_heads queries
            rep = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        bias = None if self.cross or ctx.position_bias is None else ctx.position_bias.to(q.dtype)
        mask = self._mask(ctx, T, k.shape[2], x.device, explicit_causal=bias is not None or self.softcap)
        y = attend(
            q,
            k,
            v,
            mask,
            bias,
            causal=self.causal,
            scale=self.scale,
            softcap=self.softcap,
            dropout=self.dropout if self.training else 0.0,
        )
        return self.out(y.transpose(1, 2).reshape(B, T, inner))  # (B, T, d)

    def values(self, x: torch.Tensor) -> torch.Tensor:
        """Self-attention's values of ``x``, (B, kv, T, hd): what a value residual carries from the first
        layer (the v rows of the fused projection only)."""
        kv_dim = self.n_kv_heads * self.head_dim
        w = self.qkv.weight[-kv_dim:]
        b = self.qkv.bias[-kv_dim:] if self.qkv.bias is not None else None
        v = F.linear(x, w, b)
        return v.view(*x.shape[:2], self.n_kv_heads, self.head_dim).transpose(1, 2)

    def _mask(self, ctx: Context, T: int, S: int, device, explicit_causal) -> torch.Tensor | None:
        """A boolean (B or 1, 1, T, S) mask, True = may attend; None when sdpa's ``is_causal`` (or no
        mask) says it all: no padding, no window, and no bias or soft-cap that needs causality spelt out."""
        pad = ctx.memory_padding_mask if self.cross else ctx.padding_mask
        if pad is None and self.window is None and not (self.causal and explicit_causal):
            return None
        mask = (
            torch.ones(1, 1, T, S, dtype=torch.bool, device=device) if pad is None else ~pad[:, None, None, :]
        )
        if self.causal:
            mask = mask & torch.ones(T, S, dtype=torch.bool, device=device).tril()
        if self.window is not None:  # key j is visible from query i when i - j < window
            mask = mask & torch.ones(T, S, dtype=torch.bool, device=device).triu(1 - self.window)
        # a query that may see nothing (a padding query under a causal mask) attends to itself,
        # so that its (ignored) output stays finite instead of NaN
        if T == S:
            lonely = ~mask.any(-1, keepdim=True)
            mask = mask | (lonely & torch.eye(T, dtype=torch.bool, device=device))
        return mask


def attend(q, k, v, mask, bias, *, causal: bool, scale, softcap, dropout: float) -> torch.Tensor:
    """softmax(scale q k^T [soft-capped] [+ bias] [masked]) v for (B, h, T, hd) queries: (B, h, T, hd).

    ``mask`` is bool, True = may attend (None: ``causal`` alone decides); ``bias`` (1, h, T, S) is added
    to the scores; ``softcap`` c maps scores to c tanh(scores / c) before bias and mask (Gemma 2).
    """
    if softcap is None:
        attn_mask = mask
        if bias is not None:
            attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            dropout_p=dropout,
            is_causal=causal and attn_mask is None,
            scale=scale,
        )
    scores = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    scores = softcap * torch.tanh(scores / softcap)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(q.dtype)  # softmax in float32, as Gemma 2
    return F.dropout(weights, p=dropout) @ v
