"""The names the lab's modules were registered under, before the lab moved out of the library.

Until that move, the reproductions lived in ``depthlab.reproduce``; every pin of their decision code
(lab/tests/registered_code.json, the revisions' "code.MODULE.NAME" keys) and every committed part's
module list names them so. The pins keep those names: a registration's values and digests are not
rewritten because a folder moved. :func:`registered_name` gives a module's name as registered;
:func:`actual_name` the module to import (either name is accepted), so that code of any commit, before
or after the move, is read and pinned under one name.
"""

from __future__ import annotations

# module prefix today -> the prefix it was registered under
MOVED = {"depthlab_lab.reproduce": "depthlab.reproduce"}


def _swap(module: str, table: dict[str, str]) -> str:
    for old, new in table.items():
        if module == old or module.startswith(old + "."):
            return new + module[len(old) :]
    return module


def registered_name(module: str) -> str:
    """``module`` under the name its code was registered with ("depthlab.reproduce.lm_runs")."""
    return _swap(module, MOVED)


def actual_name(module: str) -> str:
    """The module to import for ``module``, given under either name ("depthlab_lab.reproduce.lm_runs")."""
    return _swap(module, {v: k for k, v in MOVED.items()})
