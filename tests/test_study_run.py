"""Running studies on the local pool with a stand-in task: results stored once, resume, crash-resume."""

from __future__ import annotations

import io
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from test_study_fakes import fake_records, fake_study, fake_task

from depthlab.study import Store, run_study
from depthlab.study import runner as runner_module
from depthlab.study.executors import make_executor, threads_per_worker

TESTS = os.path.dirname(os.path.abspath(__file__))


def _counts(db: str) -> dict:
    with Store(db) as s:
        q = lambda sql: s.conn.execute(sql).fetchall()  # noqa: E731
        return {
            "runs": q("SELECT COUNT(*) FROM runs")[0][0],
            "status": dict(q("SELECT status, COUNT(*) FROM runs GROUP BY status")),
            "dup_metrics": q(
                "SELECT COUNT(*) FROM (SELECT run_id, step FROM metrics GROUP BY 1, 2 HAVING COUNT(*) > 1)"
            )[0][0],
            "metrics": dict(q("SELECT run_id, COUNT(*) FROM metrics GROUP BY run_id")),
            "integrity": s.integrity(),
        }


def test_threads_per_worker_never_oversubscribes():
    assert threads_per_worker(1, cores=8) == 8 and threads_per_worker(2, cores=8) == 4
    assert threads_per_worker(3, cores=8) == 2 and threads_per_worker(4, cores=2) == 1
    for w in range(1, 9):
        assert w * threads_per_worker(w, cores=8) <= 8


def test_bad_executor_settings_are_refused():
    from depthlab import ConfigError

    with pytest.raises(ConfigError, match="executor"):
        make_executor("slurm", 1, 1)
    with pytest.raises(ConfigError, match="workers"):
        make_executor("local", 0, 1)
    with pytest.raises(ConfigError, match="ray_address"):
        make_executor("local", 1, 1, address="10.0.0.1:6379")
    for empty in ("", " "):  # no address: not read as none given (a local Ray), with either executor
        for kind in ("local", "ray"):
            with pytest.raises(ConfigError, match="^ray_address=.* is not allowed: a Ray cluster's address"):
                make_executor(kind, 1, 1, address=empty)


def test_study_runs_every_run_once_and_resume_skips_done(tmp_path):
    db, study = str(tmp_path / "s.sqlite"), fake_study()
    out = io.StringIO()
    res = run_study(study, db=db, workers=2, task=fake_task, progress=False, out=out)
    n = len(study.expand())
    assert (res.total, res.skipped, res.ran, res.failed) == (n, 0, n, 0)
    assert res.outcomes == {"stalled": 1, "trained": n - 1}  # post, 4 layers, no warmup
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(
        "study 'fake': 8 runs (2 x 2 x 2 x 1), 0 already done, 8 to run (local: 2 workers"
    )
    assert sum("-> trained" in x for x in lines) == n - 1 and sum("-> stalled" in x for x in lines) == 1
    c = _counts(db)
    assert c["runs"] == n and c["status"] == {"done": n} and c["dup_metrics"] == 0
    with Store(db) as s:
        for run, spec in zip(s.runs(res.study_id), study.expand()):
            assert len(s.metrics(run["id"])) == len(fake_records(spec))  # exactly what the task logged
            assert run["val_loss"] == pytest.approx(fake_task(spec)["result"]["val_loss"])
    again = run_study(study, db=db, workers=2, task=fake_task, progress=False, out=io.StringIO())
    assert (again.skipped, again.ran) == (n, 0)
    assert _counts(db) == c


def test_failed_runs_are_recorded_and_retried_on_resume(tmp_path):
    from depthlab.study import StudyConfig

    db = str(tmp_path / "s.sqlite")
    study = StudyConfig.from_dict(
        {
            "name": "crashy",
            "model": {"d_model": 16, "n_heads": 2},
            "train": {"steps": 10, "log_every": 5},
            "axes": {"lr": [0.001, 0.5]},
        }
    )
    out = io.StringIO()
    res = run_study(study, db=db, workers=1, task=fake_task, progress=False, out=out)
    assert (res.ran, res.failed) == (2, 1)
    assert "FAILED: RuntimeError: fake crash for lr=0.5" in out.getvalue()
    again = run_study(study, db=db, workers=1, task=fake_task, progress=False, out=io.StringIO())
    assert (again.skipped, again.ran, again.failed) == (1, 1, 1)
    with Store(db) as s:
        crashed = [r for r in s.runs(res.study_id) if r["status"] == "failed"]
        assert len(crashed) == 1 and crashed[0]["attempts"] == 2 and "fake crash" in crashed[0]["error"]


