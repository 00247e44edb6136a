"""A running run's owner is its driver's host, pid and process start: a pid reused by another live
process (the state after a reboot, or a long-lived machine) does not strand the run."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time

import pytest
from test_study_fakes import fake_study, fake_task, fill_store

from depthlab.study import Store, run_study
from depthlab.study.owner import owner_id, owner_is_gone, start_ticks


@pytest.fixture
def sleeper():
    """A live process that is not a depthlab driver (its pid is what a dead driver's pid became)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.2)
    yield proc
    proc.kill()
    proc.wait()


def _strand(db: str, owner: str, started_at: float) -> int:
    """Mark the store's last queued run ``running`` under ``owner`` since ``started_at``; its id."""
    with Store(db) as s:
        rid = s.conn.execute("SELECT id FROM runs WHERE status = 'queued' ORDER BY id DESC").fetchone()[0]
        s.conn.execute(
            "UPDATE runs SET status = 'running', owner = ?, started_at = ? WHERE id = ?",
            (owner, started_at, rid),
        )
    return rid


def test_owner_names_host_pid_and_start():
    host, pid, ticks = owner_id().rsplit(":", 2)
    assert host == socket.gethostname() and int(pid) == os.getpid() and ticks == start_ticks(os.getpid())


def test_a_live_process_with_another_start_time_is_not_the_owner(sleeper):
    ticks = start_ticks(sleeper.pid)
    host = socket.gethostname()
    assert not owner_is_gone(f"{host}:{sleeper.pid}:{ticks}")  # the live driver itself
    assert owner_is_gone(f"{host}:{sleeper.pid}:{int(ticks) + 1}")  # its pid, another process
    assert owner_is_gone(f"{host}:{os.getppid()}:1")


def test_an_old_style_owner_whose_pid_started_after_the_claim_is_gone(sleeper):
    host = socket.gethostname()
    assert owner_is_gone(f"{host}:{sleeper.pid}", started_at=time.time() - 3600)
    assert not owner_is_gone(f"{host}:{sleeper.pid}", started_at=time.time() + 5)


@pytest.mark.parametrize("form", ["old", "new"])
def test_a_run_left_by_a_dead_driver_whose_pid_is_reused_is_rerun(tmp_path, sleeper, form):
    db = str(tmp_path / "s.sqlite")
    study = fake_study(depths=(2,), warmups=(0,))
    fill_store(db, study, leave_queued=1)
    host = socket.gethostname()
    owner = (
        f"{host}:{sleeper.pid}"
        if form == "old"
        else f"{host}:{sleeper.pid}:{int(start_ticks(sleeper.pid)) - 7}"
    )
    rid = _strand(db, owner, started_at=time.time() - 3600)
    res = run_study(study, db=db, task=fake_task, progress=False, out=io.StringIO())
    assert (res.ran, res.elsewhere) == (1, 0)
    with Store(db) as s:
        assert s.conn.execute("SELECT status FROM runs WHERE id = ?", (rid,)).fetchone()[0] == "done"


def test_a_run_of_a_live_driver_is_left_alone(tmp_path, sleeper):
    db = str(tmp_path / "s.sqlite")
    study = fake_study(depths=(2,), warmups=(0,))
    fill_store(db, study, leave_queued=1)
    _strand(db, f"{socket.gethostname()}:{sleeper.pid}:{start_ticks(sleeper.pid)}", started_at=time.time())
    res = run_study(study, db=db, task=fake_task, progress=False, out=io.StringIO())
    assert (res.ran, res.elsewhere) == (0, 1)


def test_the_study_command_says_what_it_left_to_another_driver(tmp_path, sleeper, capsys):
    """A run held by another live driver (of this study, or of another study sharing the run) is said
    as such, with where it stands and what to do: the line read '1 runs were left to another depthlab
    process running this study', wrong in its count and wrong for a study that only shares the run."""
    import yaml

    from depthlab.cli import main

    db, grid = str(tmp_path / "s.sqlite"), tmp_path / "g.yaml"
    study = fake_study(depths=(2,), warmups=(0,))
    grid.write_text(yaml.safe_dump(study.to_dict()))
    fill_store(db, study, leave_queued=1)
    _strand(db, f"{socket.gethostname()}:{sleeper.pid}:{start_ticks(sleeper.pid)}", started_at=time.time())
    assert main(["study", "--grid", str(grid), "--db", db, "--no-report"]) == 0
    out = capsys.readouterr().out
    assert (
        "\n1 run left to another depthlab process running it; the table below shows where it stands now "
        "(run the same command again once it is done)\n" in out
    )
    assert "running" in out.split("outcome per cell")[1]
