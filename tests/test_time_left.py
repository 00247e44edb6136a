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


def _fixed_estimate(monkeypatch, seconds: float):
    monkeypatch.setattr(runner_module, "estimate", lambda runs, threads: {k: seconds for k, _, _ in runs})


def test_a_dry_run_ends_with_the_expected_time(capsys, tmp_path, monkeypatch):
    _fixed_estimate(monkeypatch, 30.0)
    n = len(preset("smoke").expand())
    db = str(tmp_path / "s.sqlite")
    assert main(["study", "--preset", "smoke", "--db", db, "--dry-run", "--workers", "2"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert (
        last
        == f"study 'smoke': {n} runs, {n} to run; expected time: about {30 * n // 2} s (step times measured now; the longest runs first), on 2 workers"
    )


def test_a_study_says_its_expected_time_first_and_the_time_left_as_it_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "estimate", lambda runs, threads: {k: 10.0 for k, _, _ in runs})
    out = io.StringIO()
    study = fake_study(steps=5)
    header = runner_module.time_plan(list(enumerate(study.expand())), [], 1, 1)[1]
    assert header.startswith(f"expected time: about {10 * len(study.expand())} s")
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


def test_coord_off_a_terminal_prints_its_plan_and_plain_progress_lines(capsys):
    argv = ["coord", "--depths", "2,3", "--width", "16", "--heads", "2", "--steps", "1", "--seeds", "5"]
    assert main([*argv, "--batch-size", "2", "--seq-len", "8"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("coord: 20 models of 1 Adam steps; expected time: about")
    assert [line.split(",")[0] for line in err[1:]] == [f"coord: {k}/20 models" for k in range(2, 20, 2)]
