"""RunResult: what one training run produced (the ``result.json`` fields, the curves and the data).

In a notebook a RunResult displays itself (its outcome, coloured, and the result.json fields);
``to_pandas()`` gives its logged steps and ``to_pandas("layers")`` its per-layer telemetry, with the
columns of ``FRAMES``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from depthlab.display import block, esc, para, state_badge, table
from depthlab.frames import check_table, to_frame
from depthlab.watch.keys import LAYER_KEYS

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
    "escape_step",
)
# The DataFrames of ``to_pandas(table)``: "metrics", one row per logged step (the metrics.jsonl keys
# but "layers"); "layers", one row per logged step and stream ("layer" = the stream index i: 0 enters
# layer 1, L leaves layer L), the telemetry keys of depthlab.watch.keys.
METRIC_KEYS = ("step", "loss", "lr", "grad_norm", "val_loss", "tokens_per_s")
FRAMES = {"metrics": METRIC_KEYS, "layers": ("step", "layer", *LAYER_KEYS)}


@dataclass
class RunResult:
    """The outcome of :func:`depthlab.train.train`.

    outcome: "trained" | "stalled" | "diverged" (rules in :mod:`depthlab.watch.outcome`); reason: why it
    stalled or diverged (None if trained); step: the update where that was decided (None if trained).
    final_train_loss: mean training loss (nats/token) over the last logging window; val_loss: at the
    end (nats/token); val_bpb: val_loss / ln 2 for byte-level lm (None otherwise); unigram_loss: the
    stalled reference level; accuracy: exact-match share of validation sequences for copy/reverse/sort
    (None for lm); tokens_per_s: input tokens per second of training (all processes, evaluation excluded);
    escape_step: the first logged step from which the loss stayed below the unigram band
    (:func:`depthlab.watch.outcome.escape_step`; None if it never left it, and in results written before).
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
    escape_step: int | None = None
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

    def to_pandas(self, table: str = "metrics"):
        """A DataFrame of ``table`` ("metrics": a row per logged step; "layers": a row per logged step
        and stream) with the columns of ``FRAMES[table]``; numbers are float64 (NaN where none)."""
        check_table(table, tuple(FRAMES))
        if table == "metrics":
            return to_frame(self.metrics, METRIC_KEYS, numeric=METRIC_KEYS[1:])
        rows = [
            {**row, "step": rec["step"], "layer": row["index"]}
            for rec in self.metrics
            for row in rec.get("layers") or []
        ]
        return to_frame(rows, FRAMES["layers"], numeric=LAYER_KEYS)

    def __repr__(self) -> str:
        last = f", {self.metrics[-1]['step']} steps" if self.metrics else ""
        return f"<RunResult {self.outcome}: val loss {self.val_loss:.4g}{last}>"

    def _repr_html_(self) -> str:
        """The outcome (coloured) and its reason, then the result.json fields as a table."""
        rows = [[esc(k), esc(_show(getattr(self, k)))] for k in RESULT_KEYS if k not in ("outcome", "reason")]
        steps = (
            f"{len(self.metrics)} logged steps, the last at step {self.metrics[-1]['step']}"
            if self.metrics
            else ""
        )
        files = self.data_info.get("files") or []
        data = f"data: {self.data_info.get('source', '?')}, {len(files)} files" if self.data_info else ""
        return block(
            "depthlab training run",
            f"<p>{state_badge(self.outcome)} {esc(self.reason or '')}</p>",
            table(["result", "value"], rows, num={1}),
            *(para(line, muted=True) for line in (steps, data) if line),
        )

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
        if self.unigram_loss is not None:
            parts.append(
                "training loss never stayed below the unigram band"
                if self.escape_step is None
                else f"training loss below the unigram band from step {self.escape_step}"
            )
        line = f"{head}: " + ", ".join(parts)
        return line + (f" -- {self.reason}" if self.reason else "")


def _show(value) -> str:
    """A result field as the display shows it: 4 significant digits for a float, "-" for None."""
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)
