"""Value residuals (Zhou et al. 2024, ResFormer, arXiv 2410.17897): every self-attention layer after the
first mixes its values with the first layer's, V'_n = l1 V_1 + l2 V_n, before attending. The stream
itself is pre-LN; the state carries V_1 (:class:`depthlab.model.state.Valued`) from the first layer up.

    vres          l1 = l2 = 1/2, fixed (ResFormer; x-transformers' add_value_residual)
    vres_learned  l1, l2 learned scalars per layer, 1/2 at init (ResFormer's learnable variant)
"""

from __future__ import annotations

import torch
from torch import nn

from depthlab.model.state import FirstValue, Valued
from depthlab.model.topology_base import Topology
from depthlab.model.wrapping_base import register

HALF = (0.5, 0.5)


@register("vres")
class ValueResidual(Topology):
    """x <- x + m F(LN(x)), self-attention attending to V' = l1 V_1 + l2 V."""

    FORMULA = "x = x + m*F(LN(x)), attention values V' = 0.5*V_1 + 0.5*V"
    SOURCE = "Zhou et al. 2024, ResFormer (value residual)"
    BRANCH_END = "f"
    STATE = FirstValue
    READS = "the stream (self-attention also V_1, the first layer's values)"
    WRITES = "x + F(LN(x)); the first layer's values are kept"
    REFERENCES = "x-transformers add_value_residual, learned_value_residual_mix=False: equal"

    def lambdas(self):
        return HALF

    def formula(self) -> str:
        """The mix on the self-attention of every layer after the first; the first layer's attention
        hands its own values up as V_1, and the other sublayers are pre-LN."""
        if self.kind == "attn" and self.index == 0:
            return self.pre_ln_formula() + ", its values kept as V_1"
        return super().formula() if self.kind == "attn" else self.pre_ln_formula()

    def forward(self, state: Valued, ctx) -> Valued:
        if self.kind != "attn":
            return state._replace(x=state.x + self.times_m(self.f(self.norm(state.x), ctx)))
        h = self.norm(state.x)
        if state.v1 is None:  # the first layer attends to its own values, and hands them up as V_1
            return Valued(state.x + self.times_m(self.f(h, ctx)), self.f.values(h))
        return Valued(state.x + self.times_m(self.f(h, ctx, first=state.v1, mix=self.lambdas())), state.v1)


@register("vres_learned")
class LearnedValueResidual(ValueResidual):
    """The value residual with l1, l2 learned per layer (1/2 each at init)."""

    FORMULA = "x = x + m*F(LN(x)), attention values V' = l1*V_1 + l2*V"
    SOURCE = "Zhou et al. 2024, ResFormer (learned value residual)"
    REFERENCES = (
        "x-transformers' learned_value_residual_mix learns a mix per token and head: equal when its "
        "projection is 0 (l1 = 1 - sigmoid(b), l2 = sigmoid(b))"
    )

    def __init__(self, f, make_norm, residual, site):
        super().__init__(f, make_norm, residual, site)
        if self.kind == "attn" and site.layer > 1:  # the first layer's values are V_1 themselves
            self.value_mix = nn.Parameter(torch.tensor(HALF))

    def lambdas(self):
        return self.value_mix[0], self.value_mix[1]

    @classmethod
    def extra_parameters(cls, cfg, n_layers, sublayers):
        return 2 * max(0, n_layers - 1)  # l1, l2 of every layer after the first
