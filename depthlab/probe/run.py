"""Probe a model described by a config: build it at init, take a batch of real text, probe it.

``probe_config(cfg)`` is what ``depthlab probe`` does with its model flags; for a saved Hugging Face
model see :func:`depthlab.probe.hf.probe_hf`, for several configs side by side
:func:`depthlab.probe.compare.compare`.
"""

from __future__ import annotations

import torch

from depthlab.config import ModelConfig, check_int
from depthlab.corpus import text_batch
from depthlab.model import build_model
from depthlab.model.memory import available_memory, check_memory, estimate_memory
from depthlab.model.stack import check_config
from depthlab.probe.probe import check_options, probe
from depthlab.probe.result import ProbeResult


def probe_config(
    cfg: ModelConfig,
    *,
    batch_size: int = 8,
    seq_len: int = 64,
    seed: int = 0,
    force_memory: bool = False,
    **options,
) -> ProbeResult:
    """Build ``cfg`` with ``seed`` (as training would) and probe it on ``batch_size`` x ``seq_len`` bytes
    of the default corpus (an encoder-decoder gets a second, independent batch as its source).

    ``options`` are :func:`depthlab.probe.probe`'s keyword arguments (loss, perturbation,
    jacobian_probes, context). Checked before the model is built: ConfigError for a length the model's
    positions cannot hold or a bad size or seed; InputError when the probe would not fit in free memory
    (:mod:`depthlab.model.memory`; ``force_memory`` runs it anyway).
    """
    check_config(cfg)
    check_int("batch_size", batch_size)
    check_int("seq_len", seq_len)
    keys = ("loss", "perturbation", "jacobian_probes")
    check_options(**{k: options[k] for k in keys if k in options}, seed=seed)
    cfg.check_length(seq_len)
    hint = "a smaller --layers, --d-model, --batch-size or --seq-len"
    check_memory(estimate_memory(cfg, "probe", batch_size, seq_len), available_memory(), force_memory, hint)
    torch.manual_seed(seed)
    model = build_model(cfg)
    tokens = text_batch(batch_size, seq_len, cfg.vocab_size, seed)
    batch = (
        (text_batch(batch_size, seq_len, cfg.vocab_size, seed + 1), tokens)
        if cfg.arch == "encdec"
        else tokens
    )
    return probe(model, batch, seed=seed, model_config=cfg.to_dict(), **options)
