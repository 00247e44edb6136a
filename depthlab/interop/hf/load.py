"""Read a Hugging Face config from a ``save_pretrained`` folder or a ``config.json`` (nothing is
downloaded), and turn it into depthlab's config when its family is imported.

``read_config(path)`` gives transformers' config object; ``imported_config(path)`` gives
(:class:`~depthlab.ModelConfig`, :class:`~depthlab.interop.hf.family.Family`) and is what
``explain --hf``, ``probe --hf ... --wrap``, ``train --hf`` and a study's ``hf:`` key build on.
Every failure is one line (InputError or ConfigError).
"""

from __future__ import annotations

import json
import os

from depthlab.config import ModelConfig
from depthlab.errors import ConfigError, InputError
from depthlab.interop.hf.family import Family, config_from_hf, family_for, model_types
from depthlab.model.explain import init_summary, wiring_summary
from depthlab.paths import check_input_file


def transformers_module(flag: str = "--hf"):
    """``transformers``, quietened (random init warns about unused token ids: not news here)."""
    try:
        import transformers
    except ImportError:
        raise InputError(f"{flag} needs the transformers package: pip install 'depthlab[hf]'") from None
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return transformers


def config_path(path: str, flag: str = "--hf") -> tuple[str, str | None]:
    """(the config file, the folder or None) for a folder or a file path. ``flag``, in every message:
    what the user wrote the path after (``--hf``, or a grid's ``model.hf``)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"{flag} {path}: no such file or directory")
    if os.path.isdir(path):
        config_file = os.path.join(path, "config.json")
        if not os.path.isfile(config_file):
            raise InputError(f"{flag} {path}: the folder has no config.json (save it with save_pretrained)")
        return config_file, path
    check_input_file(path, flag)  # a FIFO or a device would block the read
    return path, None


def read_config(path: str, flag: str = "--hf"):
    """transformers' config object for the folder or file ``path`` (``flag``: see :func:`config_path`).
    InputError, one line, for a config transformers refuses and for a recurrent model type
    (:data:`RECURRENT_TYPES`), before any config object is built."""
    transformers = transformers_module(flag)
    config_file, _ = config_path(path, flag)
    try:
        with open(config_file) as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{flag} {path}: cannot read a Hugging Face config: {e}") from None
    if not isinstance(raw, dict) or "model_type" not in raw:
        raise InputError(f"{flag} {path}: {config_file} has no 'model_type'; is it a Hugging Face config?")
    check_model_type(raw["model_type"], transformers, flag)
    check_not_recurrent(raw["model_type"], path, flag)
    try:
        return transformers.AutoConfig.for_model(**raw)
    except config_errors() as e:
        raise InputError(f"{flag} {path}: transformers refuses this config: {one_line(e)}") from None


def config_errors() -> tuple[type[Exception], ...]:
    """What transformers raises for a config it refuses: ValueError and kin from its own checks, and
    huggingface_hub's strict-dataclass validation errors (a field of the wrong type, a hidden size that
    is not a multiple of the heads), which derive from Exception only."""
    errors: list[type[Exception]] = [ValueError, KeyError, TypeError, AttributeError, AssertionError]
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # an older huggingface_hub: no strict dataclasses, nothing more to catch
        return tuple(errors)
    return (*errors, StrictDataclassError)


def one_line(e: Exception, limit: int = 240) -> str:
    """An exception's message on one line (its lines joined), at most ``limit`` characters."""
    text = ""
    for line in (x.strip() for x in str(e).splitlines() if x.strip()):
        text += (" " if text.endswith(":") else "; " if text else "") + line
    text = text or type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_model_type(model_type, transformers, flag: str = "--hf") -> None:
    """Refuse, in one short line, a model_type transformers does not know (transformers' own message
    lists every model type it has: thousands of characters on one line)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if isinstance(model_type, str) and model_type in CONFIG_MAPPING:
        return
    shown = repr(model_type) if len(repr(model_type)) <= 40 else repr(model_type)[:36] + "...'"
    raise InputError(  # no hint at probe --hf: it builds only what transformers knows
        f"{flag}: model_type {shown} is unknown to transformers {transformers.__version__}; "
        f"depthlab imports {', '.join(model_types())}"
    )


# Recurrent model types: their blocks carry a state along the sequence (RWKV's time mixing, Mamba's
# selective scan, RecurrentGemma's RG-LRU, xLSTM's memory cells) instead of attending over it. Refused
# from the config, before a build: depthlab's questions are a Transformer's, and some of these blocks
# modify their state in place, which a gradient through their streams cannot pass.
RECURRENT_TYPES = ("rwkv", "mamba", "mamba2", "falcon_mamba", "recurrent_gemma", "xlstm")


def check_not_recurrent(model_type: str, path: str, flag: str = "--hf") -> None:
    """InputError, one line, for a recurrent model type (:data:`RECURRENT_TYPES`)."""
    if model_type in RECURRENT_TYPES:
        raise InputError(
            f"{flag} {path}: a {model_type} model is recurrent (a state carried along the sequence, not "
            "attention over it), not a Transformer; depthlab works on Transformer stacks"
        )


def _probe_hint(flag: str) -> str:
    """What else the user can do, in the terms of where the path was given."""
    if flag == "--hf":
        return " (probe --hf without model flags probes a token Transformer of any type as transformers builds it)"
    return " (a study trains depthlab's own model of an imported family)"


def imported_config(path: str, flag: str = "--hf") -> tuple[ModelConfig, Family]:
    """(depthlab's config, the family) of the HF config at ``path``: InputError when depthlab does not
    import its family (probe --hf can still probe it as transformers builds it). ``flag``: see
    :func:`config_path`."""
    hf_config = read_config(path, flag)
    family = family_for(hf_config.model_type)
    if family is None:
        raise InputError(
            f"{flag} {path}: depthlab does not import model_type {hf_config.model_type!r}; it imports "
            f"{', '.join(model_types())}{_probe_hint(flag)}"
        )
    try:
        return config_from_hf(hf_config), family
    except ConfigError as e:
        raise ConfigError(
            e.field, e.value, f"{e.allowed}; in the {family.name} config at {path}", e.other
        ) from None


# The fields that give each stack of an encoder-decoder its own depth: a family's config sets them
# (BART's encoder_layers and decoder_layers), and they win over n_layers.
STACK_DEPTHS = ("enc_layers", "dec_layers")


def rewire(base: ModelConfig, changes: dict) -> dict:
    """``changes`` (ModelConfig field -> value) to an imported config ``base``, completed so that each
    takes effect: a new depth (``n_layers``) or another ``arch`` resets the family's per-stack depths
    (``enc_layers``, ``dec_layers``) to None unless ``changes`` sets them too, and a one-stack arch drops
    the decoder's own embeddings (``side_embeddings``: BART, Marian). Without this, n_layers would change
    nothing in an encoder-decoder family (its stacks keep their own depths) and a one-stack arch would be
    refused for fields only two stacks have."""
    out = dict(changes)
    new_arch = "arch" in out and out["arch"] != base.arch
    if "n_layers" in out or new_arch:
        for f in STACK_DEPTHS:
            out.setdefault(f, None)
    if new_arch and out["arch"] != "encdec":  # one stack: no decoder with positions of its own
        out.setdefault("side_embeddings", False)
    return out


def rewired_config(path: str, changes: dict) -> ModelConfig:
    """The imported config of the HF config at ``path`` (:func:`imported_config`) with ``changes``
    applied as :func:`rewire` completes them (``explain/probe/train --hf`` with model flags, a grid's
    ``hf:`` key with other model fields). A ConfigError names the field and the family."""
    base, family = imported_config(path)
    try:
        return base.replace(**rewire(base, changes))
    except ConfigError as e:
        raise ConfigError(
            e.field, e.value, f"{e.allowed}; changing the {family.name} config at {path}", e.other
        ) from None


def family_info(path: str, changed: list[str] | None = None) -> dict:
    """What ``explain --hf`` says of the imported config at ``path``: {"name", "model_type", "path",
    "exact", "approximated", "changed"}. ``exact``: what *this* config has, all of it imported exactly
    (its wiring and init in depthlab's words, before any change; a feature the import cannot reproduce
    is refused, not listed); ``approximated``: the family's limits; ``changed``: the fields the user
    changed ("wrap=deepnorm")."""
    cfg, family = imported_config(path)
    return {
        "name": family.name,
        "model_type": read_config(path).model_type,
        "path": str(path),
        "exact": f"{wiring_summary(cfg)}; init {init_summary(cfg)}",
        "approximated": family.approximated,
        "changed": list(changed or []),
    }
