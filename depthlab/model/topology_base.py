"""What every residual topology's wrapping shares: it is built with its :class:`Site` (which carries the
``ModelConfig.topology`` options), knows which sublayer of its layer it wraps, and carries a state
(:mod:`depthlab.model.state`) instead of one stream. The designs are in :mod:`depthlab.model.hyper`,
:mod:`depthlab.model.aggregate` and :mod:`depthlab.model.value_residual`.
"""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from depthlab.errors import ConfigError
from depthlab.model.attention import Attention
from depthlab.model.wrapping_base import Site, Wrapping, with_multiplier

# What a sublayer computes that reads and writes the stream alone, as pre-LN (DenseFormer inside a block, a
# value residual's FFN): explain's row for it.
PRE_LN = "x = x + m*F(LN(x))"


class Topology(Wrapping):
    """A wrapping whose ``forward(state, ctx)`` reads the stack's residual state and writes it.

    Class attributes beyond a wrapping's: ``STATE`` (the state class), ``OPTIONS`` (the topology options
    it reads), ``READS``/``WRITES`` (the read and the write in words, for explain and the generated table),
    ``REFERENCES`` (implementations it is tested against, and where they depart from the paper).
    ``index`` is the sublayer's 0-based position among all residual sublayers of its stack, ``kind`` its
    kind ("attn", "cross", "ffn") and ``last`` whether it is its layer's last sublayer.
    """

    NORM_IN = NEEDS_NORM = True
    READS: ClassVar[str] = ""
    WRITES: ClassVar[str] = ""
    REFERENCES: ClassVar[str] = ""

    def __init__(self, f: nn.Module, make_norm, residual: bool, site: Site):
        super().__init__(f, make_norm, residual, site.d_model)
        self.kind = sublayer_kind(f)
        position = {"attn": 0, "cross": 1, "ffn": site.sublayers - 1}[self.kind]
        self.index = site.sublayers * (site.layer - 1) + position
        self.last = self.kind == "ffn"
        self.norm = make_norm()

    @classmethod
    def build(cls, f, make_norm, residual, site, branch_multiplier=1.0):
        w = cls(f, make_norm, residual, site)
        w.set_branch_multiplier(branch_multiplier)
        return w

    def pre_ln_formula(self) -> str:
        """pre-LN's formula at this sublayer's m (:data:`PRE_LN`)."""
        return with_multiplier(PRE_LN, self.branch_multiplier)

    @classmethod
    def extra_parameters(cls, cfg, n_layers: int, sublayers: int) -> int:
        """The parameters one stack of ``n_layers`` layers of ``sublayers`` sublayers has beyond pre-LN's
        (its mixing maps, reads, gates; counted without building it, at their most: the memory check)."""
        return 0

    @classmethod
    def extra_activations(cls, cfg, n_layers: int, sublayers: int, checkpointed: bool) -> int:
        """The floats per token one stack of ``n_layers`` layers keeps for backward beyond pre-LN's (the
        memory check): 0 unless its state or its reads keep more than one stream's worth."""
        return 0

    @classmethod
    def fixed_activations(cls, cfg, n_layers: int, sublayers: int, checkpointed: bool) -> int:
        """The floats one stack keeps for backward once, whatever the batch (a copy of a weight made in
        the forward): 0 unless the design makes one."""
        return 0

    @classmethod
    def check_config(cls, cfg) -> None:
        present = ("attn", "ffn") + (("cross",) if cfg.arch == "encdec" else ())
        if not all(cfg.has_residual(s) for s in present):
            why = f"every skip on with wrap={cfg.wrap}: its state replaces the skip of every sublayer"
            raise ConfigError("residual", cfg.residual, why)


def sublayer_kind(f: nn.Module) -> str:
    """ "attn", "cross" or "ffn": which sublayer ``f`` is."""
    if isinstance(f, Attention):
        return "cross" if f.cross else "attn"
    return "ffn"


def topology_summary(model: nn.Module) -> dict | None:
    """For explain: a topology's design, state, read and write, source, the options it reads, and its
    parameters beyond pre-LN's by name (summed over the sublayers and the stacks) with their total; None
    for a single stream."""
    stacks = [m for m in model.modules() if getattr(m, "state", None) is not None and hasattr(m, "layers")]
    if not stacks:
        return None
    cfg, cls = model.cfg, type(stacks[0].layers[0].attn)
    counts: dict[str, int] = {}
    for stack in stacks:
        for w in (m for m in stack.layers.modules() if isinstance(m, Topology)):
            for name, p in w.named_parameters():
                if not name.startswith(("f.", "norm.")):  # F and its pre-norm are pre-LN's own
                    counts[name] = counts.get(name, 0) + p.numel()
        for name, p in stack.state.named_parameters():
            counts[f"top.{name}"] = counts.get(f"top.{name}", 0) + p.numel()
    return {
        "design": cfg.wrap,
        "state": stacks[0].state.WORDS.format(n=cfg.topology.streams),
        "reads": cls.READS,
        "writes": cls.WRITES,
        "source": cls.SOURCE,
        "references": cls.REFERENCES,
        "options": {o: getattr(cfg.topology, o) for o in cls.OPTIONS},
        "extra_parameters": counts,
        "extra_total": sum(counts.values()),
    }
