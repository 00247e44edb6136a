"""The claims: one module per reproduced claim, each registering its :class:`Reproduction` on import.

A claim module is the claim's registration (what was expected, fixed before its runs), a function that
measures, and the checks that compare the two (:mod:`depthlab_lab.reproduce.reproduction`). The smallest,
:mod:`depthlab_lab.reproduce.claims.depth`, is the template. A new claim is a new module here: this package
imports every module it holds, so the claim's name is written once, in its ``register`` call.
"""

from __future__ import annotations

import importlib
import pkgutil

CLAIM_MODULES = tuple(
    importlib.import_module(f"{__name__}.{m.name}")
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
)
