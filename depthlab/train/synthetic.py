"""Synthetic sequence tasks: ``copy``, ``reverse`` and ``sort`` a random string of symbols.

A source is n symbols (n uniform in 1..seq_len) from an alphabet of ``cfg.symbols``; the answer is the
source copied, reversed or sorted. Token ids: PAD 0, BOS 1, SEP 2, EOS 3, symbols from 4. The layout
follows the architecture:

    encdec   src = s_1..s_n            tgt in = BOS a_1..a_n      targets = a_1..a_n EOS
    decoder  in  = s_1..s_n SEP a_1..a_n          targets = (nothing on the prompt) a_1..a_n EOS
    encoder  src = s_1..s_n            targets = a_1..a_n   (tagging: one answer token per position)

Right padding: a causal decoder never lets a real token see a pad, so only the bidirectional encoders
need a padding mask. Accuracy is exact match: every answer token (and EOS) of a sequence predicted. For
a causal model the teacher-forced argmax is correct at every answer position exactly when greedy
decoding reproduces the whole answer (each greedy step then sees the true prefix), so one forward pass
measures what autoregressive decoding would.
"""

from __future__ import annotations

import hashlib

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.corpus import unigram_entropy
from depthlab.errors import ConfigError
from depthlab.train.batch import IGNORE, Batch, step_generator

PAD, BOS, SEP, EOS, FIRST_SYMBOL = 0, 1, 2, 3, 4


def answer(task: str, src: torch.Tensor) -> torch.Tensor:
    """The answer to one source (1-D tensor of symbols)."""
    if task == "copy":
        return src.clone()
    if task == "reverse":
        return src.flip(0)
    return src.sort().values


LAYOUT_TOKENS = {"encdec": lambda n: n + 1, "decoder": lambda n: 2 * n + 1, "encoder": lambda n: n}


def check_synthetic(model_cfg: ModelConfig, cfg: TrainConfig) -> None:
    """ConfigError unless the model's vocabulary holds the symbols and its positions the layout."""
    n = cfg.seq_len
    model_cfg.check_length(LAYOUT_TOKENS[model_cfg.arch](n), value=n)
    if model_cfg.vocab_size < FIRST_SYMBOL + cfg.symbols:
        raise ConfigError(
            "vocab_size",
            model_cfg.vocab_size,
            f">= {FIRST_SYMBOL + cfg.symbols} (4 special tokens + {cfg.symbols} symbols)",
        )


class SyntheticTask:
    """copy / reverse / sort for any architecture (layouts in the module docstring)."""

    has_accuracy = True

    def __init__(self, model_cfg: ModelConfig, cfg: TrainConfig):
        check_synthetic(model_cfg, cfg)
        self.cfg, self.arch, self.name = cfg, model_cfg.arch, cfg.task
        n = cfg.seq_len
        self._val = [self._batch(step_generator(cfg.seed, "val", i)) for i in range(cfg.eval_batches)]
        targets = torch.cat([b.targets[b.targets != IGNORE] for b in self._val])
        self.unigram_loss = unigram_entropy(targets, model_cfg.vocab_size)
        digest = hashlib.sha256(b"".join(b.targets.numpy().tobytes() for b in self._val)).hexdigest()
        self.data_info = {
            "source": "synthetic",
            "task": self.name,
            "symbols": cfg.symbols,
            "max_symbols": n,
            "val_sequences": cfg.eval_batches * cfg.batch_size,
            "val_sha256": digest,
        }

    def train_batch(self, step: int) -> Batch:
        return self._batch(step_generator(self.cfg.seed, "train", step))

    def val_batches(self) -> list[Batch]:
        return self._val

    def _batch(self, g: torch.Generator) -> Batch:
        B, n = self.cfg.batch_size, self.cfg.seq_len
        lengths = torch.randint(1, n + 1, (B,), generator=g)
        symbols = torch.randint(FIRST_SYMBOL, FIRST_SYMBOL + self.cfg.symbols, (B, n), generator=g)
        sources = [symbols[i, : lengths[i]] for i in range(B)]
        answers = [answer(self.name, s) for s in sources]
        return getattr(self, f"_{self.arch}")(sources, answers, n)

    @staticmethod
    def _encdec(sources, answers, n) -> Batch:
        B = len(sources)
        src = torch.full((B, n), PAD)
        tgt = torch.full((B, n + 1), PAD)
        targets = torch.full((B, n + 1), IGNORE)
        for i, (s, a) in enumerate(zip(sources, answers)):
            k = len(s)
            src[i, :k], tgt[i, 0], tgt[i, 1 : k + 1] = s, BOS, a
            targets[i, :k], targets[i, k] = a, EOS
        return Batch((src, tgt), targets, {"src_padding_mask": src == PAD})

    @staticmethod
    def _decoder(sources, answers, n) -> Batch:
        B = len(sources)
        seq = torch.full((B, 2 * n + 2), PAD)
        targets = torch.full((B, 2 * n + 1), IGNORE)
        for i, (s, a) in enumerate(zip(sources, answers)):
            k = len(s)
            seq[i, :k], seq[i, k], seq[i, k + 1 : 2 * k + 1], seq[i, 2 * k + 1] = s, SEP, a, EOS
            # position t predicts seq[t + 1]: the answer and EOS follow SEP at position k
            targets[i, k : 2 * k + 1] = seq[i, k + 1 : 2 * k + 2]
        return Batch((seq[:, :-1],), targets)

    @staticmethod
    def _encoder(sources, answers, n) -> Batch:
        B = len(sources)
        src = torch.full((B, n), PAD)
        targets = torch.full((B, n), IGNORE)
        for i, (s, a) in enumerate(zip(sources, answers)):
            src[i, : len(s)], targets[i, : len(a)] = s, a
        return Batch((src,), targets, {"padding_mask": src == PAD})
