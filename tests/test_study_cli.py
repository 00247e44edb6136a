"""`depthlab study` from the command line: bad grids refused before anything runs; the smoke preset end to end."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_study_fakes import fake_study, fill_store

from depthlab.cli import main
from depthlab.study import Store, preset


def test_bad_grid_is_one_line_exit_2_and_touches_nothing(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("model: {d_model: 32}\naxes:\n  wrap: [post, prenorm]\n")
    db = tmp_path / "s.sqlite"
    assert main(["study", "--grid", str(grid), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "wrap='prenorm'" in err and "Traceback" not in err
    assert not db.exists()
    grid.write_text("axes:\n  layers: [2, 4]\n")
    assert main(["study", "--grid", str(grid), "--db", str(db)]) == 2
    assert "axes.layers" in capsys.readouterr().err
    assert main(["study", "--preset", "nope", "--db", str(db)]) == 2
    assert main(["study", "--executor", "slurm", "--preset", "smoke", "--db", str(db), "--no-report"]) == 2
    assert not db.exists()


def test_dry_run_shows_what_the_store_holds(tmp_path, capsys):
    db = str(tmp_path / "s.sqlite")
    study = fake_study()
    fill_store(db, study, leave_queued=3)
    grid = tmp_path / "fake.yaml"
    import yaml

    grid.write_text(yaml.safe_dump(study.to_dict()))
    assert main(["study", "--grid", str(grid), "--db", db, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum(" done " in line for line in out) == 5 and sum(" queued " in line for line in out) == 3
    assert out[-1].startswith("study 'fake': 8 runs, 3 to run; expected time: about ")
    assert main(["study", "--fields"]) == 0 and "warmup" in capsys.readouterr().out


@pytest.mark.slow
def test_smoke_preset_end_to_end_then_resume(tmp_path):
    """The real thing: probe + train each run of the smoke preset on 2 workers, report, table; again = no-op."""
    db = str(tmp_path / "runs" / "depthlab.sqlite")
    cmd = [sys.executable, "-m", "depthlab", "study", "--preset", "smoke", "--workers", "2", "--db", db]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    report = os.path.join(tmp_path, "runs", "report", "smoke", "index.html")
    assert f"report: {report}" in proc.stdout and os.path.exists(report)
    assert "wrapping  2 layers" in proc.stdout and "outcome per cell" in proc.stdout
    specs = preset("smoke").expand()
    with Store(db) as s:
        runs = s.runs(s.find_study("smoke")["id"])
        assert [r["config_hash"] for r in runs] == [x.hash for x in specs]
        assert all(
            r["status"] == "done" and r["outcome"] in ("trained", "undertrained", "stalled", "diverged")
            for r in runs
        )
        for r in runs:
            steps = len(s.metrics(r["id"]))
            assert steps >= 3 and len(s.layer_metrics(r["id"])) >= r["config"]["model"]["n_layers"] + 1
            # every smoke run is a plain decoder LM: its at-init probe must have run and been stored
            assert r["probe_error"] is None, r["probe_error"]
            assert r["probe_level"] in ("ok", "warning", "error")
            assert len(s.probe_layers(r["id"])) == r["config"]["model"]["n_layers"] + 1
        assert s.integrity() == "ok"
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0 and "4 runs (2 x 2), 4 already done, 0 to run" in again.stdout


def _grid(tmp_path) -> str:
    import yaml

    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump(fake_study(depths=(2,), warmups=(0,)).to_dict()))
    return str(grid)


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("default", [False, True])
def test_a_report_folder_holding_user_files_is_refused_before_anything_runs(tmp_path, capsys, default):
    db = tmp_path / "runs" / "s.sqlite"
    mine = tmp_path / "runs" / "report" / "fake" if default else tmp_path / "mine"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("my notes")
    cmd = ["study", "--grid", _grid(tmp_path), "--db", str(db)] + ([] if default else ["--report", str(mine)])
    assert main(cmd) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"report folder {mine} exists and is not a depthlab report folder" in err
    assert "--report" in err and "--out" not in err
    assert not db.exists() and os.listdir(mine) == ["notes.txt"]  # nothing ran, nothing stored
    assert not (tmp_path / "runs" / "tensorboard").exists()


def test_a_file_as_report_folder_is_refused_before_anything_runs(tmp_path, capsys):
    db, target = tmp_path / "s.sqlite", tmp_path / "report.html"
    target.write_text("<p>mine</p>")
    assert main(["study", "--grid", _grid(tmp_path), "--db", str(db), "--report", str(target)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "--report" in err and "is not a folder; choose another report folder" in err
    assert not db.exists() and target.read_text() == "<p>mine</p>"


def test_a_users_database_as_db_is_refused_unchanged_by_study_and_report(tmp_path, capsys):
    import sqlite3

    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE contacts (name TEXT)")
    conn.execute("INSERT INTO contacts VALUES ('Ada')")
    conn.commit()
    conn.close()
    grid = _grid(tmp_path)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    for cmd in (
        ["study", "--grid", grid, "--db", str(other), "--no-report"],
        ["study", "--grid", grid, "--db", str(other), "--dry-run"],
        ["report", "--db", str(other), "--out", str(tmp_path / "rep")],
    ):
        assert main(cmd) == 2, cmd
        err = _one_line(capsys.readouterr().err)
        assert f"{other} is not a depthlab store (it holds tables: contacts); choose another --db" in err
        after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
        assert after == before, cmd  # same bytes and mtime; no -wal, -shm, report or events made


def test_study_help_says_where_the_tensorboard_events_go(capsys):
    with pytest.raises(SystemExit):
        main(["study", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "<db folder>/tensorboard/<study name>/<run>/" in text and "tensorboard --logdir" in text


def test_study_help_lists_every_preset_with_its_run_count(capsys):
    from depthlab.study import PRESETS
    from depthlab.study.presets import SUMMARIES

    assert set(SUMMARIES) == set(PRESETS)
    with pytest.raises(SystemExit):
        main(["study", "--help"])
    listed = capsys.readouterr().out.split("presets (--preset NAME):")[1].splitlines()[1:]
    assert [line.split()[0] for line in listed] == list(PRESETS)
    for line, name in zip(listed, PRESETS):
        runs = int(line.split()[1].replace(",", ""))
        assert runs == len(preset(name).expand()) and SUMMARIES[name] in line and len(line) <= 100


def test_dry_run_refuses_a_folder_as_the_store_like_the_real_run(tmp_path, capsys):
    code = main(["study", "--preset", "smoke", "--db", str(tmp_path), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "is a folder, not a study store" in err and len(err.strip().splitlines()) == 1


def test_a_store_under_a_file_is_refused_as_the_store_not_as_its_report(tmp_path, capsys):
    """--db afile/x.sqlite: the store's path is wrong, whether or not a report would go beside it."""
    (tmp_path / "afile").write_text("mine")
    for extra in ([], ["--no-report"], ["--dry-run"]):
        code = main(
            ["study", "--preset", "smoke", "--db", str(tmp_path / "afile" / "deep" / "x.sqlite"), *extra]
        )
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1 and "--report" not in err
        assert err.rstrip().endswith("afile is a file, not a folder; choose another --db")
    assert (tmp_path / "afile").read_text() == "mine" and len(list(tmp_path.iterdir())) == 1


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_sigterm_stops_the_study_like_ctrl_c(tmp_path):
    """`kill PID`: exit 1 soon, the workers stopped, the run put back in the queue (not left running)."""
    import signal
    import sqlite3
    import time

    from test_study_run import _gone, _pool_workers

    grid = tmp_path / "g.yaml"
    grid.write_text(
        "name: long\nmodel: {d_model: 16, n_heads: 2, max_len: 16}\n"
        "train: {steps: 100000, batch_size: 2, seq_len: 8, log_every: 1000}\naxes: {n_layers: [1, 2]}\n"
    )
    db = tmp_path / "s.sqlite"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "depthlab", "study", "--grid", str(grid), "--db", str(db), "--no-report"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end, running = time.time() + 120, 0
        while not running and time.time() < end and proc.poll() is None:
            try:
                with sqlite3.connect(db, timeout=5) as conn:
                    running = conn.execute("SELECT COUNT(*) FROM runs WHERE status = 'running'").fetchone()[0]
            except sqlite3.OperationalError:  # not created yet
                pass
            time.sleep(0.1)
        assert running, f"no run started (driver exit code {proc.poll()})"
        time.sleep(2.0)  # the worker is now inside the run
        workers = _pool_workers(proc.pid)
        assert workers, "found no pool worker of the driver before the kill: nothing to check"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 1 and "interrupted" in proc.stderr.read()
        assert _gone(workers, timeout=10)
        with sqlite3.connect(db) as conn:
            assert {s for (s,) in conn.execute("SELECT status FROM runs")} == {"queued"}
    finally:
        proc.kill()


