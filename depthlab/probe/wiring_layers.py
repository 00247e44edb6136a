"""What the wiring check needs of a hyper-connection layer, whoever wrote it: :class:`HyperLayer`.

A layer is run as a function of its state and of a branch the check supplies, ``step(H, branch)`` with H
(B, T, n, w) (n streams, or m fractions of width w), and the logits of its static H_res can be set
(``set_res(M)``, M (n, n) in H_res's orientation: new stream t = sum_s M[t, s] H_s), so that an H_res
that starts at I can be moved where a bug would show. :func:`hyper_layers` finds the layers of

| implementation                                     | found by                           |
|----------------------------------------------------|------------------------------------|
| depthlab's hc, dhc, mhc, frac wrappings           | class                              |
| hyper-connections' HyperConnections, mHC (lucidrains) | class name and ``static_alpha``  |
| x-transformers' HyperConnection                    | class name and ``prepare``         |
| your own                                           | it has ``step`` and ``set_res`` (this protocol) |
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from depthlab.model.hyper import _Hyper


class HyperLayer:
    """The protocol (and the adapter of depthlab's own layers): ``n`` streams (or fractions) of ``width``,
    ``fractions`` (whether they cut one stream), ``step(H, branch)``, ``set_res(M)``."""

    def __init__(self, w: _Hyper):
        self.module, self.n = w, w.mix.n
        self.fractions = w.mix.views > 1  # frac: the n are fractions of one stream
        self.width = w.d_model // self.n if self.fractions else w.d_model

    def step(self, H: torch.Tensor, branch) -> torch.Tensor:
        with _swapped(self.module, f=_Branch(branch), norm=nn.Identity()):
            return self.module(H, None)

    def set_res(self, M: torch.Tensor) -> None:
        self.module.mix.res.copy_(M.reshape(-1))  # static H_res (mhc: its logits b_res)


class _Branch(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, h, ctx=None):
        return self.fn(h)


@contextmanager
def _swapped(module: nn.Module, **parts):
    saved = {k: getattr(module, k) for k in parts}
    for k, v in parts.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(module, k, v)


class LucidrainsLayer:
    """hyper-connections' HyperConnections / ManifoldConstrainedHyperConnections: streams in the batch,
    ``(b s) t d``; ``static_alpha[:, 1:]`` is H_res transposed. With ``num_fracs`` > 1 its fractions are
    the n (one stream, cut); their static map interleaves fractions, so H_res cannot be set."""

    def __init__(self, ref: nn.Module):
        self.module = ref
        self.fractions = getattr(ref, "num_fracs", 1) > 1
        self.n = ref.num_fracs if self.fractions else ref.num_residual_streams
        norm = getattr(ref, "norm", None)
        self.width = norm.gamma.shape[0] if hasattr(norm, "gamma") else norm.normalized_shape[0]

    def step(self, H, branch):
        B, T, n, w = H.shape
        if self.fractions:
            branch_input, add = self.module(H.flatten(-2))
            return add(branch(branch_input)).unflatten(-1, (n, w))
        x = H.permute(0, 2, 1, 3).reshape(B * n, T, w)
        branch_input, add = self.module(x)
        return add(branch(branch_input)).reshape(B, n, T, w).permute(0, 2, 1, 3)

    def set_res(self, M):
        if self.fractions:
            raise NotImplementedError("its fractions' static map is laid out fraction by fraction")
        self.module.static_alpha[:, -self.n :].copy_(M.T)


class XTransformersLayer(LucidrainsLayer):
    """x-transformers' HyperConnection: ``prepare`` then ``forward(branch_out, residuals, beta=...)``."""

    def __init__(self, ref: nn.Module):
        self.module, self.n, self.fractions = ref, ref.num_residual_streams, False
        self.width = ref.norm.normalized_shape[0]

    def step(self, H, branch):
        B, T, n, d = H.shape
        branch_input, residuals, kw = self.module.prepare(H.permute(0, 2, 1, 3).reshape(B * n, T, d))
        out = self.module(branch(branch_input), residuals, **kw)
        return out.reshape(B, n, T, d).permute(0, 2, 1, 3)


def hyper_layers(model: nn.Module) -> list:
    """Every hyper-connection layer of ``model`` (the module itself included), as :class:`HyperLayer` s,
    in module order."""
    out = []
    for m in model.modules():
        name = type(m).__name__
        if isinstance(m, _Hyper):
            out.append(HyperLayer(m))
        elif hasattr(m, "step") and hasattr(m, "set_res"):
            out.append(m)
        elif name in ("HyperConnections", "ManifoldConstrainedHyperConnections") and hasattr(
            m, "static_alpha"
        ):
            out.append(LucidrainsLayer(m))
        elif name == "HyperConnection" and hasattr(m, "prepare"):
            out.append(XTransformersLayer(m))
    return out


def qk_projections(attn: nn.Module) -> list[tuple[nn.Linear, slice]]:
    """The query and the key projection of an attention module, each as (its Linear, the rows that are
    it): depthlab's fused qkv (q | k | v), Hugging Face's q_proj/k_proj, x-transformers' to_q/to_k; []
    when it has none of them."""
    qkv = getattr(attn, "qkv", None)
    if isinstance(qkv, nn.Linear) and hasattr(attn, "n_kv_heads"):
        inner, kv = attn.n_heads * attn.head_dim, attn.n_kv_heads * attn.head_dim
        return [(qkv, slice(0, inner)), (qkv, slice(inner, inner + kv))]
    for q, k in (("q_proj", "k_proj"), ("to_q", "to_k")):
        lins = (getattr(attn, q, None), getattr(attn, k, None))
        if all(isinstance(lin, nn.Linear) for lin in lins):
            return [(lin, slice(None)) for lin in lins]
    return []


@torch.no_grad()
def scale_rows(lin: nn.Linear, rows: slice, c: float) -> None:
    """Multiply the output rows ``rows`` of ``lin`` by ``c`` (weight and bias)."""
    lin.weight[rows].mul_(c)
    if lin.bias is not None:
        lin.bias[rows].mul_(c)
