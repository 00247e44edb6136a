"""Training tasks: what a batch is, how the loss is counted, and the reference ("stalled") loss level.

A task hands out the *global* batch of a step, the same on every process; :func:`shard` cuts one
process's rows from it. Batches are a pure function of (seed, step), so a resumed run sees exactly the
batches the uninterrupted run would have seen and the "data position" is just the step number.

Tasks: ``lm`` (byte-level language modelling, :mod:`depthlab.train.data`) and ``copy``, ``reverse``,
``sort`` (:mod:`depthlab.train.synthetic`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.errors import ConfigError
from depthlab.train.data import load_corpus, unigram_entropy

IGNORE = -100  # target value that carries no loss (F.cross_entropy's ignore_index)


@dataclass
class Batch:
    """One batch. ``args``/``kwargs`` are the model's inputs (``(tokens,)`` or ``(src, tgt)``; masks);
    ``targets`` (B, T) long, IGNORE where no loss is taken; ``n_targets`` counts the target tokens of the
    *global* batch, so that every process normalises its share's summed loss by the same number."""

    args: tuple
    targets: torch.Tensor
    kwargs: dict = field(default_factory=dict)
    n_targets: int = 0

    def __post_init__(self):
        if not self.n_targets:
            self.n_targets = int((self.targets != IGNORE).sum())

    @property
    def n_tokens(self) -> int:
        """Input tokens of this batch (for throughput)."""
        return sum(a.numel() for a in self.args)

    def to(self, device) -> Batch:
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        kwargs = {k: move(v) for k, v in self.kwargs.items()}
        return Batch(tuple(move(a) for a in self.args), move(self.targets), kwargs, self.n_targets)


def shard(batch: Batch, rank: int, world: int) -> Batch:
    """Rows ``[rank * B/world, (rank+1) * B/world)`` of a global batch; ``n_targets`` stays global."""
    if world == 1:
        return batch
    b = batch.targets.shape[0] // world
    rows = slice(rank * b, (rank + 1) * b)
    kwargs = {k: v[rows] for k, v in batch.kwargs.items()}
    return Batch(tuple(a[rows] for a in batch.args), batch.targets[rows], kwargs, batch.n_targets)


def step_generator(seed: int, stream: str, index: int) -> torch.Generator:
    """A generator seeded from (seed, stream, index) by SHA-256: independent streams, no collisions."""
    digest = hashlib.sha256(f"{seed}:{stream}:{index}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


class LMTask:
    """Byte-level next-token prediction on a corpus: random windows for training, fixed ones for validation.

    ``unigram_loss`` is the entropy of the training bytes; ``val_bpb`` = val loss / ln 2 (one token is one
    byte, so nats per token / ln 2 is bits per byte).
    """

    name = "lm"
    has_accuracy = False

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.corpus = load_corpus(cfg.data, cfg.seq_len)
        self.data_info = self.corpus.info
        self.unigram_loss = unigram_entropy(self.corpus.train)

    def _windows(self, data: torch.Tensor, offsets: torch.Tensor) -> Batch:
        idx = offsets[:, None] + torch.arange(self.cfg.seq_len + 1)  # (B, T+1)
        w = data[idx].long()
        return Batch((w[:, :-1],), w[:, 1:])

    def train_batch(self, step: int) -> Batch:
        """The global batch of update ``step`` (1-based): ``batch_size`` windows at random offsets."""
        g = step_generator(self.cfg.seed, "train", step)
        n = len(self.corpus.train) - self.cfg.seq_len  # offsets 0 .. n-1 leave room for the target byte
        return self._windows(self.corpus.train, torch.randint(0, n, (self.cfg.batch_size,), generator=g))

    def val_batches(self) -> list[Batch]:
        """``eval_batches`` batches of windows evenly spaced over the validation split."""
        B, k = self.cfg.batch_size, self.cfg.eval_batches
        last = len(self.corpus.val) - self.cfg.seq_len - 1
        offsets = torch.linspace(0, last, B * k).long()
        return [self._windows(self.corpus.val, offsets[i * B : (i + 1) * B]) for i in range(k)]


def make_task(model_cfg: ModelConfig, cfg: TrainConfig):
    """The task of ``cfg``, checked against the model (vocabulary, length, architecture)."""
    from depthlab.train.synthetic import SyntheticTask

    if cfg.task == "lm":
        if model_cfg.arch != "decoder":
            raise ConfigError(
                "task",
                "lm",
                f"a decoder model (arch={model_cfg.arch} sees the future); copy, reverse or sort otherwise",
            )
        if model_cfg.vocab_size < 256:
            raise ConfigError("vocab_size", model_cfg.vocab_size, ">= 256 for byte-level lm")
        if cfg.seq_len > model_cfg.max_len:
            raise ConfigError("seq_len", cfg.seq_len, f"<= max_len={model_cfg.max_len}")
        return LMTask(cfg)
    if cfg.data is not None:
        raise ConfigError("data", cfg.data, f"unset for task {cfg.task} (--data is the lm corpus)")
    return SyntheticTask(model_cfg, cfg)
