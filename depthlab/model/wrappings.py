"""Residual/normalisation wrappings: one small class each, whose forward is its formula.

F is the wrapped sublayer (attention or FFN), x the residual stream, LN the configured norm, m the
parametrization's branch multiplier (``self.times_m``: 1 under sp, where "m*" disappears from the
formula shown). With the residual turned off ``self.skip(x)`` is 0 and "x +" disappears from the formula.

Each class is the only declaration of its wrapping. Besides ``forward`` it states, as class attributes:

| attribute            | meaning                                                        | read by                |
|----------------------|----------------------------------------------------------------|------------------------|
| FORMULA, SOURCE      | the update rule (m: the branch multiplier) and its paper       | explain, docgen.tables |
| BRANCH_END           | the module whose output m multiplies (F, or the norm after it) | the coordinate check   |
| DEPTH_RULE_REFUSED   | why a depth parametrization has no meaning here (else None)    | config validation      |
| NORM_IN / NORM_OUT   | a norm on F's input / on F's output before the addition        | explain                |
| NORM_AFTER_ADD       | a norm on the sum: the stream itself is renormalised           | explain, final norm    |
| NEEDS_NORM           | the formula normalises, so ``norm="none"`` is refused          | config validation      |
| USES_NORM            | the configured norm appears at all (ReZero: no)                | explain's warnings     |
| SCALED_RESIDUAL_INIT | GPT-2's 0.02/sqrt(2L) residual-output init applies under gpt2  | init                   |
| CONSTANTS            | the names of its depth-dependent constants                     | the stack, explain     |
| CONSTANTS_AT         | the function that computes them from the layer's :class:`Site` | the stack              |
|                      | (:mod:`depthlab.model.init`; DeepNorm's beside its class)      |                        |
| DEPTH_WARNING        | (layers, why): explain warns from that depth on                | explain                |
| PARALLEL             | the block adds one skip and each sublayer's ``branch(x, ctx)`` | the block              |
|                      | (all read one stream) instead of applying them in turn         |                        |
| SHARED_NORM          | (parallel) the block holds one norm, computed once, that every | the stack, the block   |
|                      | branch reads                                                   |                        |

and, as class methods, ``final_norm_under_auto(cfg)`` (the ``final_norm="auto"`` policy: on unless
every sublayer renormalises the stream), ``for_layer(cfg, layer, n_layers)`` (the class that
wraps one layer; Mix-LN picks post or pre by depth) and ``check_config(cfg)`` (what else the wrapping
requires of a config; config validation calls it). The wrap-wide ones (FORMULA, SOURCE, NEEDS_NORM,
USES_NORM, SCALED_RESIDUAL_INIT, DEPTH_WARNING, DEPTH_RULE_REFUSED and the class methods) make a :class:`Declaration`,
which Mix-LN is without being a module. The block (:class:`depthlab.model.layers.Block`) combines its
wrapped sublayers in the form PARALLEL and SHARED_NORM declare. Adding a wrapping is one class
registered with :func:`register` (plus its constants function): config, build, explain and probe need
no other edit.

The table of every wrapping's name, formula, source and constants is written from these classes by
``python -m depthlab_lab.docgen.tables`` into docs/wrappings.md and README.md.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from depthlab.errors import ConfigError
from depthlab.model import init
from depthlab.model.wrapping_base import WRAPPINGS, Declaration, Site, Wrapping, register

# the registry and the base, re-exported: the declarations below and their users import them here
__all__ = ["WRAPPINGS", "Declaration", "Site", "Wrapping", "register"]


@register("post")
class PostLN(Wrapping):
    """x <- LN(x + m F(x)): the original "Add & Norm" (Vaswani et al. 2017)."""

    FORMULA = "x = LN(x + m*F(x))"
    BRANCH_END = "f"
    SOURCE = "Vaswani et al. 2017, Add & Norm"
    NORM_AFTER_ADD = True
    DEPTH_WARNING = (
        12,
        "needs a learning-rate warmup and may still diverge (Xiong et al. 2020; Liu et al. 2020); "
        "consider pre, deepnorm or admin",
    )

    def __init__(self, f, make_norm, residual=True, d_model=None):
        super().__init__(f, make_norm, residual, d_model)
        self.norm = make_norm()

    def forward(self, x, ctx):
        return self.norm(self.skip(x) + self.times_m(self.f(x, ctx)))


@register("pre")
class PreLN(Wrapping):
    """x <- x + m F(LN(x)): the norm inside the branch (Xiong et al. 2020; GPT-2, LLaMA)."""

    FORMULA = "x = x + m*F(LN(x))"
    BRANCH_END = "f"
    SOURCE = "Xiong et al. 2020; GPT-2, LLaMA"
    NORM_IN = True

    def __init__(self, f, make_norm, residual=True, d_model=None):
        super().__init__(f, make_norm, residual, d_model)
        self.norm = make_norm()

    def forward(self, x, ctx):
        return self.skip(x) + self.times_m(self.f(self.norm(x), ctx))


@register("sandwich")
class SandwichLN(Wrapping):
    """x <- x + m LN_out(F(LN_in(x))) (CogView Sandwich-LN; Peri-LN; Gemma 2/3). m after the
    out-norm, which would undo it before."""

    FORMULA = "x = x + m*LN(F(LN(x)))"
    BRANCH_END = "norm_out"
    SOURCE = "Ding et al. 2021, CogView; Peri-LN 2025; Gemma 2/3"
    NORM_IN = NORM_OUT = NEEDS_NORM = True

    def __init__(self, f, make_norm, residual=True, d_model=None):
        super().__init__(f, make_norm, residual, d_model)
        self.norm_in, self.norm_out = make_norm(), make_norm()

    def forward(self, x, ctx):
        return self.skip(x) + self.times_m(self.norm_out(self.f(self.norm_in(x), ctx)))


@register("reorder")
class ReorderLN(Wrapping):
    """x <- x + m LN(F(x)): normalise the update, not the stream (OLMo 2 "norm after"); m after the
    norm, which would undo it before."""

    FORMULA = "x = x + m*LN(F(x))"
    BRANCH_END = "norm"
    SOURCE = "OLMo 2 2024, norm after"
    NORM_OUT = NEEDS_NORM = True

    def __init__(self, f, make_norm, residual=True, d_model=None):
        super().__init__(f, make_norm, residual, d_model)
        self.norm = make_norm()

    def forward(self, x, ctx):
        return self.skip(x) + self.times_m(self.norm(self.f(x, ctx)))


def deepnorm_constants(arch: str, side: str, n_enc: int, n_dec: int) -> tuple[float, float]:
    """(alpha, beta) of DeepNorm for one side of a model (Wang et al. 2022, Table 1).

    encoder-only: alpha=(2N)^1/4, beta=(8N)^-1/4; decoder-only: alpha=(2M)^1/4, beta=(8M)^-1/4;
    encoder-decoder: encoder alpha=0.81 (N^4 M)^1/16, beta=0.87 (N^4 M)^-1/16, decoder
    alpha=(3M)^1/4, beta=(12M)^-1/4. This is the paper's table; torchscale's encoder.py uses
    1.15 instead of 0.87 for the enc-dec encoder beta.
    """
    N, M = n_enc, n_dec
    if arch == "encdec":
        if side == "encoder":
            return 0.81 * (N**4 * M) ** (1 / 16), 0.87 * (N**4 * M) ** (-1 / 16)
        return (3 * M) ** 0.25, (12 * M) ** -0.25
    L = N if arch == "encoder" else M
    return (2 * L) ** 0.25, (8 * L) ** -0.25


def deepnorm_site_constants(site: Site) -> dict[str, float]:
    """DeepNorm's {"alpha", "beta"} for the side ``site`` is on (:func:`deepnorm_constants`)."""
    alpha, beta = deepnorm_constants(site.arch, site.side, site.n_enc, site.n_dec)
    return {"alpha": alpha, "beta": beta}


