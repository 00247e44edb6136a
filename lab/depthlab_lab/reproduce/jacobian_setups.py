"""From the ReZero notebook's setup to depthlab's, one factor at a time: where the Jacobian numbers part.

The ReZero examples notebook (Bachlechner et al. 2020; repository majumderb/rezero) reports the mean
squared singular value (MSV) of the input-output Jacobian of 128-layer Transformers of width 128: post-LN
0.000, pre-LN 66.3, ReZero 2.14. Its setup, as reconstructed here (the notebook itself could not be
consulted when this was written; what each step assumes is in its description):

- PyTorch's own ``nn.TransformerEncoderLayer`` (post-LN; ``norm_first=True`` for pre-LN: the notebook
  predates that flag and wrote its own, same formula) and the ReZero repository's layer: one scalar
  ``resweight`` per layer, 0 at init, shared by both sublayers, no norm, dropout after the scaling;
- the sizes of the PyTorch language-model tutorial the notebook builds on: 2 heads, FFN width 200,
  dropout 0.2, ReLU, and a model left in training mode (dropout active) as built;
- a unit-Gaussian input of one 32-token sequence, bidirectional attention, and the whole-sequence
  Jacobian d x_L / d x_0 (every token's output against every token's input).

Then, cumulatively, each step changes one factor toward what ``depthlab reproduce jacobian`` measures:
dropout off, depthlab's sizes (4 heads, FFN 512), GELU, depthlab's own layers and initialisation (still
bidirectional), causal attention, the embeddings of real text as the input (a batch of 2), and last the
per-token Jacobian (each token's output against its own input only). Every value is the probe's
Hutchinson estimate, ||u^T J||^2 / n averaged over random u, at initialisation.
"""

from __future__ import annotations

import torch
from torch import nn

from depthlab.config import ModelConfig
from depthlab.corpus import text_batch
from depthlab.model import build_model
from depthlab.model.layers import Context

D_MODEL, SEQ = 128, 32


class ReZeroLayer(nn.Module):
    """The ReZero repository's encoder layer by its formula: x = x + a F(x) for attention then the FFN,
    one a per layer (0 at init), no norm, dropout applied to a F(x)."""

    def __init__(self, d: int, heads: int, d_ff: int, dropout: float, activation: str):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)
        self.ff = nn.Sequential(
            nn.Linear(d, d_ff), _ACT[activation](), nn.Dropout(dropout), nn.Linear(d_ff, d)
        )
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)
        self.resweight = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.drop1(self.attn(x, x, x, attn_mask=mask, need_weights=False)[0] * self.resweight)
        return x + self.drop2(self.ff(x) * self.resweight)


_ACT = {"relu": nn.ReLU, "gelu": nn.GELU}


def torch_stack(
    wrap: str, n_layers: int, heads: int, d_ff: int, dropout: float, activation: str
) -> nn.ModuleList:
    """``n_layers`` PyTorch encoder layers (post or pre) or ReZero layers, batch-first, as PyTorch builds them."""
    if wrap == "rezero":
        return nn.ModuleList(ReZeroLayer(D_MODEL, heads, d_ff, dropout, activation) for _ in range(n_layers))
    return nn.ModuleList(
        nn.TransformerEncoderLayer(
            D_MODEL, heads, d_ff, dropout, activation=activation, batch_first=True, norm_first=wrap == "pre"
        )
        for _ in range(n_layers)
    )


