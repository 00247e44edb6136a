"""The study store's SQLite schema, versioned, and the migrations that bring any older store up to date.

``MIGRATIONS[v]`` is the list of statements that turn a version v-1 store into version v (version 0 =
an empty file). :func:`migrate` applies the missing ones in order, each version in one transaction,
and refuses a store written by a newer depthlab. To change the schema: add ``MIGRATIONS[v+1]`` (never
edit an applied one) and bump ``SCHEMA_VERSION``.

Tables::

    studies      one row per (name, grid hash): the grid as JSON
    runs         one row per resolved config (unique by its hash, shared between studies): status
                 queued|running|done|failed, owner (host:pid:start of the driver running it), outcome,
                 result, escape step, timings, host that ran it, error text of a failed run
    study_runs   which runs a study contains, in grid order, with the axis values that chose each
    metrics      one row per logged step of a run (loss, lr, global grad norm, val loss, tokens/s)
    layer_metrics  per logged step and stream: the training telemetry (grad, rms, update ratio, ...)
    probes       the at-init probe of a run's model (worst verdict level, codes, the probe JSON)
    probe_layers per stream at init: grad norm, stream rms, update ratio, cos_prev
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from depthlab.errors import InputError

SCHEMA_VERSION = 5

# layer_metrics' columns: the training telemetry's per-stream keys (depthlab.watch.keys.LAYER_KEYS,
# a test keeps the two equal). Version 1 named the sublayer gradients attn_grad / ffn_grad and took them
# over the whole wrapping (the sublayer and its norm); version 2 renames them attn_grad_norm /
# ffn_grad_norm (values stored before keep that first definition) and adds cross_grad_norm. Version 3
# adds each layer's attention entropy and largest attention logit (None in runs stored before).
LAYER_COLUMNS = (
    "grad_norm",
    "stream_rms",
    "update_ratio",
    "cos_prev",
    "angular_distance",
    "attn_grad_norm",
    "cross_grad_norm",
    "ffn_grad_norm",
    "param_update",
    "attn_entropy",
    "attn_logit_max",
)
_V1_LAYER_COLUMNS = (
    "grad_norm",
    "stream_rms",
    "update_ratio",
    "cos_prev",
    "angular_distance",
    "attn_grad",
    "ffn_grad",
    "param_update",
)
METRIC_COLUMNS = ("loss", "lr", "grad_norm", "val_loss", "tokens_per_s")
PROBE_LAYER_COLUMNS = ("grad_norm", "stream_rms", "update_ratio", "cos_prev")

_V1 = [
    """CREATE TABLE studies (
        id INTEGER PRIMARY KEY, name TEXT NOT NULL, config_hash TEXT NOT NULL, config_json TEXT NOT NULL,
        created_at REAL NOT NULL, updated_at REAL NOT NULL, UNIQUE (name, config_hash))""",
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY, config_hash TEXT NOT NULL UNIQUE, config_json TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'done', 'failed')),
        owner TEXT, host TEXT, attempts INTEGER NOT NULL DEFAULT 0,
        outcome TEXT, reason TEXT, outcome_step INTEGER, final_train_loss REAL, val_loss REAL,
        val_bpb REAL, unigram_loss REAL, accuracy REAL, tokens_per_s REAL,
        result_json TEXT, data_info_json TEXT, error TEXT,
        queued_at REAL NOT NULL, started_at REAL, finished_at REAL, seconds REAL)""",
    """CREATE TABLE study_runs (
        study_id INTEGER NOT NULL REFERENCES studies (id) ON DELETE CASCADE,
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        position INTEGER NOT NULL, axes_json TEXT NOT NULL, PRIMARY KEY (study_id, run_id))""",
    """CREATE TABLE metrics (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE, step INTEGER NOT NULL,
        """
    + ", ".join(f"{c} REAL" for c in METRIC_COLUMNS)
    + """, extra_json TEXT, PRIMARY KEY (run_id, step))""",
    """CREATE TABLE layer_metrics (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE, step INTEGER NOT NULL,
        layer INTEGER NOT NULL, """
    + ", ".join(f"{c} REAL" for c in _V1_LAYER_COLUMNS)
    + """, PRIMARY KEY (run_id, step, layer))""",
    """CREATE TABLE probes (
        run_id INTEGER PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
        level TEXT, codes TEXT, probe_json TEXT, error TEXT)""",
    """CREATE TABLE probe_layers (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE, layer INTEGER NOT NULL, """
    + ", ".join(f"{c} REAL" for c in PROBE_LAYER_COLUMNS)
    + """, PRIMARY KEY (run_id, layer))""",
    "CREATE INDEX runs_status ON runs (status)",
    "CREATE INDEX study_runs_run ON study_runs (run_id)",
]

