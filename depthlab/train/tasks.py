"""Training tasks: their batches, how the loss is counted, and the reference ("stalled") loss level.

Tasks: ``lm`` (byte-level language modelling on :mod:`depthlab.corpus`) and ``copy``, ``reverse``,
``sort`` (:mod:`depthlab.train.synthetic`). Batches are a pure function of (seed, step)
(:mod:`depthlab.train.batch`), so the "data position" of a resumed run is just the step number.
:func:`check_task` is the one place that says whether a model can take a task (vocabulary,
architecture, sequence length); :func:`make_task` and study grids both call it.
"""

from __future__ import annotations

import os

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.corpus import load_corpus, train_windows, unigram_entropy
from depthlab.errors import ConfigError, option, option_list
from depthlab.model.memory import MemoryEstimate, available_memory, check_memory, estimate_memory
from depthlab.train.batch import Batch
from depthlab.train.synthetic import LAYOUT_TOKENS, SyntheticTask, check_synthetic


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
        c = self.cfg
        w = train_windows(self.corpus.train, c.batch_size, c.seq_len, c.seed, step)
        return Batch((w[:, :-1],), w[:, 1:])

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


def token_lengths(model_cfg: ModelConfig, cfg: TrainConfig) -> tuple[int, int]:
    """(source length, input length) of the task's sequences: lm feeds ``seq_len`` tokens; the
    synthetic tasks' layouts (:mod:`depthlab.train.synthetic`) feed an encoder-decoder ``seq_len``
    source tokens and ``seq_len + 1`` target tokens, a decoder ``2 seq_len + 1``."""
    if cfg.task == "lm":
        return cfg.seq_len, cfg.seq_len
    return cfg.seq_len, LAYOUT_TOKENS[model_cfg.arch](cfg.seq_len)


def train_memory(model_cfg: ModelConfig, cfg: TrainConfig, world: int = 1) -> MemoryEstimate:
    """What one of ``world`` processes needs to train ``model_cfg`` as ``cfg`` says
    (:func:`depthlab.model.memory.estimate_memory`): its share of the batch; the data (a ``--data``
    file is read, split and copied: about four bytes per byte) and the validation batches kept whole."""
    src, tgt = token_lengths(model_cfg, cfg)
    data = 16 * cfg.eval_batches * cfg.batch_size * (src + tgt + 1)  # int64 inputs and targets
    if cfg.data is not None:
        try:
            data += 4 * os.path.getsize(cfg.data)
        except OSError:  # a missing file is reported when it is read
            pass
    batch = max(1, cfg.batch_size // world)
    return estimate_memory(
        model_cfg, "train", batch, tgt, src_len=src, data_bytes=data, telemetry=cfg.telemetry
    )


def check_train_memory(
    model_cfg: ModelConfig, cfg: TrainConfig, device: torch.device, world: int = 1, force: bool = False
) -> None:
    """InputError, before anything is built, when a process's share of the run would not fit in the
    memory free on ``device`` (CPU processes of one machine share it: LOCAL_WORLD_SIZE of them);
    ``force`` skips the check."""
    free = available_memory(device)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world)) if device.type == "cpu" else 1
    hint = f"a smaller {option_list('layers', 'd_model', 'batch_size', 'seq_len')}"
    if not model_cfg.activation_checkpointing:
        hint += f", or {option('checkpoint_activations')}"
    if cfg.telemetry:
        hint += f", or {option('no_telemetry')}"
    estimate = train_memory(model_cfg, cfg, world)
    check_memory(estimate, None if free is None else free // max(1, local), force, hint)
