"""torchrun + DDP on CPU (gloo): two processes give what one process gives with the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from depthlab.cli import main
from depthlab.train.checkpoint import checkpoint_paths, load
from depthlab.watch.attention_stats import ROWS

REPO = Path(__file__).resolve().parents[1]
# --no-bias: the attention key bias has a gradient that is 0 in exact arithmetic (it shifts every score
# of a query equally), so its float noise decides the sign of Adam's update, differently for 1 and 2
# processes; with it the weights could not be compared at any sensible tolerance. A batch of 4: the
# attention statistics are recomputed on a logged step for the first 4 sequences each process holds
# (depthlab.watch.attention_stats.ROWS), so one process and two see the same sequences only up to 4 in all.
FLAGS = [
    *("--layers", "2", "--d-model", "32", "--heads", "4", "--max-len", "32", "--wrap", "post", "--quiet"),
    "--no-bias",
    *("--steps", "8", "--batch-size", "4", "--seq-len", "16", "--log-every", "4", "--eval-every", "8"),
    *("--eval-batches", "2", "--clip", "1.0"),
]


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.distributed
@pytest.mark.slow
def test_two_processes_match_one(tmp_path, capsys, one_thread):
    assert int(FLAGS[FLAGS.index("--batch-size") + 1]) <= ROWS  # else the attention statistics differ
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["train", *FLAGS, "--threads", "1", "--out", str(one)]) == 0
    capsys.readouterr()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    logs = tmp_path / "logs"  # each rank's stderr, to show when a rank fails
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd += ["--redirects", "2", "--log-dir", str(logs)]
    proc = subprocess.run(
        [*cmd, "-m", "depthlab", "train", *FLAGS, "--out", str(two)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    ranks = "\n".join(
        f"{p.relative_to(logs)}:\n{p.read_text()[-3000:]}" for p in sorted(logs.rglob("stderr.log"))
    )
    assert proc.returncode == 0, f"{ranks}\n{proc.stderr[-1500:]}"
    assert proc.stdout.count("tokens/s") == 1  # only rank 0 speaks
    assert json.loads((two / "config.json").read_text())["world_size"] == 2
    assert len(list(two.glob("events.out.tfevents.*"))) == 1
    a, b = _records(one), _records(two)
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 4, 8]
    for ra, rb in zip(a, b):
        for key in ("loss", "lr", "grad_norm"):
            assert rb[key] == pytest.approx(ra[key], rel=1e-5), key
        for la, lb in zip(ra["layers"], rb["layers"]):
            for key, va in la.items():
                assert (lb[key] is None) == (va is None), key
                if va is not None:
                    assert lb[key] == pytest.approx(va, rel=1e-4, abs=1e-7), (ra["step"], la["index"], key)
    ra, rb = (json.loads((d / "result.json").read_text()) for d in (one, two))
    assert rb["val_loss"] == pytest.approx(ra["val_loss"], rel=1e-5) and rb["outcome"] == ra["outcome"]
    wa, wb = (load(checkpoint_paths(str(d))[-1])["model"] for d in (one, two))
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-4, atol=1e-5)


def test_omp_num_threads_is_honoured_as_a_limit(monkeypatch):
    from depthlab.study.executors import threads_per_worker
    from depthlab.train.distributed import available_cores, default_threads

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert default_threads() == 1 and threads_per_worker(1) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")  # ignored, as OpenMP would
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert default_threads() == min(available_cores(), 2)


def _torchrun(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node=2 -m depthlab ARGS`` in a subprocess."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    return subprocess.run(
        [*cmd, "-m", "depthlab", *args], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path
    )


@pytest.mark.distributed
@pytest.mark.parametrize(
    "args, said",
    [
        (["train", "--d-mdoel", "32"], "unrecognized arguments: --d-mdoel"),  # argparse's refusal
        (["train", "--layers", "0", "--steps", "2"], "--layers 0 is not allowed"),  # a config's
    ],
)
def test_a_refusal_under_torchrun_is_said_once(tmp_path, args, said):
    # every process reads the same flags and refuses them; one line is enough (two processes wrote two)
    proc = _torchrun(args, tmp_path)
    assert proc.returncode != 0  # torchrun's own exit code (1) for a worker that exited 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("depthlab train: error:")]
    assert len(lines) == 1 and said in lines[0], proc.stderr[-2000:]


@pytest.mark.parametrize("rank, waits", [("0", False), ("1", True), ("not a rank", False)])
def test_another_rank_says_its_refusal_after_the_wait(monkeypatch, capsys, rank, waits):
    # a rank whose refusal is its own (rank 0 went on) must still say it, only later
    import depthlab.cli as cli

    slept = []
    monkeypatch.setattr(cli.time, "sleep", slept.append)
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["train", "--layers", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "depthlab train: error: --layers 0 is not allowed: an integer >= 1"
    ]
    assert slept == ([cli.OTHER_RANK_WAIT_S] if waits else [])


@pytest.mark.parametrize("rank, said", [("0", "interrupted\n"), ("1", "")])
def test_ctrl_c_under_torchrun_is_said_by_rank_0(monkeypatch, capsys, rank, said):
    # Ctrl-C reaches every torchrun process; each wrote "interrupted"
    import depthlab.cli.train as train_cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_cli, "run", interrupted)
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["train"]) == 1
    assert capsys.readouterr().err == said


@pytest.mark.parametrize("value", ["", "two", "-1", "²"])
def test_a_rank_or_world_size_not_torchruns_is_one_process(monkeypatch, value):
    # read with int(), these made every command that asked (the refusal, the thread count) fail
    from depthlab.train.distributed import Dist, available_cores, default_threads

    monkeypatch.setenv("RANK", value)
    monkeypatch.setenv("WORLD_SIZE", value)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert (Dist.from_env().rank, Dist.from_env().world) == (0, 1)
    assert default_threads() == min(available_cores(), 2)


# train() under torchrun, then: is its DDP wrapper still alive? It sat in a reference cycle with its
# trainer, so it outlived destroy_process_group and held gloo's group open; the group's worker threads
# then freed tensors during interpreter shutdown, and gloo aborted the process (SIGABRT, about one
# finished run in twenty: torchrun reported the run as failed).
AFTER_TRAIN = """
import gc, sys
import torch
from depthlab import ModelConfig, TrainConfig
from depthlab.train import train

train(ModelConfig(n_layers=2, d_model=32, n_heads=2), TrainConfig(steps=2, batch_size=4, seq_len=16))
alive = [o for o in gc.get_objects() if isinstance(o, torch.nn.parallel.DistributedDataParallel)]
sys.exit(f"{len(alive)} DDP wrapper(s) alive after train()" if alive else 0)
"""


@pytest.mark.distributed
def test_train_lets_go_of_the_process_group_under_torchrun(tmp_path):
    script = tmp_path / "after_train.py"
    script.write_text(AFTER_TRAIN)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    said = [line for line in proc.stderr.splitlines() if "alive after train()" in line]
    assert not said and proc.returncode == 0, said or proc.stderr[-2000:]
