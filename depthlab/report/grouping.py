"""How a study's runs are laid out for a person: rows (wrappings), columns (depth), panels (train settings).

The layout is read from the resolved configs, so it fits any grid: the model fields that vary between
runs (other than depth) name the rows ("post", "pre no attn skip"), ``n_layers`` gives the columns,
and the train fields that vary (other than the seed) name the panels ("lr=0.001 warmup=0"). Seeds of
one cell are aggregated.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from depthlab.display import STATE_COLOURS as COLOURS  # noqa: F401 (the report's colours, named here)

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


def _varying(runs: list[dict], side: str, skip: tuple) -> list[str]:
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


@dataclass
class Layout:
    """Rows, depth columns and panels, each in the order they first appear in the grid."""

    row_fields: list[str]
    panel_fields: list[str]
    rows: list[str]
    depths: list[int]
    panels: list[str]

    def row(self, run: dict) -> str:
        model = run["config"]["model"]
        parts = [str(model.get("wrap", "model"))]  # the wrapping always names the row
        parts += [_value(f, model[f], model) for f in self.row_fields if f != "wrap"]
        return " ".join(p for p in parts if p)

    def panel(self, run: dict) -> str:
        train = run["config"]["train"]
        return " ".join(f"{f}={train[f]}" for f in self.panel_fields) or "all runs"


def layout(runs: list[dict]) -> Layout:
    """The layout of these runs (dicts with "config": {"model", "train"}, "status", "outcome")."""
    lay = Layout(_varying(runs, "model", DEPTH_FIELDS), _varying(runs, "train", ("seed",)), [], [], [])
    for r in runs:
        for seq, key in ((lay.rows, lay.row(r)), (lay.panels, lay.panel(r))):
            if key not in seq:
                seq.append(key)
    lay.depths = sorted({depth(r) for r in runs})
    return lay


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


def cells(runs: list[dict], lay: Layout) -> dict[tuple[str, str, int], Cell]:
    """(panel, row, depth) -> Cell, over every run (the seeds of a cell aggregated)."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((lay.panel(r), lay.row(r), depth(r)), []).append(r)
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
    """What the at-init verdicts predict for this run: "trains", "fails", or None (no probe).

    Rule: any error-level verdict predicts a failure, and so does ``warmup-required`` (at any
    level) for a run without warmup; a ``warmup-required`` verdict is satisfied by a warmup, and
    other warnings are cautions, not predictions of failure.
    """
    if not probe:
        return None
    warm = int(run["config"]["train"].get("warmup") or 0) > 0
    for v in probe.get("verdicts") or []:
        if v.get("code") == "warmup-required" and v.get("level") in ("warning", "error"):
            if not warm:
                return "fails"
        elif v.get("level") == "error":
            return "fails"
    return "trains"
