"""The embedded results store: one SQLite file in WAL mode (schema in ``depthlab.study.schema``).

Runs are keyed by the hash of their resolved config, so a study re-run (or another study with some
of the same runs) finds what is already done. Writes are short ``BEGIN IMMEDIATE`` transactions with
a busy timeout, so several processes (drivers, a report reading while a study runs) can share a file:
WAL lets readers proceed while one writer commits, and the timeout makes writers wait, not fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time

from depthlab.errors import InputError, option
from depthlab.paths import check_input_file, printable
from depthlab.study.backfill import fill_escape_steps
from depthlab.study.owner import owner_id, owner_is_gone  # noqa: F401 (the runner and tests read them here)
from depthlab.study.rekey import rekey_runs
from depthlab.study.schema import (
    LAYER_COLUMNS,
    METRIC_COLUMNS,
    PROBE_LAYER_COLUMNS,
    SCHEMA_VERSION,
    SchemaError,
    current_version,
    migrate,
)
from depthlab.study.storefile import (
    BUSY_TIMEOUT_S,
    check_is_store,
    check_quick,
    check_row,
    check_run_shape,
    check_sqlite_header,
    check_store_path,
    connect,
    open_error,
    reads,
    unwritable,
)

DEFAULT_DB = os.path.join("runs", "depthlab.sqlite")


class Store:
    """A study store at ``path``. ``create=False`` refuses a missing file (reports never create one).

    A file that is not a usable store is refused with an InputError before anything is written to it
    (:mod:`depthlab.study.storefile`): not a regular file, not SQLite, another database, damaged, or
    read-only to a writer. A reader of a store it may not write reads it without writing anything.
    """

    def __init__(self, path: str = DEFAULT_DB, create: bool = True, flag: str | None = None):
        flag = flag or option("db")  # --db on the command line, db from Python
        check_store_path(path, flag)  # flag: how the path was given, as refusals name it
        if not create and not check_input_file(path, flag, missing_ok=True):  # a FIFO is named as one
            raise InputError(f"{flag} {printable(path)}: no study store there")
        check_sqlite_header(path, flag)
        why = unwritable(path)
        if create and why:
            raise InputError(
                f"{why}; a study writes its results there: make it writable, or choose another {flag}"
            )
        self.path, self.read_only = path, why is not None
        try:
            if create:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.conn = connect(path, self.read_only)
        except (sqlite3.DatabaseError, OSError) as e:
            raise open_error(path, e) from None
        try:
            self.version = self._prepare(create, flag)
        except BaseException as e:
            self.conn.close()
            if isinstance(e, (sqlite3.DatabaseError, OSError)):
                raise open_error(path, e) from None
            if isinstance(e, SchemaError):  # said of "the store": which one, by the flag it came as
                raise InputError(f"{flag} {printable(path)}: {e}") from None
            raise

    def _prepare(self, create: bool, flag: str) -> int:
        """Check the file is a sound store (reading only), then set WAL mode and migrate; returns the
        version. A read-only store is only read: it must already be at this depthlab's version."""
        self.conn.row_factory = sqlite3.Row
        self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        check_is_store(self.conn, self.path, create, flag)  # before anything is written
        check_quick(self.conn, self.path)
        if self.read_only:
            version = current_version(self.conn)
            if version != SCHEMA_VERSION:
                raise InputError(
                    f"{self.path} is read-only and at schema version {version}, not {SCHEMA_VERSION}; "
                    "make it writable once so that depthlab can bring it up to date"
                )
            return version
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: a killed process loses nothing
        self.conn.execute("PRAGMA foreign_keys = ON")
        return migrate(self.conn, steps={4: rekey_runs, 5: fill_escape_steps})

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self):
        """One write transaction; BEGIN IMMEDIATE takes the write lock up front (waiting up to the timeout)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # -- studies and their runs --------------------------------------------------------------------
    def add_study(self, name: str, config: dict, config_hash: str, specs: list) -> int:
        """Record a study and queue its runs (those already known by hash are shared, not duplicated).

        ``specs`` are RunSpec-like objects with ``hash``, ``config_dict()`` and ``axes``. Returns the id.
        The study's runs are read back before the transaction commits: when one of them is damaged
        (InputError), nothing is recorded and the file stays as it was.
        """
        now = time.time()
        with self.transaction() as c:
            c.execute(
                "INSERT OR IGNORE INTO studies (name, config_hash, config_json, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                # the grid's keys in its own order: the report lays out rows and panels in its axes' order
                (name, config_hash, json.dumps(config), now, now),
            )
            c.execute(
                "UPDATE studies SET updated_at = ? WHERE name = ? AND config_hash = ?",
                (now, name, config_hash),
            )
            sid = c.execute(
                "SELECT id FROM studies WHERE name = ? AND config_hash = ?", (name, config_hash)
            ).fetchone()[0]
            for pos, spec in enumerate(specs):
                c.execute(
                    "INSERT OR IGNORE INTO runs (config_hash, config_json, queued_at) VALUES (?, ?, ?)",
                    (spec.hash, json.dumps(spec.config_dict(), sort_keys=True), now),
                )
                rid = c.execute("SELECT id FROM runs WHERE config_hash = ?", (spec.hash,)).fetchone()[0]
                c.execute(
                    "INSERT OR IGNORE INTO study_runs (study_id, run_id, position, axes_json) VALUES (?, ?, ?, ?)",
                    (sid, rid, pos, json.dumps(spec.axes, sort_keys=True, default=str)),
                )
            self.runs(sid)  # read back in the same transaction: a damaged row undoes all of the above
        return sid

    def claim(self, run_id: int, owner: str) -> bool:
        """Mark a run ``running`` for ``owner`` unless it is done or running under a live driver.

        Returns whether this caller now owns it (False: another driver got there first)."""
        with self.transaction() as c:
            row = c.execute("SELECT status, owner, started_at FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None or row["status"] == "done":
                return False
            live = not owner_is_gone(row["owner"], row["started_at"])
            if row["status"] == "running" and row["owner"] != owner and live:
                return False
            c.execute(
                "UPDATE runs SET status = 'running', owner = ?, started_at = ?, attempts = attempts + 1, "
                "error = NULL WHERE id = ?",
                (owner, time.time(), run_id),
            )
        return True

    def release(self, owner: str) -> int:
        """Put back to ``queued`` the runs ``owner`` claimed but did not finish; returns how many."""
        with self.transaction() as c:
            cur = c.execute(
                "UPDATE runs SET status = 'queued', owner = NULL WHERE owner = ? AND status = 'running'",
                (owner,),
            )
        return cur.rowcount

    def finish(self, run_id: int, payload: dict, recorded: dict | None = None) -> str:
        """Write one run's outcome, metrics, telemetry and probe in a single transaction.

        ``payload`` is what a worker returns (``depthlab.study.worker.execute``): "result" (result.json
        shape), "metrics" (the on_log records), "probe" (probe JSON) or "probe_error", "host",
        "seconds", and "error" (a traceback) for a run that crashed. Returns the status written.
        ``recorded``, for a run written back from a run record rather than run here: {"started_at",
        "finished_at"} as the record gives them (None where it kept none), stored instead of the claim's
        start and the time of writing, and "layers", telemetry rows {"step", "layer", *LAYER_COLUMNS}
        each at its own step; in the same transaction, so that a run is never marked done without them.
        """
        status = "failed" if payload.get("error") else "done"
        res = payload.get("result") or {}
        with self.transaction() as c:
            for table in ("metrics", "layer_metrics", "probes", "probe_layers"):
                c.execute(
                    f"DELETE FROM {table} WHERE run_id = ?", (run_id,)
                )  # a re-run replaces, never doubles
            _insert_metrics(c, run_id, payload.get("metrics") or [])
            _insert_probe(c, run_id, payload.get("probe"), payload.get("probe_error"))
            if recorded is not None:
                _insert_layers(c, run_id, recorded.get("layers") or [])
            c.execute(
                "UPDATE runs SET status = ?, owner = NULL, host = ?, outcome = ?, reason = ?, outcome_step = ?, "
                "final_train_loss = ?, val_loss = ?, val_bpb = ?, unigram_loss = ?, accuracy = ?, "
                "tokens_per_s = ?, escape_step = ?, result_json = ?, data_info_json = ?, error = ?, finished_at = ?, "
                "seconds = ? WHERE id = ?",
                (
                    status,
                    payload.get("host"),
                    res.get("outcome"),
                    res.get("reason"),
                    res.get("step"),
                    *(res.get(k) for k in ("final_train_loss", "val_loss", "val_bpb", "unigram_loss")),
                    res.get("accuracy"),
                    res.get("tokens_per_s"),
                    res.get("escape_step"),
                    json.dumps(res) if res else None,
                    json.dumps(payload.get("data_info")) if payload.get("data_info") is not None else None,
                    payload.get("error"),
                    time.time(),
                    payload.get("seconds"),
                    run_id,
                ),
            )
            if recorded is not None:  # when it ran, as recorded (unknown: none), not when it was written
                c.execute(
                    "UPDATE runs SET started_at = ?, finished_at = ? WHERE id = ?",
                    (recorded.get("started_at"), recorded.get("finished_at"), run_id),
                )
        return status

    # -- reading ------------------------------------------------------------------------------------
    @reads
    def studies(self) -> list[dict]:
        """Every study, newest first: id, name, config_hash, config (dict), created_at, updated_at."""
        rows = self.conn.execute("SELECT * FROM studies ORDER BY updated_at DESC, id DESC").fetchall()
        return [{**dict(r), "config": json.loads(r["config_json"])} for r in rows]

    def find_study(self, which: str | int | None = None, flag: str | None = None) -> dict:
        """A study by id, by name (its latest version), or the most recently updated one (None).
        ``flag``: how a refusal names ``which`` (default ``--study`` on the command line, ``study`` from
        Python)."""
        studies = self.studies()
        if not studies:
            raise InputError(f"{self.path} holds no study yet")
        if which is None:
            return studies[0]
        for s in studies:
            if str(s["id"]) == str(which) or s["name"] == which:
                return s
        ids: dict[str, list[str]] = {}
        for s in sorted(studies, key=lambda s: s["id"]):
            ids.setdefault(s["name"], []).append(str(s["id"]))
        names = ", ".join(f"{n} (id {', '.join(i)})" for n, i in sorted(ids.items()))
        raise InputError(
            f"{flag or option('study')} {which}: no such study in {self.path} (studies: {names})"
        )

    @reads
    def runs(self, study_id: int) -> list[dict]:
        """The study's runs in grid order: every runs column, "config" and "axes" as dicts, and the
        at-init probe's "probe_level"/"probe_codes" (None when no probe was recorded)."""
        rows = self.conn.execute(
            "SELECT r.*, sr.position, sr.axes_json, p.level AS probe_level, p.codes AS probe_codes, "
            "p.error AS probe_error FROM study_runs sr JOIN runs r ON r.id = sr.run_id "
            "LEFT JOIN probes p ON p.run_id = r.id WHERE sr.study_id = ? ORDER BY sr.position",
            (study_id,),
        ).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            d["config"] = json.loads(d.pop("config_json"))
            d["axes"] = json.loads(d.pop("axes_json"))
            out.append(check_run_shape(self.path, d))
        return out

    @reads
    def metrics(self, run_id: int) -> list[dict]:
        """The run's logged steps in order: step plus METRIC_COLUMNS."""
        rows = self.conn.execute("SELECT * FROM metrics WHERE run_id = ? ORDER BY step", (run_id,)).fetchall()
        return [
            check_row(self.path, f"run {run_id}'s metrics", dict(r), ("step", *METRIC_COLUMNS)) for r in rows
        ]

    @reads
    def layer_metrics(self, run_id: int) -> list[dict]:
        """The run's telemetry, ordered by step then stream: step, layer plus LAYER_COLUMNS."""
        rows = self.conn.execute(
            "SELECT * FROM layer_metrics WHERE run_id = ? ORDER BY step, layer", (run_id,)
        ).fetchall()
        what = f"run {run_id}'s telemetry"
        return [check_row(self.path, what, dict(r), ("step", "layer", *LAYER_COLUMNS)) for r in rows]

    @reads
    def probe_layers(self, run_id: int) -> list[dict]:
        """The at-init probe per stream: layer plus PROBE_LAYER_COLUMNS."""
        rows = self.conn.execute(
            "SELECT * FROM probe_layers WHERE run_id = ? ORDER BY layer", (run_id,)
        ).fetchall()
        what = f"run {run_id}'s probe"
        return [check_row(self.path, what, dict(r), ("layer", *PROBE_LAYER_COLUMNS)) for r in rows]

    @reads
    def probe(self, run_id: int) -> dict | None:
        """The stored probe JSON of a run (None if there is none)."""
        row = self.conn.execute("SELECT probe_json FROM probes WHERE run_id = ?", (run_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    @reads
    def statuses(self) -> dict[str, str]:
        """run hash -> status (queued|running|done|failed) of every run the store holds."""
        return {
            r["config_hash"]: r["status"] for r in self.conn.execute("SELECT config_hash, status FROM runs")
        }

    def integrity(self) -> str:
        """``PRAGMA integrity_check``: "ok" for a sound file."""
        return self.conn.execute("PRAGMA integrity_check").fetchone()[0]


def _num(v):
    """A float for SQLite (None for missing values)."""
    return None if v is None else float(v)


def _insert_metrics(c: sqlite3.Connection, run_id: int, records: list[dict]) -> None:
    """Insert the on_log records: a metrics row each, and a layer_metrics row per stream."""
    known = {"step", "layers", *METRIC_COLUMNS}
    for rec in records:
        step = int(rec["step"])
        extra = {k: v for k, v in rec.items() if k not in known}
        c.execute(
            f"INSERT OR REPLACE INTO metrics (run_id, step, {', '.join(METRIC_COLUMNS)}, extra_json) "
            f"VALUES (?, ?, {', '.join('?' for _ in METRIC_COLUMNS)}, ?)",
            (run_id, step, *(_num(rec.get(k)) for k in METRIC_COLUMNS), json.dumps(extra) if extra else None),
        )
        c.executemany(
            f"INSERT OR REPLACE INTO layer_metrics (run_id, step, layer, {', '.join(LAYER_COLUMNS)}) "
            f"VALUES (?, ?, ?, {', '.join('?' for _ in LAYER_COLUMNS)})",
            [
                (run_id, step, int(row["index"]), *(_num(row.get(k)) for k in LAYER_COLUMNS))
                for row in rec.get("layers") or []
            ],
        )


def _insert_layers(c: sqlite3.Connection, run_id: int, layers: list[dict]) -> None:
    """Telemetry rows {"step", "layer", *LAYER_COLUMNS}, each at its own step (a recorded run's)."""
    c.executemany(
        f"INSERT OR REPLACE INTO layer_metrics (run_id, step, layer, {', '.join(LAYER_COLUMNS)}) "
        f"VALUES (?, ?, ?, {', '.join('?' for _ in LAYER_COLUMNS)})",
        [(run_id, int(x["step"]), int(x["layer"]), *(_num(x.get(k)) for k in LAYER_COLUMNS)) for x in layers],
    )


def _insert_probe(c: sqlite3.Connection, run_id: int, probe: dict | None, error: str | None) -> None:
    """Insert the at-init probe: its worst verdict level, the codes of non-ok verdicts, and per-stream rows."""
    if probe is None and error is None:
        return
    verdicts = (probe or {}).get("verdicts") or []
    levels = [v.get("level") for v in verdicts]
    level = next((lv for lv in ("error", "warning", "ok") if lv in levels), "ok") if probe else None
    codes = ",".join(v["code"] for v in verdicts if v.get("level") != "ok" and v.get("code"))
    c.execute(
        "INSERT INTO probes (run_id, level, codes, probe_json, error) VALUES (?, ?, ?, ?, ?)",
        (run_id, level, codes or None, json.dumps(probe) if probe else None, error),
    )
    c.executemany(
        f"INSERT INTO probe_layers (run_id, layer, {', '.join(PROBE_LAYER_COLUMNS)}) "
        f"VALUES (?, ?, {', '.join('?' for _ in PROBE_LAYER_COLUMNS)})",
        [
            (run_id, int(row["index"]), *(_num(row.get(k)) for k in PROBE_LAYER_COLUMNS))
            for row in (probe or {}).get("layers") or []
        ],
    )
