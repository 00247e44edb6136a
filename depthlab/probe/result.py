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

A residual topology (hyper-connections, DenseFormer, ...) adds the keys of :mod:`depthlab.probe.topology`
(composite_gain, composite_gain_back, h_res_distance, contribution, aggregation_entropy, effective_depth)
and ``config["stack"]["state"]``: the state and how one stream per boundary is reported.

Per-layer quantities (the *_grad_norm keys) are None in row 0, which no layer produced.

The table's column headers are these keys. Its gradient bar is on a fixed log scale: the largest
gradient draws the full bar of ``BAR`` = 20 characters and every ``PER_DECADE`` = 4 characters fewer is
a factor of 10 smaller (the header says "4# = 10x"), so equal values draw equal bars and a 1.1x spread
draws bars within one character of each other, whatever the spread of the column; a value more than 4.9 decades below
the largest draws "<" (off the scale).

In a notebook a ProbeResult displays itself (the table with its gradient bars and the verdicts, coloured
by level); ``to_pandas()`` gives the rows as a DataFrame with the columns of ``FRAMES["layers"]`` (every
key above, "index" named "layer", NaN where a row lacks it), ``to_pandas("verdicts")`` the verdicts; ``figure()`` draws the
gradient and stream-rms profiles (a matplotlib Figure).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

from depthlab.display import bar as html_bar
from depthlab.display import block, esc, level_badge, para, table
from depthlab.doctor.verdict import Verdict
from depthlab.frames import check_table, to_frame
from depthlab.jsonable import finite_or_none
from depthlab.probe.plot import probe_figure
from depthlab.probe.topology import KEYS as TOPOLOGY_KEYS

REQUIRED = ("index", "grad_norm", "stream_rms", "update_ratio", "cos_prev")
EXTRA = (
    "angular_distance",
    "attn_grad_norm",
    "cross_grad_norm",
    "ffn_grad_norm",
    "layer_grad_norm",
    "output_change",
    "jacobian_msv",
    "context_grad_norm",
    "token_cos",
    *TOPOLOGY_KEYS,
)
# The DataFrames of ``to_pandas(table)``: their columns, in order. "layers": one row per stream, the
# keys documented above, "index" named "layer" (as in every depthlab frame; a DataFrame's own index is
# another thing); "verdicts": one row per verdict.
FRAMES = {"layers": ("layer", *REQUIRED[1:], *EXTRA), "verdicts": ("level", "code", "message")}
BAR = 20  # characters of the largest gradient's bar
PER_DECADE = 4  # characters per factor of 10: the bar spans BAR / PER_DECADE = 5 decades
BAR_HEADER = f"log scale: {PER_DECADE}# = 10x"
HTML_BAR_HEADER = f"log scale: {BAR // PER_DECADE} decades"


