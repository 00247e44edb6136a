"""A run record that cannot be written back as it is (depthlab_lab.restore; `reproduce doctor|ladder
--restore`): every row is checked before anything is written (types, duplicates, each row's own fields
against the config its hash names), each run is written in one transaction (a failure or a kill part way
leaves no run done without its telemetry and times, and the next restore completes it), and a record of
the other command's studies, or a file that is not a record, is one line before anything starts."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from depthlab.cli import main
from depthlab.errors import InputError
from depthlab.study.grid import StudyConfig
from depthlab.study.store import Store
from depthlab_lab.restore import HOST, restore

pytestmark = pytest.mark.usefixtures("one_thread")

GRID = """name: restore-tiny
model: {arch: decoder, n_heads: 2, n_layers: 2, d_model: 16, vocab_size: 256, max_len: 16}
train: {task: lm, steps: 20, batch_size: 2, seq_len: 8, log_every: 5, seed: 0}
axes:
  wrap: [post, pre]
"""


@pytest.fixture
def grid(tmp_path):
    path = tmp_path / "restore-tiny.yaml"
    path.write_text(GRID)
    return str(path), StudyConfig.from_yaml(str(path)).expand()


def _rows(specs) -> list[dict]:
    """Both runs as a record keeps them: their own fields, results, times, a logged step and telemetry."""
    rows = []
    for k, spec in enumerate(specs):
        rows.append(
            {"config_hash": spec.hash, "wrap": spec.model.wrap, "d_model": 16, "n_layers": 2, "lr": spec.train.lr,
             "seed": 0, "outcome": "trained", "val_loss": 2.5 + k, "unigram_loss": 3.1, "escape_step": 10,
             "seconds": 12.5, "started_at": 1764614340.0 + k, "finished_at": 1764614400.0 + k,
             "metrics": [{"step": 1, "loss": 5.5, "lr": 1e-3}],
             "layers": [{"step": 20, "layer": i, "update_ratio": 0.1 * (i + 1)} for i in range(3)]}
        )  # fmt: skip
    return rows


def _record(tmp_path, rows, name="record.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"studies": {"restore-tiny": rows}}))
    return str(path)


def _runs(db) -> dict[str, dict]:
    with Store(db, create=False) as store:
        sid = store.find_study("restore-tiny")["id"]
        return {r["config_hash"]: dict(r, layers=store.layer_metrics(r["id"])) for r in store.runs(sid)}


def _whole(db, rows) -> None:
    """Every run the store holds done has its recorded times and telemetry."""
    by_hash = {r["config_hash"]: r for r in rows}
    for h, run in _runs(db).items():
        if run["status"] == "done":
            row = by_hash[h]
            assert (run["started_at"], run["finished_at"]) == (row["started_at"], row["finished_at"]), h
            assert len(run["layers"]) == len(row["layers"]), h


@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("val_loss", "abc", "val_loss is 'abc', not a number"),
        ("val_loss", True, "val_loss is true, not a number"),
        ("unigram_loss", [3.1], "unigram_loss is [3.1], not a number"),
        ("final_train_loss", "2.5", "final_train_loss is '2.5', not a number"),
        ("seconds", "12.5", "seconds is '12.5', not a time in seconds"),
        ("started_at", "2026-12-01", "started_at is '2026-12-01', not a time in seconds"),
        ("finished_at", -5.0, "finished_at is -5.0, not a time in seconds"),
        ("escape_step", "10", "escape_step is '10', not a step"),
        ("escape_step", 10.5, "escape_step is 10.5, not a step"),
        ("escape_step", True, "escape_step is true, not a step"),
        ("escape_step", 2**70, "escape_step is 1180591620717411303424, not a step"),
        ("outcome", ["trained"], 'has the outcome ["trained"]'),
        ("config_hash", None, "has the config_hash null, not a hash"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_before_anything_is_written(
    tmp_path, grid, field, value, needle
):
    rows = _rows(grid[1])
    rows[1][field] = value
    db = tmp_path / "s.sqlite"
    with pytest.raises(InputError, match="run record") as e:
        restore(_record(tmp_path, rows), str(db), [grid[0]], probe=False)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert not db.exists()


@pytest.mark.parametrize(
    "where, value, needle",
    [
        ("layers", {"step": 2**70, "layer": 0}, "the step 1180591620717411303424, beyond a stored step"),
        ("layers", {"step": 20, "layer": -1}, "the layer -1, beyond a stored step"),
        ("layers", {"step": 20, "layer": 0, "update_ratio": "big"}, "a value that is not a number"),
        ("layers", {"step": 20, "layer": 0, "update_ratio": True}, "a value that is not a number"),
        ("layers", {"step": 20, "layer": 0, "grad_norm": 10**400}, "a value that is not a number"),
        ("layers", {"step": 20, "layer": 2, "update_ratio": 0.3}, "holds the same step and layer twice"),
        ("metrics", {"step": 2**64}, "beyond a stored step"),
        ("metrics", {"step": 1, "loss": 5.0}, "holds the same step twice"),
        ("metrics", {"step": 4, "extra_json": "{cut"}, "extra_json that is not a JSON object"),
    ],
)
def test_telemetry_beyond_the_store_is_refused_before_anything_is_written(
    tmp_path, grid, where, value, needle
):
    """A layer row at step 2**70 at the end of the record: refused whole (it failed with exit 1 once the
    runs before it were written)."""
    rows = _rows(grid[1])
    rows[-1][where].append(value)
    db = tmp_path / "s.sqlite"
    with pytest.raises(InputError, match="run record") as e:
        restore(_record(tmp_path, rows), str(db), [grid[0]], probe=False)
    assert needle in str(e.value)
    assert not db.exists()


def test_a_run_recorded_twice_is_refused(tmp_path, grid):
    rows = _rows(grid[1])
    db = tmp_path / "s.sqlite"
    twice = [*rows, dict(rows[0], val_loss=9.0)]
    with pytest.raises(InputError, match=f"run {rows[0]['config_hash']} of restore-tiny is recorded 2 times"):
        restore(_record(tmp_path, twice), str(db), [grid[0]], probe=False)
    assert not db.exists()


@pytest.mark.parametrize(
    "field, value", [("wrap", None), ("seed", 1), ("d_model", 32), ("lr", 0.5), ("seed", True)]
)
def test_a_row_whose_fields_disagree_with_its_hash_is_refused(tmp_path, grid, field, value):
    rows = _rows(grid[1])
    if value is None:  # two rows' hashes swapped: each result would land on the other config
        rows[0]["config_hash"], rows[1]["config_hash"] = rows[1]["config_hash"], rows[0]["config_hash"]
    else:
        rows[1][field] = value
    db = tmp_path / "s.sqlite"
    with pytest.raises(InputError, match=f"its {field} is .* but its config_hash names a run with {field}"):
        restore(_record(tmp_path, rows), str(db), [grid[0]], probe=False)
    assert not db.exists()


def _trap(db: str, sql: str) -> None:
    """A trigger that fails (or kills the writer) when the first run's telemetry is written."""
    conn = sqlite3.connect(db)
    conn.execute(f"CREATE TRIGGER trap AFTER INSERT ON layer_metrics WHEN NEW.run_id = 1 BEGIN {sql}; END")
    conn.commit()
    conn.close()


