"""What makes a file a usable study store, checked before SQLite writes a byte to it.

A ``--db`` file is refused (InputError, one line, the file left byte for byte as it was, nothing made
beside it) when it is not a regular file, not a SQLite database, a SQLite database that holds
something else, damaged (``PRAGMA quick_check``), or, for a writer, read-only. A store this process
may only read is opened without a journal, so that reading it leaves no -wal or -shm file behind.
Rows that turn out damaged while they are read (text that is not UTF-8, JSON cut short) raise the
same one-line error (:func:`reads`).
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import urllib.parse

from depthlab.errors import InputError, option
from depthlab.paths import broken_link, check_input_file, check_path, existing_ancestor
from depthlab.paths import printable as shown

STORE_TABLES = {"studies", "runs", "study_runs", "metrics", "layer_metrics", "probes", "probe_layers"}
RUN_NUMBERS = ("outcome_step", "final_train_loss", "val_loss", "val_bpb", "unigram_loss", "accuracy",
               "tokens_per_s", "seconds", "attempts", "escape_step")  # fmt: skip
SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database file
BUSY_TIMEOUT_S = 60.0


# Kernel views, not places for files: a store there could never hold a result (or would write to a device)
KERNEL_VIEWS = ("/proc", "/sys", "/dev")


def check_store_path(path, flag: str | None = None) -> None:
    """Refuse (InputError, one line with the reason) a store path that SQLite would accept but where no
    result could be kept, before any work: an empty path and ``:memory:`` (SQLite's temporary and
    in-memory databases: everything is lost on exit), a URI, a folder, a dangling symbolic link, a
    path in /proc, /sys or /dev, a path under a file, and anything :func:`depthlab.paths.check_path`
    refuses."""
    flag = flag or option("db")  # --db on the command line, db from Python
    if not isinstance(path, str) or not path.strip():
        raise InputError(f"{flag}: an empty path names no file (SQLite would keep the store in a temporary file, "
                         "lost on exit); name the store's file")  # fmt: skip
    if path.strip() == ":memory:":
        raise InputError(f"{flag} :memory: is SQLite's in-memory database: every result would be lost on exit; "
                         "name a file")  # fmt: skip
    if path.lower().startswith("file:"):
        raise InputError(f"{flag} {shown(path)}: a SQLite URI is not accepted; name the store's file")
    check_path(path, flag)
    link = broken_link(path)
    if link is not None:
        raise InputError(f"{flag} {shown(path)} is {link}; name the store's file itself")
    real = os.path.realpath(path)
    for view in KERNEL_VIEWS:
        if real == view or real.startswith(view + "/"):
            raise InputError(f"{flag} {shown(path)} is in {view}, the kernel's view of the system, not a place "
                             f"for files; choose another {flag}")  # fmt: skip
    if os.path.isdir(path):
        raise InputError(f"{flag} {shown(path)} is a folder, not a study store; choose another {flag}")
    parent = existing_ancestor(os.path.dirname(path) or ".")  # where the store's file would go
    if not parent.is_dir():
        raise InputError(
            f"{flag} {shown(path)}: {shown(parent)} is a file, not a folder; choose another {flag}"
        )


def check_sqlite_header(path: str, flag: str | None = None) -> None:
    """Refuse (InputError) an existing, non-empty file that is not a SQLite database (reads 16 bytes),
    and anything that is not a regular file (a FIFO would block the read forever)."""
    flag = flag or option("db")  # --db on the command line, db from Python
    check_store_path(path, flag)
    check_input_file(path, flag, missing_ok=True)
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return  # a new store
    except OSError as e:
        raise InputError(f"cannot open study store {path}: {e.strerror}") from None
    if head and head != SQLITE_MAGIC:
        raise InputError(
            f"{path} is not a depthlab store (it is not a SQLite database); choose another {flag}"
        )


def check_is_store(conn: sqlite3.Connection, path: str, create: bool, flag: str = "--db") -> None:
    """Refuse (InputError) a database that holds anything but a depthlab store, before it is changed.

    A depthlab store has ``schema_version`` and, once migrated, ``studies`` and ``runs`` (a newer
    depthlab's extra tables are allowed: the migration then refuses it by version). A database with
    no table at all is a new store when ``create``, and refused otherwise (a report never creates one).
    Only reads ``sqlite_master``, so a user's database is left byte for byte as it was. ``flag``: how the
    refusal names the path (``--atlas`` for a store given to advise as evidence).
    """
    tables = {
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND substr(name, 1, 7) != 'sqlite_'"
        )
    }
    if not tables:
        if create:
            return
        raise InputError(f"{path} is not a depthlab store (it is empty); choose another {flag}")
    if "schema_version" in tables and tables == {"schema_version"}:
        return  # a store whose first migration another process is making
    if "schema_version" in tables and {"studies", "runs"} <= tables:
        missing = sorted(STORE_TABLES - tables)
        if missing:  # refused before a byte is written: a study would record itself, then fail
            raise InputError(damaged(path, f"its table {', '.join(missing)} is missing"))
        return
    shown = ", ".join(sorted(tables)[:8]) + (", ..." if len(tables) > 8 else "")
    raise InputError(f"{path} is not a depthlab store (it holds tables: {shown}); choose another {flag}")


def check_row(path: str, what: str, row: dict, numeric: tuple[str, ...]) -> dict:
    """``row`` once its ``numeric`` columns hold numbers or NULL (SQLite keeps any text a hand wrote in
    a REAL column); InputError naming the store, the row and the column otherwise."""
    for k in numeric:
        v = row.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            shown_v = repr(v) if len(repr(v)) <= 30 else repr(v)[:26] + "..."
            raise InputError(damaged(path, f"{what}: {k} holds {shown_v}, not a number"))
    return row


def check_run_shape(path: str, row: dict) -> dict:
    """A decoded run row of :meth:`Store.runs`, checked: its config a {model, train} object, its axes
    an object, its numbers numbers (InputError naming the run otherwise)."""
    cfg, what = row.get("config"), f"run {row.get('id')}"
    if not (isinstance(cfg, dict) and all(isinstance(cfg.get(k), dict) for k in ("model", "train"))):
        raise InputError(damaged(path, f"{what}: its config_json is not a run's config"))
    if not isinstance(row.get("axes"), dict):
        raise InputError(damaged(path, f"{what}: its axes_json is not an object"))
    return check_row(path, what, row, RUN_NUMBERS)


def check_quick(conn: sqlite3.Connection, path: str) -> None:
    """Refuse (InputError) a store whose pages are damaged: ``PRAGMA quick_check`` reads every table and
    index page and checks its structure (not the values: SQLite keeps no checksum of a value)."""
    problems = [r[0] for r in conn.execute("PRAGMA quick_check(3)")]
    if problems != ["ok"]:
        raise InputError(damaged(path, problems[0]))


def damaged(path: str, why) -> str:
    """The one line for a store that cannot be read as it is."""
    text = " ".join(str(why).split())
    text = text if len(text) <= 120 else text[:117] + "..."
    return f"{path} is damaged ({text}); it was left as it was: restore a copy, or choose another --db"


def unwritable(path: str) -> str | None:
    """Why this process may not write the store at ``path`` (None when it may): the file is read-only,
    or its folder is (SQLite keeps the -wal and -shm files beside the store)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{path} is read-only"
    if os.path.isdir(folder) and not os.access(folder, os.W_OK):
        return f"the folder of {path} is read-only (SQLite keeps its -wal and -shm files beside the store)"
    return None


def connect(path: str, read_only: bool) -> sqlite3.Connection:
    """A connection in autocommit mode. ``read_only``: opened so that nothing is written or made beside
    the file (``immutable``, unless a -wal file already holds committed pages: then ``mode=ro``)."""
    if not read_only:
        return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    how = "mode=ro" if os.path.exists(path + "-wal") else "immutable=1"
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?{how}"
    return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)


def open_error(path: str, e: Exception) -> InputError:
    """The one-line InputError for a store that cannot be opened or read."""
    if isinstance(e, OSError):
        return InputError(f"cannot open study store {path}: {e.strerror or e}")
    if "locked" in str(e) or "busy" in str(e):
        return InputError(f"{path} stayed locked by another process for {BUSY_TIMEOUT_S:.0f} s: {e}")
    return InputError(damaged(path, e))


def reads(method):
    """A reading method of the Store whose damaged rows (text that is not UTF-8, JSON cut short, a
    malformed page) raise one InputError naming the store, not a raw sqlite3 or decode error."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.DatabaseError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise open_error(self.path, e) from None

    return wrapper
