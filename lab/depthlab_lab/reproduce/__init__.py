"""Reproductions: each recomputes a claim of the source texts or the papers and checks it against what
was stated.

The claims are the modules of :mod:`depthlab_lab.reproduce.claims`, each registering its reproduction
(:func:`depthlab_lab.reproduce.reproduction.register`) when imported; the machinery they share sits beside
that folder (``reproduction`` what a claim is, ``registration`` its pinned expectations, ``lm_runs`` the
training runs, ``cost``, ``claim_plots``). Importing this package registers every claim. Expected outcomes
are written in each module before the run; the results are computed from what was measured.
"""

from __future__ import annotations

from collections.abc import Callable

from depthlab_lab.reproduce import claims  # noqa: F401  (importing it registers every claim)
from depthlab_lab.reproduce.reproduction import REGISTRATIONS, REPRODUCTIONS, Check, Reproduction, register


def load_all() -> dict[str, Callable[..., Reproduction]]:
    """The registry of every reproduction, by name."""
    return REPRODUCTIONS


__all__ = ["REGISTRATIONS", "REPRODUCTIONS", "Check", "Reproduction", "load_all", "register"]
