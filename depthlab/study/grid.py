"""Study grids: a base model/train config plus axes, expanded into validated runs before anything runs.

A grid (YAML file, preset, or dict) has this shape::

    name: my-study                      # optional; default: the file's stem
    description: what it asks           # optional
    model: {d_model: 32, n_heads: 4}    # ModelConfig fields (the base of every run)
    train: {steps: 150, lr: 1.0e-3}     # TrainConfig fields
    axes:                               # the cross product of every axis
      n_layers: [6, 24]                 # an axis named by a field: one value per run
      warmup: [0, 75]
      seed: [0, 1, 2]
      wrapping:                         # an axis with any other name: a list of field mappings,
        - {wrap: post}                  # each applied together (so "pre without the attention
        - {wrap: pre, residual: [ffn, cross]}  # residual" is one value, not a cross product)

``model: {hf: path/to/config.json}`` (or a folder saved by ``save_pretrained``) starts every run from
a Hugging Face model of a family depthlab imports (:func:`depthlab.interop.hf.imported_config`); the
other model fields, in the section or on an axis, change it ("my model, with DeepNorm"). ``hf`` may
also be an axis (a list of paths).

A field may be written ``model.x`` or ``train.x`` to be explicit. Every combination is built into a
:class:`ModelConfig` and :class:`TrainConfig` by :meth:`StudyConfig.expand`, so a mistyped field or
value raises :class:`depthlab.ConfigError` naming the field before the first run starts.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from depthlab.config import ModelConfig, TrainConfig
from depthlab.config_base import check_int, one_spelling
from depthlab.corpus import check_length, read_data_file, split
from depthlab.errors import ConfigError, InputError, as_flags
from depthlab.interop.hf import imported_config, rewire
from depthlab.jsonable import digest
from depthlab.study.grid_fields import (
    HF_KEY,
    MODEL_FIELDS,
    TRAIN_FIELDS,
    coerce,
    did_you_mean,
    refuse_unread,
    route,
)
from depthlab.study.gridfile import read_grid_file
from depthlab.train.tasks import check_task

TOP_KEYS = ("name", "description", "model", "train", "axes")
# A study larger than this is refused unless its caller raises the limit (``--max-runs``): a typo such
# as an axis of 1,000 values crossed with another of 1,000 must not queue a million runs unasked. The
# full preset (1,296 runs) stays below it.
MAX_RUNS = 10_000


def run_hash(model: ModelConfig, train: TrainConfig, data_sha256: str | None = None) -> str:
    """The stable key of a run (16 hex digits): sha256 of the canonical JSON of both resolved configs,
    plus ``data_sha256`` (the content hash of a user's ``train.data`` file) when given.

    Without ``data_sha256`` (the default corpus) the key is the configs' hash alone, exactly as stores
    written before data hashes existed key their runs, so they still resume.
    """
    key = {"model": model.key_dict(), "train": train.key_dict()}
    if data_sha256 is not None:
        key["data_sha256"] = data_sha256
    return digest(key)


def data_file_info(path: str) -> dict:
    """What :func:`depthlab.corpus.split` records of a user's data file (sha256, split sizes); an
    InputError naming ``train.data`` when it cannot be read."""
    try:
        info: dict = {}
        split(read_data_file(path, "data file"), info)
    except InputError as e:
        raise InputError(f"train.data: {e}") from None
    return info


def check_data_length(path: str, info: dict, seq_len: int) -> None:
    try:
        check_length(f"data file {path}", info, seq_len, "train.seq_len")
    except InputError as e:
        raise InputError(f"train.data: {e}") from None


@dataclass(frozen=True)
class RunSpec:
    """One run of a study: both resolved configs, the axis values that chose them, and the content
    hash of its ``train.data`` file (None on the default corpus), which is part of the run's key so
    that a changed data file is a new run, not a done one."""

    model: ModelConfig
    train: TrainConfig
    axes: dict = field(default_factory=dict)
    data_sha256: str | None = None

    @property
    def hash(self) -> str:
        return run_hash(self.model, self.train, self.data_sha256)

    @property
    def label(self) -> str:
        """``axis=value`` pairs, as a person reads them in a progress line."""
        return axes_label(self.axes)

    def config_dict(self) -> dict:
        """Both configs as the store records them: flat (the family options beside the core fields),
        the one form of every row, whether written before the options were grouped or after."""
        d = {"model": self.model.flat_dict(), "train": self.train.flat_dict()}
        if self.data_sha256 is not None:
            d["data_sha256"] = self.data_sha256
        return d


def axes_label(axes: dict) -> str:
    """``axis=value`` pairs; a mapping-valued axis shows its fields (``wrap=pre residual=ffn+cross``)."""
    parts = []
    for k, v in axes.items():
        items = v.items() if isinstance(v, dict) else [(k, v)]
        parts += [f"{name}={_short(x)}" for name, x in items]
    return " ".join(parts) or "base"


def _short(v) -> str:
    if isinstance(v, (list, tuple)):
        return "+".join(str(x) for x in v)
    return str(v)


def _overrides(mapping, where: str) -> dict:
    """{field: value} -> {"model": {...}, "train": {...}}, every field routed and coerced."""
    if not isinstance(mapping, dict):
        raise ConfigError(where, mapping, "a mapping of field: value")
    out: dict[str, dict] = {"model": {}, "train": {}}
    given: dict[tuple[str, str], object] = {}
    for name, value in mapping.items():
        try:
            side, fname = route(name)
        except ConfigError as e:  # named as typed: the axis, the key, the value given
            raise ConfigError(f"{where}.{name}", value, e.allowed) from None
        if (side, fname) in given:  # `wrap` and `model.wrap`, or a field's old and new name
            raise ConfigError(
                f"{where}.{name}",
                value,
                f"one spelling of the field: {given[side, fname]!r} and {name!r} both set {side}.{fname}",
            )
        given[side, fname] = name
        cls = ModelConfig if side == "model" else TrainConfig
        out[side][fname] = coerce(cls, fname, value)
    return out


def _section(d: dict, side: str) -> dict:
    """The ``model:`` or ``train:`` section, checked against its config's fields."""
    sec = d.get(side) or {}
    if not isinstance(sec, dict):
        raise ConfigError(side, sec, f"a mapping of {side} config fields")
    cls = ModelConfig if side == "model" else TrainConfig
    known = MODEL_FIELDS if side == "model" else TRAIN_FIELDS
    sec = one_spelling(cls, sec, side)
    other = "train" if side == "model" else "model"
    for k in sec:
        if k in (TRAIN_FIELDS if side == "model" else MODEL_FIELDS):
            raise ConfigError(f"{side}.{k}", sec[k], f"a field of {cls.__name__} ({k} is a {other} field)")
        if k not in known:
            hint = did_you_mean(k, known)
            raise ConfigError(
                f"{side}.{k}", sec[k], f"a field of {cls.__name__}{hint}: {', '.join(sorted(known))}"
            )
    return {k: coerce(cls, k, v) for k, v in sec.items()}


def _axis_values(name: str, values) -> list[tuple[object, dict]]:
    """An axis -> [(label value, {"model": overrides, "train": overrides}), ...]."""
    if not isinstance(values, list) or not values:
        raise ConfigError(f"axes.{name}", values, "a non-empty list of values")
    try:
        side, fname = route(name)
    except ConfigError:
        if all(isinstance(v, dict) for v in values):
            return [(v, _overrides(v, f"axes.{name}")) for v in values]
        hint = did_you_mean(name, MODEL_FIELDS | TRAIN_FIELDS)
        raise ConfigError(
            f"axes.{name}",
            values,
            f"a ModelConfig/TrainConfig field{hint}, or a list of {{field: value}} mappings",
        ) from None
    cls = ModelConfig if side == "model" else TrainConfig
    out = []
    for v in values:
        over: dict[str, dict] = {"model": {}, "train": {}}
        over[side][fname] = coerce(cls, fname, v)
        out.append((v, over))
    return out


@dataclass(frozen=True)
class StudyConfig:
    """A named grid: base ``model``/``train`` field values and ``axes`` (name -> list of values).

    Build it with :meth:`from_dict` / :meth:`from_yaml` (which check every key); :meth:`expand` returns
    the runs. ``to_dict`` round-trips through :meth:`from_dict` exactly.
    """

    name: str
    model: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    axes: dict = field(default_factory=dict)
    description: str = ""

    @classmethod
    def from_dict(
        cls,
        d: dict,
        default_name: str | None = None,
        *,
        max_runs: int | None = MAX_RUNS,
        validate: bool = True,
    ) -> StudyConfig:
        """The grid ``d``, its keys and axes checked and its run count held to ``max_runs``; with
        ``validate`` every combination is built too (:meth:`expand`), so a bad value is refused now."""
        if not isinstance(d, dict):
            raise InputError(
                f"a study grid must be a mapping with keys {', '.join(TOP_KEYS)}, got {type(d).__name__}"
            )
        for k in d:
            if k not in TOP_KEYS:
                hint = did_you_mean(k, TOP_KEYS)
                raise ConfigError(k, d[k], f"a study grid key{hint}: {', '.join(TOP_KEYS)}")
        name = d.get("name", default_name)
        if not isinstance(name, str) or not name.strip():
            raise ConfigError("name", name, "a non-empty study name")
        axes = d.get("axes") or {}
        if not isinstance(axes, dict):
            raise ConfigError("axes", axes, "a mapping of axis name -> list of values")
        study = cls(
            name=name.strip(),
            model=_section(d, "model"),
            train=_section(d, "train"),
            axes={str(k): v for k, v in axes.items()},
            description=str(d.get("description") or ""),
        )
        study.check_count(max_runs)  # from the axes' lengths, before any combination is built
        if validate:
            study.expand()  # refuse a bad grid now, with the field named, before anything runs
        return study

    @classmethod
    def from_yaml(cls, path: str, *, max_runs: int | None = MAX_RUNS, validate: bool = True) -> StudyConfig:
        """The grid in the YAML file at ``path`` (read by :func:`depthlab.study.gridfile.read_grid_file`,
        which refuses what is not a sound grid file), then as :meth:`from_dict`."""
        d = read_grid_file(path)
        if not isinstance(d, dict):  # a TOML file, say, reads as one YAML string
            what = {type(None): "nothing", str: "one string", list: "a list"}.get(type(d), type(d).__name__)
            raise InputError(
                f"grid file {path} holds {what}, not a mapping of {', '.join(TOP_KEYS)}: a grid is YAML "
                "(or JSON)"
            )
        name = os.path.splitext(os.path.basename(path))[0]
        return cls.from_dict(d, default_name=name, max_runs=max_runs, validate=validate)

    def to_dict(self) -> dict:
        d = {"name": self.name, "model": dict(self.model), "train": dict(self.train), "axes": dict(self.axes)}
        if self.description:
            d["description"] = self.description
        return d

    def config_hash(self, specs: list[RunSpec] | None = None) -> str:
        """The grid's key (16 hex digits). Given its expanded ``specs``, the content hashes of their
        ``train.data`` files join it (none on the default corpus: the key is the grid's alone), so a
        changed data file makes a new version of the study in the store, as a changed grid does, and
        the old version's runs do not mix with the new ones."""
        key = self.to_dict()
        data = sorted({(s.train.data, s.data_sha256) for s in specs or [] if s.data_sha256 is not None})
        if data:
            key = {"grid": key, "data_sha256": data}
        return digest(key)

    def shape(self) -> list[int]:
        """The number of values of each axis, in order (ConfigError for an axis that is not a list)."""
        return [len(_axis_values(name, values)) for name, values in self.axes.items()]

    def count(self) -> int:
        """The number of combinations, from the axes' lengths alone (nothing is built); duplicates
        among them are dropped by :meth:`expand`, so the runs are at most this many."""
        return math.prod(self.shape())

    def check_count(self, max_runs: int | None = MAX_RUNS) -> int:
        """The combination count; InputError when it exceeds ``max_runs`` (``--max-runs`` raises it;
        None: no limit, for a dry run that only lists the runs)."""
        if max_runs is not None:
            check_int("max_runs", max_runs)  # a limit of 0 or below refuses every grid: a mistyped flag
        n = self.count()
        if max_runs is not None and n > max_runs:
            sizes = " x ".join(f"{k}" for k in self.shape())
            raise InputError(
                f"the grid has {n:,} runs ({sizes}), more than the limit of {max_runs:,}; "
                f"pass {'--max-runs ' if as_flags() else 'max_runs='}{n} to run (or list) them all"
            )
        return n

    def expand(self) -> list[RunSpec]:
        """Every combination of the axes (first axis slowest), built and validated; duplicates dropped.

        Raises ConfigError (the field named, plus the combination) if any combination is invalid, and
        InputError if a ``train.data`` file cannot be read (its content hash is part of each run's key).
        """
        return list(self.iter_specs())

    def iter_specs(self) -> Iterator[RunSpec]:
        """The runs of :meth:`expand`, built one at a time (a long grid streams; a bad combination
        raises when it is reached)."""
        axes = [(name, _axis_values(name, values)) for name, values in self.axes.items()]
        _refuse_overlapping_axes(axes)
        data: dict[str, dict] = {}  # each data file is read and hashed once, checked per run's seq_len
        seen = set()
        for combo in itertools.product(*[vals for _, vals in axes]):
            labels = {name: label for (name, _), (label, _) in zip(axes, combo)}
            model, train = dict(self.model), dict(self.train)
            typed = {k: f"{side}.{k}" for side, sec in (("model", model), ("train", train)) for k in sec}
            for (name, _), (label, over) in zip(axes, combo):
                model.update(over["model"])
                train.update(over["train"])
                typed.update(_axis_keys(name, label, over))
            spec = _build(model, train, labels, typed)
            path = spec.train.data
            if path is not None:
                info = data[path] if path in data else data.setdefault(path, data_file_info(path))
                check_data_length(path, info, spec.train.seq_len)
                spec = replace(spec, data_sha256=info["sha256"])
            if spec.hash not in seen:
                seen.add(spec.hash)
                yield spec


def _refuse_overlapping_axes(axes: list) -> None:
    """Two axes that set the same field would overwrite each other: the grid would silently lose one
    axis and label its runs with values they do not have. ConfigError names the field and both axes."""
    owner: dict[str, str] = {}
    for name, values in axes:
        fields_set = {f"{side}.{k}" for _, over in values for side in ("model", "train") for k in over[side]}
        for f in sorted(fields_set):
            if f in owner:
                raise ConfigError(
                    f"axes.{name}", f.split(".", 1)[1], f"a field no other axis sets ({owner[f]} sets it)"
                )
            owner[f] = f"axes.{name}"


def _axis_keys(name: str, label, over: dict) -> dict:
    """field -> the grid key that set it on this axis: ``axes.n_layers``, or ``axes.wrapping.wrap`` for
    a field in one of an axis's mappings."""
    keys = [k for side in ("model", "train") for k in over[side]]
    return {k: f"axes.{name}.{k}" if isinstance(label, dict) else f"axes.{name}" for k in keys}


def _build(model: dict, train: dict, labels: dict, typed: dict | None = None) -> RunSpec:
    """Both configs from field values (a ``model.hf`` config first, the other fields over it); a
    ConfigError names the grid key that set its field (``typed``: field -> key, ``model.n_layers`` or
    ``axes.n_layers``; a field no key set, a default or the family's, keeps its name) and gains the
    combination."""
    try:
        if HF_KEY in model:
            model = dict(model)
            base = imported_config(model.pop(HF_KEY), flag="model.hf")[0]
            model = {**base.flat_dict(), **rewire(base, model)}  # n_layers or arch: the stacks' own depths go
        m, t = ModelConfig.from_dict(model), TrainConfig.from_dict(train)
        refuse_unread(m, typed or {})
        check_task(m, t)  # as training will check it, but before any run
    except ConfigError as e:
        where = axes_label(labels) if labels else ""
        raise ConfigError(
            (typed or {}).get(e.field, e.field),
            e.value,
            e.allowed + (f" (grid combination: {where})" if where else ""),
        ) from None
    return RunSpec(model=m, train=t, axes=labels)
