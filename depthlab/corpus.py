"""The byte-level corpus: the Python standard library's own source by default, or any file (``--data``).

Training (``depthlab.train``) reads its language-modelling data here, and the probe its batches of real
text (:func:`text_batch`). Every machine that runs depthlab has the standard library of its
interpreter, so the default corpus needs no download. It is the top-level ``*.py`` modules of ``sysconfig``'s ``stdlib`` folder, read
in sorted order and concatenated; the file list and a SHA-256 of the bytes are recorded with the run, so
two runs on different Python versions are seen to differ in their data.

Train/validation split (deterministic, no randomness): the bytes are cut into consecutive blocks of
``BLOCK`` bytes (a twentieth of the corpus if it is smaller than 20 blocks) and every ``VAL_EVERY``-th
block is validation. Interleaved blocks keep the validation text representative of the whole corpus
(a tail split would validate on the alphabetically last modules only).
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import torch

from depthlab.errors import ConfigError, InputError, option
from depthlab.paths import check_input_file

BLOCK = 8192  # bytes per split block
VAL_EVERY = 10  # every 10th block is validation: a 90/10 split


@dataclass
class Corpus:
    """A byte corpus split into ``train`` and ``val`` (1-D uint8 tensors) and what it was made from.

    ``info``: source, root, files, bytes, sha256, train_bytes, val_bytes (JSON-able; stored with the run).
    """

    train: torch.Tensor
    val: torch.Tensor
    info: dict = field(default_factory=dict)


def stdlib_files() -> tuple[Path, list[Path]]:
    """The standard library folder of the running interpreter and its top-level ``.py`` files, sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    if not files:
        raise InputError(f"no Python standard library source (*.py) found under {root}; pass --data FILE")
    return root, files


@functools.lru_cache(maxsize=1)
def _stdlib_corpus() -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The default corpus, split, with its info (cached: the stdlib does not change within a process;
    callers never modify the tensors)."""
    root, files = stdlib_files()
    data = b"".join(p.read_bytes() for p in files)
    info = {"source": "python-stdlib", "root": str(root), "files": [p.name for p in files]}
    return *split(data, info), info


def read_data_file(path: str, name: str | None = None) -> bytes:
    """The bytes of a user's data file; any problem is an InputError of one line naming it as ``name``
    (default: ``--data`` on the command line, "data file" from Python). It must be a regular file: a
    FIFO, a device or a socket is refused before it is opened (reading one may never end)."""
    name = name or option("data")
    check_input_file(path, name)
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {name} {path}: {e.strerror or e}") from None
    if not data:
        raise InputError(f"{name} {path} is empty")
    if data.count(data[:1]) == len(data):  # one byte value: its loss is 0 from the first step
        raise InputError(
            f"{name} {path} holds one byte value only ({data[:1]!r} x {len(data):,}): there is "
            "nothing to predict; pass a text"
        )
    return data


def load_corpus(path: str | None, seq_len: int) -> Corpus:
    """The corpus (``path`` or the stdlib default), split, checked to hold ``seq_len + 1`` bytes per split."""
    if path is None:
        train, val, info = _stdlib_corpus()
        info = dict(info)
    else:
        data = read_data_file(path)
        info = {
            "source": "file",
            "root": os.path.dirname(os.path.abspath(path)),
            "files": [os.path.basename(path)],
        }
        train, val = split(data, info)
    check_length(f"the corpus {info['root']}" if path is None else f"{option('data')} {path}", info, seq_len)
    return Corpus(train=train, val=val, info=info)


def check_length(where: str, info: dict, seq_len: int, length: str | None = None) -> None:
    """InputError unless both splits recorded in ``info`` (by :func:`split`) hold ``seq_len + 1`` bytes;
    ``where`` and ``length``: how the message names the data ("--data notes.txt") and the length
    (default: ``--seq-len`` on the command line, ``seq_len`` from Python)."""
    need = seq_len + 1
    if info["train_bytes"] < need or info["val_bytes"] < need:
        raise InputError(
            f"{where} is too short: {info['bytes']} bytes give {info['train_bytes']} train / "
            f"{info['val_bytes']} validation bytes; {length or option('seq_len')} {seq_len} needs {need} in each "
            f"(about {VAL_EVERY * need} bytes in all)"
        )


def split(data: bytes, info: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, val): every VAL_EVERY-th block of the bytes is validation (see module doc).

    Records bytes, sha256, block, train_bytes and val_bytes in ``info``.
    """
    block = max(1, min(BLOCK, len(data) // (2 * VAL_EVERY)))
    all_bytes = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    n_blocks = math.ceil(len(data) / block)
    ids = torch.arange(n_blocks)
    val_block = (ids % VAL_EVERY) == (VAL_EVERY - 1)
    if n_blocks < VAL_EVERY:  # fewer blocks than one period: the last block validates
        val_block = ids == n_blocks - 1
    is_val = val_block.repeat_interleave(block)[: len(data)]
    train, val = all_bytes[~is_val].clone(), all_bytes[is_val].clone()
    info.update(
        bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        block=block,
        train_bytes=len(train),
        val_bytes=len(val),
    )
    return train, val


def unigram_entropy(tokens: torch.Tensor, vocab: int = 256) -> float:
    """Entropy (nats) of the token frequencies: the loss of a model that predicts only common tokens.

    A model whose loss stays here has learned the marginal distribution and nothing of the context:
    the level where a stack without its attention skip stalls.
    """
    counts = torch.bincount(tokens.reshape(-1).long(), minlength=vocab).double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())


def text_batch(
    batch_size: int, seq_len: int, vocab_size: int, seed: int = 0, data: str | None = None
) -> torch.Tensor:
    """(batch_size, seq_len) int64 tokens of the training split of the corpus ``data`` (a file; None:
    the default corpus), as training reads it: byte windows at seeded random offsets (bytes mod
    vocab_size), deterministic by ``seed``.

    Random bytes would do for most statistics at init, but the LM loss and its gradient are only
    meaningful on text with structure. The tokens are bytes, 0..255, whatever the vocabulary
    (:func:`describe_batch` says so). ConfigError for a non-positive size or a sequence longer than the
    corpus; InputError for a data file that cannot be read.
    """
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len), ("vocab_size", vocab_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(name, value, "an integer >= 1")
    corpus = load_corpus(data, 1)
    data_bytes = corpus.train
    if seq_len >= len(data_bytes):
        what = "the corpus" if data is None else f"data file {data}"
        raise ConfigError("seq_len", seq_len, f"< {len(data_bytes)} (the training bytes of {what})")
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(data_bytes) - seq_len, (batch_size,), generator=gen)
    windows = torch.stack([data_bytes[s : s + seq_len] for s in starts.tolist()]).long()  # (B, T)
    return windows % vocab_size if vocab_size < 256 else windows