@register("deepnorm")
class DeepNorm(Wrapping):
    """x <- LN(alpha * x + F(x)), with F's v/out/fc weights scaled by beta at init (Wang et al. 2022)."""

    FORMULA = "x = LN(alpha*x + F(x))"
    SOURCE = "Wang et al. 2022, DeepNet"
    NORM_AFTER_ADD = NEEDS_NORM = True
    DEPTH_RULE_REFUSED = (
        "DeepNorm's alpha and beta already set the skip-to-branch ratio by depth (Wang et al. 2022)"
    )
    CONSTANTS = ("alpha", "beta")
    CONSTANTS_AT = staticmethod(deepnorm_site_constants)
    SCALED_RESIDUAL_INIT = False  # beta is DeepNorm's depth-scaled init: GPT-2's is not applied on top

    def __init__(self, f, make_norm, residual=True, d_model=None, **constants):
        super().__init__(f, make_norm, residual, d_model, **constants)
        self.norm, self.alpha, self.beta = make_norm(), constants["alpha"], constants["beta"]

    def forward(self, x, ctx):
        # F(x) + alpha * x in one kernel (torch.add's alpha): one elementwise pass fewer per sublayer
        return self.norm(torch.add(self.f(x, ctx), self.skip(x), alpha=self.alpha))

    def constant_values(self):
        return {"alpha": self.alpha, "beta": self.beta}

    def init_branch(self):
        init.scale_deepnorm_branch(self.f, self.beta)


