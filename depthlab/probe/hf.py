"""Build a Hugging Face model to probe from a local ``save_pretrained`` folder or a ``config.json``.

Nothing is downloaded. The model gets random weights from its config (the probe is an at-init tool)
unless ``weights=True`` asks for the weights saved in the folder. For the LM loss the class is the
first LM-head Auto class that accepts the config (Seq2SeqLM for encoder-decoders, MaskedLM for
encoders, CausalLM for decoders), then the config's own ``architectures``, then AutoModel; for the
"sum" loss the config's own architecture comes first.
"""

from __future__ import annotations

import json
import os

import torch

from depthlab.corpus import text_batch
from depthlab.errors import ConfigError, InputError
from depthlab.interop.hf import MODEL_TYPES
from depthlab.paths import check_input_file
from depthlab.probe.probe import probe
from depthlab.probe.result import ProbeResult


def probe_hf(
    path: str,
    *,
    weights: bool = False,
    batch_size: int = 8,
    seq_len: int = 64,
    seed: int = 0,
    loss: str = "lm",
    **options,
) -> ProbeResult:
    """Probe the Hugging Face model saved at ``path`` (a folder or a config.json) on ``batch_size`` x
    ``seq_len`` bytes of the default corpus: random weights drawn with ``seed`` unless ``weights``.
    ``options`` are :func:`depthlab.probe.probe`'s keyword arguments."""
    _config_path(path)  # a missing path, a folder without config.json, a FIFO: refused before reading
    check_model_type(path)
    torch.manual_seed(seed)
    model, config = load_hf_model(path, weights=weights, want_lm=loss == "lm")
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if limit and seq_len > limit:
        raise ConfigError("seq_len", seq_len, f"<= {limit}, the model's max positions")
    tokens = text_batch(batch_size, seq_len, config.vocab_size, seed)
    batch = {"input_ids": tokens, "decoder_input_ids": tokens} if config.is_encoder_decoder else tokens
    return probe(model, batch, loss, seed=seed, **options)


def check_model_type(path: str) -> None:
    """Refuse, in one short line, a config whose model_type transformers does not know (transformers' own
    message lists every model type it has: thousands of characters on one line)."""
    try:
        import transformers
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError:
        return  # load_hf_model says how to install it
    config_file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(config_file) as f:
            model_type = json.load(f).get("model_type")
    except (OSError, ValueError, AttributeError):
        return  # load_hf_model reports a missing or unreadable config
    if model_type is None or (isinstance(model_type, str) and model_type in CONFIG_MAPPING):
        return
    shown = repr(model_type) if len(repr(model_type)) <= 40 else repr(model_type)[:36] + "...'"
    raise InputError(
        f"--hf: model_type {shown} is unknown to transformers {transformers.__version__}; "
        f"depthlab's interop imports {', '.join(MODEL_TYPES)} (probe --hf takes any type transformers knows)"
    )


def load_hf_model(path: str, weights: bool = False, want_lm: bool = True):
    """(model in float32, its config) from ``path``: a folder holding config.json, or a config JSON file."""
    transformers = _transformers()
    config_file, folder = _config_path(path)
    try:
        with open(config_file) as f:
            raw = json.load(f)
        config = transformers.AutoConfig.for_model(**raw) if "model_type" in raw else None
    except (OSError, ValueError, KeyError) as e:
        raise InputError(f"--hf {path}: cannot read a Hugging Face config: {e}") from None
    if config is None:
        raise InputError(f"--hf {path}: {config_file} has no 'model_type'; is it a Hugging Face config?")
    cls = _model_class(transformers, config, want_lm)
    if weights:
        if folder is None:
            raise InputError(f"--hf {path}: weights need a save_pretrained folder, not a config file")
        try:
            return cls.from_pretrained(folder, local_files_only=True).float(), config
        except OSError as e:
            raise InputError(f"--hf {path}: cannot load the saved weights: {e}") from None
    return cls.from_config(config).float(), config


def _transformers():
    try:
        import transformers
    except ImportError:
        raise InputError("--hf needs the transformers package: pip install 'depthlab[hf]'") from None
    transformers.logging.set_verbosity_error()  # random init warns about unused token ids; not news here
    transformers.logging.disable_progress_bar()
    return transformers


def _config_path(path: str) -> tuple[str, str | None]:
    """(the config file, the folder or None) for a folder or a file path."""
    if not os.path.exists(path):
        raise InputError(f"--hf {path}: no such file or directory")
    if os.path.isdir(path):
        config_file = os.path.join(path, "config.json")
        if not os.path.isfile(config_file):
            raise InputError(f"--hf {path}: the folder has no config.json (save it with save_pretrained)")
        return config_file, path
    check_input_file(path, "--hf")  # a FIFO or a device would block the read
    return path, None


def _model_class(transformers, config, want_lm: bool):
    """The class to build. With ``want_lm`` an LM-head Auto class comes first (the LM loss needs logits;
    with random weights the head is as random as the rest); otherwise the config's own architecture."""
    own = [
        _Concrete(getattr(transformers, n))
        for n in getattr(config, "architectures", None) or []
        if hasattr(transformers, n)
    ]
    if getattr(config, "is_encoder_decoder", False):
        names = ["AutoModelForSeq2SeqLM"]
    elif getattr(config, "is_decoder", False):
        names = ["AutoModelForCausalLM"]
    else:
        names = ["AutoModelForMaskedLM", "AutoModelForCausalLM"]
    autos = [_AutoFromConfig(getattr(transformers, n)) for n in [*names, "AutoModel"]]
    autos = [a for a in autos if type(config) in getattr(a.auto, "_model_mapping", {})]
    ordered = (autos[:-1] + own + autos[-1:]) if want_lm else (own + autos)
    if not ordered:
        raise InputError(f"transformers has no model class for model_type {config.model_type!r}")
    return ordered[0]


class _AutoFromConfig:
    """An Auto* class seen through the calls used here: ``from_config`` and ``from_pretrained``."""

    def __init__(self, auto):
        self.auto = auto

    def from_config(self, config):
        return self.auto.from_config(config)

    def from_pretrained(self, folder, **kw):
        return self.auto.from_pretrained(folder, **kw)


class _Concrete(_AutoFromConfig):
    """A concrete model class (GPT2LMHeadModel, ...): random weights come from calling it on the config."""

    def from_config(self, config):
        return self.auto(config)
