"""How depthlab says a count in words: ``1 run``, ``2 runs`` (every command's lines, the report, the views)."""

from __future__ import annotations


def plural(n: int, word: str) -> str:
    """``1 worker``, ``2 workers``, ``10,000 runs``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"
