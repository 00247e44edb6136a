"""The ReZero examples notebook's Jacobian cell, as written ("ReZero-Deep_Fast_Transformer.ipynb").

Its setup, not depthlab's: ``torch.nn.TransformerEncoder`` over the notebook's own ``ReZeroEncoderLayer``
(width 16, 4 tokens, batch 1, 4 heads, FFN 64, dropout 0, ReLU, one LayerNorm, ``norm1``, used after both
sublayers), every matrix re-drawn Xavier-uniform, the residual weight 1 for post-LN and pre-LN and 0.1
for ReZero (not 0: at 0 every layer is the identity), the full input-output Jacobian of the 64 inputs
computed by one backward pass over 64 copies, its singular values by SVD, ten draws after one
``torch.manual_seed(0)``, post, pre, ReZero in turn from the same random stream. The notebook prints,
at 12 layers, 0.810 / 10.242 / 1.059 and at 128 layers 0.000 / 66.281 / 2.142 (post / pre / ReZero).

Kept as written: the order of every random draw (the input, then each model's construction and its
Xavier re-initialisation). The one change: the layers are called in a loop rather than through
``TransformerEncoder.forward``, whose newer signature passes arguments the notebook's layer does not
take; with no mask and no final norm the computation is the same.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.init import xavier_uniform_

EMB, LENGTH, NHEAD, NHID, DROPOUT, DRAWS = 16, 4, 4, 64, 0.0, 10
PRINTED = {12: (0.810, 10.242, 1.059), 128: (0.000, 66.281, 2.142)}  # post, pre, ReZero at 0.1


class ReZeroEncoderLayer(nn.Module):
    """The notebook's layer: self-attention and ReLU FFN, each scaled by ``resweight``; ``norm`` None (ReZero),
    "pre" or "post", with the one norm ``norm1`` used by both sublayers (``norm2`` made, never used)."""

    def __init__(self, d_model, nhead, dim_feedforward, dropout, use_norm, init_resweight):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.resweight = nn.Parameter(torch.Tensor([init_resweight]))
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.use_norm = use_norm
        if use_norm:
            self.norm1 = nn.LayerNorm(d_model)
            self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _add(self, src, branch):
        out = src + branch
        return self.norm1(out) if self.use_norm == "post" else out

    def forward(self, src):
        """The layer's output, (length, batch, d_model) in and out."""
        x = self.norm1(src) if self.use_norm == "pre" else src
        src = self._add(src, self.dropout1(self.resweight * self.self_attn(x, x, x)[0]))
        x = self.norm1(src) if self.use_norm == "pre" else src
        ffn = self.linear2(self.dropout(F.relu(self.linear1(x))))
        return self._add(src, self.dropout2(self.resweight * ffn))


class DeepEncoder(nn.Module):
    """``layers`` deep copies of one layer (as TransformerEncoder makes them), every matrix then re-drawn."""

    def __init__(self, layers: int, use_norm, init_resweight: float):
        super().__init__()
        layer = ReZeroEncoderLayer(EMB, NHEAD, NHID, DROPOUT, use_norm, init_resweight)
        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(layers)])
        for p in self.parameters():
            if p.dim() > 1:
                xavier_uniform_(p)

    def forward(self, src):
        for layer in self.layers:
            src = layer(src)
        return src


def io_jacobian(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The notebook's ``io_jacobian_TF``: the (64, 64) input-output Jacobian of ``x`` (length, 1, emb)."""
    le, emb = x.size()[0], x.size()[2]
    n = emb * le
    x = x.reshape(n).repeat(n, 1)
    x.requires_grad_(True)
    y = model(x.reshape(emb * le, le, emb).transpose(0, 1)).reshape(n, -1)
    y.backward(torch.eye(n))
    return x.grad.data


def notebook_msv(layers: int, draws: int = DRAWS) -> tuple[float, float, float]:
    """(post, pre, ReZero at 0.1): the mean squared singular value over ``draws`` draws, as the cell
    prints it (one ``torch.manual_seed(0)``, then per draw the input and the three models in turn)."""
    sv = {"post": [], "pre": [], "rezero": []}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for _ in range(draws):
            src = torch.randn(LENGTH, 1, EMB)
            for name, norm, weight in (("post", "post", 1.0), ("pre", "pre", 1.0), ("rezero", None, 0.1)):
                d = torch.linalg.svdvals(io_jacobian(DeepEncoder(layers, norm, weight), src))
                sv[name].append(d)
    return tuple(float(torch.cat(sv[k]).double().pow(2).mean()) for k in ("post", "pre", "rezero"))