_V2 = [
    "ALTER TABLE layer_metrics RENAME COLUMN attn_grad TO attn_grad_norm",
    "ALTER TABLE layer_metrics RENAME COLUMN ffn_grad TO ffn_grad_norm",
    "ALTER TABLE layer_metrics ADD COLUMN cross_grad_norm REAL",
]

_V3 = [
    "ALTER TABLE layer_metrics ADD COLUMN attn_entropy REAL",
    "ALTER TABLE layer_metrics ADD COLUMN attn_logit_max REAL",
]

# Version 4 takes every run's key of the canonical form of its config (depthlab.config_base.canonical:
# 0, 0.0 and -0.0 one value). No table changes: the rows are re-keyed by a step in Python
# (depthlab.study.rekey), in the same transaction as the version row.
_V4: list[str] = []

# Version 5 stores each run's escape step (depthlab.watch.outcome.escape_step: the first logged step from
# which the loss stayed below the unigram band); a step in Python (depthlab.study.backfill) computes it
# for the runs stored before from their logged losses and unigram loss.
_V5 = ["ALTER TABLE runs ADD COLUMN escape_step INTEGER"]

MIGRATIONS: dict[int, list[str]] = {1: _V1, 2: _V2, 3: _V3, 4: _V4, 5: _V5}


class SchemaError(InputError):
    """A store's schema version this depthlab cannot use (newer, or not a version number); the Store
    names the store in front of it."""


def current_version(conn: sqlite3.Connection) -> int:
    """The store's schema version (0 for an empty database)."""
    has = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'").fetchone()
    if not has:
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    value = 0 if row[0] is None else row[0]
    if not isinstance(value, int) or value < 0:  # SQLite keeps whatever a hand wrote in the column
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:36] + "..."
        raise SchemaError(
            f"the store's schema_version holds {shown}, not a version number: depthlab did not write it; "
            "restore a copy, or choose another --db"
        )
    return value


def migrate(
    conn: sqlite3.Connection, target: int | None = None, steps: dict[int, Callable] | None = None
) -> int:
    """Apply every missing migration up to ``target`` (default SCHEMA_VERSION); returns the store's version.

    Each version runs in its own ``BEGIN IMMEDIATE`` transaction (so two processes opening a new
    store at once do not both migrate it): its statements, then ``steps[version](conn)`` when given
    (a change SQL cannot make, such as re-keying the runs). Raises InputError for a store newer than
    this code.
    """
    target = SCHEMA_VERSION if target is None else target
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at REAL NOT NULL)"
    )
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = current_version(conn)
            if version > target:
                raise SchemaError(
                    f"the store is at schema version {version}, newer than this depthlab ({target}); upgrade depthlab"
                )
            if version == target:
                conn.execute("COMMIT")
                return version
            for stmt in MIGRATIONS[version + 1]:
                conn.execute(stmt)
            if steps and version + 1 in steps:
                steps[version + 1](conn)
            conn.execute("INSERT INTO schema_version VALUES (?, ?)", (version + 1, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
