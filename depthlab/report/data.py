"""Everything a report needs from the store, read once: the study, its runs, curves and telemetry."""

from __future__ import annotations

from dataclasses import dataclass, field

from depthlab.report.grouping import Layout, depth, layout, state
from depthlab.study.store import Store


@dataclass
class StudyData:
    """One study read from a store.

    ``runs``: the store's run dicts in grid order, each with "metrics" (logged steps), "layers"
    (telemetry rows, by step then stream), "probe" (probe JSON or None) and "probe_layers" added.
    """

    db: str
    study: dict
    runs: list[dict]
    layout: Layout = field(init=False)

    def __post_init__(self):
        self.layout = layout(self.runs)

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

    def hardest_panel(self) -> str | None:
        """The panel with the most runs that did not train at the deepest depth (ties: the first):
        where wrappings differ most, so the per-layer figures show it."""
        if not self.layout.panels:
            return None
        deep = self.deepest()

        def failures(panel: str) -> int:
            rs = [r for r in self.runs if self.layout.panel(r) == panel and depth(r) == deep]
            return sum(state(r) in ("stalled", "diverged") for r in rs)

        return max(self.layout.panels, key=lambda p: (failures(p), -self.layout.panels.index(p)))

    def pick(self, panel: str | None, depth_: int | None) -> dict[str, dict]:
        """Row label -> the first finished run (lowest seed) of that row in ``panel`` at ``depth_``."""
        out: dict[str, dict] = {}
        for r in sorted(self.runs, key=lambda r: r["config"]["train"].get("seed", 0)):
            if r["status"] == "done" and self.layout.panel(r) == panel and depth(r) == depth_:
                out.setdefault(self.layout.row(r), r)
        return {row: out[row] for row in self.layout.rows if row in out}


def load(db: str, which: str | int | None = None) -> StudyData:
    """Read study ``which`` (id, name, or None = the latest) and all its runs' data from ``db``.

    Raises InputError if the file or the study does not exist (a report never creates a store).
    """
    with Store(db, create=False) as store:
        study = store.find_study(which)
        runs = store.runs(study["id"])
        for r in runs:
            r["metrics"] = store.metrics(r["id"])
            r["layers"] = store.layer_metrics(r["id"])
            r["probe"] = store.probe(r["id"])
            r["probe_layers"] = store.probe_layers(r["id"])
    return StudyData(db=db, study=study, runs=runs)
