"""Topologies that read earlier layers back: DenseFormer's weighted averages, Attention Residuals.

DenseFormer (Pagliardini et al. 2024, arXiv 2402.02622): blocks are pre-LN; after block i the stream is
replaced by a learned weighted average of every block output so far, X_0 the embedding:

    X_i = B_i(Y_{i-1}),   Y_i = sum_{j <= i} alpha_ij X_j        alpha_ii = 1, the rest 0 at init

with dilation k (only j = i, i - k, i - 2k, ...) and period p (an average after every p-th block only).
At init Y_i = X_i: the model is pre-LN, bit for bit.

Attention Residuals (Kimi Team 2026, arXiv 2603.15031): no skip; each sublayer l reads a softmax
average over depth of the embedding v_0 and the earlier sublayers' outputs v_i = F_i(LN(h_i)):

    h_l = sum_{i < l} softmax_i(w_l . RMSNorm(v_i)) v_i                    w_l = 0 at init (a uniform mean)

Block AttnRes sums the outputs of each block of sublayers into one summary b_n and reads the closed
summaries and the open block's partial sum; full AttnRes is a block per sublayer.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from depthlab.errors import ConfigError
from depthlab.model.state import Dense, DenseHistory, Depth, DepthAttention, DepthHistory
from depthlab.model.topology_base import Topology
from depthlab.model.wrapping_base import register


@register("denseformer")
class DenseFormer(Topology):
    """x <- x + m F(LN(x)) inside a block; after the block's last sublayer, x <- sum_j alpha_ij X_j."""

    FORMULA = "x = x + m*F(LN(x)); after block i: x = sum_j alpha_ij*X_j"
    SOURCE = "Pagliardini et al. 2024, DenseFormer"
    BRANCH_END = "f"
    STATE = DenseHistory
    OPTIONS = ("dwa_dilation", "dwa_period")
    READS = "the stream: after block i, Y_i = sum_j alpha_ij X_j"
    WRITES = "x + F(LN(x)); block i's output X_i joins the history"
    REFERENCES = (
        "its formula transcribed (epfml/DenseFormer's DWAModules: not on the registry); x-transformers' "
        "integrate_layers is LIMe, another formula"
    )

    def __init__(self, f, make_norm, residual, site):
        super().__init__(f, make_norm, residual, site)
        i, k, p = site.layer, site.topology.dwa_dilation, site.topology.dwa_period
        self.sources = list(range(i % k, i + 1, k)) if self.last and i % p == 0 else []  # j = i, i - k, ...
        if self.sources:
            self.alpha = nn.Parameter(torch.zeros(len(self.sources)))
            with torch.no_grad():
                self.alpha[-1] = 1.0  # alpha_ii = 1: Y_i = X_i at init

    def formula(self) -> str:
        """The average on the last sublayer of a block that averages; pre-LN on the others."""
        return super().formula() if self.sources else self.pre_ln_formula()

    @classmethod
    def check_config(cls, cfg):
        """A period or a dilation past the depth leaves no average: the stack would be pre-LN unsaid."""
        super().check_config(cfg)
        depth, k, p = max(cfg.enc_depth, cfg.dec_depth), cfg.topology.dwa_dilation, cfg.topology.dwa_period
        for name in ("dwa_period", "dwa_dilation"):
            value = getattr(cfg.topology, name)
            if value > depth:
                why = f"at most the depth ({depth} layers): beyond it no block averages earlier outputs (pre-LN)"
                raise ConfigError(name, value, why)
        last = depth // p * p  # the last block that averages; block i reads X_i, X_(i-k), ..: two if i >= k
        if k > last:
            why = (f"at most {last}, the last block that averages with dwa_period={p} at {depth} layers: "
                   "beyond it no block averages earlier outputs (pre-LN)")  # fmt: skip
            raise ConfigError("dwa_dilation", k, why)

    @classmethod
    def extra_parameters(cls, cfg, n_layers, sublayers):
        k, p = cfg.topology.dwa_dilation, cfg.topology.dwa_period
        return sum(i // k + 1 for i in range(1, n_layers + 1) if i % p == 0)  # alpha_i: j = i, i - k, ..

    def forward(self, state: Dense, ctx) -> Dense:
        x = state.stream + self.times_m(self.f(self.norm(state.stream), ctx))  # pre-LN inside the block
        if not self.last:
            return state._replace(stream=x)
        outputs = state.outputs + (x,)  # X_0 .. X_i
        if not self.sources:
            return Dense(x, outputs)
        y = WeightedSum.apply(self.alpha, *(outputs[j] for j in self.sources))  # Y_i = sum_j alpha_ij X_j
        return Dense(y, outputs)

    def mixing_parameters(self) -> list[nn.Parameter]:
        return [self.alpha] if self.sources else []


class WeightedSum(torch.autograd.Function):
    """sum_n alpha_n X_n, as ``sum(a * X for a, X in zip(alpha, xs))`` computes it (the same products and
    additions in the same order: the same values), in one autograd node. Summed term by term under
    autograd, every product left two small nodes behind it that pinned its freed memory (glibc's heap):
    a 300-layer DenseFormer held 6 GB after its forward, growing with depth squared."""

    @staticmethod
    def forward(ctx, alpha: torch.Tensor, *xs: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(alpha, *xs)
        y, term = alpha[0] * xs[0], torch.empty_like(xs[0])
        for a, x in zip(alpha[1:], xs[1:]):
            y += torch.mul(a, x, out=term)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        alpha, *xs = ctx.saved_tensors
        grad_alpha = torch.stack([(g * x).sum() for x in xs]) if ctx.needs_input_grad[0] else None
        return (grad_alpha, *(g * a if need else None for a, need in zip(alpha, ctx.needs_input_grad[1:])))


@register("attnres")
class AttentionResiduals(Topology):
    """h = sum_i softmax_i(w . RMSNorm(v_i)) v_i; v = F(LN(h)) joins the values (one block per sublayer)."""

    FORMULA = "h = sum_i softmax_i(w*RMSNorm(v_i))*v_i; v = F(LN(h))"
    SOURCE = "Kimi Team 2026, Attention Residuals"
    STATE = DepthHistory
    DEPTH_RULE_REFUSED = (
        "Attention Residuals replace the residual sum by a softmax average over depth: no branch multiplier "
        "sets a skip-to-branch ratio by depth there (Kimi Team 2026)"
    )
    READS = "a softmax average over depth of the embedding and every earlier output"
    WRITES = "the output v joins the values"
    REFERENCES = (
        "its formula and the official block_attn_res transcribed (MoonshotAI/Attention-Residuals: not on the "
        "registry); x-transformers' attn_aggregated_residuals departs: it keeps the residual sum and "
        "conditions the query on the input"
    )

    def __init__(self, f, make_norm, residual, site):
        super().__init__(f, make_norm, residual, site)
        self.read = DepthAttention(site.d_model, getattr(self.norm, "eps", 1e-5))
        self.block = block_size(self, site)

    @classmethod
    def extra_parameters(cls, cfg, n_layers, sublayers):
        return (n_layers * sublayers + 1) * 2 * cfg.d_model  # a query and a key norm per read, and the top's

    @classmethod
    def extra_activations(cls, cfg, n_layers, sublayers, checkpointed):
        """Each read stacks the values it reads and keeps, per value and token, the stack and its RMSNorm
        before and after the gain (3 d), the norm's scale and the softmax weight (2). Full AttnRes reads
        1, 2, .., 2L + 1 values: what it keeps grows with depth squared (a 200-layer stack at d_model 32
        passed the check and was killed at 16 GB). Recomputed blocks keep one layer's reads at a time."""
        b = cls.block_of(cfg.topology, n_layers * sublayers)
        sizes = [1 + -(-s // b) for s in range(n_layers * sublayers + 1)]  # values read; the last: the top's
        read = sum(sizes[-sublayers - 1 :]) if checkpointed else sum(sizes)  # sizes only grow with s
        return (3 * cfg.d_model + 2) * read

    @classmethod
    def block_of(cls, topology, sublayers: int) -> int:
        """Sublayers per block in a stack of ``sublayers`` (``topology``: the config's options): 1 for full
        AttnRes."""
        return 1

    def forward(self, state: Depth, ctx) -> Depth:
        h, _ = self.read(state.values)  # (B, T, d), the weights over depth (a named point)
        v = self.f(self.norm(h), ctx)
        if 0 < state.filled < self.block:  # the open block's partial sum grows
            return Depth(h, state.values[:-1] + (state.values[-1] + v,), state.filled + 1)
        return Depth(h, state.values + (v,), 1)  # a new block starts with v

    def mixing_parameters(self) -> list[nn.Parameter]:
        return []


@register("attnres_block")
class BlockAttentionResiduals(AttentionResiduals):
    """Block AttnRes: the sublayers in N blocks (``attnres_blocks``), each summarised by the sum of its
    outputs; every sublayer reads the closed summaries and the open block's partial sum."""

    SOURCE = "Kimi Team 2026, Block Attention Residuals"
    FORMULA = "h = sum_n softmax_n(w*RMSNorm(b_n))*b_n over N block sums; v = F(LN(h))"
    OPTIONS = ("attnres_blocks",)

    @classmethod
    def block_of(cls, topology, sublayers: int) -> int:
        return math.ceil(sublayers / topology.attnres_blocks)


def block_size(w: Topology, site) -> int:
    """Sublayers per block: 1 for full AttnRes, ceil(sublayers of the stack / N) for Block AttnRes."""
    return type(w).block_of(site.topology, site.sublayers * site.n_layers)
