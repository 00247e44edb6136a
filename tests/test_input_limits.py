"""Limits checked before any work: one line on stderr, exit 2, nothing started. Threads, seeds, the
Jacobian sample count, path component lengths, inputs that would block (FIFO, device, socket), the
memory estimate (with --force-memory to go on), and flags that would do nothing."""

from __future__ import annotations

import os
import socket
import stat
import time

import pytest

from depthlab.cli import main
from depthlab.model import memory

TINY = ["--layers", "2", "--d-model", "16", "--heads", "2", "--max-len", "16"]
TRAIN = ["train", *TINY, "--steps", "2", "--batch-size", "2", "--seq-len", "8", "--threads", "1", "--quiet"]
PROBE = ["probe", *TINY, "--batch-size", "2", "--seq-len", "8", "--perturbation", "0"]
LONG = "a" * 300  # longer than any filesystem's 255-byte name limit

pytestmark = pytest.mark.usefixtures("one_thread")


def refused(capsys, argv, *needles: str, within: float = 10.0) -> str:
    """Run ``argv``: exit 2, one line on stderr holding every needle, nothing on stdout, and fast."""
    start = time.perf_counter()
    code = main([str(a) for a in argv])
    took = time.perf_counter() - start
    out, err = capsys.readouterr()
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert all(n in err for n in needles), err
    assert out == "", out
    assert took < within, f"refused only after {took:.1f} s"
    return err


@pytest.mark.parametrize(
    "argv", [[*TRAIN, "--threads", "100000"], ["reproduce", "seeds", "--threads", "100000"]]
)
def test_thread_counts_beyond_a_multiple_of_the_cores_are_refused(capsys, argv):
    refused(capsys, argv, "--threads 100000 is not allowed", "<=")


def test_omp_num_threads_beyond_the_limit_is_named(capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "100000")
    refused(capsys, [a for a in TRAIN if a not in ("--threads", "1")], "OMP_NUM_THREADS=100000")


@pytest.mark.parametrize("command", [TRAIN, PROBE])
def test_seeds_beyond_64_bits_are_refused(capsys, command):
    refused(
        capsys,
        [*command, "--seed", "99999999999999999999999"],
        "--seed 99999999999999999999999 is not",
        "<= 9223372036854775807",
    )


def test_the_largest_seed_is_accepted(capsys):
    assert main([*PROBE, "--seed", str(2**63 - 1), "--no-context"]) == 0


def test_jacobian_samples_are_bounded(capsys):
    refused(capsys, [*PROBE, "--jacobian", "1000000000"], "--jacobian 1000000000 is not allowed", "1024")


@pytest.mark.parametrize("flag", ["--data", "--out"])
def test_a_path_component_longer_than_the_filesystem_allows_is_refused(capsys, tmp_path, flag):
    refused(capsys, [*TRAIN, flag, tmp_path / LONG], "300 bytes long", "255")
    assert list(tmp_path.iterdir()) == []


def test_output_files_with_long_names_are_refused(capsys, tmp_path):
    refused(capsys, [*PROBE, "--json", tmp_path / LONG / "p.json"], "--json", "300 bytes")
    refused(capsys, ["study", "--preset", "smoke", "--db", tmp_path / (LONG + ".sqlite")], "bytes long")
    assert list(tmp_path.iterdir()) == []


def _fifo(path):
    os.mkfifo(path)
    return path


def _socket(path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")
@pytest.mark.parametrize(
    "make, kind",
    [(_fifo, "named pipe"), (lambda p: "/dev/zero", "character device"), (_socket, "socket")],
)
def test_data_that_would_block_or_never_end_is_refused(capsys, tmp_path, make, kind):
    path = make(tmp_path / "corpus")
    refused(capsys, [*TRAIN, "--data", path], kind, "regular file", within=5)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")
def test_a_fifo_as_grid_or_store_is_refused(capsys, tmp_path):
    fifo = _fifo(tmp_path / "fifo")
    refused(capsys, ["study", "--grid", fifo, "--db", tmp_path / "s.sqlite"], "named pipe", within=5)
    refused(capsys, ["study", "--preset", "smoke", "--db", fifo], "named pipe", within=5)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


# -- memory ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, needle",
    [
        (["explain", "--layers", "10000000"], "building the model needs about"),
        (["train", "--d-model", "1000000", "--heads", "4", "--steps", "1"], "training needs about"),
        (["probe", "--batch-size", "10000000"], "the probe needs about"),
        (["probe", "--d-model", "1000000", "--heads", "4"], "the probe needs about"),
    ],
)
def test_shapes_far_beyond_any_machine_are_refused_with_the_estimate(capsys, argv, needle):
    err = refused(capsys, argv, needle, "GB", "--force-memory", within=5)
    assert "parameters" in err


def test_the_table_row_explain_100000_layers_on_an_8_gb_machine(capsys, monkeypatch):
    """The hostile tester's machine had 8 GB free: 100,000 layers need 20 GB of weights."""
    monkeypatch.setattr("depthlab.model.explain.available_memory", lambda: 8_000_000_000)
    err = refused(capsys, ["explain", "--layers", "100000"], "about 20.2 GB", "of the 8.0 GB free", within=5)
    assert "a smaller --layers or --d-model" in err