@pytest.mark.slow
def test_many_tiny_runs_through_four_workers_lose_nothing(tmp_path):
    db, study = str(tmp_path / "s.sqlite"), fake_study(depths=(2, 3, 4, 5, 6), seeds=(0, 1, 2, 3))
    n = len(study.expand())  # 2 wrappings x 5 depths x 2 warmups x 4 seeds = 80
    res = run_study(study, db=db, workers=4, task=fake_task, progress=False, out=io.StringIO())
    assert res.ran == n == 80
    c = _counts(db)
    assert c["runs"] == n and c["status"] == {"done": n} and c["dup_metrics"] == 0 and c["integrity"] == "ok"
    assert set(c["metrics"].values()) == {len(fake_records(study.expand()[0]))}


DRIVER = """
import sys
sys.path.insert(0, {tests!r})
from test_study_fakes import fake_study, fake_task
from depthlab.study import run_study
run_study(fake_study(depths=(2, 3, 4), seeds=(0, 1)), db={db!r}, workers=2, task=fake_task, progress=False)
"""


def _wait_for_done(db: str, proc: subprocess.Popen, k: int, timeout: float = 120.0) -> None:
    """Block until the driver has claimed a run and finished ``k`` (or exited)."""
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        if os.path.exists(db):
            try:
                conn = sqlite3.connect(db, timeout=5)
                claimed, done = conn.execute(
                    "SELECT SUM(status != 'queued'), SUM(status = 'done') FROM runs"
                ).fetchone()
                conn.close()
                if claimed and (done or 0) >= k:
                    return
            except sqlite3.OperationalError:  # schema not created yet
                pass
        time.sleep(0.02)


@pytest.mark.slow
def test_sigkill_at_a_random_moment_then_resume(tmp_path):
    """Kill the driver with SIGKILL mid-study, resume: every run present exactly once, store sound."""
    db = str(tmp_path / "s.sqlite")
    env = {**os.environ, "DEPTHLAB_FAKE_SLEEP": "0.25"}
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER.format(tests=TESTS, db=db)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    # a random moment whatever the machine's speed: after a random number of finished runs (0 = while
    # the pool is still starting), plus a random fraction of one run's time
    k, delay = random.randrange(0, 20), random.uniform(0.0, 0.25)
    try:
        _wait_for_done(db, proc, k)
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the orphaned pool workers (they never write the store)
        except ProcessLookupError:
            pass
    before = _counts(db)
    assert before["integrity"] == "ok", f"killed after {k} runs + {delay:.2f} s"
    study = fake_study(depths=(2, 3, 4), seeds=(0, 1))
    n = len(study.expand())
    res = run_study(study, db=db, workers=2, task=fake_task, progress=False, out=io.StringIO())
    assert res.skipped == before["status"].get("done", 0), f"killed after {k} runs + {delay:.2f} s"
    after = _counts(db)
    assert after["runs"] == n and after["status"] == {"done": n}, (
        f"killed after {k} runs + {delay:.2f} s: {after}"
    )
    assert after["dup_metrics"] == 0 and after["integrity"] == "ok"
    expected = {len(fake_records(s)) for s in study.expand()}
    assert set(after["metrics"].values()) == expected and len(after["metrics"]) == n


def _children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(entry))
    return out


def _pool_workers(pid: int) -> list[int]:
    """The pids of ``pid``'s pool worker processes: its spawned children (not its resource tracker)."""
    out = []
    for child in _children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"spawn_main" in f.read():
                    out.append(child)
        except OSError:
            continue
    return out