def _new_store(db: str, grid) -> None:
    study = StudyConfig.from_yaml(grid[0])
    with Store(db) as s:
        s.add_study(study.name, study.to_dict(), study.config_hash(grid[1]), grid[1])


def test_a_failure_part_way_through_a_run_leaves_it_unwritten_and_the_next_restore_completes_it(
    tmp_path, grid
):
    rows = _rows(grid[1])
    record, db = _record(tmp_path, rows), str(tmp_path / "s.sqlite")
    _new_store(db, grid)
    _trap(db, "SELECT RAISE(ABORT, 'the disk went away')")
    with pytest.raises(sqlite3.DatabaseError, match="the disk went away"):
        restore(record, db, [grid[0]], probe=False)
    _whole(db, rows)  # no run done without its telemetry and times
    assert all(r["status"] == "queued" for r in _runs(db).values())
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER trap")
    conn.commit()
    conn.close()
    assert restore(record, db, [grid[0]], probe=False) == {"restore-tiny": (2, 0)}  # not "already stored"
    _whole(db, rows)


KILLER = """
import os, signal, sys
import depthlab.study.store as store
from depthlab_lab.restore import restore
real = store.connect
def connect(path, read_only):
    conn = real(path, read_only)
    conn.create_function("die", 0, lambda: os.kill(os.getpid(), signal.SIGKILL))
    return conn
store.connect = connect
restore(sys.argv[1], sys.argv[2], [sys.argv[3]], probe=False)
"""


def test_a_restore_killed_mid_run_leaves_no_run_done_without_its_telemetry(tmp_path, grid):
    """SIGKILL while the first run's telemetry is written (a trigger calls a function that kills the
    process): the run is not left done without it, and the next restore writes it whole."""
    rows = _rows(grid[1])
    record, db = _record(tmp_path, rows), str(tmp_path / "s.sqlite")
    _new_store(db, grid)
    _trap(db, "SELECT die()")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", KILLER, record, db, grid[0]], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    _whole(db, rows)
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER trap")
    conn.commit()
    conn.close()
    assert restore(record, db, [grid[0]], probe=False) == {"restore-tiny": (2, 0)}
    _whole(db, rows)
    assert {r["status"] for r in _runs(db).values()} == {"done"}