@dataclass
class ProbeResult:
    """config: {"model", "stack", "probe"} (see :func:`depthlab.probe.forward_backward`); layers: one dict per
    stream; verdicts: the doctor's :class:`~depthlab.doctor.verdict.Verdict` s, most severe first."""

    config: dict
    layers: list[dict]
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def n_layers(self) -> int:
        return len(self.layers) - 1

    def column(self, key: str) -> list:
        """One key of every row, as a list of length L+1."""
        return [row.get(key) for row in self.layers]

    @property
    def worst_level(self) -> str:
        """ "error", "warning" or "ok": the most severe verdict."""
        levels = {v.level for v in self.verdicts}
        return "error" if "error" in levels else "warning" if "warning" in levels else "ok"

    def to_dict(self) -> dict:
        """The Probe JSON of docs/design.md: exactly {"config", "layers", "verdicts"}; a non-finite number (an
        overflowing stream) becomes null, as JSON has no NaN."""
        verdicts = [v.to_dict() for v in self.verdicts]
        return finite_or_none({"config": self.config, "layers": self.layers, "verdicts": verdicts})

    def format(self) -> str:
        """The header, a per-layer table with a log-scale bar of the gradient norm, the verdicts, and the
        calibrated call where one was made (:meth:`expected_line`)."""
        expected = self.expected_line()
        return "\n".join(
            [
                *self._header(),
                *self._table(),
                "",
                *format_verdicts(self.verdicts),
                *([expected] if expected else []),
            ]
        )

    def expected_line(self) -> str | None:
        """The calibrated call on the run (``config["probe"]["expected"]``, written by
        :func:`depthlab.advise.advice.expect`), as one line; None where none was made."""
        e = self.config["probe"].get("expected")
        if not e:
            return None
        sure = e.get("against_limit", "") + (
            "" if e["confident"] else f"; not confident: {e['why_not_confident']}"
        )
        runs = (
            f"and the {e['nearest_runs']} nearest measured runs; depthlab advise shows them"
            if e["nearest_runs"]
            else "alone: no measured run of this stack sets the same"
        )
        sets = f" ({e['recipe']})" if e.get("recipe") else ""
        return (
            f"expected at {e['steps']:,} steps{sets}: {e['said']} (P(trains) = {e['p_trains']:.2f}, from the limit "
            f"above {runs}){sure}"
        )

    def to_pandas(self, table: str = "layers"):
        """A DataFrame of ``table`` ("layers": a row per stream; "verdicts": a row per verdict) with
        the columns of ``FRAMES[table]``; numbers are float64 (NaN where a row has none)."""
        check_table(table, tuple(FRAMES))
        if table == "verdicts":
            return to_frame([v.to_dict() for v in self.verdicts], FRAMES["verdicts"])
        return to_frame(self.rows(), FRAMES["layers"], numeric=FRAMES["layers"][1:])

    def rows(self) -> list[dict]:
        """The rows of ``layers`` as the frames name them: "index" as "layer"."""
        return [{**row, "layer": row["index"]} for row in self.layers]

    def figure(self, label: str = "probe", title: str = "", axes=None):
        """The gradient, position-varying gradient and stream rms by depth (see
        :func:`depthlab.probe.plot.probe_figure`; ``axes``: three Axes to draw into). Returns the Figure."""
        return probe_figure([(label, self)], title=title, axes=axes)

    def __repr__(self) -> str:
        st = self.config.get("stack", {})
        codes = ", ".join(f"{v.level} {v.code}" for v in self.verdicts) or "no verdicts"
        return f"<ProbeResult {st.get('path', '?')}: {self.n_layers} layers; {codes}>"

    def _repr_html_(self) -> str:
        """The header, the per-stream table with a bar for the gradient (log scale), the verdicts."""
        cols = self._columns()
        head = ["index", "grad_norm", HTML_BAR_HEADER, *(key for key, _ in cols)]
        rows = [
            [str(row["index"]), _num(row["grad_norm"]), _bar_html(pos)]
            + [esc(fmt(row.get(key))) for key, fmt in cols]
            for row, pos in zip(self.layers, log_fractions(self.column("grad_norm")))
        ]
        return block(
            "depthlab probe",
            *(para(line) for line in self._header()),
            table(head, rows, num={0, 1, *range(3, len(head))}),
            verdicts_html(self.verdicts),
        )

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
        lines += [f"{key}: {st[key]}" for key in ("wiring", "init", "parametrization") if st.get(key)]
        if pr.get("source"):
            lines.append(f"source: {pr['source']}")
        if pr.get("batch"):
            lines.append(f"batch: {pr['batch']}")
        lines += [f"blind spot: {gap}" for gap in st.get("blind_spots") or []]
        if st.get("state"):
            state = st["state"]
            lines.append(
                f"residual state ({state['design']}): {state['state']}; each row reports {state['reported']}"
            )
            if state.get("sinkhorn_error") is not None:
                lines.append(
                    f"Sinkhorn-Knopp: H_res rows and columns off 1 by at most {state['sinkhorn_error']:.1e}"
                )
        return lines + ([f"note: {st['note']}"] if st["note"] else [])

    def _table(self) -> list[str]:
        """Row i: index, grad_norm and its bar, then the columns of ``_columns``, each headed by its row
        key (as wide as the key, at least 9 characters)."""
        cols = [(key, fmt, max(9, len(key))) for key, fmt in self._columns()]
        lines = [
            f"{'index':>5}  {'grad_norm':>9} {BAR_HEADER:<{BAR}}" + "".join(f"  {k:>{w}}" for k, _, w in cols)
        ]
        for row, bar in zip(self.layers, log_bars(self.column("grad_norm"))):
            cells = "".join(f"  {fmt(row.get(key)):>{w}}" for key, fmt, w in cols)
            lines.append(f"{row['index']:>5}  {_num(row['grad_norm']):>9} {bar:<{BAR}}{cells}")
        return lines

    def _columns(self) -> list[tuple]:
        """(row key, formatter) of the table's columns after the bar; the key is the column's header."""
        cols = [
            ("context_grad_norm", _num),
            ("stream_rms", _num),
            ("update_ratio", _num),
            ("cos_prev", _fix3),
            ("angular_distance", _fix3),
            ("token_cos", _fix3),
        ]
        cols += [
            (f"{g}_grad_norm", _num) for g in ("attn", "cross", "ffn") if f"{g}_grad_norm" in self.layers[-1]
        ]
        cols.append(("output_change", _num))
        if any(r.get("jacobian_msv") is not None for r in self.layers):
            cols.append(("jacobian_msv", _num))
        shown = {
            "composite_gain": _num,
            "composite_gain_back": _num,
            "contribution": _num,
            "effective_depth": _fix3,
        }
        cols += [(k, fmt) for k, fmt in shown.items() if any(r.get(k) is not None for r in self.layers)]
        return cols


