"""A claim and its reproduction: what was stated, what depthlab measured, and whether they agree.

A reproduction is a function ``fn(quick: bool = False, out_dir: str | None = None) -> Reproduction``,
registered by name with :func:`register`; ``depthlab reproduce NAME`` runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Check:
    """One claim: what the source states (or expects), what depthlab measured, and whether they agree."""

    claim: str
    stated: str
    measured: str
    ok: bool

    def to_dict(self) -> dict:
        return {"claim": self.claim, "stated": self.stated, "measured": self.measured, "ok": bool(self.ok)}


@dataclass
class Reproduction:
    """The measured data (a JSON-able dict), the checks, and the paths of any plots written."""

    name: str
    data: dict
    checks: list[Check]
    plots: list[str] = field(default_factory=list)
    source: str = ""

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_dict(self) -> dict:
        return {**self.data, "checks": [c.to_dict() for c in self.checks]}

    def format(self) -> str:
        """A claim / stated / measured / verdict table."""
        w1 = max([len(c.claim) for c in self.checks] + [5])
        w2 = max([len(c.stated) for c in self.checks] + [6])
        w3 = max([len(c.measured) for c in self.checks] + [8])
        lines = [
            f"{self.name}" + (f"  ({self.source})" if self.source else ""),
            f"  {'claim':<{w1}}  {'stated':<{w2}}  {'measured':<{w3}}  verdict",
        ]
        for c in self.checks:
            lines.append(
                f"  {c.claim:<{w1}}  {c.stated:<{w2}}  {c.measured:<{w3}}  {'ok' if c.ok else 'MISMATCH'}"
            )
        lines += [f"  plot: {p}" for p in self.plots]
        return "\n".join(lines)


REPRODUCTIONS: dict[str, Callable[..., Reproduction]] = {}


def register(name: str):
    """Decorator: add a reproduction function under ``name``."""

    def deco(fn):
        REPRODUCTIONS[name] = fn
        return fn

    return deco