def test_a_run_an_earlier_restore_left_without_its_telemetry_is_completed(tmp_path, grid):
    """The state an earlier version left when stopped between its two transactions: the result written
    (done, finished at the time of restoring), no start time and no telemetry. The next restore completes
    it instead of calling it already stored; a run trained here is never touched."""
    rows = _rows(grid[1])
    record, db = _record(tmp_path, rows), str(tmp_path / "s.sqlite")
    _new_store(db, grid)
    with Store(db) as s:
        s.finish(1, {"result": {"outcome": "trained", "val_loss": 2.5}, "metrics": [{"step": 1, "loss": 5.5}],
                     "host": HOST, "seconds": 12.5})  # fmt: skip
        s.finish(2, {"result": {"outcome": "stalled", "val_loss": 7.0}, "host": "here", "seconds": 3.0})
    assert restore(record, db, [grid[0]], probe=False) == {"restore-tiny": (1, 1)}
    runs = _runs(db)
    first, trained = runs[rows[0]["config_hash"]], runs[rows[1]["config_hash"]]
    assert (first["started_at"], first["finished_at"]) == (rows[0]["started_at"], rows[0]["finished_at"])
    assert len(first["layers"]) == 3
    assert (trained["host"], trained["outcome"], trained["layers"]) == ("here", "stalled", [])


def test_a_whole_restored_run_is_kept_as_it_is(tmp_path, grid):
    rows = _rows(grid[1])
    db = str(tmp_path / "s.sqlite")
    assert restore(_record(tmp_path, rows), db, [grid[0]], probe=False) == {"restore-tiny": (2, 0)}
    changed = [dict(r, val_loss=9.0, outcome="diverged") for r in rows]
    assert restore(_record(tmp_path, changed, "b.json"), db, [grid[0]], probe=False) == {
        "restore-tiny": (0, 2)
    }
    assert {r["val_loss"] for r in _runs(db).values()} == {2.5, 3.5}


def _no_training(*args, **kwargs):
    raise AssertionError("the doctor's grids started training")


def _doctor(tmp_path, record: str) -> list[str]:
    return ["reproduce", "doctor", "--restore", record, "--db", str(tmp_path / "d.sqlite"),
            "--scale-db", str(tmp_path / "s.sqlite"), "--doc", str(tmp_path / "d.md")]  # fmt: skip


def test_the_doctor_refuses_the_ladders_record_before_anything_starts(tmp_path, capsys, monkeypatch):
    """It restored nothing, said nothing and started 45 minutes of training."""
    monkeypatch.setattr("depthlab_lab.cli.reproduce.write_doctor_doc", _no_training)
    assert main(_doctor(tmp_path, "docs/reproductions-ladder-runs.json")) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "holds none of the doctor's studies" in err and "Traceback" not in err, (
        err
    )
    assert "ladder-depth-d32" in err and "reproduce ladder --restore" in err
    assert out == "" and list(tmp_path.iterdir()) == []


def test_the_ladder_refuses_the_doctors_record(tmp_path, capsys):
    argv = [
        "reproduce",
        "ladder",
        "--plan",
        "--db",
        str(tmp_path / "l.sqlite"),
        "--restore",
        "docs/doctor-runs.json",
    ]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert (
        err.count("\n") == 1 and "holds none of the ladder's studies" in err and "doctor --restore" in err
    ), err
    assert out == "" and list(tmp_path.iterdir()) == []


def test_a_doctor_record_with_a_study_that_is_none_of_the_doctors_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("depthlab_lab.cli.reproduce.write_doctor_doc", _no_training)
    studies = json.loads(open("docs/doctor-runs.json").read())["studies"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"studies": {"doctor-tuning": studies["doctor-tuning"][:2], "mine": []}}))
    assert main(_doctor(tmp_path, str(path))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mine is none of the doctor's studies" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


@pytest.mark.parametrize("command", ["doctor", "ladder"])
@pytest.mark.parametrize("what, needle", [("fifo", "is a named pipe (FIFO)"), ("/dev/zero", "is a character device"),
                                          ("folder", "is a directory"), ("missing", "no such run record")])  # fmt: skip
def test_a_restore_path_that_is_not_a_file_says_what_it_is(
    tmp_path, capsys, monkeypatch, command, what, needle
):
    monkeypatch.setattr("depthlab_lab.cli.reproduce.write_doctor_doc", _no_training)
    (tmp_path / "in").mkdir()
    os.mkfifo(tmp_path / "in" / "fifo")
    path = {"fifo": str(tmp_path / "in" / "fifo"), "/dev/zero": "/dev/zero", "folder": str(tmp_path / "in"),
            "missing": str(tmp_path / "in" / "none.json")}[what]  # fmt: skip
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    if command == "doctor":
        argv = _doctor(out_dir, path)
    else:
        argv = ["reproduce", "ladder", "--plan", "--db", str(out_dir / "l.sqlite"), "--restore", path]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and f"--restore {path}" in err and needle in err and "Traceback" not in err, (
        err
    )
    assert out == "" and list(out_dir.iterdir()) == []