def format_verdicts(verdicts: list[Verdict]) -> list[str]:
    """Per verdict: LEVEL code: message (which ends in its cause, init or wiring, when known), then its
    detail, if any, indented below it."""
    lines = []
    for v in verdicts:
        lines.append(f"{v.level.upper():7} {v.code}: {v.message}")
        if v.detail:
            lines += textwrap.wrap(v.detail, 110, initial_indent=" " * 8, subsequent_indent=" " * 8)
    return lines


def verdicts_html(verdicts: list[Verdict]) -> str:
    """One paragraph per verdict: its level as a coloured badge, its code, its message (escaped)."""
    return "".join(
        f"<p>{level_badge(v.level)} <b>{esc(v.code)}</b>: {esc(v.message)}"
        + (f"<br><small>{esc(v.detail)}</small>" if v.detail else "")
        + "</p>"
        for v in verdicts
    )


def log_fractions(values: list) -> list[float | None]:
    """Each value's bar as a fraction of the full bar, on the fixed log scale of the module docstring:
    1 for the largest positive value, 1 - d / (BAR / PER_DECADE) for a value d decades below it (below 0
    off the scale); None for a missing or non-positive value, NaN for a non-finite one (all None when no
    value is a positive number)."""
    pos = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not pos:
        return [None for _ in values]
    top, span = math.log10(max(pos)), BAR / PER_DECADE
    out: list[float | None] = []
    for v in values:
        if v is not None and not math.isfinite(v):
            out.append(math.nan)
        elif v is None or v <= 0:
            out.append(None)
        else:
            out.append(1 - (top - math.log10(v)) / span)
    return out


def log_bars(values: list) -> list[str]:
    """A text bar per value: ``PER_DECADE`` "#" per decade, ``BAR`` for the largest value; "<" for a
    value off the scale, "?" for a non-finite one, "" for a missing one."""
    out = []
    for f in log_fractions(values):
        n = None if f is None or math.isnan(f) else round(f * BAR)
        out.append("" if f is None else "?" if n is None else "<" if n < 1 else "#" * n)
    return out


def _bar_html(fraction: float | None) -> str:
    """The HTML bar of a log fraction (at least a sliver, as the text bar has one character); "?" for NaN."""
    if fraction is None:
        return ""
    return "?" if math.isnan(fraction) else html_bar(max(0.02, fraction))


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
