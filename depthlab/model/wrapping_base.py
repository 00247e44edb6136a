"""The base of every wrapping: where a sublayer sits (:class:`Site`), the registry decorator and the
:class:`Wrapping` protocol that each declaration in :mod:`depthlab.model.wrappings` fills in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from depthlab.config import WRAPPINGS, ModelConfig


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
    def check_config(cls, cfg: ModelConfig) -> None:
        """Raise ConfigError for a config this wrapping cannot build (beyond NEEDS_NORM); most accept all."""

    @classmethod
    def block_norm(cls, make_norm: Callable[[], nn.Module]) -> nn.Module | None:
        """A norm the block holds and every sublayer reads (the shared-norm parallel form); None here."""
        return None

    def run_block(self, block: nn.Module, x: torch.Tensor, ctx) -> torch.Tensor:
        """One layer: the block's wrapped sublayers applied one after the other (x -> attn -> cross -> ffn).
        Called on the block's first wrapping (every sublayer of a layer has the same wrapping)."""
        for w in block.sublayers().values():
            x = w(x, ctx)
        return x

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


def _width(f: nn.Module) -> int | None:
    """The stream width a sublayer maps to (its output projection's size), when ``d_model`` is not given."""
    for name in ("out", "fc2"):
        m = getattr(f, name, None)
        if isinstance(m, nn.Linear):
            return m.out_features
    return None
