"""A study's results as DataFrames: its runs, their logged steps, their telemetry and their probes.

Every table starts with the columns that name a run: ``run_id`` (the store's id), ``wrapping`` and
``setting`` (the report's row and panel labels: the model fields and the train fields that vary between
the study's runs), ``n_layers`` and ``seed``; ``layer`` is a stream index (0 = entering layer 1,
L = leaving layer L). The columns of each table, in order, are ``FRAMES[table]`` (the runs table adds
one column per varying config field, then ``config``).
"""

from __future__ import annotations

from depthlab.frames import check_table, to_frame
from depthlab.report.data import StudyData
from depthlab.report.grouping import DEPTH_FIELDS, depth, state, varying
from depthlab.study.schema import LAYER_COLUMNS, METRIC_COLUMNS, PROBE_LAYER_COLUMNS

ID = ("run_id", "wrapping", "n_layers", "setting", "seed")
RESULTS = ("final_train_loss", "val_loss", "val_bpb", "unigram_loss", "accuracy", "tokens_per_s", "seconds")
FRAMES = {
    # one row per run, in grid order: state = the outcome once done, else the status (queued, running,
    # failed); outcome_step = where a stalled or diverged run was judged; escape_step = the first logged
    # step from which the loss stayed below the unigram band (None: it never left); probe_level / probe_codes =
    # the at-init verdict (worst level, non-ok codes); then the varying config fields and "config"
    "runs": (
        *ID,
        "position",
        "state",
        "status",
        "outcome",
        "reason",
        "outcome_step",
        "escape_step",
        *RESULTS,
        "host",
        "probe_level",
        "probe_codes",
        "config_hash",
    ),
    "metrics": (*ID, "step", *METRIC_COLUMNS),  # one row per logged step of each run
    "layer_metrics": (*ID, "step", "layer", *LAYER_COLUMNS),  # per logged step and stream
    "probe_layers": (*ID, "layer", *PROBE_LAYER_COLUMNS),  # the at-init probe, per stream
}
TABLES = tuple(FRAMES)
NUMERIC = {
    "runs": RESULTS,
    "metrics": METRIC_COLUMNS,
    "layer_metrics": LAYER_COLUMNS,
    "probe_layers": PROBE_LAYER_COLUMNS,
}


def _ident(data: StudyData, r: dict) -> dict:
    """The columns of ``ID`` for run ``r``."""
    lay = data.layout
    seed = r["config"]["train"].get("seed")
    return {
        "run_id": r["id"],
        "wrapping": lay.row(r),
        "n_layers": depth(r),
        "setting": lay.panel(r),
        "seed": seed,
    }


def _value(v):
    """A config value as a frame cell: a list becomes a tuple (hashable, so it can be grouped by)."""
    return tuple(v) if isinstance(v, list) else v


def varying_fields(data: StudyData) -> list[tuple[str, str]]:
    """(side, field) of every config field that varies between the runs and is not already a column."""
    taken = set(FRAMES["runs"])
    return [
        (side, f)
        for side, skip in (("model", DEPTH_FIELDS), ("train", ("seed",)))
        for f in varying(data.runs, side, skip)
        if f not in taken
    ]


def rows(data: StudyData, table: str) -> tuple[list[dict], tuple[str, ...]]:
    """(one dict per row, the columns) of ``table`` (one of ``TABLES``) for the study ``data``."""
    check_table(table, TABLES)
    out = []
    for r in data.runs:
        ident = _ident(data, r)
        if table == "runs":
            cfg = r["config"]
            extra = {f: _value(cfg[side].get(f)) for side, f in varying_fields(data)}
            out.append({**r, **ident, "state": state(r), **extra, "config": cfg})
        elif table == "metrics":
            out += [{**m, **ident} for m in r["metrics"]]
        elif table == "layer_metrics":
            out += [{**m, **ident} for m in r["layers"]]
        else:
            out += [{**m, **ident} for m in r["probe_layers"]]
    columns = FRAMES[table]
    if table == "runs":
        columns = (*columns, *(f for _, f in varying_fields(data)), "config")
    return out, columns


def study_frame(data: StudyData, table: str = "runs"):
    """The DataFrame of ``table`` (one of ``TABLES``): the columns of ``FRAMES[table]`` (and, for
    "runs", the varying config fields and ``config``); numbers are float64 (NaN where none)."""
    found, columns = rows(data, table)
    return to_frame(found, columns, numeric=NUMERIC[table])
