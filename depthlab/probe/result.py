"""``ProbeResult``: the per-stream numbers, the doctor's verdicts, the JSON of docs/design.md and a terminal table.

``layers[i]`` describes stream i (0 = entering layer 1, L = leaving layer L). Required keys (docs/design.md,
"Probe JSON"): index, grad_norm, stream_rms, update_ratio, cos_prev. Extra keys per row:

| key               | meaning                                                                          |
|-------------------|----------------------------------------------------------------------------------|
| angular_distance  | arccos(cos_prev) / pi (ShortGPT; Mix-LN): how far layer i turned the stream      |
| attn_grad_norm    | ||d loss / d theta|| over layer i's attention weights (Xiong et al. 2020, Fig. 3) |
| cross_grad_norm   | the same for cross-attention (encoder-decoder decoders only)                     |
| ffn_grad_norm     | the same for the feed-forward sublayer                                           |
| layer_grad_norm   | the same over every parameter of layer i (norm gains and scalars included)       |
| output_change     | ||x_i(W + dW) - x_i(W)|| / ||x_i(W)||, every block's weight matrices perturbed  |
|                   | by a fixed relative amount (Admin, Liu et al. 2020; DeepNet's "model update")    |
| jacobian_msv      | mean squared singular value of d x_L / d x_i (ReZero), or None if not estimated  |
| context_grad_norm | ||J_i^T C g_L||: the part of the top gradient that differs between positions,    |
|                   | carried down to stream i (LM loss only; see :func:`probe._context_grads`)        |
| token_cos         | mean cosine between distinct positions of stream i; 1 = rank collapse            |

Per-layer quantities (the *_grad_norm keys) are None in row 0, which no layer produced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from depthlab.jsonable import finite_or_none

REQUIRED = ("index", "grad_norm", "stream_rms", "update_ratio", "cos_prev")
BAR = 20


@dataclass
class ProbeResult:
    """config: {"model", "stack", "probe"} (see :func:`depthlab.probe.probe`); layers: one dict per
    stream; verdicts: [{"level", "code", "message"}]."""

    config: dict
    layers: list[dict]
    verdicts: list[dict] = field(default_factory=list)

    @property
    def n_layers(self) -> int:
        return len(self.layers) - 1

    def column(self, key: str) -> list:
        """One key of every row, as a list of length L+1."""
        return [row.get(key) for row in self.layers]

    @property
    def worst_level(self) -> str:
        """ "error", "warning" or "ok": the most severe verdict."""
        levels = {v["level"] for v in self.verdicts}
        return "error" if "error" in levels else "warning" if "warning" in levels else "ok"

    def to_dict(self) -> dict:
        """The Probe JSON of docs/design.md: exactly {"config", "layers", "verdicts"}; a non-finite number (an
        overflowing stream) becomes null, as JSON has no NaN."""
        return finite_or_none({"config": self.config, "layers": self.layers, "verdicts": self.verdicts})

    def format(self) -> str:
        """The header, a per-layer table with a log-scale bar of the gradient norm, and the verdicts."""
        return "\n".join([*self._header(), *self._table(), "", *format_verdicts(self.verdicts)])

    def _header(self) -> list[str]:
        st, pr = self.config["stack"], self.config["probe"]
        lines = [
            f"probe: {st['path']} ({st['kind']}), {self.n_layers} layers, streams of shape {pr['batch_shape']}; "
            f"loss {pr['loss']} = {pr['loss_value']:.4g}",
            f"final norm: {_yes(st['final_norm'])}   stream renormalised by each block: "
            f"{_yes(st['stream_normalised'])}   output change {_num(pr['output_change'])} under a relative "
            f"weight perturbation of {pr['perturbation']:g}"
            + (f" ({pr['output_change_note']})" if pr.get("output_change_note") else ""),
        ]
        lines += [f"{key}: {st[key]}" for key in ("wiring", "init") if st.get(key)]
        if pr.get("source"):
            lines.append(f"source: {pr['source']}")
        return lines + ([f"note: {st['note']}"] if st["note"] else [])

    def _table(self) -> list[str]:
        """Row i: index, grad_norm and its bar, then the columns of ``_columns`` (9 characters each)."""
        cols = self._columns()
        lines = [
            f"{'i':>4}  {'grad_norm':>9} {'(log scale)':<{BAR}}" + "".join(f"  {h:>9}" for h, _, _ in cols)
        ]
        for row, bar in zip(self.layers, log_bars(self.column("grad_norm"), BAR)):
            cells = "".join(f"  {fmt(row.get(key)):>9}" for _, key, fmt in cols)
            lines.append(f"{row['index']:>4}  {_num(row['grad_norm']):>9} {bar:<{BAR}}{cells}")
        return lines

    def _columns(self) -> list[tuple]:
        """(header, row key, formatter) of the table's columns after the bar."""
        cols = [
            ("ctx_grad", "context_grad_norm", _num),
            ("rms", "stream_rms", _num),
            ("update", "update_ratio", _num),
            ("cos", "cos_prev", _fix3),
            ("angle", "angular_distance", _fix3),
            ("tok_cos", "token_cos", _fix3),
        ]
        cols += [
            (f"{g}_grad", f"{g}_grad_norm", _num)
            for g in ("attn", "cross", "ffn")
            if f"{g}_grad_norm" in self.layers[-1]
        ]
        cols.append(("out_chg", "output_change", _num))
        if any(r.get("jacobian_msv") is not None for r in self.layers):
            cols.append(("jac_msv", "jacobian_msv", _num))
        return cols


def format_verdicts(verdicts: list[dict]) -> list[str]:
    """One line per verdict: LEVEL code: message (which ends in its cause, init or wiring, when known)."""
    return [f"{v['level'].upper():7} {v['code']}: {v['message']}" for v in verdicts]


def log_bars(values: list, width: int) -> list[str]:
    """A bar per value, its length the value's position between the smallest and largest on a log scale."""
    pos = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not pos:
        return ["" for _ in values]
    lo, hi = math.log10(min(pos)), math.log10(max(pos))
    span = hi - lo or 1.0
    out = []
    for v in values:
        if v is None or not math.isfinite(v) or v <= 0:
            out.append("?" if v is not None and not math.isfinite(v) else "")
            continue
        out.append("#" * max(1, round(1 + (width - 1) * (math.log10(v) - lo) / span)))
    return out


def _num(v) -> str:
    if v is None:
        return "-"
    if v == 0:
        return "0"
    return f"{v:.2e}"


def _fix3(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _yes(v) -> str:
    return {True: "yes", False: "no", None: "unknown"}[v]
