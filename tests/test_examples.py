"""examples/watch_*.py as a newcomer runs them: each trains a few steps into the --out it is given, says
where its outputs went, writes nothing into the folder it is run from, and refuses a bad flag (a step
count below 1, a learning rate that is not a positive number, an --out that already holds a run) with
one line naming the flag and exit code 2, before any work and without a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCRIPTS = ["watch_plain_loop.py", "watch_hf_trainer.py", "watch_lightning.py"]
NEEDS = {
    "watch_plain_loop.py": "transformers",
    "watch_hf_trainer.py": "accelerate",
    "watch_lightning.py": "lightning",
}
HAS_LR = ["watch_plain_loop.py", "watch_lightning.py"]  # the Trainer example sets its own


def _run(script: str, *flags: str, cwd: Path) -> subprocess.CompletedProcess:
    pytest.importorskip(NEEDS[script])
    root = str(EXAMPLES.parent)
    path = os.pathsep.join([root, os.path.join(root, "lab"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, str(EXAMPLES / script), *flags]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _refused(result: subprocess.CompletedProcess, flag: str) -> str:
    """The one error line of a refusal (argparse's usage line may precede it), which names ``flag``."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and flag in errors[0], result.stderr
    return errors[0]


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_an_example_writes_only_its_out_and_says_where(script, tmp_path):
    cwd, out = tmp_path / "cwd", tmp_path / "run"
    cwd.mkdir()
    result = _run(script, "--steps", "6", "--out", str(out), cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"wrote {out}: depthlab report --run {out}" in result.stdout
    assert "depthlab.watch: outcome: " in result.stderr or "depthlab.watch: outcome: " in result.stdout
    assert (out / "metrics.jsonl").is_file() and json.loads((out / "watch.json").read_text())["steps"] == 6
    assert not list(cwd.iterdir()), f"{script} wrote into the folder it was run from: {list(cwd.iterdir())}"


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_an_out_that_holds_a_run_is_refused_before_any_work(script, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    line = _refused(_run(script, "--steps", "2", "--out", str(out), cwd=tmp_path), "--out")
    assert "already holds a run" in line
    assert sorted(p.name for p in out.iterdir()) == ["metrics.jsonl"]  # nothing of it lost or added
    assert (out / "metrics.jsonl").read_text() == '{"step": 1}\n'


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_fewer_than_one_step_is_refused(script, tmp_path):
    out = tmp_path / "run"
    _refused(_run(script, "--steps", "0", "--out", str(out), cwd=tmp_path), "--steps")
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("script", HAS_LR)
@pytest.mark.parametrize("lr", ["0", "nan"])
def test_a_learning_rate_that_is_not_positive_and_finite_is_refused(script, lr, tmp_path):
    out = tmp_path / "run"
    _refused(_run(script, f"--lr={lr}", "--out", str(out), cwd=tmp_path), "--lr")
    assert not out.exists()
