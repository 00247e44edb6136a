"""Smoke tests of benchmarks/: every script's --help and a tiny run work; helpers compute right.

No timing is asserted (speed is judged only by the benchmark scripts' ratios on a real run).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import peers  # noqa: E402
import run_all  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # restored after each test (conftest.py)
TINY = ["--seq", "16", "--batch", "2"]


def run(script: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEPTHLAB_BENCH_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.mark.parametrize("script", [p.name for p in run_all.discover()])
def test_every_script_make_bench_runs_has_a_help_and_needs_no_argument(script):
    """run_all runs each discovered script with no argument: none may be a helper or need a flag."""
    usage = run(script, "--help").stdout.split("\n\n")[0]
    assert usage.startswith("usage:"), usage
    while re.search(r"\[[^\[\]]*\]", usage):  # drop the optional flags, inner brackets first
        usage = re.sub(r"\[[^\[\]]*\]", "", usage)
    assert usage.split() == ["usage:", script], usage  # nothing else may remain


# Each bad flag: one line on stderr naming it, exit 2, before any work (tiny sizes, should a check be missing).
TINY_RUN = ["--seq", "8", "--batch", "2", "--heads", "2"]
BAD_FLAGS = [
    ("throughput", ["--configs", "128"], "--configs"),
    ("throughput", ["--configs", "16xa"], "--configs"),
    ("throughput", ["--configs", "16x1", *TINY_RUN, "--rounds", "-1"], "--rounds"),
    ("throughput", ["--configs", "16x1", *TINY_RUN, "--models", "nope"], "--models"),
    ("throughput", ["--configs", "16x1", "--seq", "8", "--batch", "2", "--heads", "3"], "--heads"),
    ("throughput", ["--configs", "16x1", *TINY_RUN, "--peak-n", "0"], "--peak-n"),
    ("topologies", ["--d-model", "10", "--layers", "1", "--seq", "8", "--batch", "2"], "--d-model"),
    ("topologies", ["--designs", "vres", "--d-model", "16", "--layers", "1", "--rounds", "-1"], "--rounds"),
    ("probe_cost", ["--layers", "1", "--d-model", "16", "--heads", "3"], "--heads"),
    ("probe_cost", ["--layers", "1", "--d-model", "16", "--heads", "2", "--rounds", "0"], "--rounds"),
    ("advise_cost", ["--layers", "1", "--d-model", "16", "--heads", "3"], "--heads"),
    ("advise_cost", ["--layers", "1", "--d-model", "16", "--heads", "2", "--rounds", "0"], "--rounds"),
    ("advise_cost", ["--layers", "1", "--d-model", "16", "--heads", "2", "--wrap", "nope"], "--wrap"),
    ("profile_step", ["--configs", "16"], "--configs"),
    ("profile_step", ["--configs", "16x1", *TINY_RUN, "--models", "nope"], "--models"),
    ("profile_step", ["--configs", "16x1", *TINY_RUN, "--rounds", "0"], "--rounds"),
    ("memory_depth", ["--layers", "a"], "--layers"),
    ("memory_depth", ["--layers", "1", "--deep", "2", "--d", "16", *TINY_RUN, "--steps", "0"], "--steps"),
    ("memory_depth", ["--layers", "1", "--deep", "2", "--d", "16", *TINY_RUN, "--wrap", "nope"], "--wrap"),
    ("study_throughput", ["--workers", "1"], "--workers"),
    (
        "telemetry_overhead",
        ["--layers", "1", "--steps", "3", "--hf-rounds", "2", "--repeats", "0"],
        "--repeats",
    ),
    ("telemetry_overhead", ["--hf-only", "--hf-layers", "1", "--hf-rounds", "1"], "--hf-rounds"),
    ("telemetry_overhead", ["--hf-only", "--threads", "0"], "--threads"),
    ("gpu", ["--device", "cpu", "--shape", "16x1x2x8", "--batch", "2", "--rounds", "0"], "--rounds"),
    ("gpu", ["--device", "cpu", "--shape", "16x1x2x8", "--batch", "2", "--models", "nope"], "--models"),
    ("coord_time", ["--quick", "--out", __file__], "--json"),  # depthlab coord's refusal, passed on
]


@pytest.mark.parametrize(
    ("script", "args", "flag"), BAD_FLAGS, ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_a_bad_flag_is_refused_in_one_line_naming_it(script, args, flag, capsys, monkeypatch):
    import importlib

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # pin_threads sets them: restored after the test
        monkeypatch.setenv(var, "1")
    with pytest.raises(SystemExit) as exc:
        code = importlib.import_module(script).main(args)
        raise SystemExit(code)  # a main that returns instead of raising: its code is the exit status
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and flag in err[0], (exc.value.code, err)


@pytest.mark.parametrize(("args", "flag"), [(["--only", "nope"], "--only"), (["--budget", "0"], "--budget")])
def test_run_all_refuses_a_bad_flag_before_rewriting_results(tmp_path, args, flag, capsys):
    results = tmp_path / "RESULTS.md"
    results.write_text("kept\n")
    with pytest.raises(SystemExit) as exc:
        run_all.main([*args, "--out", str(results)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and flag in err[0], err
    assert results.read_text() == "kept\n"  # nothing measured, nothing rewritten


def test_run_all_only_refuses_to_drop_other_scripts_results(tmp_path, capsys):
    """--only rewrites --out whole: onto a RESULTS.md holding other scripts' sections it would lose them."""
    results = tmp_path / "RESULTS.md"
    kept = f"# Benchmark results\n\n## gpu\n\nx\n\n## throughput\n\ny\n{common_notes()}\nanalysis\n"
    results.write_text(kept)
    with pytest.raises(SystemExit) as exc:
        run_all.main(["--only", "gpu", "--out", str(results)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "holds the results of throughput" in err[0], err
    assert results.read_text() == kept


def test_param_counts_match_and_a_mismatch_is_caught():
    s = peers.Shape(d=16, layers=2, heads=2, seq=8, batch=2)
    names = [f"depthlab-{w}" for w in peers.DEPTHLAB] + list(peers.PEERS)
    models = {n: peers.build(n, s) for n in names}
    totals = peers.check_param_counts(models, s)
    assert totals["depthlab-pre"] == totals["nanogpt"] == totals["torch-pre"]
    models["nanogpt"] = peers.build("nanogpt", peers.Shape(d=16, layers=3, heads=2, seq=8, batch=2))
    with pytest.raises(AssertionError):
        peers.check_param_counts(models, s)


def test_study_throughput_grids_change_only_what_they_say():
    import study_throughput

    smoke = study_throughput.grid("smoke")
    long = study_throughput.grid("smoke", steps=1000)
    one = study_throughput.grid("smoke", steps=1, n_runs=1)
    assert [s.label for s in long.expand()] == [s.label for s in smoke.expand()]
    assert {s.train.steps for s in long.expand()} == {1000}
    assert {s.model.d_model for s in long.expand()} == {s.model.d_model for s in smoke.expand()}
    assert len(one.expand()) == 1 and one.expand()[0].train.steps == 1


def test_train_step_lowers_the_loss_of_every_model():
    s = peers.Shape(d=16, layers=1, heads=2, seq=8, batch=4)
    for name in ("depthlab-deepnorm", "torch-post", "x-transformers", "nanogpt"):
        torch.manual_seed(0)
        step = peers.train_step(peers.build(name, s), s)
        first = float(step())
        for _ in range(30):
            last = float(step())
        assert last < first, name


def test_throughput_tiny_prints_one_line_per_model_ending_with_the_ratio():
    out = run(
        "throughput.py", "--configs", "16x2", *TINY, "--heads", "2", "--rounds", "2", "--peak-n", "64"
    ).stdout
    rows = [line for line in out.splitlines() if line.startswith("d=16")]
    assert len(rows) == len(peers.DEPTHLAB) + len(peers.PEERS)
    assert all(re.search(r"ratio \d+\.\d\d$", line) for line in rows)
    assert "goal ratio >= 1.00 everywhere" in out


@pytest.mark.slow
def test_memory_depth_tiny_fits_and_checkpointing_is_exact():
    args = ["--quick", "--layers", "1,2", "--deep", "3", "--d", "16", "--heads", "2", "--steps", "1", *TINY]
    out = run("memory_depth.py", *args).stdout
    assert "fit plain" in out and "fit checkpointed" in out and "goal 3-layer deepnorm" in out
    losses = {}
    for line in out.splitlines():
        m = re.match(r"L=(\d+)\s+(plain|checkpointed)\s.*loss (\S+)", line)
        if m:
            losses.setdefault(m[1], {})[m[2]] = float(m[3])
    # same seed, same batch: checkpointing recomputes, it must not change training
    assert all(
        v["plain"] == pytest.approx(v["checkpointed"], rel=1e-5) for v in losses.values() if len(v) == 2
    )
    assert set(losses) == {"1", "2", "3"} and len(losses["1"]) == 2


def test_gpu_script_without_gpu_says_so_and_runs_on_cpu_tiny():
    if not torch.cuda.is_available():
        assert "No GPU" in run("gpu.py").stdout
    args = ["--device", "cpu", "--shape", "16x1x2x8", "--batch", "2", "--rounds", "2", "--steps", "1"]
    out = run("gpu.py", *args, "--warmup", "1", "--peak-n", "32").stdout
    assert re.search(r"depthlab-pre .* ratio \d+\.\d\d", out) and "nanogpt" in out


def test_run_all_rewrites_results_and_keeps_the_notes(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text(f"old generated text\n{common_notes()}\nhand-written analysis\n")
    run("run_all.py", "--only", "gpu", "--out", str(results))
    text = results.read_text()
    assert "old generated text" not in text and "hand-written analysis" in text
    assert "torch " + torch.__version__ in text and "## gpu" in text
    assert re.search(r"from commit [0-9a-f]{7,}", text)  # what was measured, so a figure can be traced


def common_notes() -> str:
    import run_all

    return run_all.NOTES


def test_advise_cost_tiny_prints_each_cost_in_steps_and_the_expected_time():
    out = run("advise_cost.py", "--layers", "1", "--d-model", "16", "--heads", "2", "--rounds", "1").stdout
    lines = out.splitlines()
    assert lines[0].startswith("post, 1 layers, d_model 16, batch 32 x 64, 1 threads"), out
    assert [line.split("  ")[1] for line in lines[1:6]] == [
        "Adam step", "probe (your stack)", "light probe (alternative)", "advise, 4 alternatives", "advise, --alternatives ''"
    ], out  # fmt: skip
    assert lines[6].startswith("probe = ") and lines[7].startswith("advise's expected time "), out


def test_linear_fit_and_alternation():
    a, b, r2 = common.linear_fit([1, 2, 3], [3, 5, 7])
    assert (a, b, r2) == pytest.approx((1, 2, 1))
    calls = []
    times = common.time_alternating(
        {"x": lambda: calls.append("x"), "y": lambda: calls.append("y")}, 3, warmup=0
    )
    assert calls == ["x", "y", "y", "x", "x", "y"] and len(times["x"]) == 3


def test_topologies_runs_tiny_and_prints_each_design_against_both_pre_lns():
    out = run("topologies.py", "--designs", "hc,mhc,frac,vres", "--d-model", "16", "--layers", "2", *TINY,
              "--rounds", "1").stdout  # fmt: skip
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line and not line.startswith("#")}
    assert lines["design"][:2] == ["design", "depthlab"]
    for design in ("hc", "mhc", "vres"):  # paired with x-transformers: every column has a number
        assert all(v != "-" for v in lines[design][1:]), lines[design]
    assert lines["frac"][3:] == ["-", "-", "-"]  # no x-transformers counterpart
    assert "pre-LN step: depthlab" in out
    assert "then the median over rounds" in out  # the ratio columns' definition, printed with the table


def test_topologies_refuses_an_unknown_design():
    env = dict(os.environ, DEPTHLAB_BENCH_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(BENCH / "topologies.py"), "--designs", "nope"],
                          capture_output=True, text=True, env=env)  # fmt: skip
    assert proc.returncode == 2 and "unknown nope" in proc.stderr
