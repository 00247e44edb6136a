"""Everything a report needs from the store, read once: the study, its runs, curves and telemetry."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from depthlab.errors import option
from depthlab.report.grouping import Layout, depth, layout, state
from depthlab.study.sensitivity import Curve, curves
from depthlab.study.store import Store
from depthlab.study.transfer import Transfer, transfers


@dataclass
class StudyData:
    """One study read from a store.

    ``runs``: the store's run dicts in grid order, each with "metrics" (logged steps), "layers"
    (telemetry rows, by step then stream), "probe" (probe JSON or None) and "probe_layers" added.
    """

    db: str
    study: dict
    runs: list[dict]
    x: str = "auto"  # the outcome map's columns: "n_layers", "lr" or "auto" (grouping.layout)
    layout: Layout = field(init=False)

    def __post_init__(self):
        order = list((self.study.get("config") or {}).get("axes") or {})
        self.layout = layout(self.runs, order or None, self.x)

    @functools.cached_property
    def lr_curves(self) -> list[Curve]:
        """The study's learning-rate curves (:func:`depthlab.study.sensitivity.curves`); empty when no
        setting was run at two or more learning rates."""
        return curves(self.runs)

    @functools.cached_property
    def transfers(self) -> dict[str, list[Transfer]]:
        """{"depth": ..., "width": ...}: the learning-rate transfer of each setting the study sweeps lr
        across two or more depths (widths) for (:func:`depthlab.study.transfer.transfers`); empty lists
        for an axis it does not sweep."""
        return {axis: transfers(self.runs, axis) for axis in ("depth", "width")}

    @property
    def name(self) -> str:
        return self.study["name"]

    def counts(self) -> dict[str, int]:
        """How many runs are in each state."""
        out: dict[str, int] = {}
        for r in self.runs:
            out[state(r)] = out.get(state(r), 0) + 1
        return out

    def deepest(self) -> int | None:
        return max(self.layout.depths) if self.layout.depths else None

    def informative(self) -> tuple[str | None, object]:
        """(panel, column) at the deepest depth where the rows' outcomes differ most: the most runs that
        trained and the most that did not, both (ties: more that did not, then the first). The per-layer
        figures show that setting, where the wrappings part ways."""
        deep = self.deepest()
        best, best_score = (None, None), None
        for panel in self.layout.panels:
            for col in self.layout.columns:
                rs = [
                    r
                    for r in self.runs
                    if self.layout.panel(r) == panel and self.layout.column(r) == col and depth(r) == deep
                ]
                if not rs:
                    continue
                ok = sum(state(r) == "trained" for r in rs)
                score = (min(ok, len(rs) - ok), len(rs) - ok)
                if best_score is None or score > best_score:
                    best, best_score = (panel, col), score
        return best

    def pick(self, panel: str | None, column) -> dict[str, dict]:
        """Row label -> the first finished run (lowest seed) of that row in ``panel`` at ``column``, at
        the deepest depth."""
        out: dict[str, dict] = {}
        deep = self.deepest()
        for r in sorted(self.runs, key=lambda r: r["config"]["train"].get("seed", 0)):
            here = self.layout.panel(r) == panel and self.layout.column(r) == column and depth(r) == deep
            if r["status"] == "done" and here:
                out.setdefault(self.layout.row(r), r)
        return {row: out[row] for row in self.layout.rows if row in out}


def load(db: str, which: str | int | None = None, x: str = "auto", flag: str | None = None) -> StudyData:
    """Read study ``which`` (id, name, or None = the latest) and all its runs' data from ``db``.

    Raises InputError if the file or the study does not exist (a report never creates a store); ``flag``
    names the path as the refusal says it.
    """
    flag = flag or option("db")  # --db on the command line, db from Python
    with Store(db, create=False, flag=flag) as store:
        study = store.find_study(which)
        runs = store.runs(study["id"])
        for r in runs:
            r["metrics"] = store.metrics(r["id"])
            r["layers"] = store.layer_metrics(r["id"])
            r["probe"] = store.probe(r["id"])
            r["probe_layers"] = store.probe_layers(r["id"])
    return StudyData(db=db, study=study, runs=runs, x=x)
