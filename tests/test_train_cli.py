"""depthlab train: what a run writes, the refusal to overwrite, bad input, and resume after SIGKILL."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from depthlab import ModelConfig, TrainConfig
from depthlab.cli import main
from depthlab.train import train
from depthlab.train.checkpoint import checkpoint_paths, load

TINY = ["--layers", "2", "--d-model", "32", "--heads", "4", "--max-len", "32", "--threads", "1", "--quiet"]
RUN = TINY + [
    "--steps",
    "12",
    "--batch-size",
    "8",
    "--seq-len",
    "16",
    "--log-every",
    "5",
    "--eval-batches",
    "2",
]
REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(["train", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_run_writes_its_folder(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, err = _cli(capsys, *RUN, "--wrap", "post", "--out", str(out))
    # 12 steps: too short to stall; a loss still falling above the band is undertrained, not "flat"
    assert code == 0 and stdout.splitlines()[0].startswith(("trained", "undertrained"))
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["wrap"] == "post" and config["train"]["steps"] == 12
    assert config["data"]["source"] == "python-stdlib" and config["data"]["files"]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 5, 10, 12] and len(metrics[0]["layers"]) == 3
    result = json.loads((out / "result.json").read_text())
    assert result["outcome"] in ("trained", "undertrained") and result["val_bpb"] > 0
    state = load(checkpoint_paths(str(out))[-1])  # weights_only=True inside
    assert state["step"] == 12 and {"model", "optimizer", "scheduler", "rng", "monitor"} <= set(state)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"train/loss", "val/loss", "val/bpb", "stream_grad/layer_00", "param_update/layer_02"} <= set(tags)
    assert [e.step for e in events.Scalars("train/loss")] == [1, 5, 10, 12]


def test_an_existing_folder_is_refused_unless_resume_or_force(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, err = _cli(capsys, *RUN, "--out", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--resume" in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert _cli(capsys, *RUN, "--out", str(out), "--force")[0] == 0
    first = (out / "result.json").read_text()
    code, stdout, _ = _cli(capsys, *RUN, "--out", str(out), "--resume")  # finished: reports, no training
    assert code == 0 and (out / "result.json").read_text() == first and (out / "notes.txt").exists()
    code, _, err = _cli(capsys, *RUN, "--out", str(out), "--resume", "--lr", "0.01")
    assert code == 2 and "train.lr" in err


def test_force_deletes_only_what_a_run_wrote(tmp_path, capsys):
    out = tmp_path / "proj"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "my_model.bin").write_text("mine")
    (out / "config.json").write_text('{"mine": 1}')
    code, _, err = _cli(capsys, *RUN, "--out", str(out), "--force")  # not a run's config.json: refused
    assert code == 2 and "is not a depthlab run's config" in err
    code, _, err = _cli(capsys, *RUN, "--out", str(out), "--resume")  # nor resumed: no way on but elsewhere
    assert code == 2 and "choose another --out" in err and "--force" not in err
    assert (out / "config.json").read_text() == '{"mine": 1}'
    (out / "config.json").unlink()
    (out / "watch.json").write_text('{"stack": "a watched loop"}')  # a watched loop's record in the folder
    assert _cli(capsys, *RUN, "--out", str(out), "--force", "--checkpoint-every", "5")[0] == 0
    assert _cli(capsys, *RUN, "--out", str(out), "--force", "--checkpoint-every", "5")[0] == 0  # over a run
    assert (out / "checkpoints" / "my_model.bin").read_text() == "mine"  # only step-N.pt files go
    assert not (out / "watch.json").exists()  # a run page would have read it as this run's
    assert [p.name for p in checkpoint_paths(str(out))] == ["step-000010.pt", "step-000012.pt"]


@pytest.mark.parametrize("content", [None, b"", b"tiny"])
def test_bad_data_file_is_one_line_and_exit_2(tmp_path, capsys, content):
    data = tmp_path / "corpus.txt"
    if content is not None:
        data.write_bytes(content)
    code, _, err = _cli(capsys, *RUN, "--data", str(data), "--out", str(tmp_path / "run"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_diverged_run_exits_0_and_is_recorded(tmp_path, capsys):
    code, stdout, _ = _cli(capsys, *RUN, "--lr", "1", "--out", str(tmp_path / "run"))
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert code == 0 and stdout.startswith("diverged at step") and result["outcome"] == "diverged"


KILLED_RUN = """
import json, sys, time
from depthlab import ModelConfig, TrainConfig
from depthlab.train import train
from depthlab.train.distributed import set_torch_threads

model, run, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
set_torch_threads(1)

def hold_at(record):
    if record["step"] == 25:  # after the checkpoint of step 20: tell the test, and wait to be killed
        print("ready", flush=True)
        time.sleep(600)

