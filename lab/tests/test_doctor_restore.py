"""A study store rebuilt from a committed run record (depthlab_lab.restore; `depthlab reproduce doctor
--restore`): the recorded outcomes written back without training, a stored run never replaced, a record
the grid no longer matches refused before the store is touched, and the doctor's record restorable."""

from __future__ import annotations

import json

import pytest

from depthlab.cli import main
from depthlab.errors import InputError
from depthlab.study.grid import StudyConfig
from depthlab.study.store import Store
from depthlab_lab.docgen.doctor_score import HELDOUT, SCALE_GRIDS, TUNING
from depthlab_lab.restore import HOST, read_record, restore

pytestmark = pytest.mark.usefixtures("one_thread")

GRID = """name: restore-tiny
model: {arch: decoder, n_heads: 2, n_layers: 2, d_model: 16, vocab_size: 256, max_len: 16}
train: {task: lm, steps: 20, batch_size: 2, seq_len: 8, log_every: 5, seed: 0}
axes:
  wrap: [post, pre]
"""


def _grid(tmp_path):
    path = tmp_path / "restore-tiny.yaml"
    path.write_text(GRID)
    return str(path), StudyConfig.from_yaml(str(path)).expand()


def _record(tmp_path, rows, name="record.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"studies": {"restore-tiny": rows}}))
    return str(path)


def _rows(specs):
    return [
        {"config_hash": specs[0].hash, "outcome": "trained", "val_loss": 2.5, "unigram_loss": 3.1, "escape_step": 10,
         "started_at": 1764614340.0, "finished_at": 1764614400.0},
        {"config_hash": specs[1].hash, "outcome": "stalled", "val_loss": 3.1, "unigram_loss": 3.1, "escape_step": None,
         "seconds": 12.5},
    ]  # fmt: skip


def _stored(db):
    with Store(db, create=False) as store:
        sid = store.find_study("restore-tiny")["id"]
        return {r["config_hash"]: dict(r, probe=store.probe(r["id"])) for r in store.runs(sid)}


def test_recorded_runs_are_written_back_done_with_their_outcomes_and_a_probe(tmp_path):
    grid, specs = _grid(tmp_path)
    db = str(tmp_path / "s.sqlite")
    assert restore(_record(tmp_path, _rows(specs)), db, [grid]) == {"restore-tiny": (2, 0)}
    runs = _stored(db)
    a, b = runs[specs[0].hash], runs[specs[1].hash]
    assert (a["status"], a["outcome"], a["val_loss"], a["escape_step"], a["host"]) == (
        "done",
        "trained",
        2.5,
        10,
        HOST,
    )
    assert (b["outcome"], b["escape_step"], b["seconds"], a["seconds"]) == ("stalled", None, 12.5, None)
    assert (a["started_at"], a["finished_at"], b["started_at"]) == (
        1764614340.0,
        1764614400.0,
        None,
    )  # as run
    assert a["probe"]["config"]["probe"]["step_size"] > 0  # taken again, as a study run takes it
    assert a["probe"]["config"]["probe"]["lr"] == specs[0].train.lr


def test_a_stored_run_is_never_replaced(tmp_path):
    grid, specs = _grid(tmp_path)
    db = str(tmp_path / "s.sqlite")
    restore(_record(tmp_path, _rows(specs)[:1]), db, [grid])
    changed = [dict(r, outcome="diverged", val_loss=9.0) for r in _rows(specs)]
    assert restore(_record(tmp_path, changed, "b.json"), db, [grid]) == {"restore-tiny": (1, 1)}
    runs = _stored(db)
    assert runs[specs[0].hash]["outcome"] == "trained" and runs[specs[0].hash]["val_loss"] == 2.5
    assert runs[specs[1].hash]["outcome"] == "diverged"  # the one not stored before is written


def test_a_record_the_grid_no_longer_produces_is_refused_before_the_store_is_touched(tmp_path):
    grid, specs = _grid(tmp_path)
    db = tmp_path / "s.sqlite"
    rows = _rows(specs) + [{"config_hash": "0000000000000000", "outcome": "trained"}]
    with pytest.raises(InputError, match="not in .* as it stands"):
        restore(_record(tmp_path, rows), str(db), [grid])
    with pytest.raises(InputError, match="outcome 'fine'"):
        restore(_record(tmp_path, [dict(_rows(specs)[0], outcome="fine")]), str(db), [grid])
    assert not db.exists()


@pytest.mark.parametrize("text", ["not json", "[]", '{"studies": {"a": 1}}'])
def test_a_file_that_is_not_a_run_record_is_refused(tmp_path, text):
    (tmp_path / "r.json").write_text(text)
    with pytest.raises(InputError, match="run record"):
        read_record(str(tmp_path / "r.json"))


def test_the_cli_refuses_restore_off_doctor_and_a_missing_record(tmp_path, capsys):
    for argv in (
        ["reproduce", "seeds", "--restore", str(tmp_path / "r.json")],
        ["reproduce", "doctor", "--restore", str(tmp_path / "none.json"), "--db", str(tmp_path / "d.sqlite")],
    ):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert err.count("\n") == 1 and "--restore" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_every_run_of_the_doctors_committed_record_is_in_its_grid_as_it_stands():
    """The committed record restores: each of its runs is a run its grid file produces today."""
    studies = read_record("docs/doctor-runs.json")
    grids = {StudyConfig.from_yaml(p).name: p for p in (TUNING, HELDOUT, *SCALE_GRIDS)}
    assert set(studies) <= set(grids), set(studies) - set(grids)
    for name, rows in studies.items():
        hashes = {s.hash for s in StudyConfig.from_yaml(grids[name]).expand()}
        assert {r["config_hash"] for r in rows} <= hashes, name


def test_a_grid_restored_without_start_times_is_still_flagged_when_its_record_came_later():
    """A late record is flagged from the start time the grid kept, where its restored runs have none."""
    from depthlab_lab.docgen.doctor_heldout import FIRST, fitted_after_start

    record = {"fitted_from": {"when": "2026-12-01 18:48 UTC"}}
    assert fitted_after_start(record, [{"started_at": None}], FIRST.first_started).startswith(
        "fitted 2026-12-01 18:48"
    )
    assert fitted_after_start(record, [{}]) is None  # nothing known: no flag, and none invented
    early = {"fitted_from": {"when": "2026-12-01 18:30 UTC"}}
    assert fitted_after_start(early, [{}], FIRST.first_started) is None
