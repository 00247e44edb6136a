"""`depthlab calibrate` on runs it cannot fit on: a study with no finished run, one that is not a tuning
study (no probes; one class of outcome), studies that share runs, and a record that is not one. It never
removes a fitted rule it cannot fit again (it refuses in one line, the record left byte for byte, or keeps
the earlier rule and says so), never counts a run twice, and never says "wrote" for a record it did not
improve."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from depthlab.cli import main
from depthlab.doctor.record import RECORD_PATH
from depthlab.study.grid import StudyConfig
from depthlab.study.store import Store
from lab.tests.tuning_store import tuning_store

pytestmark = pytest.mark.usefixtures("one_thread")

GRID = {
    "name": "rho-tuning",
    "model": {"d_model": 16, "n_heads": 2, "max_len": 16},
    "train": {"steps": 20, "seq_len": 16, "batch_size": 2},
    "axes": {"wrap": ["pre", "rezero"], "n_layers": [2, 6, 12], "lr": [1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]},
}


def _judge(spec):
    """Stacks that never renormalise the stream: a relative update of 30 x lr, failing from rho 1 (ReZero
    from 0.3). They fit the limits on rho only: no step limit, no plateau (no probed step size)."""
    rho = 30 * spec.train.lr
    cut = 1.0 if spec.model.wrap == "pre" else 0.3
    probe = {"stack": {"renormalised_share": 0.0}, "probe": {"relative_update": rho}}
    return probe, {"outcome": "trained" if rho < cut else "diverged"}


@pytest.fixture
def record(tmp_path):
    """A copy of the library's own calibration record (every fitted section present)."""
    path = tmp_path / "calibration.json"
    shutil.copy(RECORD_PATH, path)
    return path


def _calibrate(capsys, argv):
    code = main(["calibrate", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(capsys, argv, needle, record):
    before = record.read_bytes()
    code, out, err = _calibrate(capsys, argv)
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert "wrote" not in out
    assert record.read_bytes() == before  # left byte for byte
    assert not os.path.exists(f"{record}.tmp")
    return err


def _queued_store(path) -> str:
    study = StudyConfig.from_dict(GRID)
    with Store(str(path)) as s:
        s.add_study(study.name, study.to_dict(), study.config_hash(), study.expand())
    return str(path)


def test_a_study_with_no_finished_run_is_refused_and_the_record_kept(tmp_path, record, capsys):
    db = _queued_store(tmp_path / "queued.sqlite")
    argv = ["--from", db, "rho-tuning", "--record", record]
    err = _refused(capsys, argv, "no finished run to fit on", record)
    assert "rho-tuning in " in err and "(0 of 36 runs done)" in err and "left as it was" in err


def test_a_study_whose_runs_have_no_probe_is_refused(tmp_path, record, capsys):
    """Not a tuning study: finished runs without an at-init probe (a store restored without probes)."""
    db = str(tmp_path / "noprobe.sqlite")
    study = StudyConfig.from_dict(GRID)
    with Store(db) as s:
        sid = s.add_study(study.name, study.to_dict(), study.config_hash(), study.expand())
        for run in s.runs(sid):
            s.finish(run["id"], {"result": {"outcome": "trained", "unigram_loss": 3.0}})
    _refused(capsys, ["--from", db, "rho-tuning", "--record", record], "has an at-init probe", record)


def test_a_study_that_fits_none_of_the_rules_is_refused(tmp_path, record, capsys):
    """Not a tuning study: every run trained (one lr, no limit to find), so no rule can be fitted."""
    grid = dict(GRID, name="one-class", axes={"wrap": ["pre"], "n_layers": [2, 6], "lr": [1e-3]})
    db = tuning_store(str(tmp_path / "one.sqlite"), grid, _judge)
    _refused(
        capsys, ["--from", db, "one-class", "--record", record], "fit none of the doctor's rules", record
    )


def test_a_section_the_runs_cannot_fit_is_kept_and_said(tmp_path, record, capsys):
    """Runs that fit the limits on rho only: the plateau prediction and the step limit are kept as they
    were (today's code dropped them, and the doctor fell back on its constants)."""
    old = json.loads(record.read_text())
    db = tuning_store(str(tmp_path / "rho.sqlite"), GRID, _judge)
    code, out, err = _calibrate(capsys, ["--from", db, "rho-tuning", "--record", record])
    assert code == 0 and "error" not in err and err.startswith("calibrate: 36 runs of 1 study"), err
    new = json.loads(record.read_text())
    assert new["escape"] == old["escape"] and new["step_limit"] == old["step_limit"]
    assert new["update_limit"]["families"]["free"]["runs"] == 18  # refitted on these runs
    kept = {k["section"] for k in new["fitted_from"]["kept"]}
    assert kept == {"escape", "step_limit"}
    assert "kept the earlier plateau prediction" in out and "kept the earlier step limit" in out
    assert out.rstrip().endswith(f"wrote {record}")


def test_the_same_study_named_twice_is_refused(tmp_path, record, capsys):
    db = tuning_store(str(tmp_path / "rho.sqlite"), GRID, _judge)
    argv = ["--from", db, "rho-tuning", "--from", db, "rho-tuning", "--record", record]
    _refused(capsys, argv, "is named twice", record)
    argv = ["--from", db, "rho-tuning", "--from", f"{tmp_path}/./rho.sqlite", "1", "--record", record]
    _refused(capsys, argv, "is named twice", record)  # the same study by another path and its id


def test_runs_two_studies_share_are_counted_once(tmp_path, record, capsys):
    db = tuning_store(str(tmp_path / "rho.sqlite"), GRID, _judge)
    copy = StudyConfig.from_dict(dict(GRID, name="rho-tuning-again"))
    with Store(db) as s:  # the same 36 runs under another name (shared by config hash)
        s.add_study(copy.name, copy.to_dict(), copy.config_hash(), copy.expand())
    other = tmp_path / "other.sqlite"  # and a copy of the store: the same runs in a second store
    shutil.copy(db, other)
    argv = ["--from", db, "rho-tuning", "--from", db, "rho-tuning-again", "--from", other, "rho-tuning"]
    code, out, err = _calibrate(capsys, [*argv, "--record", record])
    assert code == 0, err
    rec = json.loads(record.read_text())
    assert rec["update_limit"]["families"]["free"]["runs"] == 18  # not 54
    assert rec["update_limit"]["families"]["gated"]["runs"] == 18
    assert [s["shared"] for s in rec["fitted_from"]["studies"]] == [0, 36, 36]
    assert "72 runs shared by the studies named (the same config hash) were counted once" in out


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[1, 2]", "not a calibration record (a JSON list, not an object)"),
        ('"text"', "a JSON string"),
        ("{not json", "not a readable calibration record"),
        ("", "not a readable calibration record"),
        ("[" * 100000, "not a readable calibration record"),
        ('{"escape": 5}', "its 'escape' is not an object"),
        ('{"fitted_from": [1]}', "its 'fitted_from' is not an object"),
    ],
)
def test_a_record_that_is_not_one_is_refused_in_one_line(tmp_path, capsys, text, needle):
    db = tuning_store(str(tmp_path / "rho.sqlite"), GRID, _judge)
    path = tmp_path / "calibration.json"
    path.write_text(text)
    _refused(capsys, ["--from", db, "rho-tuning", "--record", path], needle, path)


