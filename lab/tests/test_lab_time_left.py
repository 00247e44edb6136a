"""The lab's long commands say what they will do and how long they expect before they start, and the time
left as they go (depthlab.progress.TimeLeft, the run times from depthlab.train.cost), as plain lines when
not on a terminal: a reproduction's runs, reproduce all, the ladder, the doctor (run from any folder: it
finds its grids) and calibrate. No test reads a real clock where a number is checked: time is a fake
monotonic clock and the cost model's seconds are set."""

from __future__ import annotations

import io
import json
import shutil

import pytest

from depthlab import progress
from depthlab.cli import main
from depthlab.doctor.record import RECORD_PATH
from depthlab.errors import InputError
from depthlab.study.runner import StudyOutcome
from depthlab_lab.docgen import doctor_scale, doctor_score
from depthlab_lab.docgen import reproductions as all_mod
from depthlab_lab.reproduce import REPRODUCTIONS, cost, dry_run, ladder_run, lm_runs
from depthlab_lab.reproduce.reproduction import Check, Reproduction
from lab.tests.test_calibrate_failures import GRID, _judge
from lab.tests.tuning_store import tuning_store

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def now(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    return clock


def test_the_lab_estimates_with_the_librarys_cost_model(monkeypatch):
    from depthlab.train import cost as library

    monkeypatch.setattr(library, "run_seconds", lambda m, t, bare=False: 42.0)
    m, t = lm_runs.configs({"n_layers": 2}, {"steps": 5})
    assert cost.run_seconds(m, t) == 42.0


def test_a_reproductions_runs_print_the_time_left_off_a_terminal(monkeypatch, now):
    """Two runs of 10 s expected; the first takes 20 s: the plain line says 20 s are left (the second at
    the measured speed), not 10."""
    err = io.StringIO()
    monkeypatch.setattr(progress.sys, "stderr", err)
    monkeypatch.setattr(cost, "run_seconds", lambda m, t: 10.0)
    monkeypatch.setattr(lm_runs, "is_done", lambda m, t: False)
    lm_runs.announce("demo", [({"n_layers": 2}, {"steps": 5}), ({"n_layers": 3}, {"steps": 5})], [0])
    (bar,) = lm_runs._PROGRESS
    assert bar.clock is not None and bar.clock.total_s() == 20.0
    m, t = lm_runs.configs({"n_layers": 2}, {"steps": 5, "seed": 0})
    now[0] = 20.0
    lm_runs._advance(m, t, 20.0)
    lines = err.getvalue().splitlines()
    assert lines[0].startswith(
        "demo: 2 training runs (0 already done in this process); expected time about 20 s"
    )
    assert lines[-1] == "reproduce demo: 1/2 runs, 20 s elapsed, about 20 s left"
    m, t = lm_runs.configs({"n_layers": 3}, {"steps": 5, "seed": 0})
    lm_runs._advance(m, t, 20.0)
    assert lm_runs._PROGRESS == [] and err.getvalue().splitlines()[-1].startswith("reproduce demo: 2/2 runs")


def test_reproduce_all_says_its_plan_first_and_the_time_left_after_each_claim(tmp_path, monkeypatch, capsys):
    def claim(name):
        return lambda quick=False, out_dir=None, scale="small": Reproduction(
            name, {}, [Check("c", "a < b", "deterministic", True)]
        )

    for name in ("fake-a", "fake-b"):
        monkeypatch.setitem(REPRODUCTIONS, name, claim(name))
    plans = {
        n: dry_run.ClaimPlan(n, 3, 1, 60.0, {(n, i): 30.0 for i in range(2)}, None)
        for n in ("fake-a", "fake-b")
    }
    monkeypatch.setattr(dry_run, "claim_plan", lambda name, scale, quick, cache: plans[name])
    doc = tmp_path / "docs" / "reproductions.md"
    all_mod.run_all(
        quick=True, doc=str(doc), names=["fake-a", "fake-b"], ladder_db=str(tmp_path / "l.sqlite"), plan=True
    )
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "reproduce all: 2 claims, 0 loaded from their current parts, 2 to run (4 training runs not in the run "
        "cache, 2 claims train); expected about 2 min of training (cost model: step times measured now; "
        "claims that train nothing not timed)"
    )
    done = [line for line in err if line.startswith("[1/2] fake-a: done; about ")]
    assert len(done) == 1 and done[0].endswith(" left for the rest")
    assert not any(
        line.startswith("[2/2] fake-b: done") for line in err
    )  # nothing left to say after the last


