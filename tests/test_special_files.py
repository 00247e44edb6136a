"""Every file a command reads is a regular file before it is opened, every output replaces only a
regular file (or makes a new one) through a temporary name mkstemp made, and a run folder of the wrong
shape, without a checkpoint, or on a full disk gets one line."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from depthlab.cli import main
from depthlab.train import checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")
FIXTURE_RUN = Path(__file__).parent / "fixtures" / "legacy_store" / "run"
FLAGS = ["train", "--layers", "2", "--d-model", "16", "--heads", "2", "--wrap", "pre", "--steps", "6",
         "--batch-size", "4", "--seq-len", "16", "--log-every", "2", "--quiet"]  # fmt: skip


def _run(tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, out)
    return out


def _special(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()


def _one_line(capsys, *needles) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert all(n in err for n in needles), err
    return err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "socket"])
@pytest.mark.parametrize(
    "name",
    [
        "metrics.jsonl",
        "result.json",
        "config.json",
        "checkpoints/step-000006.pt",
        "checkpoints/step-000006.pt.sha256",
    ],
)
def test_a_run_file_that_is_not_regular_is_refused_on_resume(tmp_path, capsys, name, kind):
    out = _run(tmp_path)
    if name != "result.json":
        (out / "result.json").unlink()  # so that the resume reads its checkpoint and metrics
    _special(out / name, kind)
    assert main([*FLAGS, "--out", str(out), "--resume"]) == 2
    _one_line(capsys, name.split("/")[-1], "socket" if kind == "socket" else "named pipe")
    assert not stat.S_ISREG(os.lstat(out / name).st_mode)


@pytest.mark.timeout(60)
def test_a_fifo_in_a_run_folder_is_refused_on_force(tmp_path, capsys):
    out = _run(tmp_path)
    _special(out / "metrics.jsonl", "fifo")
    assert main([*FLAGS, "--out", str(out), "--force"]) == 2
    _one_line(capsys, "metrics.jsonl", "named pipe")


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_json_onto_a_device_node_is_refused_and_the_node_kept(tmp_path, capsys):
    node = tmp_path / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    assert main(["explain", "--layers", "2", "--json", str(node)]) == 2
    _one_line(capsys, "character device")
    assert stat.S_ISCHR(os.lstat(node).st_mode)


@pytest.mark.timeout(60)
def test_json_onto_a_fifo_is_refused_before_any_work(tmp_path, capsys):
    os.mkfifo(tmp_path / "x.json")
    assert main(["explain", "--layers", "2", "--json", str(tmp_path / "x.json")]) == 2
    _one_line(capsys, "named pipe")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "x.json").st_mode)


def test_a_user_file_named_like_a_temporary_file_is_kept(tmp_path, capsys):
    mine = tmp_path / ".x.json.tmp"
    mine.write_text("my notes\n")
    assert main(["explain", "--layers", "2", "--json", str(tmp_path / "x.json")]) == 0
    assert mine.read_text() == "my notes\n"
    assert json.loads((tmp_path / "x.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == [".x.json.tmp", "x.json"]


@pytest.mark.parametrize("name,content", [("result.json", "[]"), ("result.json", '{"outcome": 3}'),
                                          ("config.json", "{}"), ("config.json", "[1]")])  # fmt: skip
def test_run_json_of_the_wrong_shape_is_refused_and_kept(tmp_path, capsys, name, content):
    out = _run(tmp_path)
    (out / name).write_text(content)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    lr = ["--lr", "0.5"] if name == "config.json" else []  # other settings must not slip past an empty config
    assert main([*FLAGS, *lr, "--out", str(out), "--resume"]) == 2
    _one_line(capsys, name)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_checkpoints_as_a_file_is_refused_and_metrics_kept(tmp_path, capsys):
    out = _run(tmp_path)
    (out / "result.json").unlink()
    shutil.rmtree(out / "checkpoints")
    (out / "checkpoints").write_text("not a folder")
    metrics = (out / "metrics.jsonl").read_bytes()
    assert main([*FLAGS, "--out", str(out), "--resume"]) == 2
    _one_line(capsys, "checkpoints", "not a folder")
    assert (out / "metrics.jsonl").read_bytes() == metrics


def test_resume_without_a_checkpoint_note(tmp_path, capsys):
    out = _run(tmp_path)
    (out / "result.json").unlink()
    shutil.rmtree(out / "checkpoints")
    assert main([*FLAGS, "--out", str(out), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "holds no checkpoint yet" in err and "starts over from step 0" in err


def test_a_full_disk_while_checkpointing_is_one_line_and_leaves_no_temporary_file(
    tmp_path, capsys, monkeypatch
):
    """Simulated: torch.save fails as it does on a full disk (a RuntimeError), and the free space
    reported is below the checkpoint's size."""

    def full(*_a, **_k):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(checkpoint.torch, "save", full)
    monkeypatch.setattr(checkpoint, "free_bytes", lambda _p: 1000)
    out = tmp_path / "run"
    assert main([*FLAGS, "--out", str(out), "--checkpoint-every", "2"]) == 2
    _one_line(capsys, "disk is full", "step-000002.pt", "needs about")
    assert [p.name for p in (out / "checkpoints").iterdir()] == []


TMPFS = Path("/tmp") / f"depthlab-tmpfs-{os.getpid()}"


@pytest.fixture
def tiny_disk():
    """A 256 kB tmpfs (root only: skipped where it cannot be mounted)."""
    TMPFS.mkdir(exist_ok=True)
    if os.geteuid() or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(TMPFS)],
                                      capture_output=True).returncode:  # fmt: skip
        TMPFS.rmdir()
        pytest.skip("cannot mount a tmpfs here")
    yield TMPFS
    subprocess.run(["umount", str(TMPFS)], capture_output=True)
    TMPFS.rmdir()


def test_a_really_full_disk_under_train_out(tiny_disk, capsys):
    out = tiny_disk / "run"
    flags = [a if a != "16" else "48" for a in FLAGS[:7]] + FLAGS[7:]  # a checkpoint larger than the disk
    assert main([*flags, "--out", str(out), "--checkpoint-every", "2"]) == 2
    _one_line(capsys, "disk is full", "needs about", "free there")
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.endswith(".tmp")]
