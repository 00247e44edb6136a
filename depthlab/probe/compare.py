"""Several probes side by side: one line each (bottom/top gradient ratios, stream growth, verdicts).

from depthlab.probe.compare import compare
c = compare([("post", cfg_post), ("pre", cfg_pre)], batch_size=8, seq_len=64)
print(c.format()); c.to_dict(); c.plot("compare.png")
c.figure(); c.to_pandas(); c.to_pandas("summary")   # a matplotlib Figure; DataFrames (in a notebook)
"""

from __future__ import annotations

from dataclasses import dataclass

from depthlab.config import ModelConfig
from depthlab.display import block, esc, level_badge, table
from depthlab.doctor.checks import ratios
from depthlab.doctor.lr_limit import limit_of
from depthlab.frames import check_table, to_frame
from depthlab.paths import save_figure
from depthlab.probe.from_config import probe_config
from depthlab.probe.plot import probe_figure
from depthlab.probe.result import FRAMES as PROBE_FRAMES
from depthlab.probe.result import ProbeResult, format_verdicts, verdicts_html
from depthlab.progress import Progress

# The DataFrames of ``Comparison.to_pandas(table)``: "layers" and "verdicts" are the probe's own tables
# (depthlab.probe.result.FRAMES) with the probe's label first; "summary" has a row per probe:
# g0_gL = grad_norm at stream 0 / at stream L, ctx0_ctxL the same for context_grad_norm (NaN without
# it), rms_growth = stream_rms at L / at 0, safe_lr = the largest lr within the doctor's limit for this
# stack and warmup (NaN when the probe was given no lr: depthlab.doctor.lr_limit.limit_of, the number the
# verdict, advise and the docs quote), p_trains = the calibrated probability that the run trains (NaN
# unless depthlab.advise.advice.expect made the call: advise's number), level = the worst verdict level,
# verdicts = "level code, ...".
FRAMES = {
    "layers": ("label", *PROBE_FRAMES["layers"]),
    "verdicts": ("label", *PROBE_FRAMES["verdicts"]),
    "summary": ("label", "g0_gL", "ctx0_ctxL", "rms_growth", "safe_lr", "p_trains", "level", "verdicts"),
}


