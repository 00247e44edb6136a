"""``Verdict``: one finding of the doctor about a probed stack (:mod:`depthlab.doctor.checks`).

"Verdict" means this in depthlab and nothing else: a level, a code naming the phenomenon and a message
with the numbers behind it. In the Probe JSON (docs/design.md) each is the object ``to_dict`` returns.
"""

from __future__ import annotations

from dataclasses import dataclass

LEVELS = ("error", "warning", "ok")  # most severe first
CAUSES = ("init", "wiring")


@dataclass(frozen=True)
class Verdict:
    """level: one of ``LEVELS``; code: e.g. "vanishing-gradient"; message: the finding in one short
    sentence, the number a reader acts on first; detail: how it was measured and calibrated ("" when the
    message says it all); cause: "init" or "wiring" once :func:`depthlab.probe.from_config.attribute_to_init` has
    told them apart (None before, and for ok verdicts)."""

    level: str
    code: str
    message: str
    cause: str | None = None
    detail: str = ""

    def __post_init__(self):
        if self.level not in LEVELS:
            raise ValueError(f"verdict level {self.level!r} is not one of {LEVELS}")
        if self.cause is not None and self.cause not in CAUSES:
            raise ValueError(f"verdict cause {self.cause!r} is not one of {CAUSES}")

    @property
    def severity(self) -> int:
        """0 for an error, 1 for a warning, 2 for ok: the doctor's sort key."""
        return LEVELS.index(self.level)

    @property
    def summary(self) -> str:
        """The verdict in a summary cell: "warning stream-growth" (level, then code); "ok" alone for the
        all-clear verdict, whose code is its level (never "ok ok")."""
        return self.level if self.code == self.level else f"{self.level} {self.code}"

    def to_dict(self) -> dict:
        """{"level", "code", "message"}, and "cause" when it is known: the Probe JSON's verdict."""
        d = {"level": self.level, "code": self.code, "message": self.message}
        if self.cause is not None:
            d["cause"] = self.cause
        if self.detail:
            d["detail"] = self.detail
        return d
