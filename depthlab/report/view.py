"""A study store opened from Python (a notebook, a script): its studies, their frames and figures.

import depthlab
s = depthlab.open("runs/depthlab.sqlite").study("default")   # depthlab.open is open_store
s                                  # in Jupyter: the run counts and the outcome map, coloured
s.runs(); s.metrics(); s.layer_metrics(); s.probe_layers()   # DataFrames (depthlab.report.tables)
s.figure("outcome_map"); s.figures()                          # matplotlib Figures (the report's)
s.report()                         # the HTML report, as ``depthlab report`` writes it

A StudyView holds what was read when it was made (``refresh()`` reads the store again, e.g. while
the study still runs); a StoreView reads the store on every call.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from depthlab.display import block, esc, para, state_badge, table
from depthlab.frames import to_frame
from depthlab.paths import check_path_type
from depthlab.report import default_report_dir, render
from depthlab.report.data import StudyData, load
from depthlab.report.figures import FIGURES, report_figure
from depthlab.report.grouping import state
from depthlab.report.summary import outcome_tables, summary_table
from depthlab.report.tables import study_frame
from depthlab.study.store import DEFAULT_DB, Store
from depthlab.words import plural

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# The columns of ``StoreView.to_pandas()``: one row per study, newest first; runs = how many runs the
# study's grid holds; created_at and updated_at in seconds since the epoch.
STUDY_COLUMNS = ("id", "name", "description", "runs", "created_at", "updated_at", "config_hash")


def open_store(path: str = DEFAULT_DB) -> StoreView:
    """The study store at ``path``, opened for reading (``depthlab.open``). InputError when there is no
    store there or the file is not one (nothing is created)."""
    return StoreView(path)


class StoreView:
    """A study store: ``studies()`` lists them, ``study(name)`` opens one."""

    def __init__(self, path: str = DEFAULT_DB):
        check_path_type(path, "path", "a study store's path")
        path = os.fspath(path)
        with Store(path, create=False, flag="path"):  # refuses a missing file or one that is not a store
            pass
        self.path = path

    def studies(self) -> list[dict]:
        """Every study, newest first: the columns of ``STUDY_COLUMNS``, and "counts" (runs per state)."""
        out = []
        with Store(self.path, create=False) as store:
            for s in store.studies():
                states = [state(r) for r in store.runs(s["id"])]
                counts = {k: states.count(k) for k in sorted(set(states))}
                desc = s["config"].get("description", "")
                out.append({**s, "description": desc, "runs": len(states), "counts": counts})
        return out

    def study(self, which: str | int | None = None) -> StudyView:
        """The study ``which`` (its name, its id, or None: the most recently updated), read now."""
        return StudyView(load(self.path, which))

    def to_pandas(self):
        """A DataFrame with a row per study (columns ``STUDY_COLUMNS``)."""
        return to_frame(self.studies(), STUDY_COLUMNS)

    def __repr__(self) -> str:
        names = [s["name"] for s in self.studies()]
        return f"<StoreView {self.path}: {len(names)} stud{'y' if len(names) == 1 else 'ies'} ({', '.join(names) or 'none'})>"

    def _repr_html_(self) -> str:
        rows = [
            [
                esc(s["id"]),
                f"<b>{esc(s['name'])}</b>",
                str(s["runs"]),
                " ".join(f"{state_badge(k)} {n}" for k, n in s["counts"].items()),
                esc(time.strftime("%Y-%m-%d %H:%M", time.localtime(s["updated_at"]))),
                esc(s["description"]),
            ]
            for s in self.studies()
        ]
        head = ["id", "study", "runs", "states", "updated", "description"]
        return block(f"depthlab store {self.path}", table(head, rows, num={0, 2}))


class StudyView:
    """One study as read from its store (``data``: the :class:`StudyData` the report is drawn from)."""

    def __init__(self, data: StudyData):
        self.data = data

    @property
    def name(self) -> str:
        return self.data.name

    def refresh(self) -> StudyView:
        """The same study read from the store again (a study that is still running has moved on)."""
        return StudyView(load(self.data.db, self.data.study["id"]))

    def counts(self) -> dict[str, int]:
        """Runs per state (trained, stalled, diverged, failed, running, queued)."""
        return self.data.counts()

    def to_pandas(self, table: str = "runs"):
        """The DataFrame of ``table``: "runs", "metrics", "layer_metrics" or "probe_layers"
        (columns: :data:`depthlab.report.tables.FRAMES`)."""
        return study_frame(self.data, table)

    def runs(self):
        """A DataFrame with a row per run (see :mod:`depthlab.report.tables`)."""
        return study_frame(self.data, "runs")

    def metrics(self):
        """A DataFrame with a row per logged step of every run."""
        return study_frame(self.data, "metrics")

    def layer_metrics(self):
        """A DataFrame with a row per logged step and stream of every run (the training telemetry)."""
        return study_frame(self.data, "layer_metrics")

    def probe_layers(self):
        """A DataFrame with a row per stream of every run's at-init probe."""
        return study_frame(self.data, "probe_layers")

    def figure(self, name: str, axes=None) -> Figure | None:
        """The report's figure ``name`` (one of :data:`depthlab.report.figures.FIGURE_NAMES`), drawn
        into ``axes`` if given; None when the study has no data for it."""
        return report_figure(name).draw(self.data, axes=axes)

    def figures(self) -> dict[str, Figure]:
        """Every figure of the report that the study has data for: name -> Figure, in page order."""
        drawn = {f.name: f.draw(self.data) for f in FIGURES}
        return {name: fig for name, fig in drawn.items() if fig is not None}

    def summary(self) -> str:
        """The outcome table that ``depthlab report`` prints."""
        return summary_table(self.data)

    def report(self, out_dir: str | None = None) -> str:
        """Write the HTML report (default folder: ``<store folder>/report/<study>``); returns index.html's path."""
        return render(self.data, out_dir or default_report_dir(self.data.db, self.name))

    def __repr__(self) -> str:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts().items()))
        return f"<StudyView {self.name!r}: {plural(len(self.data.runs), 'run')} ({counts or 'none'}), store {self.data.db}>"

    def _repr_html_(self) -> str:
        """The counts per state, then the outcome map as one table per train setting."""
        counts = " ".join(f"{state_badge(k)} {n}" for k, n in sorted(self.counts().items()))
        desc = self.data.study["config"].get("description", "")
        parts = [para(desc)] if desc else []
        parts.append(f"<p>{plural(len(self.data.runs), 'run')}: {counts}</p>")
        parts += outcome_tables(self.data)
        parts.append(para(f"store {self.data.db}; frames: .runs() .metrics() .layer_metrics() "
                          f".probe_layers(); figures: {', '.join(f.name for f in FIGURES)}", muted=True))  # fmt: skip
        return block(f"depthlab study {self.name}", *parts)
