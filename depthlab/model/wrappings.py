"""Residual/normalisation wrappings: one small class each, whose forward is its formula.

F is the wrapped sublayer (attention or FFN), x the residual stream, LN the configured norm. With the
residual turned off ``self.skip(x)`` is 0 and "x +" disappears from the formula.

Each class is the only declaration of its wrapping. Besides ``forward`` it states, as class attributes:

| attribute            | meaning                                                        | read by                |
|----------------------|----------------------------------------------------------------|------------------------|
| FORMULA, SOURCE      | the update rule and the paper it comes from                    | explain, README        |
| NORM_IN / NORM_OUT   | a norm on F's input / on F's output before the addition        | explain                |
| NORM_AFTER_ADD       | a norm on the sum: the stream itself is renormalised           | explain, final norm    |
| NEEDS_NORM           | the formula normalises, so ``norm="none"`` is refused          | config validation      |
| USES_NORM            | the configured norm appears at all (ReZero: no)                | explain's warnings     |
| SCALED_RESIDUAL_INIT | GPT-2's 0.02/sqrt(2L) residual-output init applies under gpt2  | init                   |
| CONSTANTS            | the names of its depth-dependent constants                     | the stack, explain     |
| CONSTANTS_AT         | the function of :mod:`depthlab.model.init` that computes them  | the stack              |
|                      | from the layer's :class:`Site`                                 |                        |
| DEPTH_WARNING        | (layers, why): explain warns from that depth on                | explain                |

and, as class methods, ``final_norm_under_auto(cfg)`` (the ``final_norm="auto"`` policy: on unless
every sublayer renormalises the stream) and ``for_layer(cfg, layer, n_layers)`` (the class that
wraps one layer; Mix-LN picks post or pre by depth). Adding a wrapping is one class registered with
:func:`register` (plus its constants function): config, build, explain and probe need no other edit.

| name       | formula                         | source                                           |
|------------|---------------------------------|--------------------------------------------------|
| post       | x <- LN(x + F(x))               | Vaswani et al. 2017, "Add & Norm"                |
| pre        | x <- x + F(LN(x))               | Xiong et al. 2020; GPT-2, LLaMA                  |
| sandwich   | x <- x + LN_out(F(LN_in(x)))    | CogView 2021; Peri-LN 2025; Gemma 2/3            |
| reorder    | x <- x + LN(F(x))               | OLMo 2 2024 ("norm after")                       |
| deepnorm   | x <- LN(alpha x + F(x))         | Wang et al. 2022, DeepNet                        |
| admin      | x <- LN(omega * x + F(x))       | Liu et al. 2020, Admin                           |
| rezero     | x <- x + a F(x), a = 0 at init  | Bachlechner et al. 2020                          |
| layerscale | x <- x + lambda * F(LN(x))      | Touvron et al. 2021, CaiT                        |
| mix        | post below floor(r L), pre above| Li et al. 2024, Mix-LN                           |
| lns        | x <- x + F(LN(x) / sqrt(l))     | Sun et al. 2025, LayerNorm Scaling               |
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from depthlab.config import WRAPPINGS, ModelConfig
from depthlab.model import init


@dataclass(frozen=True)
class Site:
    """Where one wrapped sublayer sits: what its depth-dependent constants are computed from.

    ``side`` is "encoder" or "decoder"; ``layer`` is 1-based within its side, ``n_layers`` that side's
    depth; ``n_enc``/``n_dec`` the model's two depths (0 for a missing side); ``sublayers`` the residual
    sublayers per layer (2, or 3 in an encoder-decoder's decoder).
    """

    arch: str
    side: str
    layer: int
    n_layers: int
    n_enc: int
    n_dec: int
    sublayers: int
    d_model: int


_SKIP_TERM = re.compile(r"(\w+\*)?x \+ ")  # "x + " or "alpha*x + ": the skip term of a formula


def register(name: str):
    """Class decorator: declare a wrapping under ``name`` (the value of ``ModelConfig.wrap``)."""

    def deco(cls):
        cls.name = name
        WRAPPINGS[name] = cls
        return cls

    return deco


class Wrapping(nn.Module):
    """Base: holds the sublayer ``f`` and whether its skip connection is on; checks the constants.

    ``constants`` passed to ``__init__`` must be exactly the names the class declares (a misspelt or
    missing constant is a TypeError, never silently ignored).
    """

    name: ClassVar[str] = "?"
    FORMULA: ClassVar[str] = ""
    SOURCE: ClassVar[str] = ""
    NORM_IN: ClassVar[bool] = False
    NORM_OUT: ClassVar[bool] = False
    NORM_AFTER_ADD: ClassVar[bool] = False
    NEEDS_NORM: ClassVar[bool] = False
    USES_NORM: ClassVar[bool] = True
    SCALED_RESIDUAL_INIT: ClassVar[bool] = True
    CONSTANTS: ClassVar[tuple[str, ...]] = ()
    CONSTANTS_AT: ClassVar[Callable[[Site], dict[str, float]] | None] = None
    DEPTH_WARNING: ClassVar[tuple[int, str] | None] = None

    def __init__(
        self,
        f: nn.Module,
        make_norm: Callable[[], nn.Module],
        residual: bool = True,
        d_model: int | None = None,
        **constants,
    ):
        super().__init__()
        if set(constants) != set(self.CONSTANTS):
            raise TypeError(
                f"wrapping {self.name} takes the constants ({', '.join(self.CONSTANTS) or 'none'}), "
                f"got ({', '.join(sorted(constants)) or 'none'})"
            )
        self.f, self.residual = f, residual
        self.d_model = d_model if d_model is not None else _width(f)

    @classmethod
    def build(cls, f: nn.Module, make_norm: Callable[[], nn.Module], residual: bool, site: Site) -> Wrapping:
        """An instance for the sublayer ``f`` at ``site``, its constants computed for that site."""
        values = cls.CONSTANTS_AT(site) if cls.CONSTANTS_AT is not None else {}
        return cls(f, make_norm, residual, site.d_model, **values)

    @classmethod
    def final_norm_under_auto(cls, cfg: ModelConfig) -> bool:
        """Whether ``final_norm="auto"`` adds a final norm: yes unless the stream is renormalised."""
        return not cls.NORM_AFTER_ADD

    @classmethod
    def for_layer(cls, cfg: ModelConfig, layer: int, n_layers: int) -> type[Wrapping]:
        """The class that wraps the sublayers of ``layer`` (1-based) of an ``n_layers`` stack."""
        return cls

    @classmethod
    def formula_for(cls, residual: bool) -> str:
        """The formula, with the skip term dropped when the residual is off."""
        if residual:
            return cls.FORMULA
        lhs, rhs = cls.FORMULA.split(" = ", 1)
        return lhs + " = " + _SKIP_TERM.sub("", rhs, count=1)

    def skip(self, x: torch.Tensor):
        """The identity path, or 0 when this sublayer's residual is turned off."""
        return x if self.residual else 0

    def constant_values(self) -> dict[str, float]:
        """The current value of each declared constant (a learned one read from its parameter)."""
        return {}

    def init_branch(self) -> None:
        """Adjust the branch's initial weights after the weight scheme has run (DeepNorm's beta)."""


@register("post")
class PostLN(Wrapping):
    """x <- LN(x + F(x)): the original "Add & Norm" (Vaswani et al. 2017)."""

    FORMULA = "x = LN(x + F(x))"
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
        return self.norm(self.skip(x) + self.f(x, ctx))


@register("pre")
class PreLN(Wrapping):
    """x <- x + F(LN(x)): the norm inside the branch (Xiong et al. 2020; GPT-2, LLaMA)."""

    FORMULA = "x = x + F(LN(x))"
    SOURCE = "Xiong et al. 2020; GPT-2, LLaMA"
    NORM_IN = True

    def __init__(self, f, make_norm, residual=True, d_model=None):
        super().__init__(f, make_norm, residual, d_model)
        self.norm = make_norm()

    def forward(self, x, ctx):
        return self.skip(x) + self.f(self.norm(x), ctx)


@register("sandwich")
class SandwichLN(Wrapping):
    """x <- x + LN_out(F(LN_in(x))) (CogView Sandwich-LN; Peri-LN; Gemma 2/3)."""

    FORMULA = "x = x + LN(F(LN(x)))"
    SOURCE = "Ding et al. 2021, CogView; Peri-LN 2025; Gemma 2/3"
    NORM_IN = NORM_OUT = NEEDS_NORM = True

    def __init__(self, f, make_norm, residual=True, d_model=None):
        super().__init__(f, make_norm, residual, d_model)
        self.norm_in, self.norm_out = make_norm(), make_norm()

    def forward(self, x, ctx):
        return self.skip(x) + self.norm_out(self.f(self.norm_in(x), ctx))


@register("reorder")
class ReorderLN(Wrapping):
    """x <- x + LN(F(x)): normalise the update, not the stream (OLMo 2 "norm after")."""

    FORMULA = "x = x + LN(F(x))"
    SOURCE = "OLMo 2 2024, norm after"
    NORM_OUT = NEEDS_NORM = True

    def __init__(self, f, make_norm, residual=True, d_model=None):
        super().__init__(f, make_norm, residual, d_model)
        self.norm = make_norm()

    def forward(self, x, ctx):
        return self.skip(x) + self.norm(self.f(x, ctx))


@register("deepnorm")
class DeepNorm(Wrapping):
    """x <- LN(alpha * x + F(x)), with F's v/out/fc weights scaled by beta at init (Wang et al. 2022)."""

    FORMULA = "x = LN(alpha*x + F(x))"
    SOURCE = "Wang et al. 2022, DeepNet"
    NORM_AFTER_ADD = NEEDS_NORM = True
    CONSTANTS = ("alpha", "beta")
    CONSTANTS_AT = staticmethod(init.deepnorm_site_constants)

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
    """x <- x + a * F(x), a scalar a = 0 at init and no norm (Bachlechner et al. 2020)."""

    FORMULA = "x = x + a*F(x)"
    SOURCE = "Bachlechner et al. 2020, ReZero"
    USES_NORM = False
    CONSTANTS = ("a",)
    CONSTANTS_AT = staticmethod(init.rezero_site_constants)

    def __init__(self, f, make_norm, residual=True, d_model=None, **constants):
        super().__init__(f, make_norm, residual, d_model, **constants)
        self.a = nn.Parameter(torch.full((1,), float(constants["a"])))

    def forward(self, x, ctx):
        return self.skip(x) + self.a * self.f(x, ctx)

    def constant_values(self):
        return {"a": float(self.a.detach())}


@register("layerscale")
class LayerScale(Wrapping):
    """x <- x + diag(lambda) F(LN(x)), lambda per feature, small at init (CaiT, Touvron et al. 2021)."""

    FORMULA = "x = x + lambda*F(LN(x))"
    SOURCE = "Touvron et al. 2021, CaiT"
    NORM_IN = True
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
    """x <- x + F(LN(x) * 1/sqrt(l)), l = 1..L the layer index (Sun et al. 2025)."""

    FORMULA = "x = x + F(LN(x)/sqrt(l))"
    SOURCE = "Sun et al. 2025, LayerNorm Scaling"
    NORM_IN = NEEDS_NORM = True
    SCALED_RESIDUAL_INIT = False  # LayerNorm Scaling replaces GPT-2's depth-scaled init (not combined)
    CONSTANTS = ("scale",)
    CONSTANTS_AT = staticmethod(init.lns_site_constants)

    def __init__(self, f, make_norm, residual=True, d_model=None, **constants):
        super().__init__(f, make_norm, residual, d_model, **constants)
        self.norm, self.scale = make_norm(), constants["scale"]

    def forward(self, x, ctx):
        return self.skip(x) + self.f(self.norm(x) * self.scale, ctx)

    def constant_values(self):
        return {"scale": self.scale}


@register("mix")
class MixLN(Wrapping):
    """Post-LN for the bottom floor(mix_ratio * L) layers, pre-LN above (Li et al. 2024, Mix-LN).

    A choice per layer, not a formula of its own: :meth:`for_layer` returns :class:`PostLN` or
    :class:`PreLN`, and no MixLN module is ever built.
    """

    FORMULA = "post below floor(mix_ratio*L), pre above"
    SOURCE = "Li et al. 2024, Mix-LN"
    NEEDS_NORM = True

    def __init__(self, *args, **kwargs):
        raise TypeError("mix is resolved per layer (MixLN.for_layer gives post or pre); it has no module")

    @classmethod
    def for_layer(cls, cfg, layer, n_layers):
        return PostLN if layer <= math.floor(cfg.mix_ratio * n_layers) else PreLN

    @classmethod
    def final_norm_under_auto(cls, cfg):
        return cfg.mix_ratio < 1.0  # pre-LN layers on top leave the stream unnormalised


def _width(f: nn.Module) -> int | None:
    """The stream width a sublayer maps to (its output projection's size), when ``d_model`` is not given."""
    for name in ("out", "fc2"):
        m = getattr(f, name, None)
        if isinstance(m, nn.Linear):
            return m.out_features
    return None
