"""JSON helpers: strict values (``finite_or_none``) and the one stable digest of a JSON value (``digest``).

A diverged run or an overflowing stack produces non-finite numbers; Python's ``json`` would write them
as the non-standard tokens ``NaN``/``Infinity``, which strict parsers (and SQLite's JSON functions)
reject. Every JSON depthlab writes (probe, run files, the study store) goes through ``finite_or_none``.
Every key depthlab derives from a config (a config, a run, a study grid) is ``digest`` of a JSON value.
"""

from __future__ import annotations

import hashlib
import json
import math


def digest(obj) -> str:
    """16 hex digits of the SHA-256 of ``obj`` as canonical JSON (sorted keys, no spaces; values JSON
    cannot hold are written with ``str``)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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