@dataclass
class Comparison:
    """(label, ProbeResult) pairs, in the order they were probed."""

    runs: list[tuple[str, ProbeResult]]

    def to_dict(self) -> list[dict]:
        """A list of Probe JSON objects (each exactly ``ProbeResult.to_dict()``)."""
        return [r.to_dict() for _, r in self.runs]

    def summary(self) -> list[dict]:
        """A dict per probe with the keys of ``FRAMES["summary"]`` (None for a ratio that has no value)."""
        out = []
        for label, r in self.runs:
            g, c, rms = (
                ratios(r.column("grad_norm")),
                ratios(r.column("context_grad_norm")),
                r.column("stream_rms"),
            )
            found = limit_of(r) if r.config["probe"].get("lr") is not None else None
            out.append(
                {
                    "label": label,
                    "g0_gL": None if g is None else g[0],
                    "ctx0_ctxL": None if c is None else c[0],
                    "rms_growth": rms[-1] / rms[0] if rms[0] else float("inf"),
                    "safe_lr": None if found is None else found[0].lr_limit,
                    "p_trains": (r.config["probe"].get("expected") or {}).get("p_trains"),
                    "level": r.worst_level,
                    "verdicts": ", ".join(v.summary for v in r.verdicts),
                }
            )
        return out

    def format(self) -> str:
        """A line per probe under the summary's keys (g0_gL = g0/gL, ctx0_ctxL = ctx0/ctxL, rms_growth =
        rmsL/rms0, a residual topology's composite gain at the top gain_L, the verdict codes), then each
        probe's verdicts."""
        w = max(len(label) for label, _ in self.runs) + 2
        rows = self.summary()
        lr = any(s["safe_lr"] is not None for s in rows)  # a column only where the probes were given an lr
        gains = [r.layers[-1].get("composite_gain") for _, r in self.runs]  # residual topologies only
        shown = any(g is not None for g in gains)
        called = any(s["p_trains"] is not None for s in rows)  # the calibrated call, where one was made
        safe = f"  {'safe_lr':>8}" if lr else ""
        safe += f"  {'P(trains)':>9}" if called else ""
        head = f"{'gain_L':>9}  " if shown else ""
        lines = [f"{'label':<{w}}{'g0_gL':>9}  {'ctx0_ctxL':>9}  {'rms_growth':>10}{safe}  {head}verdicts"]
        for s, g in zip(rows, gains, strict=True):
            safe = f"  {_lr(s['safe_lr']):>8}" if lr else ""
            safe += f"  {_p(s['p_trains']):>9}" if called else ""
            cell = f"{_sci(g):>9}  " if shown else ""
            lines.append(
                f"{s['label']:<{w}}{_sci(s['g0_gL']):>9}  {_sci(s['ctx0_ctxL']):>9}  "
                f"{s['rms_growth']:>10.3g}{safe}  {cell}{s['verdicts']}"
            )
        for label, r in self.runs:
            expected = r.expected_line()
            lines += ["", f"{label}:"] + ["  " + line for line in format_verdicts(r.verdicts)]
            lines += [f"  {expected}"] if expected else []
        return "\n".join(lines)

    def to_pandas(self, table: str = "layers"):
        """A DataFrame of ``table`` with the columns of ``FRAMES[table]``: "layers" (a row per probe and
        stream), "verdicts" (a row per probe and verdict) or "summary" (a row per probe)."""
        check_table(table, tuple(FRAMES))
        if table == "summary":
            return to_frame(
                self.summary(),
                FRAMES["summary"],
                numeric=("g0_gL", "ctx0_ctxL", "rms_growth", "safe_lr", "p_trains"),
            )
        if table == "verdicts":
            return to_frame(
                [{"label": label, **v.to_dict()} for label, r in self.runs for v in r.verdicts], FRAMES[table]
            )
        rows = [{"label": label, **row} for label, r in self.runs for row in r.rows()]
        return to_frame(rows, FRAMES["layers"], numeric=FRAMES["layers"][2:])

    def __repr__(self) -> str:
        return (
            f"<Comparison of {len(self.runs)} probes: "
            + "; ".join(f"{label} {r.worst_level}" for label, r in self.runs)
            + ">"
        )

    def _repr_html_(self) -> str:
        """The summary table (a row per probe, its verdicts coloured by level)."""
        rows = [
            [
                esc(s["label"]),
                esc(_sci(s["g0_gL"])),
                esc(_sci(s["ctx0_ctxL"])),
                esc(f"{s['rms_growth']:.3g}"),
                " ".join(
                    level_badge(v.level) + ("" if v.code == v.level else f" {esc(v.code)}")
                    for v in r.verdicts
                ),
            ]
            for s, (_, r) in zip(self.summary(), self.runs)
        ]
        head = ["label", "g0_gL", "ctx0_ctxL", "rms_growth", "verdicts"]
        details = "".join(
            f"<details><summary>{esc(label)}: the verdicts in full</summary>{verdicts_html(r.verdicts)}</details>"
            for label, r in self.runs
        )
        title = f"depthlab probe comparison: {len(self.runs)} probes"
        return block(title, table(head, rows, num={1, 2, 3}), details)

    def figure(self, title: str = "", axes=None):
        """The gradient, position-varying gradient and stream rms of every probe, by depth (``axes``:
        three Axes to draw into); returns the Figure."""
        return probe_figure(self.runs, title=title, axes=axes)

    def plot(self, path: str, title: str = "") -> str:
        """Write :meth:`figure` to ``path`` (png, pdf or svg); returns ``path``."""
        return save_figure(self.figure(title), path)


def compare(
    configs: list[tuple[str, ModelConfig]], expected: list[float] | None = None, **options
) -> Comparison:
    """Probe each (label, config) with :func:`depthlab.probe.from_config.probe_config` and the same ``options``.
    ``expected``: each probe's expected seconds (:func:`depthlab.train.cost.probes_seconds`), for the time
    left: on a terminal the progress line gives it, elsewhere a line per probe of several says it.
    ValueError for an empty list; TypeError for anything but (label, ModelConfig) pairs."""
    if not isinstance(configs, (list, tuple)) or not all(
        isinstance(c, (list, tuple)) and len(c) == 2 for c in configs
    ):
        raise TypeError(f"configs must be a list of (label, ModelConfig) pairs, not {type(configs).__name__}")
    if not configs:
        raise ValueError("configs must hold at least one (label, ModelConfig) pair")
    runs = []
    total = sum(expected) if expected else None
    plain = total is not None and len(configs) > 1  # a line per probe off a terminal, where it is long
    with Progress(len(configs), "probe --compare", unit="probe", expected_s=total, plain=plain) as bar:
        for i, (label, cfg) in enumerate(configs):
            runs.append((label, probe_config(cfg, **options)))
            bar.advance(expected_s=expected[i] if expected else None)
    return Comparison(runs)


def _sci(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def _lr(value: float | None) -> str:
    return "-" if value is None or value == float("inf") else f"{value:.2g}"


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