def hutchinson_msv(fn, x: torch.Tensor, probes: int, gen: torch.Generator, per_token: bool = False) -> float:
    """Mean squared singular value of the Jacobian of ``fn`` at ``x`` (B, T, d), from random projections.

    Whole-sequence: E ||u^T J||^2 / n over u ~ N(0, I) of the output's shape (n its size). Per token: u is
    non-zero at one random position t of each sequence, and only the t-th input's block of u^T J is kept,
    so the estimate is of mean_t ||d y_t / d x_t||_F^2 / d.
    """
    x = x.detach().clone().requires_grad_(True)
    y = fn(x)
    B, T, d = y.shape
    total = 0.0
    for j in range(probes):
        u = torch.randn(y.shape, generator=gen)
        if per_token:
            t = torch.randint(0, T, (B,), generator=gen)
            keep = torch.zeros(B, T, 1)
            keep[torch.arange(B), t] = 1.0
            u = u * keep
        (v,) = torch.autograd.grad(y, x, grad_outputs=u, retain_graph=j < probes - 1)
        total += float((v * keep).pow(2).sum() / (B * d)) if per_token else float(v.pow(2).sum() / y.numel())
    return total / probes


STEPS = (
    ("depthlab's reconstruction of the ReZero setup", {}),
    ("dropout off (eval mode)", {"dropout_active": False}),
    ("depthlab's sizes: 4 heads, FFN 512", {"heads": 4, "d_ff": 512}),
    ("GELU instead of ReLU", {"activation": "gelu"}),
    ("depthlab's layers and initialisation", {"layers": "depthlab"}),
    ("causal attention (a decoder)", {"causal": True}),
    ("input: embeddings of real text, batch 2", {"input": "text"}),
    ("per-token Jacobian instead of whole-sequence", {"per_token": True}),
)
START = {
    "heads": 2, "d_ff": 200, "dropout": 0.2, "dropout_active": True, "activation": "relu",
    "layers": "torch", "causal": False, "input": "gaussian", "per_token": False,
}  # fmt: skip


def setup_msv(wrap: str, n_layers: int, setup: dict, seed: int, probes: int) -> float:
    """The Jacobian MSV of one setup (a dict like START) for ``wrap`` at init, with ``seed``."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    if setup["layers"] == "torch":
        layers = torch_stack(
            wrap, n_layers, setup["heads"], setup["d_ff"], setup["dropout"], setup["activation"]
        )
        layers.train(setup["dropout_active"])
        mask = nn.Transformer.generate_square_subsequent_mask(SEQ) if setup["causal"] else None

        def fn(x):
            for layer in layers:
                x = (
                    layer(x, mask)
                    if wrap == "rezero"
                    else layer(x, src_mask=mask, is_causal=mask is not None)
                )
            return x

        x = torch.randn(1, SEQ, D_MODEL, generator=gen)
        return hutchinson_msv(fn, x, probes, gen, setup["per_token"])
    cfg = ModelConfig(
        arch="decoder" if setup["causal"] else "encoder", n_layers=n_layers, d_model=D_MODEL,
        n_heads=setup["heads"], d_ff=setup["d_ff"], activation=setup["activation"], wrap=wrap,
    )  # fmt: skip
    model = build_model(cfg).eval()
    tokens = text_batch(2, SEQ, cfg.vocab_size, seed=seed)
    x = (
        model.embed(tokens).detach()
        if setup["input"] == "text"
        else torch.randn(1, SEQ, D_MODEL, generator=gen)
    )
    ctx = Context(padding_mask=None, rope=None)
    return hutchinson_msv(lambda h: _states_last(model, h, ctx), x, probes, gen, setup["per_token"])


def _states_last(model, x: torch.Tensor, ctx: Context) -> torch.Tensor:
    """x_L: the stream leaving the last layer, before any final norm."""
    _, states = model.stack(x, ctx, return_states=True)
    return states[-1]


def walk(wraps, n_layers: int, seeds, probes: int) -> list[dict]:
    """[{"step", "changes", "msv": {wrap: [per seed]}}] for every step of STEPS, cumulatively."""
    setup, rows = dict(START), []
    for label, change in STEPS:
        setup.update(change)
        rows.append(
            {
                "step": label,
                "setup": dict(setup),
                "msv": {w: [setup_msv(w, n_layers, setup, s, probes) for s in seeds] for w in wraps},
            }
        )
    return rows
