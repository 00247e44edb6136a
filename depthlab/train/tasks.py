"""Training tasks: their batches, how the loss is counted, and the reference ("stalled") loss level.

Tasks: ``lm`` (byte-level language modelling on :mod:`depthlab.corpus`) and ``copy``, ``reverse``,
``sort`` (:mod:`depthlab.train.synthetic`). Batches are a pure function of (seed, step)
(:mod:`depthlab.train.batch`), so the "data position" of a resumed run is just the step number.
:func:`check_task` is the one place that says whether a model can take a task (vocabulary,
architecture, sequence length); :func:`make_task` and study grids both call it.
"""

from __future__ import annotations

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.corpus import load_corpus, unigram_entropy
from depthlab.errors import ConfigError
from depthlab.train.batch import Batch, step_generator
from depthlab.train.synthetic import SyntheticTask, check_synthetic


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


def check_task(model_cfg: ModelConfig, cfg: TrainConfig) -> None:
    """ConfigError unless ``model_cfg`` can be trained on ``cfg``'s task (read no data)."""
    if cfg.task != "lm":
        check_synthetic(model_cfg, cfg)
        return
    if model_cfg.arch != "decoder":
        raise ConfigError(
            "task",
            "lm",
            f"a decoder model (arch={model_cfg.arch} sees the future); copy, reverse or sort otherwise",
        )
    if model_cfg.vocab_size < 256:
        raise ConfigError("vocab_size", model_cfg.vocab_size, ">= 256 for byte-level lm")
    model_cfg.check_length(cfg.seq_len)


def make_task(model_cfg: ModelConfig, cfg: TrainConfig):
    """The task of ``cfg``, checked against the model (:func:`check_task`)."""
    check_task(model_cfg, cfg)
    return LMTask(cfg) if cfg.task == "lm" else SyntheticTask(model_cfg, cfg)
