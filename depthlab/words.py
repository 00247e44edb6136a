"""How depthlab says a count (``1 run``, ``2 runs``) and the name nearest a typo, in words.

Every command's lines, the report, the views and a grid's refusals use them."""

from __future__ import annotations

import difflib


def plural(n: int, word: str) -> str:
    """``1 worker``, ``2 workers``, ``10,000 runs``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def nearest(name: str, known) -> str | None:
    """The name of ``known`` nearest a misspelt ``name`` (``--warmpu``: ``--warmup``), None when none is near
    (difflib's ratio of 0.6: a typo or two in a word of a few letters)."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6) if isinstance(name, str) else []
    return close[0] if close else None