@register("admin")
class Admin(Wrapping):
    """x <- LN(omega * x + F(x)), omega learnable per feature, closed-form init (Liu et al. 2020)."""

    FORMULA = "x = LN(omega*x + F(x))"
    SOURCE = "Liu et al. 2020, Admin"
    NORM_AFTER_ADD = NEEDS_NORM = True
    DEPTH_RULE_REFUSED = "Admin's omega already sets the skip-to-branch ratio by depth (Liu et al. 2020)"
    CONSTANTS = ("omega",)
    CONSTANTS_AT = staticmethod(init.admin_site_constants)

    def __init__(self, f, make_norm, residual=True, d_model=None, **constants):
        super().__init__(f, make_norm, residual, d_model, **constants)
        self.norm = make_norm()
        self.omega = nn.Parameter(torch.full((self.d_model,), float(constants["omega"])))

    def forward(self, x, ctx):
        return self.norm(self.omega * self.skip(x) + self.f(x, ctx))

    def constant_values(self):
        return {"omega": float(self.omega.detach().mean())}


@register("rezero")
class ReZero(Wrapping):
    """x <- x + a m F(x), a scalar a = 0 at init and no norm (Bachlechner et al. 2020)."""

    FORMULA = "x = x + a*m*F(x)"
    BRANCH_END = "f"
    SOURCE = "Bachlechner et al. 2020, ReZero"
    USES_NORM = False
    CONSTANTS = ("a",)
    CONSTANTS_AT = staticmethod(init.rezero_site_constants)

    def __init__(self, f, make_norm, residual=True, d_model=None, **constants):
        super().__init__(f, make_norm, residual, d_model, **constants)
        self.a = nn.Parameter(torch.full((1,), float(constants["a"])))

    def forward(self, x, ctx):
        return self.skip(x) + self.a * self.times_m(self.f(x, ctx))

    def constant_values(self):
        return {"a": float(self.a.detach())}


@register("layerscale")
class LayerScale(Wrapping):
    """x <- x + diag(lambda) F(LN(x)), lambda per feature, small at init (CaiT, Touvron et al. 2021)."""

    FORMULA = "x = x + lambda*F(LN(x))"
    SOURCE = "Touvron et al. 2021, CaiT"
    NORM_IN = True
    DEPTH_RULE_REFUSED = "LayerScale's lambda already sets the branch scale by depth (CaiT: 0.1, 1e-5, 1e-6)"
    CONSTANTS = ("lambda",)
    CONSTANTS_AT = staticmethod(init.layerscale_site_constants)

    def __init__(self, f, make_norm, residual=True, d_model=None, **constants):
        super().__init__(f, make_norm, residual, d_model, **constants)
        self.norm = make_norm()
        self.gamma = nn.Parameter(torch.full((self.d_model,), float(constants["lambda"])))

    def forward(self, x, ctx):
        return self.skip(x) + self.gamma * self.f(self.norm(x), ctx)

    def constant_values(self):
        return {"lambda": float(self.gamma.detach().mean())}


