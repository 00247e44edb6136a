"""How a study's runs are laid out for a person: rows, columns and panels, from the grid's axes.

A study's grid names its axes (``wrapping``, ``n_layers``, ``warmup``, ``lr``, ``seed``, ...), and the
layout follows them: the columns are the depth (``n_layers``) or, when the grid sweeps more learning
rates than depths, the learning rate (``x="lr"``; ``x`` may also be chosen); the axes that choose the
model (the wrapping, a norm, ...) make the rows; every remaining axis except the seed makes panels
("warmup=50", "n_layers=24"). Seeds of one cell are aggregated. Runs without axes (a grid of one run,
or runs from elsewhere) fall back on the config fields that vary: model fields name the rows, train
fields the panels.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from depthlab.config import TrainConfig
from depthlab.display import STATE_COLOURS as COLOURS  # noqa: F401 (the report's colours, named here)
from depthlab.doctor.checks import prediction
from depthlab.words import plural

STATES = ("trained", "undertrained", "stalled", "diverged", "failed", "running", "queued")
SEVERITY = {
    "failed": 0,
    "diverged": 1,
    "stalled": 2,
    "undertrained": 3,
    "running": 4,
    "queued": 5,
    "trained": 6,
}
DEPTH_FIELDS = ("n_layers", "enc_layers", "dec_layers")


def state(run: dict) -> str:
    """A run's state for display: its outcome once done, else its status."""
    if run["status"] == "done":
        return run.get("outcome") or "trained"
    return run["status"]


def depth(run: dict) -> int:
    return int(run["config"]["model"]["n_layers"])


X_AXES = ("n_layers", "lr")  # what the columns may be


def column_of(run: dict, x: str):
    """A run's column value: its depth or its learning rate."""
    return depth(run) if x == "n_layers" else float(run["config"]["train"].get("lr", TrainConfig.lr))


def varying(runs: list[dict], side: str, skip: tuple) -> list[str]:
    """Fields of ``side`` whose value differs between runs, in config order."""
    if not runs:
        return []
    keys = list(runs[0]["config"][side])
    return [k for k in keys if k not in skip and len({repr(r["config"][side].get(k)) for r in runs}) > 1]


def _value(field: str, v, model: dict) -> str:
    if field == "residual":
        subs = ("attn", "ffn") + (("cross",) if model.get("arch") == "encdec" else ())
        missing = [s for s in subs if s not in v]
        return f"no {'+'.join(missing)} skip" if missing else ""
    if isinstance(v, (list, tuple)):
        v = "+".join(map(str, v))
    return f"{field}={v}"


def _axis_label(name: str, value, model: dict) -> str:
    """An axis value as a person reads it: ``pre no attn skip``, ``pre qk_norm=True``, ``warmup=50``."""
    items = value.items() if isinstance(value, dict) else [(name, value)]
    items = sorted(items, key=lambda fv: fv[0] != "wrap")  # the wrapping first (the store sorts keys)
    parts = [str(v) if f == "wrap" else _value(f, v, model) for f, v in items]
    return " ".join(p for p in parts if p)


@dataclass
class Layout:
    """Rows, columns (``x``: depth or learning rate) and panels, each in the order they first appear.

    With ``row_axes``/``panel_axes`` (axis names) the labels are read from each run's ``axes``;
    otherwise from the config fields in ``row_fields``/``panel_fields``.
    """

    x: str
    row_fields: list[str]
    panel_fields: list[str]
    row_axes: list[str] = field(default_factory=list)
    panel_axes: list[str] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)
    columns: list = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    panels: list[str] = field(default_factory=list)

    @property
    def x_label(self) -> str:
        return "layers" if self.x == "n_layers" else "learning rate"

    def column(self, run: dict):
        return column_of(run, self.x)

    def row(self, run: dict) -> str:
        model = run["config"]["model"]
        if self.row_axes:
            return " ".join(_axis_label(a, run["axes"][a], model) for a in self.row_axes) or "all runs"
        parts = [str(model.get("wrap", "model"))]  # the wrapping always names the row
        parts += [_value(f, model[f], model) for f in self.row_fields if f != "wrap"]
        return " ".join(p for p in parts if p)

    def panel(self, run: dict) -> str:
        if self.row_axes or self.panel_axes:
            model = run["config"]["model"]
            return " ".join(_axis_label(a, run["axes"][a], model) for a in self.panel_axes) or "all runs"
        train = run["config"]["train"]
        return " ".join(f"{f}={train[f]}" for f in self.panel_fields) or "all runs"

    def setting(self, run: dict) -> str:
        """A per-run table's setting: the panel's label, and the learning rate where it is the x axis
        (the map shows it as a column; a table of runs must show it in the row)."""
        panel = self.panel(run)
        if self.x != "lr":
            return panel
        lr = f"lr={column_of(run, 'lr'):g}"
        return lr if panel == "all runs" else f"{panel} {lr}"


