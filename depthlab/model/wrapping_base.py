"""The base of every wrapping: where a sublayer sits (:class:`Site`), the registry decorator, what a
wrap name declares for the whole model (:class:`Declaration`) and the module that wraps one sublayer
(:class:`Wrapping`), which each declaration in :mod:`depthlab.model.wrappings` fills in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from depthlab.config import WRAPPINGS, ModelConfig
from depthlab.config_topology import TopologyOptions


@dataclass(frozen=True)
class Site:
    """Where one wrapped sublayer sits: what its depth-dependent constants are computed from.

    ``side`` is "encoder" or "decoder"; ``layer`` is 1-based within its side, ``n_layers`` that side's
    depth; ``n_enc``/``n_dec`` the model's two depths (0 for a missing side); ``sublayers`` the residual
    sublayers per layer (2, or 3 in an encoder-decoder's decoder); ``topology`` the config's topology
    options (what a residual topology's wrapping reads: :mod:`depthlab.model.topology_base`).
    """

    arch: str
    side: str
    layer: int
    n_layers: int
    n_enc: int
    n_dec: int
    sublayers: int
    d_model: int
    topology: TopologyOptions = TopologyOptions()


_SKIP_TERM = re.compile(r"(\w+\*)?x \+ ")  # "x + " or "alpha*x + ": the skip term of a formula
_M_FACTOR = re.compile(r"\bm\*")  # "m*": the branch multiplier's factor in a formula


def with_multiplier(formula: str, multiplier: float) -> str:
    """``formula`` as it reads at the branch multiplier: its "m*" dropped where m is 1 (sp)."""
    return formula if multiplier != 1.0 else _M_FACTOR.sub("", formula)


def register(name: str):
    """Class decorator: declare a wrapping under ``name`` (the value of ``ModelConfig.wrap``)."""

    def deco(cls):
        cls.name = name
        WRAPPINGS[name] = cls
        return cls

    return deco


class Declaration:
    """What a wrap name declares for the whole model, read before any module is built: by config
    validation, explain's warnings, the weight init and the final-norm rule. Every :class:`Wrapping`
    is one; Mix-LN, a choice of wrapping per layer, is one and nothing more (no module)."""

    name: ClassVar[str] = "?"
    FORMULA: ClassVar[str] = ""
    SOURCE: ClassVar[str] = ""
    NEEDS_NORM: ClassVar[bool] = False
    USES_NORM: ClassVar[bool] = True
    SCALED_RESIDUAL_INIT: ClassVar[bool] = True
    DEPTH_WARNING: ClassVar[tuple[int, str] | None] = None
    DEPTH_RULE_REFUSED: ClassVar[str | None] = None
    OPTIONS: ClassVar[tuple[str, ...]] = ()  # the ModelConfig.topology options it reads
    STATE: ClassVar[type | None] = None  # the residual state the stack carries (None: one stream)

    @classmethod
    def for_layer(cls, cfg: ModelConfig, layer: int, n_layers: int) -> type[Wrapping]:
        """The class that wraps the sublayers of ``layer`` (1-based) of an ``n_layers`` stack: this
        class itself, for a wrapping that is one formula."""
        return cls

    @classmethod
    def final_norm_under_auto(cls, cfg: ModelConfig) -> bool:
        """Whether ``final_norm="auto"`` adds a final norm; yes unless a declaration says otherwise."""
        return True

    @classmethod
    def formula_at(cls, multiplier: float = 1.0) -> str:
        """FORMULA with the branch multiplier's "m*" dropped when it is 1 (sp): "x = x + m*F(LN(x))"
        reads "x = x + F(LN(x))" under sp."""
        return with_multiplier(cls.FORMULA, multiplier)

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        """Raise ConfigError for a config this wrapping cannot build (beyond NEEDS_NORM); most accept all."""


class Wrapping(Declaration, nn.Module):
    """A sublayer ``f`` in its wrapping, whose ``forward(x, ctx)`` is the formula. Holds ``f`` and
    whether its skip connection is on; checks the constants.

    The branch multiplier m of a parametrization (:mod:`depthlab.model.parametrization`) enters where
    the formula shows it: each ``forward`` (or ``branch``) applies :meth:`times_m` to the output of the
    module named by ``BRANCH_END``, which is the branch's last step. ``m`` is the plain float
    ``branch_multiplier``, 1 under sp; it is not in the state dict. A wrapping whose own constants set
    the skip-to-branch ratio by depth declares ``DEPTH_RULE_REFUSED`` (why) and no branch end.

    The block combines its sublayers in the form the class declares: one after the other, or, with
    ``PARALLEL``, all reading the same stream, the block adding one skip and each sublayer's
    ``branch(x, ctx)`` (the formula's term without the skip); with ``SHARED_NORM`` the block also holds
    the one norm they all read (:class:`depthlab.model.layers.Block`).

    ``constants`` passed to ``__init__`` must be exactly the names the class declares (a misspelt or
    missing constant is a TypeError, never silently ignored).
    """

    BRANCH_END: ClassVar[str | None] = None
    NORM_IN: ClassVar[bool] = False
    NORM_OUT: ClassVar[bool] = False
    NORM_AFTER_ADD: ClassVar[bool] = False
    PARALLEL: ClassVar[bool] = False
    SHARED_NORM: ClassVar[bool] = False
    CONSTANTS: ClassVar[tuple[str, ...]] = ()
    CONSTANTS_AT: ClassVar[Callable[[Site], dict[str, float]] | None] = None

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
        self.branch_multiplier = 1.0

    @classmethod
    def build(
        cls,
        f: nn.Module,
        make_norm: Callable[[], nn.Module],
        residual: bool,
        site: Site,
        branch_multiplier: float = 1.0,
    ) -> Wrapping:
        """An instance for the sublayer ``f`` at ``site``, its constants computed for that site and its
        branch multiplied by ``branch_multiplier`` (:meth:`set_branch_multiplier`)."""
        values = cls.CONSTANTS_AT(site) if cls.CONSTANTS_AT is not None else {}
        w = cls(f, make_norm, residual, site.d_model, **values)
        w.set_branch_multiplier(branch_multiplier)
        return w

    def set_branch_multiplier(self, m: float) -> None:
        """Multiply the branch by ``m`` from now on. ValueError for m != 1 on a wrapping that refuses a
        depth rule or declares no branch end (config validation refuses those configs first)."""
        if m != 1.0 and (self.DEPTH_RULE_REFUSED or self.BRANCH_END is None):
            why = self.DEPTH_RULE_REFUSED or "it declares no BRANCH_END"
            raise ValueError(f"wrapping {self.name} takes no branch multiplier: {why}")
        self.branch_multiplier = float(m)

    def times_m(self, y: torch.Tensor) -> torch.Tensor:
        """m y, the branch times its multiplier; ``y`` itself at m = 1, so that sp computes exactly what
        it computed before parametrizations, with no extra pass."""
        return y if self.branch_multiplier == 1.0 else y * self.branch_multiplier

    def branch_end(self) -> nn.Module:
        """The module whose output m multiplies (``BRANCH_END``): F, or the norm after F."""
        if self.BRANCH_END is None:
            raise ValueError(f"wrapping {self.name} declares no BRANCH_END")
        return getattr(self, self.BRANCH_END)

    @classmethod
    def final_norm_under_auto(cls, cfg: ModelConfig) -> bool:
        """Whether ``final_norm="auto"`` adds a final norm: yes unless the stream is renormalised."""
        return not cls.NORM_AFTER_ADD

    @classmethod
    def formula_for(cls, residual: bool, multiplier: float = 1.0) -> str:
        """The formula at ``multiplier`` (:meth:`formula_at`), with the skip term dropped when the
        residual is off."""
        formula = cls.formula_at(multiplier)
        if residual:
            return formula
        lhs, rhs = formula.split(" = ", 1)
        return lhs + " = " + _SKIP_TERM.sub("", rhs, count=1)

    def formula(self) -> str:
        """What this sublayer computes, as explain's row for it reads: :meth:`formula_for` at its own skip
        and m (a topology whose sublayers differ says what each one does)."""
        return self.formula_for(self.residual, self.branch_multiplier)

    def skip(self, x: torch.Tensor):
        """The identity path, or 0 when this sublayer's residual is turned off."""
        return x if self.residual else 0

    def constant_values(self) -> dict[str, float]:
        """The current value of each declared constant (a learned one read from its parameter)."""
        return {}

    def init_branch(self) -> None:
        """Adjust the branch's initial weights after the weight scheme has run (DeepNorm's beta)."""


def _width(f: nn.Module) -> int | None:
    """The stream width a sublayer maps to (its output projection's size), when ``d_model`` is not given."""
    for name in ("out", "fc2"):
        m = getattr(f, name, None)
        if isinstance(m, nn.Linear):
            return m.out_features
    return None