@pytest.mark.parametrize("argv", [PROBE, ["advise", *TINY, "--lr", "1e-3", "--alternatives", ""]])
def test_a_one_token_sequence_is_refused_by_its_flag_before_any_probe(capsys, argv):
    """The lm loss predicts each token from those before it: with --seq-len 1 the probe was built, then
    refused without naming the flag (advise after announcing its probes)."""
    refused(capsys, [*argv, "--seq-len", "1"], "--seq-len 1 is not allowed: at least 2 with loss lm")


def test_full_attention_residuals_count_their_reads_which_grow_with_depth_squared(capsys, monkeypatch):
    """Every AttnRes read stacks the values it reads: at 200 layers, d_model 32, the probe passed the
    check (estimated at 0.4 GB) and was killed at 16 GB; at 60 layers it needs 1.6 GB."""
    monkeypatch.setattr("depthlab.probe.from_config.available_memory", lambda: 1_000_000_000)
    shape = ["--layers", "60", "--d-model", "32", "--heads", "2"]
    refused(capsys, ["probe", "--wrap", "attnres", *shape], "the probe needs about 1.6 GB", "--force-memory")
    est = memory.estimate_memory(
        memory.ModelConfig(n_layers=200, d_model=32, n_heads=2, wrap="attnres"), "probe", 8, 64
    )
    assert est.total > 15 * 10**9


def test_force_memory_runs_what_the_estimate_refuses(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("depthlab.train.tasks.available_memory", lambda device=None: 1_000_000)
    err = refused(capsys, TRAIN, "training needs about", "--checkpoint-activations", "--force-memory")
    assert "of the 0.0 GB free" in err
    assert main([*TRAIN, "--force-memory"]) == 0


def test_a_training_refusal_offers_to_turn_telemetry_off_when_it_is_on(capsys, monkeypatch):
    """Telemetry copies every layer's weights on a logged step (4 bytes a parameter, counted since): the
    refusal names the flag that drops it, and from Python the argument."""
    monkeypatch.setattr("depthlab.train.tasks.available_memory", lambda device=None: 1_000_000)
    refused(capsys, TRAIN, "training needs about", "--checkpoint-activations, or --no-telemetry")
    assert "--no-telemetry" not in refused(capsys, [*TRAIN, "--no-telemetry"], "--force-memory")
    from depthlab import TrainConfig
    from depthlab.train import train

    with pytest.raises(memory.InputError, match=r"or telemetry=False, or force_memory=True"):
        train(memory.ModelConfig(n_layers=2, d_model=16, n_heads=2), TrainConfig(steps=2), progress=False)


def test_a_study_too_big_for_memory_at_once_is_refused_before_the_store(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("depthlab.study.runner.available_memory", lambda: 200_000_000)
    db = tmp_path / "s.sqlite"
    refused(
        capsys, ["study", "--preset", "smoke", "--db", db, "--workers", "2"], "2 runs at once", "--workers"
    )
    assert not db.exists()


def test_unknown_free_memory_checks_nothing(monkeypatch):
    big = memory.estimate_memory(memory.ModelConfig(n_layers=10_000_000), "build")
    memory.check_memory(big, None)  # no number to compare with: no refusal
    with pytest.raises(memory.InputError):
        memory.check_memory(big, 10**9)
    memory.check_memory(big, 10**9, force=True)


# -- flags that would do nothing ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, needle",
    [
        ([*PROBE, "--hf-weights"], "--hf-weights needs --hf"),
        ([*PROBE, "--checkpoint-activations"], "--checkpoint-activations does nothing in probe"),
        ([*PROBE, "--loss", "sum", "--no-context"], "--no-context skips"),
        (["explain", *TINY, "--seed", "3"], "--seed does nothing in explain"),
        ([*TRAIN, "--force"], "--force needs --out"),
        ([*TRAIN, "--checkpoint-every", "5"], "--checkpoint-every needs --out"),
        ([*TRAIN, "--symbols", "8"], "--symbols 8 is not allowed: unset for task lm"),
        (
            [*TRAIN, "--min-lr-ratio", "0.2"],
            "--min-lr-ratio 0.2 is not allowed: unset unless schedule=cosine",
        ),
        (["reproduce", "list", "--quick"], "--quick does nothing with 'list'"),
        (["reproduce", "tour", "--json", "-"], "--json does nothing with 'tour'"),
        (["reproduce", "tour", "--out", "plots"], "--out does nothing with 'tour'"),
        (["study", "--fields", "--preset", "smoke"], "--preset does nothing with --fields"),
        (["study", "--preset", "smoke", "--report", "r", "--no-report"], "--report contradicts --no-report"),
    ],
)
def test_flags_that_would_do_nothing_are_refused(capsys, argv, needle):
    refused(capsys, argv, needle)


def test_the_flags_still_work_where_they_apply(capsys, tmp_path):
    assert main([*TRAIN, "--out", str(tmp_path / "r"), "--checkpoint-every", "1"]) == 0
    assert main([*TRAIN, "--out", str(tmp_path / "r"), "--force"]) == 0
    assert main([*TRAIN, "--schedule", "cosine", "--min-lr-ratio", "0.2"]) == 0
    assert main([*PROBE, "--seed", "3"]) == 0
    capsys.readouterr()