def _sets_model(axis: str, runs: list[dict]) -> bool:
    """Whether an axis chooses the model (a model field, or mappings holding one): such axes make rows."""
    value = runs[0]["axes"][axis]
    fields = value.keys() if isinstance(value, dict) else [axis]
    return any(f in runs[0]["config"]["model"] for f in fields)


def layout(runs: list[dict], axis_order: list[str] | None = None, x: str = "auto") -> Layout:
    """The layout of these runs (dicts with "config": {"model", "train"}, "axes", "status", "outcome").

    ``axis_order``: the grid's axis names in order (default: the runs' axis names, sorted); ``x``:
    "n_layers", "lr" or "auto" (the learning rate when the grid sweeps more of them than depths, and at
    least 3: two learning rates at one depth stay panels)."""
    names = list(axis_order or sorted({a for r in runs for a in r.get("axes") or {}}))
    names = [a for a in names if all(a in (r.get("axes") or {}) for r in runs)]
    counts = {a: len({column_of(r, a) for r in runs}) for a in X_AXES if runs}
    if x == "auto":
        x = "lr" if counts.get("lr", 0) > max(counts.get("n_layers", 0), 2) and "lr" in names else "n_layers"
    if x not in X_AXES:
        raise ValueError(f"x={x!r}: one of {', '.join(X_AXES)}")
    others = [a for a in names if a not in (x, "seed")]
    row_axes = [a for a in others if a not in X_AXES and _sets_model(a, runs)]
    if row_axes:
        lay = Layout(x, [], [], row_axes, [a for a in others if a not in row_axes])
    else:  # no axis of model fields to make rows of: read the varying config fields
        skip_train = ("seed", "lr") if x == "lr" else ("seed",)
        lay = Layout(x, varying(runs, "model", DEPTH_FIELDS), varying(runs, "train", skip_train))
    for r in runs:
        for seq, key in ((lay.rows, lay.row(r)), (lay.panels, lay.panel(r))):
            if key not in seq:
                seq.append(key)
    lay.columns = sorted({lay.column(r) for r in runs})
    lay.depths = sorted({depth(r) for r in runs})
    return lay


def column_text(lay: Layout, value) -> str:
    """A column's heading: "24 layers" or "lr 0.003"."""
    return plural(value, "layer") if lay.x == "n_layers" else f"lr {value:g}"


@dataclass
class Cell:
    """The runs of one (panel, row, depth): their majority state, mean final val loss, state counts."""

    state: str
    val_loss: float | None
    counts: dict
    n: int

    def label(self) -> str:
        """The text shown in the cell: the val loss, plus "k/n state" when seeds disagree."""
        loss = f"{self.val_loss:.2f}" if self.val_loss is not None else "-"
        if len(self.counts) > 1:
            return f"{loss}\n{self.counts[self.state]}/{self.n} {self.state}"
        return loss


def cells(runs: list[dict], lay: Layout) -> dict[tuple[str, str, object], Cell]:
    """(panel, row, column) -> Cell, over every run (the seeds of a cell aggregated)."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((lay.panel(r), lay.row(r), lay.column(r)), []).append(r)
    out = {}
    for key, rs in groups.items():
        counts = Counter(state(r) for r in rs)
        # majority state; ties go to the worse state (a study should not hide a failure)
        top = max(counts.items(), key=lambda kv: (kv[1], -SEVERITY.get(kv[0], 9)))[0]
        losses = [r["val_loss"] for r in rs if r["status"] == "done" and r.get("val_loss") is not None]
        mean = sum(losses) / len(losses) if losses else None
        out[key] = Cell(top, mean, dict(counts), len(rs))
    return out


def predicted(run: dict, probe: dict | None) -> str | None:
    """What the at-init verdicts predict for this run: "trains", "fails", or None (no probe)
    (:func:`depthlab.doctor.checks.prediction`, with the run's own warmup)."""
    if not probe:
        return None
    return prediction(probe, int(run["config"]["train"].get("warmup") or 0))
