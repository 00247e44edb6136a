"""benchmarks/gpu.py --reproduce --dry-run: the registered large scale's plan, on a CPU, training nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from depthlab_lab.reproduce import REGISTRATIONS

ROOT = Path(__file__).resolve().parents[2]


def _gpu_py(args: list[str]) -> subprocess.CompletedProcess:
    """benchmarks/gpu.py run with ``args`` on the CPU (no CUDA device visible), its output captured."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, "gpu.py", *args],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_the_large_scale_dry_run_names_every_registered_claim_and_trains_nothing(tmp_path):
    done = _gpu_py(["--reproduce", "--dry-run", "--out", str(tmp_path / "runs")])
    assert done.returncode == 0, done.stderr
    large = [n for n, r in REGISTRATIONS.items() if "large" in r.regimes]
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"# the registered large scale: {len(large)} claims")
    assert {ln.split(":")[0] for ln in lines[1:-1]} == set(large)
    assert (
        "passes over the corpus" in lines[1]
        and lines[-1] == "run it with: python benchmarks/gpu.py --reproduce"
    )
    assert not (tmp_path / "runs").exists()  # nothing trained, nothing written


def test_the_large_scale_dry_run_states_its_runs_flop_and_hours(tmp_path):
    done = _gpu_py(["--reproduce", "depth,batchnorm", "--dry-run"])
    assert done.returncode == 0, done.stderr
    header, *claims, command = done.stdout.splitlines()
    assert "2 claims" in header and "36 runs" in header and "h on two cores" in header and "H200" in header
    depth = next(ln for ln in claims if ln.startswith("depth:"))
    assert "30 runs" in depth and "FLOP" in depth and "h on this cpu" in depth
    assert command == "run it with: python benchmarks/gpu.py --reproduce depth,batchnorm"


def test_the_ladder_dry_run_prints_its_plan_and_trains_nothing(tmp_path):
    db = tmp_path / "ladder.sqlite"
    done = _gpu_py(["--ladder", "dyt,batchnorm", "--dry-run", "--db", str(db)])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ladder dyt: 18 runs (0 already in the store), about")
    assert lines[2].startswith("ladder: 36 runs, 0 already done; expected about")
    assert lines[-1] == "run it with: python benchmarks/gpu.py --ladder dyt,batchnorm"
    assert not db.exists()  # nothing trained, no store made
