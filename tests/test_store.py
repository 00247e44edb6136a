"""The SQLite store: schema and migrations, run lifecycle, no duplicates, concurrent writers lose nothing."""

from __future__ import annotations

import multiprocessing as mp
import re
import socket
import sqlite3
import subprocess
import sys

import pytest
from test_study_fakes import fake_study, fake_task

from depthlab import InputError
from depthlab.study import Store, schema
from depthlab.study.store import owner_id, owner_is_gone


def _count(store: Store, table: str) -> int:
    return store.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def test_new_store_is_wal_versioned_and_sound(tmp_path):
    with Store(str(tmp_path / "sub" / "s.sqlite")) as s:
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 10_000
        assert s.version == schema.SCHEMA_VERSION == schema.current_version(s.conn)
        tables = {r[0] for r in s.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {
            "studies",
            "runs",
            "study_runs",
            "metrics",
            "layer_metrics",
            "probes",
            "probe_layers",
        } <= tables
        assert s.integrity() == "ok"


def test_report_side_never_creates_a_store(tmp_path):
    with pytest.raises(InputError, match="no study store"):
        Store(str(tmp_path / "none.sqlite"), create=False)
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with pytest.raises(InputError, match="is not a depthlab store \\(it is empty\\)"):
        Store(str(empty), create=False)
    assert empty.stat().st_size == 0
    with Store(str(empty)) as s:  # the study side makes an empty file its new store
        assert s.version == schema.SCHEMA_VERSION


def _snapshot(folder) -> dict:
    """Every file of ``folder``: name -> (bytes, mtime in ns)."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def _user_database(path, tables=("contacts", "notes")) -> None:
    conn = sqlite3.connect(path)
    for t in tables:
        conn.execute(f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute(f"INSERT INTO {t} (name) VALUES ('Ada')")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("create", [True, False])
def test_a_users_database_is_refused_and_left_byte_for_byte(tmp_path, create):
    path = tmp_path / "other.db"
    _user_database(path)
    before = _snapshot(tmp_path)
    with pytest.raises(InputError) as e:
        Store(str(path), create=create)
    msg = str(e.value)
    # from Python the path is the argument db (the command line's --db: tests/test_study_cli.py)
    assert msg == f"{path} is not a depthlab store (it holds tables: contacts, notes); choose another db"
    assert _snapshot(tmp_path) == before  # same bytes, same mtime, no -wal/-shm beside it
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()


def test_a_database_with_a_leftover_schema_version_table_is_still_refused(tmp_path):
    """What older depthlab versions left in a user's file (schema_version added) is not a store either."""
    path = tmp_path / "other.db"
    _user_database(path, tables=("contacts", "schema_version"))
    before = _snapshot(tmp_path)
    with pytest.raises(InputError, match="holds tables: contacts, schema_version"):
        Store(str(path))
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("create", [True, False])
def test_a_file_that_is_not_sqlite_is_refused_unchanged(tmp_path, create):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database, just some bytes" * 100)
    before = _snapshot(tmp_path)
    with pytest.raises(InputError, match="is not a depthlab store \\(it is not a SQLite database\\)"):
        Store(str(junk), create=create)
    assert _snapshot(tmp_path) == before
    with pytest.raises(InputError, match="is a folder"):
        Store(str(tmp_path))


def test_an_existing_store_still_opens(tmp_path):
    path = str(tmp_path / "s.sqlite")
    study = fake_study(depths=(2,))
    with Store(path) as s:
        s.add_study(study.name, study.to_dict(), study.config_hash(), study.expand())
    with Store(path, create=False) as s:
        assert s.find_study()["name"] == "fake"


def test_study_runs_are_shared_by_hash_not_duplicated(tmp_path):
    study = fake_study()
    specs = study.expand()
    with Store(str(tmp_path / "s.sqlite")) as s:
        sid = s.add_study(study.name, study.to_dict(), study.config_hash(), specs)
        assert s.add_study(study.name, study.to_dict(), study.config_hash(), specs) == sid
        bigger = fake_study(depths=(2, 4, 6))
        sid2 = s.add_study(bigger.name, bigger.to_dict(), bigger.config_hash(), bigger.expand())
        assert sid2 != sid
        assert _count(s, "runs") == len(bigger.expand())  # the first study's runs are reused
        assert [r["config_hash"] for r in s.runs(sid)] == [x.hash for x in specs]  # grid order kept
        assert all(r["status"] == "queued" for r in s.runs(sid2))
        assert s.find_study()["id"] == sid2 and s.find_study("fake")["id"] == sid2
        with pytest.raises(
            InputError, match=r"^study other: no such study in .* \(studies: fake \(id 1, 2\)\)$"
        ):
            s.find_study("other")  # both grids named 'fake' are listed, each by the id that reaches it


def test_a_grid_edited_under_its_old_name_is_said_to_be_a_new_study(tmp_path):
    import io

    from test_study_fakes import fake_task

    from depthlab.study import run_study

    db = str(tmp_path / "s.sqlite")
    said = io.StringIO()
    run_study(fake_study(depths=(2,)), db=db, task=fake_task, progress=False, out=said)
    assert "note:" not in said.getvalue()
    said = io.StringIO()
    run_study(fake_study(depths=(2, 4)), db=db, task=fake_task, progress=False, out=said)
    assert (
        "note: " + db + " also holds a study named 'fake' with another grid (id 1); this grid is study 2,"
        in said.getvalue()
    )


def test_an_extended_grid_runs_only_its_new_runs_and_other_workers_are_the_same_study(tmp_path):
    import io

    from test_study_fakes import fake_task

    from depthlab.study import run_study

    db = str(tmp_path / "s.sqlite")
    first = run_study(fake_study(depths=(2,)), db=db, task=fake_task, progress=False, out=io.StringIO())
    said = io.StringIO()  # the same grid on another number of workers, under another run limit
    again = run_study(
        fake_study(depths=(2,)), db=db, task=fake_task, workers=2, max_runs=5, progress=False, out=said
    )
    assert again.study_id == first.study_id and (again.ran, again.skipped) == (0, first.total)
    assert "note:" not in said.getvalue()
    bigger = run_study(fake_study(depths=(2, 4)), db=db, task=fake_task, progress=False, out=io.StringIO())
    assert bigger.study_id != first.study_id
    assert (bigger.total, bigger.skipped, bigger.ran) == (2 * first.total, first.total, first.total)


def test_claim_finish_release_lifecycle(tmp_path):
    study = fake_study(depths=(4,), warmups=(0,))
    specs = study.expand()
    with Store(str(tmp_path / "s.sqlite")) as s:
        sid = s.add_study(study.name, study.to_dict(), study.config_hash(), specs)
        (post, pre) = s.runs(sid)
        me = owner_id()
        assert s.claim(post["id"], me) and s.claim(pre["id"], me)
        assert s.claim(post["id"], "elsewhere-host:1")  # the owner is this very process: stale
        payload = {**fake_task(specs[0]), "host": "h", "seconds": 1.5}
        assert s.finish(post["id"], payload) == "done"
        assert s.finish(post["id"], payload) == "done"  # a re-run replaces its rows, never doubles them
        assert not s.claim(post["id"], me)  # done runs are never claimed again
        assert s.release(me) == 1  # pre was claimed, not finished: back to the queue
        post, pre = s.runs(sid)
        assert (post["status"], post["outcome"], post["probe_level"], post["probe_codes"]) == (
            "done",
            "stalled",
            "warning",
            "warmup-required",
        )
        assert post["val_loss"] == pytest.approx(payload["result"]["val_loss"]) and post["seconds"] == 1.5
        assert pre["status"] == "queued" and pre["owner"] is None
        n_steps = len(payload["metrics"])
        assert len(s.metrics(post["id"])) == n_steps
        assert len(s.layer_metrics(post["id"])) == n_steps * (4 + 1)
        assert (
            len(s.probe_layers(post["id"])) == 5
            and s.probe(post["id"])["verdicts"][0]["code"] == "warmup-required"
        )
        failed = s.finish(pre["id"], {"error": "Traceback ...\nRuntimeError: boom"})
        assert failed == "failed" and s.runs(sid)[1]["error"].endswith("boom")


def test_non_finite_numbers_are_stored_as_missing(tmp_path):
    study = fake_study(depths=(2,), warmups=(0,))
    spec = study.expand()[0]
    with Store(str(tmp_path / "s.sqlite")) as s:
        sid = s.add_study(study.name, study.to_dict(), study.config_hash(), [spec])
        payload = fake_task(spec)
        payload["metrics"][-1]["loss"] = float("nan")
        s.finish(s.runs(sid)[0]["id"], payload)
        assert s.metrics(s.runs(sid)[0]["id"])[-1]["loss"] is None


def test_dead_owner_is_detected():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    host = socket.gethostname()
    assert owner_is_gone(f"{host}:{proc.pid}")
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not owner_is_gone(f"{host}:{parent.pid}")
    finally:
        parent.kill()
        parent.wait()
    assert owner_is_gone(None) and owner_is_gone(owner_id())


def test_store_from_a_newer_depthlab_is_refused(tmp_path):
    path = str(tmp_path / "s.sqlite")
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version VALUES (?, 0)", (schema.SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match="newer than this depthlab"):
        Store(path)
    # which store is too new, by the flag it was given as: advise may read several
    with pytest.raises(InputError, match=f"^db {re.escape(path)}: the store is at schema version "):
        Store(path)
    with pytest.raises(InputError, match=f"^--atlas {re.escape(path)}: the store is at schema version "):
        Store(path, create=False, flag="--atlas")
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version VALUES ('x', 0)")
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match=f"^db {re.escape(path)}: the store's schema_version holds 'x'"):
        Store(path)