train(ModelConfig(**model), TrainConfig(**run), out, on_log=hold_at)
"""


@pytest.mark.slow
def test_resume_after_sigkill_equals_an_uninterrupted_run(tmp_path, capsys):
    """Dropout (the RNG state), a cosine schedule with warmup (the scheduler state) and Adam (the optimizer
    state) all have to be restored for the resumed run to end with the same weights, bit for bit."""
    model = dict(n_layers=2, d_model=32, n_heads=4, max_len=32, dropout=0.1)
    run = dict(
        steps=40,
        batch_size=8,
        seq_len=16,
        log_every=5,
        checkpoint_every=10,
        eval_every=20,
        eval_batches=2,
        schedule="cosine",
        warmup=10,
    )
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    train(ModelConfig(**model), TrainConfig(**run), str(whole))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-c", textwrap.dedent(KILLED_RUN), json.dumps(model), json.dumps(run), str(cut)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "ready"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL and not (cut / "result.json").exists()
    assert [p.name for p in checkpoint_paths(str(cut))][-1] == "step-000020.pt"
    resumed = train(ModelConfig(**model), TrainConfig(**run), str(cut), resume=True)
    a, b = (json.loads((d / "result.json").read_text()) for d in (whole, cut))
    assert {k: v for k, v in a.items() if k != "tokens_per_s"} == {
        k: v for k, v in b.items() if k != "tokens_per_s"
    }
    assert [m["step"] for m in resumed.metrics] == [1, 5, 10, 15, 20, 25, 30, 35, 40]
    ma, mb = (
        [
            {k: v for k, v in json.loads(x).items() if k != "tokens_per_s"}
            for x in (d / "metrics.jsonl").read_text().splitlines()
        ]
        for d in (whole, cut)
    )
    assert ma == mb  # the killed run's lines after step 20 were replaced, not doubled
    wa, wb = (load(checkpoint_paths(str(d))[-1]) for d in (whole, cut))
    assert wa["step"] == wb["step"] == 40
    assert all(torch.equal(wa["model"][k], wb["model"][k]) for k in wa["model"])
    opt_a, opt_b = list(_tensors(wa["optimizer"])), list(_tensors(wb["optimizer"]))
    assert opt_a and len(opt_a) == len(opt_b)  # Adam's state is there to compare
    assert all(torch.equal(x, y) for x, y in zip(opt_a, opt_b))


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def test_a_force_that_cannot_remove_a_file_removes_none(tmp_path, capsys, monkeypatch):
    """--force removes a run's files all or none: where one cannot be removed (a file locked by its
    owner), the others are put back, the run folder is as it was, and the refusal is one line, exit 2."""
    import depthlab.train.rundir as rundir

    out = tmp_path / "run"
    assert _cli(capsys, *RUN, "--out", str(out))[0] == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real = os.rename

    def locked(src, dst):
        if Path(src).name == "result.json":
            raise PermissionError(1, "Operation not permitted")
        real(src, dst)

    monkeypatch.setattr(rundir.os, "rename", locked)
    code, _, err = _cli(capsys, *RUN, "--out", str(out), "--force")
    assert (
        code == 2
        and err.count("\n") == 1
        and "result.json cannot be removed" in err
        and "nothing was removed" in err
    )
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in out.iterdir()) == sorted({p.parts[0] for p in before})


def test_the_help_says_every_way_a_run_stalls(capsys):
    """A loss flat above the unigram band ends stalled (depthlab.watch.outcome), not undertrained: the
    help's account of the outcomes says so, not only 'at the unigram loss'."""
    from depthlab.watch.outcome import Monitor

    monitor = Monitor(40, 3.0, 3.0, 0.5)
    for step in range(1, 41):
        monitor.update(step, 4.0, 1.0)
        if step % 5 == 0:
            monitor.log(step, 4.0)
    assert monitor.decide().outcome == "stalled"
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "'stalled' (at the unigram plateau, or above it and flat)" in text


def test_kill_pid_stops_a_run_as_ctrl_c_does_and_says_how_to_go_on(tmp_path):
    """`kill PID` (SIGTERM) ended `depthlab train` with exit 143 and no word; it now stops as Ctrl-C does:
    exit 1 and one line that says what the run folder keeps and how to continue."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "depthlab", "train", "--layers", "1", "--d-model", "16", "--heads", "2",
            "--steps", "100000", "--batch-size", "2", "--seq-len", "8", "--max-len", "8", "--log-every", "1",
            "--checkpoint-every", "5",
            "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.time() + 120
        while not checkpoint_paths(str(out)) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert checkpoint_paths(str(out)), f"the run wrote no checkpoint (exit {proc.poll()})"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 1
        err = proc.stderr.read()
    finally:
        proc.kill()
    last = err.strip().splitlines()[-1]
    assert re.fullmatch(
        f"interrupted: {re.escape(str(out))} keeps the checkpoint of step \\d+; the same command with --resume "
        "continues from it",
        last,
    ), last
    assert not (out / "result.json").exists()


def test_an_interrupted_run_without_out_says_nothing_was_kept(capsys, monkeypatch):
    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("depthlab.cli.train.train", stopped)
    assert main(["train", "--layers", "1", "--d-model", "16", "--heads", "2", "--steps", "2"]) == 1
    assert capsys.readouterr().err == "interrupted: nothing was kept (no --out)\n"


def test_an_interrupted_run_before_its_first_checkpoint_says_resume_starts_over(
    tmp_path, capsys, monkeypatch
):
    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("depthlab.cli.train.train", stopped)
    out = tmp_path / "run"
    assert main(["train", "--layers", "1", "--d-model", "16", "--heads", "2", "--out", str(out)]) == 1
    assert capsys.readouterr().err == (
        f"interrupted: {out} holds no checkpoint yet; the same command with --resume starts it over\n"
    )