@register("lns")
class LayerNormScaling(Wrapping):
    """x <- x + m F(LN(x) * 1/sqrt(l)), l = 1..L the layer index (Sun et al. 2025)."""

    FORMULA = "x = x + m*F(LN(x)/sqrt(l))"
    BRANCH_END = "f"
    SOURCE = "Sun et al. 2025, LayerNorm Scaling"
    NORM_IN = NEEDS_NORM = True
    SCALED_RESIDUAL_INIT = False  # LayerNorm Scaling replaces GPT-2's depth-scaled init (not combined)
    CONSTANTS = ("scale",)
    CONSTANTS_AT = staticmethod(init.lns_site_constants)

    def __init__(self, f, make_norm, residual=True, d_model=None, **constants):
        super().__init__(f, make_norm, residual, d_model, **constants)
        self.norm, self.scale = make_norm(), constants["scale"]

    def forward(self, x, ctx):
        return self.skip(x) + self.times_m(self.f(self.norm(x) * self.scale, ctx))

    def constant_values(self):
        return {"scale": self.scale}


@register("mix")
class MixLN(Declaration):
    """Post-LN for the bottom floor(mix_ratio * L) layers, pre-LN above (Li et al. 2024, Mix-LN).

    A choice per layer, not a formula of its own, so a declaration and not a module:
    :meth:`for_layer` returns :class:`PostLN` or :class:`PreLN`, whose modules the stack builds.
    """

    FORMULA = "post below floor(mix_ratio*L), pre above"
    SOURCE = "Li et al. 2024, Mix-LN"
    NEEDS_NORM = True

    @classmethod
    def for_layer(cls, cfg, layer, n_layers):
        return PostLN if layer <= math.floor(cfg.mix_ratio * n_layers) else PreLN

    @classmethod
    def final_norm_under_auto(cls, cfg):
        return cfg.mix_ratio < 1.0  # pre-LN layers on top leave the stream unnormalised


class _OneStream(Wrapping):
    """The parallel forms: every sublayer of a block reads the same stream, and the block adds one
    skip and each sublayer's ``branch`` (:class:`depthlab.model.layers.Block`)."""

    PARALLEL = NORM_IN = True

    @classmethod
    def check_config(cls, cfg):
        present = ["attn", "ffn"] + (["cross"] if cfg.arch == "encdec" else [])
        on = [s for s in present if cfg.has_residual(s)]
        if on and len(on) != len(present):
            raise ConfigError(
                "residual",
                cfg.residual,
                f"all of {', '.join(present)} or none with wrap={cfg.wrap}: its sublayers share one skip",
            )


@register("parallel")
class Parallel(_OneStream):
    """x <- x + m sum_i F_i(LN_i(x)): every sublayer reads the same stream, one skip per block
    (GPT-NeoX, Black et al. 2022; Pythia; Falcon-40B's two norms). A sublayer on its own is
    pre-LN's x + m F(LN(x))."""

    FORMULA = "x = x + m*sum_i F_i(LN_i(x))"
    BRANCH_END = "f"
    SOURCE = "Black et al. 2022, GPT-NeoX; Pythia; Falcon"

    def __init__(self, f, make_norm, residual=True, d_model=None):
        super().__init__(f, make_norm, residual, d_model)
        self.norm = make_norm()

    def branch(self, x, ctx):
        return self.times_m(self.f(self.norm(x), ctx))  # m F_i(LN_i(x))

    def forward(self, x, ctx):
        return self.skip(x) + self.branch(x, ctx)  # one sublayer on its own: x + m F(LN(x))


@register("parallel_shared")
class ParallelShared(_OneStream):
    """x <- x + m sum_i F_i(LN(x)): the parallel form with one norm per block, held by the block and
    computed once (GPT-J, Wang & Komatsuzaki 2021; PaLM, Chowdhery et al. 2022; Phi-1/2; Falcon-7B).
    A sublayer holds no norm: on its own it needs its block's."""

    FORMULA = "x = x + m*sum_i F_i(LN(x))"
    BRANCH_END = "f"
    SOURCE = "Wang & Komatsuzaki 2021, GPT-J; Chowdhery et al. 2022, PaLM"
    SHARED_NORM = True

    def branch(self, h, ctx):
        return self.times_m(self.f(h, ctx))  # m F_i(h), h = LN(x) computed once by the block

    def forward(self, x, ctx, block_norm):
        return self.skip(x) + self.branch(block_norm(x), ctx)  # one sublayer on its own: x + m F(LN(x))


# The residual topologies register themselves in their own modules (one concept per file); importing them
# here puts them in the registry wherever the wrappings are.
from depthlab.model import aggregate, hyper, value_residual  # noqa: E402, F401
