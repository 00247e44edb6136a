"""Time estimates: the estimator (ordering-aware, corrected by measured times, several workers), the cost
model's extrapolation, and the commands that say their expected time before they start and the time left
as they go: study (and --dry-run), train and coord off a terminal. No test reads a real clock: time is
a fake monotonic clock, and the cost model's step times are set where a number is checked."""

from __future__ import annotations

import io
import sys

import pytest
from test_input_limits import TINY
from test_study_fakes import fake_study, fake_task

from depthlab import progress
from depthlab.cli import main
from depthlab.config import ModelConfig, TrainConfig
from depthlab.progress import Progress, TimeLeft
from depthlab.study import preset, run_study
from depthlab.study import runner as runner_module
from depthlab.train import cost

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def now(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    return clock


def test_the_slowest_job_first_is_not_a_quarter_of_the_time(now):
    """Four jobs, the first as long as all the others ten times over: when it is done, a counter says a
    quarter is done (three times its 100 s to go); the time left is the 30 s of the short ones."""
    clock = TimeLeft({"a": 100.0, "b": 10.0, "c": 10.0, "d": 10.0})
    assert clock.total_s() == 130.0
    bar = Progress(4, "study", unit="run", clock=clock, stream=io.StringIO())
    clock.started("a")
    now[0] = 100.0
    clock.finished("a")
    bar.advance()
    assert clock.left_s() == pytest.approx(30.0) and bar.line().endswith("about 30 s left")


def test_measured_times_correct_the_cost_model(now):
    clock = TimeLeft({"a": 100.0, "b": 10.0, "c": 10.0})
    clock.started("a")
    now[0] = 200.0
    clock.finished("a")  # twice as slow as expected
    assert clock.speed() == 2.0 and clock.left_s() == pytest.approx(40.0)
    resumed = TimeLeft({"x": 10.0}, known=[(10.0, 30.0)])  # runs stored before took three times longer
    assert resumed.total_s() == pytest.approx(30.0)


def test_workers_share_the_work_but_not_a_job(now):
    assert TimeLeft({"a": 60.0, "b": 10.0, "c": 10.0}, workers=2).total_s() == 60.0  # a runs alone
    assert TimeLeft({k: 10.0 for k in "abcd"}, workers=2).total_s() == 20.0
    clock = TimeLeft({"a": 100.0}, workers=1)
    clock.started("a")
    now[0] = 40.0
    assert clock.left_s() == pytest.approx(60.0)  # what is left of the running job


def test_plain_lines_each_tenth_off_a_terminal_and_none_on_one(now):
    log = io.StringIO()
    bar = Progress(20, "train pre x2", unit="step", plain=True, stream=log)
    for _ in range(20):
        now[0] += 1.0
        bar.advance()
    lines = log.getvalue().splitlines()
    assert len(lines) == 10 and lines[0] == "train pre x2: 2/20 steps, 2 s elapsed, about 18 s left"

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    bar = Progress(20, "train", unit="step", plain=True, stream=tty)
    bar.advance()
    assert "\n" not in tty.getvalue()  # drawn in place, never a line of its own
    bar.close()


def test_the_cost_model_extrapolates_by_layers_and_times_a_large_shape_at_a_smaller_batch(monkeypatch):
    timed = []

    def fake_timed(cfg, batch, seq, device):
        timed.append((cfg.n_layers, batch))
        return 0.0, 0.001 * batch * (1 + cfg.n_layers)  # 1 ms per sequence and layer, plus a fixed ms

    monkeypatch.setattr(cost, "_timed", fake_timed)
    monkeypatch.setattr(cost, "_STEP", {})
    small = ModelConfig(n_layers=4, d_model=32, n_heads=4)
    t = TrainConfig(steps=100, batch_size=8, seq_len=32, eval_every=1000)
    bare = cost.run_seconds(small, t, bare=True)
    assert bare == pytest.approx(100 * 0.001 * 8 * 5) and timed == [(1, 8), (3, 8)]
    assert cost.run_seconds(small.replace(n_layers=8), t, bare=True) == pytest.approx(100 * 0.001 * 8 * 9)
    assert cost.run_seconds(small, t) > bare  # the loop's allowance, validation and the probe
    timed.clear()
    big = ModelConfig(n_layers=4, d_model=2048, n_heads=16, max_len=1024)
    fixed, per_layer, _ = cost.step_cost(big, 64, 1024, cost.device_of(t))
    assert timed[0][1] < 64 and per_layer == pytest.approx(0.001 * 64)  # scaled back to the batch


def test_a_run_costs_its_task_set_ups_measured_once_after_the_corpus_is_read(monkeypatch):
    """A study run sets its task up twice (the probe's first batch, then training's): at tiny shapes that
    is most of a run, and the estimate left it out. It is timed once per task, after a first set-up (the
    corpus read, once per process)."""
    clock, calls = [0.0], []

    def fake_make_task(mcfg, tcfg):
        calls.append(tcfg.seq_len)
        clock[0] += 1.0 if len(calls) == 1 else 0.05  # the first reads the corpus

    monkeypatch.setattr(cost, "_timed", lambda cfg, batch, seq, device: (0.0, 0.001 * (1 + cfg.n_layers)))
    monkeypatch.setattr(cost, "_STEP", {})
    monkeypatch.setattr(cost, "_TASK", {})
    monkeypatch.setattr(cost, "make_task", fake_make_task)
    monkeypatch.setattr(cost.time, "perf_counter", lambda: clock[0])
    m, t = ModelConfig(n_layers=4, d_model=32, n_heads=4), TrainConfig(steps=100, eval_every=1000)
    step = 0.001 * 5
    loop = cost.LOOP_OVERHEAD * step * 100 + t.eval_batches * step / 3 + cost.PROBE_STEPS * step
    assert cost.run_seconds(m, t) == pytest.approx(loop + 2 * 0.05)
    assert cost.run_seconds(m.replace(n_layers=8), t) > cost.run_seconds(m, t) and len(calls) == 2
    assert cost.run_seconds(m, t, bare=True) == pytest.approx(100 * step)  # a coordinate check's: no task


def test_the_first_run_on_each_worker_waits_for_the_worker_to_start(monkeypatch):
    """A spawned worker imports torch and depthlab (and its first run what it imports on first use)
    before any step: seconds each, that the expected time left out ("about 1 s" for studies of 4 to 17 s).
    The ``workers`` longest runs start one each; the others, and a single worker's later runs, do not."""
    monkeypatch.setattr(runner_module, "WORKER_START_S", 4.0)
    costs = {0: 30.0, 1: 10.0, 2: 20.0, 3: 10.0}
    monkeypatch.setattr(runner_module, "estimate", lambda runs, threads: {k: costs[k] for k, _, _ in runs})
    todo = list(enumerate(preset("smoke").expand()))
    clock, line = runner_module.time_plan(todo, [], 2, 1)
    assert clock.expected == {0: 34.0, 1: 10.0, 2: 24.0, 3: 10.0}
    assert clock.total_s() == pytest.approx(39.0) and line.startswith("expected time: about 39 s")
    assert runner_module.time_plan(todo, [], 1, 1)[0].total_s() == pytest.approx(74.0)


def _fixed_estimate(monkeypatch, seconds: float):
    monkeypatch.setattr(runner_module, "estimate", lambda runs, threads: {k: seconds for k, _, _ in runs})


def test_a_dry_run_ends_with_the_expected_time(capsys, tmp_path, monkeypatch):
    _fixed_estimate(monkeypatch, 30.0)
    n, start = len(preset("smoke").expand()), runner_module.WORKER_START_S  # each of 2 workers starts
    db = str(tmp_path / "s.sqlite")
    assert main(["study", "--preset", "smoke", "--db", db, "--dry-run", "--workers", "2"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert (
        last
        == f"study 'smoke': {n} runs, {n} to run; expected time: about {(30 * n + 2 * start) // 2:.0f} s (step times measured now; the longest runs first), on 2 workers"
    )


def test_a_study_says_its_expected_time_first_and_the_time_left_as_it_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "estimate", lambda runs, threads: {k: 10.0 for k, _, _ in runs})
    out = io.StringIO()
    study = fake_study(steps=5)
    monkeypatch.setattr(runner_module, "WORKER_START_S", 5.0)
    header = runner_module.time_plan(list(enumerate(study.expand())), [], 1, 1)[1]
    assert header.startswith(f"expected time: about {10 * len(study.expand()) + 5} s")
    run_study(study, db=str(tmp_path / "s.sqlite"), workers=1, task=fake_task, progress=False, out=out)
    lines = [line for line in out.getvalue().splitlines() if line.startswith("[")]
    assert len(lines) == len(study.expand()) and all(line.endswith(" left)") for line in lines[:-1])
    assert "expected time: known once a run has finished" in out.getvalue()


def test_train_off_a_terminal_prints_its_plan_and_plain_progress_lines(capsys):
    argv = ["train", *TINY, "--steps", "20", "--batch-size", "2", "--seq-len", "8", "--threads", "1"]
    assert main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("train pre x2: 20 steps of 2 x 8 tokens; expected time: about")
    progress_lines = [line for line in err if line.startswith("train pre x2: ") and "/20 steps" in line]
    assert len(progress_lines) == 10 and progress_lines[-1].startswith("train pre x2: 20/20 steps")
    assert main([*argv, "--quiet"]) == 0 and capsys.readouterr().err == ""
    assert "warmup" not in err[0]
    assert main([*argv, "--warmup", "30"]) == 0  # a run that ends before its warmup does, said up front
    assert (
        capsys.readouterr()
        .err.splitlines()[0]
        .endswith("; it ends inside its 30-step warmup: the run is of a rising lr")
    )


def test_train_on_a_terminal_says_its_plan_and_a_warmup_it_ends_inside(capsys, monkeypatch):
    """On a terminal the bar is drawn, but the plan line comes first as off one: a run that ends inside
    its warmup said nothing there (only a log or a pipe got the line)."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    argv = ["train", *TINY, "--steps", "4", "--batch-size", "2", "--seq-len", "8", "--threads", "1"]
    assert main([*argv, "--warmup", "30"]) == 0
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith("train pre x2: 4 steps of 2 x 8 tokens; expected time: about")
    assert first.endswith("; it ends inside its 30-step warmup: the run is of a rising lr")
    assert "/4 steps, " not in err  # the bar, not the plain lines of a log
    assert main([*argv, "--warmup", "30", "--quiet"]) == 0 and capsys.readouterr().err == ""


def test_train_s_plan_does_not_set_its_task_up_again(capsys, monkeypatch):
    """train says its plan once its task is set up: the expected time of what is left has no set-up in
    it, and the cost model does not build the task twice more to time one (a large --data file read
    again at every start)."""

    def refuse(*a, **k):
        raise AssertionError("the cost model set the task up")

    monkeypatch.setattr(cost, "make_task", refuse)
    argv = ["train", *TINY, "--steps", "4", "--batch-size", "2", "--seq-len", "8", "--threads", "1"]
    assert main(argv) == 0
    assert (
        capsys.readouterr().err.splitlines()[0].startswith("train pre x2: 4 steps of 2 x 8 tokens; expected")
    )


def test_coord_off_a_terminal_prints_its_plan_and_plain_progress_lines(capsys):
    argv = ["coord", "--depths", "2,3", "--width", "16", "--heads", "2", "--steps", "1", "--seeds", "5"]
    assert main([*argv, "--batch-size", "2", "--seq-len", "8"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("coord: 20 models of 1 Adam steps; expected time: about")
    assert [line.split(",")[0] for line in err[1:]] == [f"coord: {k}/20 models" for k in range(2, 20, 2)]
