"""The fields a study grid may set, and the words that refuse a field it may not.

Each field's section (model or train), the nearest name to a misspelt one, the settings a model reads
only with others (a sweep of one elsewhere would train one model twice), and the list ``depthlab study
--fields`` prints."""

from __future__ import annotations

import math
import typing
from dataclasses import fields

from depthlab.config import (
    ConfigBase,
    ModelConfig,
    TrainConfig,
    current_name,
    flat_field_names,
    flat_field_types,
)
from depthlab.errors import ConfigError
from depthlab.words import nearest

HF_KEY = "hf"  # model.hf: a Hugging Face config to start from (not a ModelConfig field)
# a grid names every field flat, the family options too (``d_head: 8``, not ``family: {d_head: 8}``)
MODEL_FIELDS = set(flat_field_names(ModelConfig)) | {HF_KEY}
TRAIN_FIELDS = set(flat_field_names(TrainConfig))


def route(name: str) -> tuple[str, str]:
    """A field name (optionally ``model.``/``train.`` prefixed; a renamed field's first name is
    accepted) -> ("model"|"train", its current name)."""
    if isinstance(name, str) and "." in name:
        side, _, rest = name.partition(".")
        cls = {"model": ModelConfig, "train": TrainConfig}.get(side)
        known = MODEL_FIELDS if side == "model" else TRAIN_FIELDS
        if cls is not None and current_name(cls, rest) in known:
            return side, current_name(cls, rest)
    if isinstance(name, str) and current_name(ModelConfig, name) != name:
        return "model", current_name(ModelConfig, name)
    if name in MODEL_FIELDS and name in TRAIN_FIELDS:
        raise ConfigError(name, name, f"model.{name} or train.{name} (both configs have it)")
    if name in MODEL_FIELDS:
        return "model", name
    if name in TRAIN_FIELDS:
        return "train", name
    hint = did_you_mean(name, MODEL_FIELDS | TRAIN_FIELDS)
    raise ConfigError(
        name, name, f"a field of ModelConfig or TrainConfig{hint} (see `depthlab study --fields`)"
    )


def did_you_mean(name, known) -> str:
    """`` (did you mean 'n_layers'?)`` for the name of ``known`` nearest a misspelt ``name``
    (:func:`depthlab.words.nearest`); '' when none is near."""
    close = nearest(name, known)
    return f" (did you mean {close!r}?)" if close else ""


def coerce(cls, name: str, value):
    """YAML 1.1 reads ``1e-3`` as a string: turn numeric strings into floats for float-typed fields."""
    if cls is ModelConfig and name == HF_KEY:
        if not isinstance(value, str) or not value:
            raise ConfigError(
                "model.hf", value, "a path to a Hugging Face config.json or save_pretrained folder"
            )
        return value
    hint = flat_field_types(cls)[name]
    floaty = hint is float or float in typing.get_args(hint)
    if floaty and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


# the headings of ``--fields`` for the config's groups of options
OPTION_GROUPS = {
    "family": "family options, what released model families need",
    "topology": "topology options, read by hc, dhc, mhc, frac, denseformer and attnres",
}


# model fields read under some settings only: field -> (the setting's field, the values that read it).
# A grid that sets one elsewhere would train one model under two keys, and its sweep would read as
# "no effect" (the residual topologies' options are refused so by ModelConfig itself).
READ_ONLY_WITH = {
    "dyt_alpha": ("norm", ("dyt",)),
    "mix_ratio": ("wrap", ("mix",)),
    "rope_base": ("position", ("rope",)),
    "init_std": ("init", ("normal", "gpt2")),  # xavier's scale is its own
}
_DEFAULTS = ModelConfig().flat_dict()


def refuse_unread(m: ModelConfig, typed: dict) -> None:
    """ConfigError for a field of READ_ONLY_WITH that the grid set (``typed``: field -> key) away from its
    default in a run whose model does not read it. A value a Hugging Face config brought is not refused."""
    flat = m.flat_dict()
    for name, (by, readers) in READ_ONLY_WITH.items():
        if name in typed and flat[by] not in readers and not math.isclose(flat[name], _DEFAULTS[name]):
            with_ = " or ".join(f"{by}={r}" for r in readers)
            why = f"to be left unset with {by}={flat[by]}, which does not read it (read with {with_}: set both in one mapping of an axis)"
            raise ConfigError(name, flat[name], why)


def field_help() -> str:
    """The fields a grid may set, with their defaults (for ``depthlab study --fields``): the core
    fields of each config, then the family options (named flat in a grid as everywhere)."""
    lines = ["model.hf: a Hugging Face config.json or save_pretrained folder to start from (optional)"]
    for side, config in (("model", ModelConfig()), ("train", TrainConfig())):
        lines.append(f"{side}:")
        for f in fields(config):
            value = getattr(config, f.name)
            if isinstance(value, ConfigBase):
                lines.append(f"{side}, {OPTION_GROUPS.get(f.name, f'{f.name} options')} (named flat too):")
                lines += [f"  {g.name:16} default {getattr(value, g.name)!r}" for g in fields(value)]
            else:
                lines.append(f"  {f.name:16} default {value!r}")
    return "\n".join(lines)
