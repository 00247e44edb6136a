"""A worker that dies costs only its own run: the local pool knows which run each worker holds, so a
SIGKILL'd worker fails that run alone while the run on the other worker finishes and is stored; a rerun
retries only the failed run. Two drivers on one store leave each other's live runs alone."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from test_study_fakes import fake_records, fake_study, fake_task

from depthlab.study import Store, run_study

TESTS = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")


def _wait_for(predicate, timeout: float, what: str):
    end = time.time() + timeout
    while time.time() < end:
        found = predicate()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _store_rows(db: str) -> list[dict]:
    with Store(db) as s:
        rows = s.conn.execute("SELECT id, config_hash, status, attempts, error FROM runs").fetchall()
        return [dict(r) for r in rows]


def _metric_counts(db: str) -> dict:
    with Store(db) as s:
        return dict(s.conn.execute("SELECT run_id, COUNT(*) FROM metrics GROUP BY run_id").fetchall())


@pytest.mark.slow
def test_a_killed_worker_fails_only_its_own_run(tmp_path, monkeypatch):
    db, pids = str(tmp_path / "s.sqlite"), tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("DEPTHLAB_FAKE_PIDS", str(pids))
    monkeypatch.setenv("DEPTHLAB_FAKE_SLEEP", "1.5")
    study = fake_study(depths=(2,), warmups=(0, 5))  # 4 runs on 2 workers
    specs = study.expand()
    out, result = io.StringIO(), {}
    driver = threading.Thread(
        target=lambda: result.update(
            res=run_study(study, db=db, workers=2, task=fake_task, progress=False, out=out)
        )
    )
    driver.start()
    try:
        # both workers hold a run: kill the process of one, while the other's run is in flight
        started = _wait_for(
            lambda: sorted(pids.glob("*.pid")) if len(list(pids.glob("*.pid"))) >= 2 else None,
            120,
            "two runs",
        )
        victim, survivor = started[0], started[1]
        os.kill(int(victim.read_text()), signal.SIGKILL)
    finally:
        driver.join(180)
    assert not driver.is_alive()
    res = result["res"]
    killed = victim.name.removesuffix(".pid")
    rows = {r["config_hash"]: r for r in _store_rows(db)}
    assert (res.ran, res.failed) == (4, 1), out.getvalue()
    assert rows[killed]["status"] == "failed" and "worker process" in rows[killed]["error"]
    assert "SIGKILL" in rows[killed]["error"]
    others = [h for h in rows if h != killed]
    assert all(rows[h]["status"] == "done" and rows[h]["attempts"] == 1 for h in others)
    assert survivor.name.removesuffix(".pid") in others  # the run in flight on the other worker was kept
    # a rerun retries the failed run only, and nothing is doubled
    monkeypatch.setenv("DEPTHLAB_FAKE_SLEEP", "0")
    again = run_study(study, db=db, workers=2, task=fake_task, progress=False, out=io.StringIO())
    assert (again.skipped, again.ran, again.failed) == (3, 1, 0)
    rows = {r["config_hash"]: r for r in _store_rows(db)}
    assert len(rows) == len(specs) and all(r["status"] == "done" for r in rows.values())
    assert rows[killed]["attempts"] == 2 and all(rows[h]["attempts"] == 1 for h in others)
    assert sorted(_metric_counts(db).values()) == sorted(len(fake_records(s)) for s in specs)


DRIVER = """
import sys
sys.path.insert(0, {tests!r})
from test_study_fakes import fake_study, fake_task
from depthlab.study import run_study
res = run_study(fake_study(depths=(2, 3), warmups=(0, 5)), db={db!r}, workers=1, task=fake_task, progress=False)
print("RESULT", res.ran, res.elsewhere, res.failed)
"""


@pytest.mark.slow
def test_two_drivers_share_a_store_and_leave_live_runs_alone(tmp_path):
    """Driver B starts while driver A holds a run: B leaves A's live run alone (A's pid is alive), runs
    what is queued; every run ends done exactly once, with one attempt each."""
    db = str(tmp_path / "s.sqlite")
    env = {**os.environ, "DEPTHLAB_FAKE_SLEEP": "1.0"}
    cmd = [sys.executable, "-c", DRIVER.format(tests=TESTS, db=db)]
    a = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(
            lambda: os.path.exists(db) and any(r["status"] == "running" for r in _store_rows(db)),
            120,
            "A's run",
        )
        b = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out_b, err_b = b.communicate(timeout=180)
        out_a, err_a = a.communicate(timeout=180)
    finally:
        for p in (a,):
            if p.poll() is None:
                p.kill()
    assert a.returncode == 0 and b.returncode == 0, err_a + err_b
    ran_a, elsewhere_a, _ = (int(x) for x in out_a.split("RESULT")[1].split())
    ran_b, elsewhere_b, _ = (int(x) for x in out_b.split("RESULT")[1].split())
    rows = _store_rows(db)
    assert len(rows) == 8 and all(r["status"] == "done" and r["attempts"] == 1 for r in rows)
    assert ran_a + ran_b == 8 and elsewhere_b >= 1  # B saw at least A's live run and left it
    assert sorted(_metric_counts(db).values()) == sorted(
        len(fake_records(s)) for s in fake_study(depths=(2, 3), warmups=(0, 5)).expand()
    )


def test_a_script_without_the_main_guard_is_told_so_by_its_workers(tmp_path):
    """A script that calls run_study at its top level: each spawned worker imports it again, and there
    run_study refuses in one line naming the guard, before it touches the store; the driver stops at
    the first worker that failed as it started, and puts its runs back in the queue (none failed)."""
    script = tmp_path / "mystudy.py"
    script.write_text(
        DRIVER.format(tests=TESTS, db=str(tmp_path / "s.sqlite"))
        .replace("(2, 3)", "(2,)")
        .replace("(0, 5)", "(0,)")
    )
    ran = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert ran.returncode == 1 and "RESULT" not in ran.stdout, ran.stderr[-2000:]
    said = [line for line in ran.stderr.splitlines() if line.startswith("depthlab.errors.InputError")]
    assert said and all('`if __name__ == "__main__":`' in line for line in said)
    assert any(line.endswith("its error is on stderr): where a script runs the study, call run_study "
                             'under `if __name__ == "__main__":`') for line in said)  # fmt: skip
    assert [r["status"] for r in _store_rows(str(tmp_path / "s.sqlite"))] == ["queued", "queued"]


@pytest.mark.parametrize("flags, said", [(False, "force_memory=True"), (True, "--force-memory")])
def test_workers_name_options_in_their_driver_s_words(tmp_path, flags, said):
    """A worker's refusal names an option as its driver does: the flag under the command line, the
    keyword from Python."""
    import contextlib

    from test_study_fakes import speaking_task

    from depthlab.errors import spoken_as_flags

    db = str(tmp_path / "s.sqlite")
    with spoken_as_flags() if flags else contextlib.nullcontext():
        run_study(
            fake_study(depths=(2,), warmups=(0,)),
            db=db,
            task=speaking_task,
            progress=False,
            out=io.StringIO(),
        )
    errors = {r["error"] for r in _store_rows(db)}
    assert errors == {f"InputError: use {said}"}, errors