def _gone(pids: list[int], timeout: float) -> bool:
    """True once none of ``pids`` is alive (zombies count as gone). An empty list is refused: it would
    make "every worker is gone" hold without looking at any worker."""
    assert pids, "no worker processes to watch"
    end = time.time() + timeout
    while time.time() < end:
        alive = []
        for p in pids:
            try:
                with open(f"/proc/{p}/stat") as f:
                    alive += [p] if f.read().rsplit(")", 1)[1].split()[0] != "Z" else []
            except OSError:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_workers_end_when_the_driver_is_killed(tmp_path):
    """SIGKILL leaves the driver no chance to stop its pool: the workers' watchdog must end them."""
    db = str(tmp_path / "s.sqlite")
    env = {**os.environ, "DEPTHLAB_FAKE_SLEEP": "0.5"}
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER.format(tests=TESTS, db=db)], env=env, start_new_session=True
    )
    try:
        _wait_for_done(db, proc, 1)
        workers = _pool_workers(proc.pid)
        assert len(workers) == 2, f"expected the pool's 2 workers, found {workers}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert _gone(workers, timeout=10), "pool workers outlived the killed driver"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_worker_and_thread_counts_are_pluralised(tmp_path):
    from depthlab.words import plural

    assert (plural(1, "worker"), plural(2, "thread"), plural(0, "core")) == (
        "1 worker",
        "2 threads",
        "0 cores",
    )
    out = io.StringIO()
    run_study(
        fake_study(depths=(2,), warmups=(0,)),
        db=str(tmp_path / "s.sqlite"),
        task=fake_task,
        out=out,
        progress=False,
        tensorboard=False,
    )
    head = out.getvalue().splitlines()[0]
    assert "(local: 1 worker x " in head and "1 workers" not in head and "1 threads" not in head


def _data_study(path):
    """A 4-run study on the user's data file at ``path``."""
    from depthlab.study import StudyConfig

    return StudyConfig.from_dict(
        {
            "name": "mydata",
            "model": {"d_model": 16, "n_heads": 2, "max_len": 16},
            "train": {"steps": 10, "log_every": 5, "seq_len": 16, "batch_size": 2, "data": str(path)},
            "axes": {"wrap": ["post", "pre"], "n_layers": [2, 4]},
        }
    )


# Keys that stores written by earlier depthlab versions hold (computed by the first release): a change in
# how keys are derived (a renamed or added config field, a new hash input) must leave them as they are,
# or every stored study would run again from scratch.
STORED_KEYS = {
    "default": ("ab27ebd7598a0cfb", ["cad48f34b2166e20", "c4a0e83d198d70c1", "93c38af09e14d7cd"]),
    "smoke": ("60f1c893a4553047", ["7440d57d261cde46", "6583a1da29d538fd", "dafa2bc93dc9681e"]),
    "fake": ("2b3afccec0dd0b6a", ["1920bb350696dab2", "cb885e1c4a149327", "013f42196beadc4e"]),
}


def test_run_and_study_keys_are_those_earlier_stores_hold():
    from depthlab.study import preset

    for study in (preset("default"), preset("smoke"), fake_study()):
        specs = study.expand()
        grid_key, run_keys = STORED_KEYS[study.name]
        assert study.config_hash(specs) == study.config_hash() == grid_key
        assert [s.hash for s in specs[:3]] == run_keys
        assert all(s.data_sha256 is None for s in specs)
        spec = specs[0]
        assert spec.config_dict() == {"model": spec.model.flat_dict(), "train": spec.train.flat_dict()}


def test_a_field_added_at_its_default_leaves_the_keys_alone():
    """key_dict: a field of the first release is always in the key; a later one only once it is set."""
    spec = fake_study().expand()[0]
    model = spec.model
    assert "checkpoint" in model.key_dict() and "activation_checkpointing" not in model.key_dict()
    assert model.replace(activation_checkpointing=True).config_hash() != model.config_hash()


