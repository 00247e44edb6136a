"""JSON has no NaN or Infinity: ``finite_or_none`` turns them into null before anything is written.

A diverged run or an overflowing stack produces non-finite numbers; Python's ``json`` would write them
as the non-standard tokens ``NaN``/``Infinity``, which strict parsers (and SQLite's JSON functions)
reject. Every JSON depthlab writes (probe, run files, the study store) goes through this.
"""

from __future__ import annotations

import math


def finite_or_none(obj):
    """``obj`` with every non-finite float replaced by None, recursively through dicts, lists and tuples
    (tuples become lists, as JSON would make them)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    return obj