def test_migration_path_upgrades_an_existing_store_keeping_its_data(tmp_path, monkeypatch):
    path = str(tmp_path / "s.sqlite")
    study = fake_study(depths=(2,))
    with Store(path) as s:
        s.add_study(study.name, study.to_dict(), study.config_hash(), study.expand())
    nxt = schema.SCHEMA_VERSION + 1
    monkeypatch.setitem(schema.MIGRATIONS, nxt, ["ALTER TABLE runs ADD COLUMN note TEXT DEFAULT 'migrated'"])
    with Store(path) as s:
        assert s.version == schema.SCHEMA_VERSION  # the code's target did not move: nothing applied
    monkeypatch.setattr(schema, "SCHEMA_VERSION", nxt)
    with Store(path) as s:
        assert s.version == nxt
        notes = [r["note"] for r in s.conn.execute("SELECT note FROM runs")]
        assert notes == ["migrated"] * len(study.expand())


def _writer(path: str, k: int) -> None:
    """One process of the concurrency test: record a study and finish all its runs, one transaction each."""
    study = fake_study(name=f"w{k}", depths=tuple(range(2, 8)), warmups=(0,), seeds=(k,), steps=10)
    specs = study.expand()
    with Store(path) as s:
        sid = s.add_study(study.name, study.to_dict(), study.config_hash(), specs)
        for run, spec in zip(s.runs(sid), specs):
            if s.claim(run["id"], owner_id()):
                s.finish(run["id"], fake_task(spec))