def test_a_changed_data_file_is_run_again(tmp_path, monkeypatch):
    import hashlib

    from depthlab.study import grid as data_mod

    data = tmp_path / "data.txt"
    data.write_bytes(b"def f(x):\n    return x + 1\n" * 40)
    reads = []
    real = data_mod.read_data_file
    monkeypatch.setattr(data_mod, "read_data_file", lambda p, *name: reads.append(p) or real(p, *name))
    study = _data_study(data)
    assert reads == [str(data)]  # the grid is expanded (validated) once on loading: one read
    specs = study.expand()
    assert reads == [str(data)] * 2  # hashed once per expansion, not once per run
    assert {s.data_sha256 for s in specs} == {hashlib.sha256(data.read_bytes()).hexdigest()}
    db = str(tmp_path / "s.sqlite")
    first = run_study(study, db=db, task=fake_task, progress=False, out=io.StringIO(), tensorboard=False)
    again = run_study(study, db=db, task=fake_task, progress=False, out=io.StringIO(), tensorboard=False)
    assert (first.ran, again.skipped, again.ran) == (4, 4, 0)
    with data.open("ab") as f:
        f.write(b"# one more line\n")
    changed = run_study(study, db=db, task=fake_task, progress=False, out=io.StringIO(), tensorboard=False)
    assert (changed.skipped, changed.ran) == (0, 4)  # the old results were on other data
    assert changed.study_id != first.study_id  # a new version of the study: its runs do not mix
    with Store(db) as s:
        latest = s.find_study("mydata")
        assert latest["id"] == changed.study_id and len(s.runs(latest["id"])) == 4
        stored = {r["config_hash"]: r["config"] for r in s.runs(latest["id"])}
        assert all(c["data_sha256"] == hashlib.sha256(data.read_bytes()).hexdigest() for c in stored.values())


def test_a_missing_data_file_is_one_input_error(tmp_path):
    from depthlab import ConfigError, InputError

    with pytest.raises(InputError, match=r"^train\.data: data file \S+nope\.txt does not exist$"):
        _data_study(tmp_path / "nope.txt")
    from depthlab.study import StudyConfig

    with pytest.raises(ConfigError, match="data="):  # refused before any run, as training would
        StudyConfig.from_dict({"name": "x", "train": {"task": "copy", "data": str(tmp_path / "nope.txt")}})


def test_a_data_file_changed_during_the_study_is_not_stored_under_the_old_key(tmp_path, monkeypatch):
    import types

    from depthlab.study import worker

    data = tmp_path / "data.txt"
    data.write_bytes(b"some text to train on\n" * 50)
    spec = _data_study(data).expand()[0]
    monkeypatch.setattr(worker, "probe_at_init", lambda s: (None, "skipped"))
    trained = types.SimpleNamespace(data_info={"sha256": "0" * 64}, metrics=[], to_dict=dict)
    monkeypatch.setattr(worker, "train", lambda *a, **k: trained)
    payload = worker.execute(None, spec)
    assert "train.data" in payload["error"] and "changed during the study" in payload["error"]
    trained.data_info["sha256"] = spec.data_sha256
    assert "error" not in worker.execute(None, spec)


def test_the_time_left_learns_from_each_run_as_waited_for_its_worker_start_too(tmp_path, monkeypatch):
    """The clock's correction compares a run's expected seconds, which count its worker's start for a
    worker's first run, with the seconds the driver waited for it (from its submission), not the seconds
    the worker timed itself (which begin after the process and its imports have started)."""
    told, timed = [], []
    original = runner_module.saved_seconds

    def spy_saved(spec, payload):
        timed.append(payload["seconds"])
        return original(spec, payload)

    class SpyClock(runner_module.TimeLeft):
        def finished(self, key, seconds=None):
            told.append(seconds)
            super().finished(key, seconds)

    monkeypatch.setattr(runner_module, "saved_seconds", spy_saved)
    monkeypatch.setattr(runner_module, "TimeLeft", SpyClock)
    monkeypatch.setattr(runner_module, "estimate", lambda runs, threads: {k: 1.0 for k, _, _ in runs})
    study = fake_study(depths=(2,), warmups=(0,))
    run_study(
        study, db=str(tmp_path / "s.sqlite"), workers=1, task=fake_task, progress=False, out=io.StringIO()
    )
    assert len(told) == len(timed) == 2
    assert told[0] > timed[0] + 0.3  # the first waited for a spawned process to import torch and depthlab
    assert all(w >= t for w, t in zip(told, timed))
