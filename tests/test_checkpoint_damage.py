"""Checkpoints carry a SHA-256 beside them; --resume passes over a damaged one (a byte flipped, cut
short, emptied, its checksum gone) to the newest intact one and ends exactly where the uninterrupted
run ends, or refuses (exit 2, the folder left as it was) when none is intact."""

from __future__ import annotations

import hashlib
import json
import random
import shutil

import pytest
import torch

from depthlab import ModelConfig, TrainConfig
from depthlab.cli import main
from depthlab.train import train
from depthlab.train.checkpoint import checkpoint_paths, checksum_paths, load, sum_path

MODEL = dict(n_layers=2, d_model=32, n_heads=4, max_len=32)  # what FLAGS say, for the Python API
RUN = dict(
    steps=20, batch_size=8, seq_len=16, log_every=5, checkpoint_every=10, eval_every=10, eval_batches=2
)
FLAGS = [
    "train", "--layers", "2", "--d-model", "32", "--heads", "4", "--max-len", "32", "--steps", "20",
    "--batch-size", "8", "--seq-len", "16", "--log-every", "5", "--checkpoint-every", "10",
    "--eval-every", "10", "--eval-batches", "2", "--threads", "1", "--quiet",
]  # fmt: skip

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """One uninterrupted run (checkpoints at steps 10 and 20), shared by the tests below."""
    out = tmp_path_factory.mktemp("ckpt") / "whole"
    torch.set_num_threads(1)
    assert main([*FLAGS, "--out", str(out)]) == 0
    return out


def _cut(whole, tmp_path):
    """The whole run as a run killed right after its last checkpoint: no result.json."""
    cut = tmp_path / "cut"
    shutil.copytree(whole, cut)
    (cut / "result.json").unlink()
    return cut


def _snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _result(folder) -> dict:
    r = json.loads((folder / "result.json").read_text())
    r.pop("tokens_per_s")
    return r


def test_every_checkpoint_has_its_checksum_beside_it(whole):
    paths = checkpoint_paths(str(whole))
    assert [p.name for p in paths] == ["step-000010.pt", "step-000020.pt"]
    assert [p.name for p in checksum_paths(str(whole))] == ["step-000010.pt.sha256", "step-000020.pt.sha256"]
    for p in paths:
        digest, name = sum_path(p).read_text().split()
        assert digest == hashlib.sha256(p.read_bytes()).hexdigest() and name == p.name  # sha256sum's format
    assert not list((whole / "checkpoints").glob(".*"))  # no temporary file left


def _flip_one_byte(p):
    data = bytearray(p.read_bytes())
    at = random.Random(p.name).randrange(len(data))
    data[at] ^= 0x01
    p.write_bytes(bytes(data))


def _64_random_bytes(p):
    data = bytearray(p.read_bytes())
    rng = random.Random(1)
    at = rng.randrange(len(data) // 4, len(data) - 64)
    data[at : at + 64] = rng.randbytes(64)
    p.write_bytes(bytes(data))


DAMAGE = {
    "one byte flipped": (_flip_one_byte, "do not match their checksum"),
    "64 random bytes inside": (_64_random_bytes, "do not match their checksum"),
    "cut short": (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "do not match"),
    "zero bytes": (lambda p: p.write_bytes(b""), "do not match"),
    "random content": (lambda p: p.write_bytes(random.Random(2).randbytes(5000)), "do not match"),
    "checksum missing": (lambda p: sum_path(p).unlink(), "no .sha256 checksum"),
    "checksum garbled": (lambda p: sum_path(p).write_text("not a digest\n"), "holds no checksum"),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_resume_passes_over_a_damaged_last_checkpoint_and_ends_as_the_whole_run(
    whole, tmp_path, capsys, damage
):
    cut = _cut(whole, tmp_path)
    last = checkpoint_paths(str(cut))[-1]
    spoil, reason = DAMAGE[damage]
    spoil(last)
    capsys.readouterr()
    assert main([*FLAGS, "--out", str(cut), "--resume"]) == 0
    err = capsys.readouterr().err
    assert f"checkpoint {last} is damaged" in err and reason in err, err
    assert _result(cut) == _result(whole)  # resumed from step 10: steps 11-20 again, the same numbers
    a, b = (load(checkpoint_paths(str(d))[-1]) for d in (whole, cut))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert sum_path(checkpoint_paths(str(cut))[-1]).exists()  # the step-20 checkpoint was written again


def test_the_issue_case_never_trains_on_garbage(whole, tmp_path, capsys):
    """64 random bytes inside the last checkpoint used to resume into a diverged run (exit 0): through
    the Python API the damaged checkpoint is passed over too, and the run ends as the whole run did."""
    cut = _cut(whole, tmp_path)
    _64_random_bytes(checkpoint_paths(str(cut))[-1])
    result = train(ModelConfig(**MODEL), TrainConfig(**RUN), str(cut), resume=True)
    assert "is damaged" in capsys.readouterr().err
    assert result.outcome == json.loads((whole / "result.json").read_text())["outcome"] != "diverged"
    assert _result(cut) == _result(whole)


def test_no_intact_checkpoint_refuses_and_leaves_the_folder_as_it_was(whole, tmp_path, capsys):
    cut = _cut(whole, tmp_path)
    for p in checkpoint_paths(str(cut)):
        _flip_one_byte(p)
    before = _snapshot(cut)
    capsys.readouterr()
    assert main([*FLAGS, "--out", str(cut), "--resume"]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Traceback" not in err and out == "", err  # one line, naming both
    assert err.startswith("depthlab train: error: --resume: none of the 2 checkpoints") and "--force" in err
    assert "step-000010.pt: its bytes do not match" in err and "step-000020.pt: its bytes" in err
    assert _snapshot(cut) == before


def test_force_deletes_the_checksums_too(whole, tmp_path, capsys):
    cut = _cut(whole, tmp_path)
    (cut / "checkpoints" / "step-000099.pt.sha256").write_text("orphan\n")  # its checkpoint never landed
    (cut / "checkpoints" / "notes.txt").write_text("mine")
    assert main([*FLAGS, "--out", str(cut), "--force", "--steps", "5"]) == 0
    names = sorted(p.name for p in (cut / "checkpoints").iterdir())
    assert names == ["notes.txt", "step-000005.pt", "step-000005.pt.sha256"]