def describe_batch(batch_size: int, seq_len: int, vocab_size: int, data: str | None = None) -> str:
    """What :func:`text_batch` fed the model, in one line, with what it means for this vocabulary: a
    vocabulary below 256 sees each byte mod its size; one above 256 never sees its ids 256 and up
    (the batch is bytes, not the model's own tokenizer's ids)."""
    source = "the Python standard library's source" if data is None else f"data file {data}"
    line = f"{batch_size} x {seq_len} bytes of {source}"
    if vocab_size < 256:
        return f"{line}, each byte taken mod {vocab_size} (the vocabulary size)"
    if vocab_size > 256:
        return (
            f"{line}; token ids are bytes 0..255, so ids 256..{vocab_size - 1} of this vocabulary "
            "never appear in the batch"
        )
    return line


def step_generator(seed: int, stream: str, index: int) -> torch.Generator:
    """A generator seeded from (seed, stream, index) by SHA-256: independent streams, no collisions."""
    digest = hashlib.sha256(f"{seed}:{stream}:{index}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def train_windows(train: torch.Tensor, batch_size: int, seq_len: int, seed: int, step: int) -> torch.Tensor:
    """The (batch_size, seq_len + 1) byte windows a language-model run of ``seed`` trains on at update
    ``step`` (1-based): random offsets into the training split ``train``, a pure function of (seed,
    step). Inputs are ``[:, :-1]``, targets ``[:, 1:]``. The probe of a run takes its first batch from here
    too, so that what it measures (the update gain behind the learning-rate limit) is the same whether
    ``depthlab probe --lr``, ``depthlab advise`` or a study takes it."""
    g = step_generator(seed, "train", step)
    n = len(train) - seq_len  # offsets 0 .. n-1 leave room for the target byte
    offsets = torch.randint(0, n, (batch_size,), generator=g)
    return train[offsets[:, None] + torch.arange(seq_len + 1)].long()