@pytest.mark.slow
def test_concurrent_writers_lose_nothing(tmp_path):
    """Four processes write 4 x 12 runs (with metrics and telemetry) into one store at the same time."""
    path = str(tmp_path / "s.sqlite")
    Store(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, k)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    with Store(path) as s:
        assert _count(s, "runs") == 48 and _count(s, "study_runs") == 48 and _count(s, "studies") == 4
        assert s.conn.execute("SELECT COUNT(*) FROM runs WHERE status = 'done'").fetchone()[0] == 48
        steps = 10 // 5 + 1
        assert _count(s, "metrics") == 48 * steps
        streams = sum(range(2, 8)) + 6  # L + 1 streams per run, depths 2..7
        assert _count(s, "layer_metrics") == 4 * 2 * streams * steps  # 4 writers x 2 wrappings
        assert _count(s, "probe_layers") == 4 * 2 * streams
        assert s.integrity() == "ok"


def test_layer_columns_are_the_telemetry_keys():
    """The store keeps every per-layer number training logs, under the same names."""
    from depthlab.watch.keys import LAYER_KEYS

    assert schema.LAYER_COLUMNS == LAYER_KEYS


def test_a_version_1_store_migrates_and_keeps_its_telemetry(tmp_path):
    path = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    assert schema.migrate(conn, target=1) == 1
    conn.execute("INSERT INTO runs (id, config_hash, config_json, queued_at) VALUES (1, 'h', '{}', 0)")
    conn.execute(
        "INSERT INTO layer_metrics (run_id, step, layer, grad_norm, attn_grad, ffn_grad) VALUES (1, 10, 2, 1.0, 0.5, 0.25)"
    )
    conn.close()
    with Store(str(path)) as s:
        assert s.version == schema.SCHEMA_VERSION >= 2
        (row,) = s.layer_metrics(1)
    assert (row["attn_grad_norm"], row["ffn_grad_norm"], row["cross_grad_norm"]) == (0.5, 0.25, None)
    assert "attn_grad" not in row
