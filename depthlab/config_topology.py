"""The options of the residual topologies: ``ModelConfig.topology``.

A residual topology (:mod:`depthlab.model.state`) is chosen by ``wrap`` like any wrapping (``hc``,
``mhc``, ``denseformer``, ...); these are its shape and its numerics. Like the family options they are
named flat wherever a person writes them (``streams: 8`` in a grid, ``--streams 8``,
``cfg.replace(streams=8)``), and each is refused away from its default unless the chosen wrapping reads
it (the class declares ``OPTIONS``), so a flag that would silently do nothing is one line on stderr.
Added after the first release, they join a config's key only when set: every existing run key holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from depthlab.config_base import ConfigBase
from depthlab.errors import ConfigError


@dataclass(frozen=True)
class TopologyOptions(ConfigBase):
    """n streams (or m fractions), the Sinkhorn-Knopp projection, Block AttnRes's blocks, DenseFormer's
    connection pattern."""

    streams: int = 4  # hc, dhc, mhc: n copies of the stream; frac: m fractions of it
    sinkhorn_iters: int = 20  # mhc: Sinkhorn-Knopp iterations at most (t_max = 20 in Xie et al.)
    sinkhorn_tol: float = 0.0  # mhc: stop once every column sums to 1 within this; 0 = run all iterations
    attnres_blocks: int = 8  # attnres_block: N blocks of sublayers (Kimi Team: ~8)
    dwa_dilation: int = 1  # denseformer: average every k-th earlier output (Pagliardini et al.: k)
    dwa_period: int = 1  # denseformer: an average after every p-th block only (p)

    def __post_init__(self):
        self._check_int("streams", low=1, high=64)
        self._check_int("sinkhorn_iters", low=1, high=1000)
        self._check_float("sinkhorn_tol", 0.0, 0.1)
        self._check_int("attnres_blocks", low=1)
        self._check_int("dwa_dilation", low=1)
        self._check_int("dwa_period", low=1)

    def check_for(self, wrap: str, wrappings: dict, names: tuple[str, ...] | None = None) -> None:
        """ConfigError for an option set away from its default that ``wrap`` does not read (each class
        of ``wrappings``, the registry, lists the options it reads in ``OPTIONS``); ``names``: these
        options whatever their values (flags the user gave)."""
        for f in fields(self):
            if names is not None and f.name not in names:
                continue
            value = getattr(self, f.name)
            if f.name not in wrappings[wrap].OPTIONS and (names is not None or not _same(value, f.default)):
                who = ", ".join(n for n, c in wrappings.items() if f.name in c.OPTIONS)
                raise ConfigError(
                    f.name,
                    value,
                    f"to be left unset with wrap={wrap}, which does not read it (read by {who})",
                )


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b))
