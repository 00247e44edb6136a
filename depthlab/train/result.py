"""RunResult: what one training run produced (the ``result.json`` fields, the curves and the data)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

RESULT_KEYS = (
    "outcome",
    "reason",
    "step",
    "final_train_loss",
    "val_loss",
    "val_bpb",
    "unigram_loss",
    "accuracy",
    "tokens_per_s",
)


@dataclass
class RunResult:
    """The outcome of :func:`depthlab.train.train`.

    outcome: "trained" | "stalled" | "diverged" (rules in :mod:`depthlab.train.outcome`); reason: why it
    stalled or diverged (None if trained); step: the update where that was decided (None if trained).
    final_train_loss: mean training loss (nats/token) over the last logging window; val_loss: at the
    end (nats/token); val_bpb: val_loss / ln 2 for byte-level lm (None otherwise); unigram_loss: the
    stalled reference level; accuracy: exact-match share of validation sequences for copy/reverse/sort
    (None for lm); tokens_per_s: input tokens per second of training (all processes, evaluation excluded).
    metrics: the records given to ``on_log`` (one per logged step); data_info: files and hash of the data;
    model: the trained module itself (in memory only; the reproductions measure it).
    """

    outcome: str
    reason: str | None
    step: int | None
    final_train_loss: float
    val_loss: float
    val_bpb: float | None
    unigram_loss: float | None
    accuracy: float | None
    tokens_per_s: float
    metrics: list[dict] = field(default_factory=list, repr=False)
    data_info: dict = field(default_factory=dict, repr=False)
    model: object = field(default=None, repr=False, compare=False)  # the trained nn.Module (not serialised)

    def to_dict(self) -> dict:
        """Exactly the ``result.json`` object (no metrics, no data info)."""
        return {k: getattr(self, k) for k in RESULT_KEYS}

    @classmethod
    def from_dict(
        cls, d: dict, metrics: list[dict] | None = None, data_info: dict | None = None
    ) -> RunResult:
        """Back from ``result.json`` (null losses become NaN: JSON stores a non-finite number as null)."""
        values = {k: d.get(k) for k in RESULT_KEYS}
        for k in ("final_train_loss", "val_loss", "tokens_per_s"):
            if values[k] is None:
                values[k] = math.nan
        return cls(**values, metrics=metrics or [], data_info=data_info or {})

    def summary(self) -> str:
        """One line: the outcome and the losses."""
        head = self.outcome + (f" at step {self.step}" if self.step is not None else "")
        parts = [f"train loss {self.final_train_loss:.3f}", f"val loss {self.val_loss:.3f}"]
        if self.val_bpb is not None:
            parts[-1] += f" ({self.val_bpb:.3f} bits/byte)"
        if self.accuracy is not None:
            parts.append(f"accuracy {self.accuracy:.1%}")
        if self.unigram_loss is not None:
            parts.append(f"unigram {self.unigram_loss:.3f}")
        parts.append(f"{self.tokens_per_s:,.0f} tokens/s")
        line = f"{head}: " + ", ".join(parts)
        return line + (f" -- {self.reason}" if self.reason else "")