def test_the_ladder_says_the_time_left_of_the_whole_ladder_after_each_rung(tmp_path, monkeypatch):
    """Two rungs expected at 100 s each (one worker); the first takes 200 s: 200 s are left."""
    monkeypatch.setattr(cost, "run_seconds", lambda m, t: 25.0)
    monkeypatch.setattr(
        ladder_run, "run_study", lambda study, **kw: StudyOutcome(1, 4, 0, ran=4, seconds=200.0)
    )
    out = io.StringIO()
    todo = ladder_run.run_ladder(str(tmp_path / "l.sqlite"), ["batchnorm"], quick=True, workers=1, out=out)
    lines = out.getvalue().splitlines()
    assert len(todo) == 2 and lines[-3].startswith("ladder: 8 runs, 0 already done; expected about 3 min")
    assert lines[-2] == "ladder: 1/2 rungs done (ladder-quick-batchnorm-d16: 4 runs, 3 min); about 3 min left"
    assert lines[-1] == "ladder: 2/2 rungs done (ladder-quick-batchnorm-d32: 4 runs, 3 min)"


def test_the_doctor_says_its_plan_from_outside_the_repository(tmp_path, monkeypatch, capsys):
    """Run from another folder, reproduce doctor finds its grids (through depthlab_lab.lab_file), says how
    many runs it will train and probe and how long that is expected to take, then starts."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(doctor_score, "run_seconds", lambda m, t: 10.0)
    monkeypatch.setattr(doctor_score, "probe_seconds", lambda spec: 0.5)
    seen = {}

    def write(db, doc, scale_db, clock):
        seen["clock"] = clock
        raise InputError("stopped where the training starts")

    monkeypatch.setattr("depthlab_lab.cli.reproduce.write_doctor_doc", write)
    assert main(["reproduce", "doctor", "--db", "d.sqlite", "--doc", "d.md"]) == 2
    out, err = capsys.readouterr()
    assert err.strip() == "depthlab reproduce: error: stopped where the training starts"
    assert out.startswith(
        "the doctor's grids: 340 tiny training runs (0 already in d.sqlite), 340 to train: about 57 min; then "
        "340 runs' probes taken again (the scale grids' finished runs in runs/doctor-scale.sqlite included): "
        "about 3 min; "
        "about 60 min in all"
    )
    assert out.rstrip().endswith("then d.md written")
    clock = seen["clock"]
    assert clock.total_s() == pytest.approx(340 * 10.0 + 340 * 0.5)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # a plan writes nothing


def test_the_doctor_counts_the_probes_and_the_time_left_as_they_are_taken(monkeypatch, now):
    err = io.StringIO()
    monkeypatch.setattr(progress.sys, "stderr", err)
    clock = progress.TimeLeft(
        {"train g": 50.0, doctor_scale.probe_key("a"): 1.0, doctor_scale.probe_key("b"): 1.0}
    )
    monkeypatch.setattr(doctor_scale, "probe_at_init", lambda spec: (now.__setitem__(0, now[0] + 1.0), None))
    run = {"config_hash": "a", "config": {"model": {"n_layers": 2}, "train": {}}}
    with doctor_scale.probing(clock, 2, "reproduce doctor"):
        doctor_scale.probe_again(run)
        doctor_scale.probe_again(run)  # a run probed twice counts once
    assert clock.done == {doctor_scale.probe_key("a")}
    assert err.getvalue().splitlines() == ["reproduce doctor: 1/2 probes, 1 s elapsed, about 51 s left"]


def test_calibrate_says_what_it_fits_and_how_long_before_it_starts(tmp_path, capsys):
    db = tuning_store(str(tmp_path / "rho.sqlite"), GRID, _judge)
    record = tmp_path / "calibration.json"
    shutil.copy(RECORD_PATH, record)
    assert main(["calibrate", "--from", db, "rho-tuning", "--record", str(record)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(
        "calibrate: 36 runs of 1 study (36 finished); fitting the limits on rho (36 runs): expected about "
    )  # the plateau and the step limit cannot be fitted on these runs: not tried (kept, said on stdout)
    assert len(err) == 2 and err[1].startswith("calibrate: 1/1 fit, ") and err[1].endswith(" left")
    assert "update_limit" in json.loads(record.read_text())