def test_a_fifo_as_the_record_is_named(tmp_path, capsys):
    os.mkfifo(tmp_path / "calibration.json")
    code, out, err = _calibrate(capsys, ["--predictor", "--record", tmp_path / "calibration.json"])
    assert code == 2 and err.count("\n") == 1 and "named pipe (FIFO)" in err, err


def test_what_can_be_fitted_is_known_before_any_fit(tmp_path):
    """calibrate refuses runs that fit nothing before it fits (one line, no progress printed first): the
    check says a section can be fitted exactly when its fit gives one."""
    from depthlab_lab.calibrate.refit import FITS, fittable, tuning_runs
    from lab.tests.test_doctor_plateau import _built_store

    one = dict(GRID, name="one-class", axes={"wrap": ["pre"], "n_layers": [2, 6], "lr": [1e-3]})
    stores = [
        (tuning_store(str(tmp_path / "rho.sqlite"), GRID, _judge), "rho-tuning"),
        (tuning_store(str(tmp_path / "one.sqlite"), one, _judge), "one-class"),
        (_built_store(str(tmp_path / "plateau.sqlite")), "plateau-tuning"),
    ]
    seen = set()
    for db, name in stores:
        runs, _ = tuning_runs([(db, name)])
        can = fittable(runs)
        for key, fit in FITS.items():
            got = fit(runs)
            fitted = got is not None and (key != "escape" or bool(got["families"]))
            assert bool(can[key]) == fitted, (name, key)
            seen.add((key, fitted))
    assert len(seen) == 6  # every section seen both fitted and not


def test_a_missing_store_or_study_names_the_flag_typed(tmp_path, record, capsys):
    """--from names the store and the study: a refusal read '--db ...: no study store there' or
    '--study nope: no such study', flags calibrate does not have."""
    missing = str(tmp_path / "none.sqlite")
    err = _refused(
        capsys, ["--from", missing, "rho-tuning", "--record", record], "no study store there", record
    )
    assert err.startswith(f"depthlab calibrate: error: --from {missing}:"), err
    db = tuning_store(str(tmp_path / "rho.sqlite"), GRID, _judge)
    err = _refused(capsys, ["--from", db, "nope", "--record", record], "no such study", record)
    assert f"--from {db} nope: no such study" in err, err
