"""A real batch of text for the probe, deterministic by seed.

The text is depthlab's default corpus (DESIGN.md: the Python standard library's own source, via
``depthlab.train.data``) when that module is present, otherwise depthlab's own ``.py`` files: real code
text either way, no download. Random bytes would do for most init statistics, but the LM loss and
its gradient are only meaningful on text with structure.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from depthlab.errors import ConfigError


@functools.lru_cache(maxsize=1)
def corpus_bytes() -> tuple[torch.Tensor, str]:
    """(the corpus as a 1-D uint8 tensor, its name)."""
    try:
        from depthlab.train.data import load_corpus
    except ImportError:
        load_corpus = None
    if load_corpus is not None:
        return load_corpus(None, 1).train, "python-stdlib"
    root = Path(__file__).resolve().parents[1]
    data = b"".join(p.read_bytes() for p in sorted(root.rglob("*.py")))
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone(), "depthlab-source"


def text_batch(batch_size: int, seq_len: int, vocab_size: int, seed: int = 0) -> torch.Tensor:
    """(batch_size, seq_len) int64 tokens: byte windows at seeded random offsets (bytes mod vocab_size).

    Raises ConfigError for a non-positive size or a sequence longer than the corpus.
    """
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len), ("vocab_size", vocab_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(name, value, "an integer >= 1")
    data, _ = corpus_bytes()
    if seq_len >= len(data):
        raise ConfigError("seq_len", seq_len, f"< {len(data)} (the corpus length)")
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(data) - seq_len, (batch_size,), generator=gen)
    windows = torch.stack([data[s : s + seq_len] for s in starts.tolist()]).long()  # (B, T)
    return windows % vocab_size if vocab_size < 256 else windows