def test_an_interrupted_study_says_the_same_command_resumes_it(tmp_path, capsys, monkeypatch):
    """Ctrl-C (or `kill PID`) mid-study: exit 1 with a line that says the finished runs are kept and the
    same command runs the rest (it printed only 'interrupted')."""
    import depthlab.cli.study as study_cli

    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(study_cli, "run_study", stopped)
    db = tmp_path / "s.sqlite"
    assert main(["study", "--preset", "smoke", "--db", str(db), "--no-report"]) == 1
    err = capsys.readouterr().err
    assert err == f"interrupted: the runs that finished are kept in {db}; the same command runs the rest\n"


def test_one_run_one_study_and_one_layer_are_said_in_the_singular(tmp_path, capsys):
    """A study of one run reads '1 run', 'of 1 run', '1 layer' and '1 study' (it read '1 runs', '1 layers'
    and '1 studies')."""
    import depthlab
    from depthlab.study import StudyConfig

    study = StudyConfig.from_dict(
        {
            "name": "one",
            "model": {"d_model": 16, "n_heads": 2, "max_len": 16, "n_layers": 1},
            "train": {"steps": 10, "log_every": 5, "seq_len": 16, "batch_size": 2},
            "axes": {"wrap": ["pre"]},
        }
    )
    db, grid = str(tmp_path / "s.sqlite"), tmp_path / "one.yaml"
    grid.write_text(
        "name: one\nmodel: {d_model: 16, n_heads: 2, max_len: 16, n_layers: 1}\n"
        "train: {steps: 10, log_every: 5, seq_len: 16, batch_size: 2}\naxes: {wrap: [pre]}\n"
    )
    fill_store(db, study)
    assert main(["study", "--grid", str(grid), "--db", db, "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "study 'one': 1 run (1), 1 already done, 0 to run" in out and "ran 0 of 1 run in" in out
    assert "  wrapping  1 layer\n" in out
    store = depthlab.open(db)
    assert ": 1 study (one)>" in repr(store) and ": 1 run (1 trained)" in repr(store.study("one"))


def test_combinations_that_repeat_a_run_are_said(tmp_path, capsys):
    """A grid whose combinations resolve to fewer runs (a seed listed twice, a wrapping that restates the
    default norm) says so, in the dry run and in the study, where the count fell silently from 6 to 2."""
    import io

    from test_study_fakes import fake_task

    from depthlab.study import StudyConfig, run_study

    grid = tmp_path / "g.yaml"
    grid.write_text(
        "name: g\nmodel: {d_model: 16, n_heads: 2, max_len: 16, n_layers: 2}\n"
        "train: {steps: 10, log_every: 5, seq_len: 16, batch_size: 2}\n"
        "axes:\n  wrapping: [{wrap: pre}, {wrap: pre, norm: layernorm}, {wrap: post}]\n  seed: [0, 0]\n"
    )
    note = (
        "note: 4 of the grid's 6 combinations repeat a run listed before them once resolved (a value listed "
        "twice, or a setting that restates a default): 2 runs\n"
    )
    db = str(tmp_path / "s.sqlite")
    assert main(["study", "--grid", str(grid), "--db", db, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert note in out and out.count(" new ") == 2
    said = io.StringIO()
    res = run_study(StudyConfig.from_yaml(str(grid)), db=db, task=fake_task, progress=False, out=said)
    assert note in said.getvalue() and res.total == res.ran == 2
    assert "study 'g': 2 runs (3 x 2, 4 repeated), 0 already done, 2 to run" in said.getvalue()
    assert main(["study", "--preset", "smoke", "--db", db, "--dry-run"]) == 0
    assert "note:" not in capsys.readouterr().out  # a grid without repeats: no note


def test_executor_ray_without_ray_says_how_to_install_it_and_touches_nothing(tmp_path, capsys, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a)
    )
    db = tmp_path / "s.sqlite"
    assert main(["study", "--preset", "smoke", "--executor", "ray", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err == "depthlab study: error: --executor ray needs Ray: pip install 'depthlab[ray]'\n"
    assert list(tmp_path.iterdir()) == []
