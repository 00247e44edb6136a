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
from depthlab.paths import check_input_file


def transformers_module():
    """``transformers``, quietened (random init warns about unused token ids: not news here)."""
    try:
        import transformers
    except ImportError:
        raise InputError("--hf needs the transformers package: pip install 'depthlab[hf]'") from None
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return transformers


def config_path(path: str) -> tuple[str, str | None]:
    """(the config file, the folder or None) for a folder or a file path."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"--hf {path}: no such file or directory")
    if os.path.isdir(path):
        config_file = os.path.join(path, "config.json")
        if not os.path.isfile(config_file):
            raise InputError(f"--hf {path}: the folder has no config.json (save it with save_pretrained)")
        return config_file, path
    check_input_file(path, "--hf")  # a FIFO or a device would block the read
    return path, None


def read_config(path: str):
    """transformers' config object for the folder or file ``path``."""
    transformers = transformers_module()
    config_file, _ = config_path(path)
    try:
        with open(config_file) as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"--hf {path}: cannot read a Hugging Face config: {e}") from None
    if not isinstance(raw, dict) or "model_type" not in raw:
        raise InputError(f"--hf {path}: {config_file} has no 'model_type'; is it a Hugging Face config?")
    check_model_type(raw["model_type"], transformers)
    try:
        return transformers.AutoConfig.for_model(**raw)
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(
            f"--hf {path}: transformers cannot read this config: {str(e).splitlines()[0][:200]}"
        ) from None


def check_model_type(model_type, transformers) -> None:
    """Refuse, in one short line, a model_type transformers does not know (transformers' own message
    lists every model type it has: thousands of characters on one line)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    types = model_types()
    if isinstance(model_type, str) and model_type in CONFIG_MAPPING:
        return
    shown = repr(model_type) if len(repr(model_type)) <= 40 else repr(model_type)[:36] + "...'"
    raise InputError(
        f"--hf: model_type {shown} is unknown to transformers {transformers.__version__}; "
        f"probe --hf takes any type it knows (depthlab imports {', '.join(types[:3])} and "
        f"{len(types) - 3} more: see README)"
    )


def imported_config(path: str) -> tuple[ModelConfig, Family]:
    """(depthlab's config, the family) of the HF config at ``path``: InputError when depthlab does not
    import its family (probe --hf can still probe it as transformers builds it)."""
    hf_config = read_config(path)
    family = family_for(hf_config.model_type)
    if family is None:
        raise InputError(
            f"--hf {path}: depthlab does not import model_type {hf_config.model_type!r} "
            f"(it imports {', '.join(model_types())}); probe --hf without model flags probes it as is"
        )
    try:
        return config_from_hf(hf_config), family
    except ConfigError as e:
        raise ConfigError(e.field, e.value, f"{e.allowed}; in the {family.name} config at {path}") from None


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
            e.field, e.value, f"{e.allowed}; changing the {family.name} config at {path}"
        ) from None


def family_info(path: str, changed: list[str] | None = None) -> dict:
    """What ``explain --hf`` says of the imported config at ``path``: {"name", "model_type", "path",
    "exact", "approximated", "changed"} (``changed``: the fields the user changed, "wrap=deepnorm")."""
    hf_config = read_config(path)
    family = family_for(hf_config.model_type)
    if family is None:
        raise InputError(f"--hf {path}: depthlab does not import model_type {hf_config.model_type!r}")
    return {
        "name": family.name,
        "model_type": hf_config.model_type,
        "path": str(path),
        "exact": family.exact,
        "approximated": family.approximated,
        "changed": list(changed or []),
    }
