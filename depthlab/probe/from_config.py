"""Probe a model described by a config: build it at init, take a batch of real text, probe it.

``probe_config(cfg)`` is what ``depthlab probe`` does with its model flags; for a saved Hugging Face
model see :func:`depthlab.probe.saved_hf.probe_hf`, for several configs side by side
:func:`depthlab.probe.compare.compare`.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from depthlab.config import ModelConfig, check_int
from depthlab.corpus import describe_batch, load_corpus, text_batch, train_windows
from depthlab.doctor.verdict import Verdict
from depthlab.errors import ConfigError, option_list
from depthlab.model import build_model
from depthlab.model.explain import init_summary, param_summary, wiring_summary
from depthlab.model.memory import available_memory, check_memory, estimate_memory
from depthlab.model.stack import check_config_type
from depthlab.probe.forward_backward import check_options, probe
from depthlab.probe.result import ProbeResult

# depthlab's reference init conventions: what a verdict is compared under to tell init from wiring
REFERENCE_INIT = {"init": "xavier", "tie_embeddings": True, "embed_scale": True}


def check_batch(batch_size: int, seq_len: int, loss: str = "lm") -> None:
    """ConfigError naming the size unless the probe's batch can be cut and its loss taken: lm predicts
    each token from those before it, so it needs two tokens a sequence."""
    check_int("batch_size", batch_size)
    check_int("seq_len", seq_len)
    if loss == "lm" and seq_len < 2:
        raise ConfigError(
            "seq_len", seq_len, "at least 2 with loss lm: it predicts each token from those before"
        )


def probe_config(
    cfg: ModelConfig,
    *,
    batch_size: int = 8,
    seq_len: int = 64,
    seed: int = 0,
    data: str | None = None,
    attribute: bool = True,
    force_memory: bool = False,
    **options,
) -> ProbeResult:
    """Build ``cfg`` with ``seed`` (as training would) and probe it on ``batch_size`` x ``seq_len`` bytes
    of the corpus ``data`` (a text file, as ``train --data`` reads it; None: the default corpus); an
    encoder-decoder gets a second, independent batch as its source. The batch is bytes: a vocabulary
    above 256 never sees its ids 256 and up, and ``config["probe"]["batch"]`` says so.

    ``options`` are :func:`depthlab.probe.forward_backward`'s keyword arguments (loss, perturbation,
    jacobian_probes, context). The header names the wiring and the init conventions; with
    ``attribute``, a config whose init conventions are not the reference ones (:data:`REFERENCE_INIT`)
    and that gets a warning or error is probed once more under the reference init, and each verdict
    says whether it comes from the init or from the wiring (:func:`attribute_to_init`).
    Checked before the model is built: ConfigError for a length the model's positions cannot hold or a
    bad size or seed; InputError when the probe would not fit in free memory
    (:mod:`depthlab.model.memory`; ``force_memory`` runs it anyway).
    """
    check_probe(cfg, batch_size=batch_size, seq_len=seq_len, seed=seed, force_memory=force_memory, **options)
    result = _probe_built(cfg, batch_size, seq_len, seed, options, data)
    if attribute:
        attribute_to_init(
            result,
            reference_init(cfg),
            batch_size=batch_size,
            seq_len=seq_len,
            seed=seed,
            data=data,
            **options,
        )
    return result


def check_probe(
    cfg: ModelConfig,
    *,
    batch_size: int = 8,
    seq_len: int = 64,
    seed: int = 0,
    force_memory: bool = False,
    **options,
) -> None:
    """What :func:`probe_config` checks before it builds anything (its docstring's last sentences), for a
    caller that checks every config before the first probe (``probe --compare``, its expected time)."""
    check_config_type(cfg)
    check_batch(batch_size, seq_len, options.get("loss", "lm"))
    keys = ("loss", "perturbation", "jacobian_probes")
    check_options(**{k: options[k] for k in keys if k in options}, seed=seed)
    cfg.check_length(seq_len)
    hint = f"a smaller {option_list('layers', 'd_model', 'batch_size', 'seq_len')}"
    check_memory(estimate_memory(cfg, "probe", batch_size, seq_len), available_memory(), force_memory, hint)


def _probe_built(
    cfg: ModelConfig, batch_size: int, seq_len: int, seed: int, options: dict, data: str | None = None
) -> ProbeResult:
    cfg.check_length(seq_len)
    as_run = options.get("lr") is not None and cfg.arch == "decoder" and cfg.vocab_size >= 256
    if as_run:  # a probe given the run's lr is a probe of that run: its first batch, as a study probes it
        train = load_corpus(data, seq_len).train
        tokens = train_windows(train, batch_size, seq_len, seed, step=1)[:, :-1]
    else:
        tokens = text_batch(batch_size, seq_len, cfg.vocab_size, seed, data)  # a bad file: before the build
    source = text_batch(batch_size, seq_len, cfg.vocab_size, seed + 1, data) if cfg.arch == "encdec" else None
    torch.manual_seed(seed)
    model = build_model(cfg)
    batch = (source, tokens) if source is not None else tokens
    # the probe's own seed (its random directions) is the study's, 0, for a run's probe
    result = probe(model, batch, seed=0 if as_run else seed, model_config=cfg.to_dict(), **options)
    result.config["stack"]["wiring"] = wiring_summary(cfg)
    result.config["stack"]["init"] = init_summary(cfg)
    note_batch(result, batch_size, seq_len, cfg.vocab_size, data)
    result.config["stack"]["parametrization"] = param_summary(cfg)
    return result


def note_batch(result: ProbeResult, batch_size: int, seq_len: int, vocab_size: int, data: str | None) -> None:
    """Record in ``config["probe"]`` the corpus the batch came from ("data": the file, None for the
    default corpus) and what the batch was ("batch": :func:`depthlab.corpus.describe_batch`)."""
    result.config["probe"]["data"] = data
    result.config["probe"]["batch"] = describe_batch(batch_size, seq_len, vocab_size, data)


def reference_init(cfg: ModelConfig) -> ModelConfig | None:
    """``cfg`` under the reference init conventions, or None when it already has them."""
    ref = cfg.replace(**REFERENCE_INIT)
    return None if ref.replace(init_std=cfg.family.init_std) == cfg else ref


def attribute_to_init(
    result: ProbeResult,
    ref: ModelConfig | None,
    *,
    batch_size: int = 8,
    seq_len: int = 64,
    seed: int = 0,
    data: str | None = None,
    **options,
) -> None:
    """Mark each verdict of ``result`` with ``"cause"``: "init" when the same wiring under the reference
    init (``ref``) does not get a warning or error of that code, else "wiring" (appended to its message).

    Nothing is probed when ``ref`` is None (the reference init already) or every verdict is ok. The
    reference probe (same batch, seed and ``options`` as ``result``'s) is kept in
    ``config["probe"]["reference_init"]``."""
    if ref is None or all(v.level == "ok" for v in result.verdicts):
        return
    ref_result = _probe_built(ref, batch_size, seq_len, seed, options, data)
    ref_bad = {v.code for v in ref_result.verdicts if v.level != "ok"}
    result.config["probe"]["reference_init"] = {
        "init": init_summary(ref),
        "verdicts": [f"{v.level} {v.code}" for v in ref_result.verdicts],
    }
    result.verdicts = [
        v if v.level == "ok" else _attributed(v, v.code in ref_bad, ref) for v in result.verdicts
    ]


def _attributed(v: Verdict, shared: bool, ref: ModelConfig) -> Verdict:
    """``v`` with its cause: "wiring" when the reference init gets it too (``shared``), else "init"."""
    tail = (
        f" [from the wiring: under init {init_summary(ref)} too]"
        if shared
        else f" [from the init: the same wiring under init {init_summary(ref)} does not get it]"
    )
    return replace(v, cause="wiring" if shared else "init", message=v.message + tail)
