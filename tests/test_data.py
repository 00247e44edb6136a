"""The corpus and the tasks' batches: deterministic, split as documented, bad files rejected in one line."""

from __future__ import annotations

import hashlib
import math
import sysconfig
from pathlib import Path

import pytest
import torch

from depthlab import ConfigError, InputError, ModelConfig, TrainConfig
from depthlab import corpus as D
from depthlab.train.batch import IGNORE, shard
from depthlab.train.evaluate import exact_matches
from depthlab.train.synthetic import BOS, EOS, FIRST_SYMBOL, PAD, SEP
from depthlab.train.tasks import make_task


def test_default_corpus_is_the_stdlib_sorted_and_hashed():
    c = D.load_corpus(None, 64)
    root = Path(sysconfig.get_paths()["stdlib"])
    names = sorted(p.name for p in root.glob("*.py"))
    assert c.info["files"] == names and c.info["root"] == str(root)
    blob = b"".join((root / n).read_bytes() for n in names)
    assert c.info["bytes"] == len(blob) and c.info["sha256"] == hashlib.sha256(blob).hexdigest()
    assert len(c.train) + len(c.val) == len(blob)
    assert 0.08 < len(c.val) / len(blob) < 0.12  # a 90/10 split


def test_split_takes_every_tenth_block(tmp_path):
    n_blocks = 30
    blob = bytes(i % 251 for i in range(D.BLOCK * n_blocks))
    info = {}
    train, val = D.split(blob, info)
    expect_val = b"".join(blob[b * D.BLOCK : (b + 1) * D.BLOCK] for b in (9, 19, 29))
    assert bytes(val.tolist()) == expect_val
    assert len(train) == D.BLOCK * 27 and info["val_bytes"] == 3 * D.BLOCK


def test_data_file_replaces_the_corpus(tmp_path):
    f = tmp_path / "bin.dat"
    f.write_bytes(bytes(torch.randint(0, 256, (5000,), generator=torch.Generator().manual_seed(0)).tolist()))
    c = D.load_corpus(str(f), 16)
    assert c.info["source"] == "file" and c.info["files"] == ["bin.dat"] and c.info["bytes"] == 5000
    assert c.info["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()


def _file(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing.txt", "does not exist"),
        (lambda p: p, "is a directory"),
        (lambda p: _file(p / "empty.txt", b""), "is empty"),
        (lambda p: _file(p / "short.txt", b"xy" * 50), "too short"),
        (lambda p: _file(p / "one.txt", b"a" * 10_000), r"one byte value only \(b'a' x 10,000\)"),
    ],
)
def test_bad_data_files_are_input_errors(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(InputError, match=message) as e:
        D.load_corpus(str(path), 64)
    assert "\n" not in str(e.value)


def test_unreadable_data_file(tmp_path, monkeypatch):
    f = tmp_path / "locked.txt"
    f.write_bytes(b"x" * 10_000)

    def denied(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(InputError, match="cannot read data file .*Permission denied"):
        D.load_corpus(str(f), 16)


def test_unigram_entropy():
    assert D.unigram_entropy(torch.tensor([7] * 50)) == 0.0
    assert D.unigram_entropy(torch.arange(8).repeat(10)) == pytest.approx(math.log(8))


def test_lm_batches_depend_on_seed_and_step_only():
    model = ModelConfig(max_len=32)
    task = make_task(model, TrainConfig(seq_len=16, batch_size=4, seed=3))
    again = make_task(model, TrainConfig(seq_len=16, batch_size=4, seed=3))
    other = make_task(model, TrainConfig(seq_len=16, batch_size=4, seed=4))
    b = task.train_batch(5)
    assert torch.equal(b.args[0], again.train_batch(5).args[0])
    assert not torch.equal(b.args[0], task.train_batch(6).args[0])
    assert not torch.equal(b.args[0], other.train_batch(5).args[0])
    assert torch.equal(b.args[0][:, 1:], b.targets[:, :-1])  # next-byte targets
    assert b.args[0].shape == (4, 16) and b.n_targets == 64
    assert len(task.val_batches()) == TrainConfig().eval_batches
    assert task.unigram_loss == pytest.approx(D.unigram_entropy(task.corpus.train))


def test_shards_reassemble_the_global_batch():
    task = make_task(
        ModelConfig(arch="encdec", max_len=16), TrainConfig(task="sort", seq_len=6, batch_size=6)
    )
    b = task.train_batch(1)
    parts = [shard(b, r, 3) for r in range(3)]
    assert all(p.n_targets == b.n_targets for p in parts)
    assert torch.equal(torch.cat([p.args[0] for p in parts]), b.args[0])
    assert torch.equal(torch.cat([p.kwargs["src_padding_mask"] for p in parts]), b.kwargs["src_padding_mask"])


def _decode(task_name, arch, batch):
    """(source, answer incl. EOS) per row, read back from a batch's layout."""
    rows = []
    for i in range(batch.targets.shape[0]):
        t = batch.targets[i][batch.targets[i] != IGNORE].tolist()
        if arch == "decoder":
            seq = batch.args[0][i].tolist()
            src = seq[: seq.index(SEP)]
        else:
            src = [x for x in batch.args[0][i].tolist() if x != PAD]
        if arch == "encdec":
            tgt_in = batch.args[1][i].tolist()
            assert tgt_in[0] == BOS and tgt_in[1 : len(t)] == t[:-1]  # teacher forcing shifts by one
        rows.append((src, t))
    return rows


@pytest.mark.parametrize("arch", ["encdec", "decoder", "encoder"])
@pytest.mark.parametrize("name", ["copy", "reverse", "sort"])
def test_synthetic_answers(arch, name):
    task = make_task(
        ModelConfig(arch=arch, max_len=32), TrainConfig(task=name, seq_len=7, batch_size=8, symbols=5)
    )
    for src, target in _decode(name, arch, task.train_batch(2)):
        assert 1 <= len(src) <= 7 and all(FIRST_SYMBOL <= s < FIRST_SYMBOL + 5 for s in src)
        expected = {"copy": src, "reverse": src[::-1], "sort": sorted(src)}[name]
        assert target == (expected if arch == "encoder" else expected + [EOS])
    u = task.unigram_loss
    assert math.log(5) * 0.8 < u < math.log(6) + 0.01  # uniform symbols (+ EOS)


def test_exact_match_counts_whole_sequences():
    targets = torch.tensor([[5, 6, IGNORE], [5, 6, 7]])
    logits = torch.nn.functional.one_hot(torch.tensor([[5, 6, 0], [5, 9, 7]]), 10).float()
    assert int(exact_matches(logits, targets)) == 1


def test_task_and_model_must_fit():
    with pytest.raises(ConfigError, match="task"):
        make_task(ModelConfig(arch="encdec"), TrainConfig(task="lm"))
    with pytest.raises(ConfigError, match="vocab_size"):
        make_task(ModelConfig(vocab_size=128), TrainConfig(task="lm"))
    with pytest.raises(ConfigError, match="seq_len"):
        make_task(ModelConfig(max_len=32), TrainConfig(task="lm", seq_len=64))
    with pytest.raises(ConfigError, match="seq_len"):
        make_task(ModelConfig(max_len=32), TrainConfig(task="copy", seq_len=16))  # 2n+1 > 32
    with pytest.raises(ConfigError, match="data"):
        make_task(ModelConfig(arch="encdec"), TrainConfig(task="copy", data="x.txt"))
