"""The machinery every config dataclass shares: JSON round-trip, stable keys, field checks.

:class:`ConfigBase` gives ``to_dict``/``from_dict`` (exact inverses, tuples restored from JSON lists),
``key_dict``/``config_hash`` (the digest every store key is taken of) and the ``_check_*`` helpers that
``__post_init__`` methods use to raise :class:`depthlab.ConfigError` naming the field. A field typed by
another config class is a nested group (``ModelConfig.family``); :meth:`ConfigBase.flat_dict` and
``_flat_items`` give every field by its flat name, which is what keys are taken of and what
``from_dict``/``replace`` also accept. The configs themselves (``ModelConfig``, ``TrainConfig``) are in
:mod:`depthlab.config`, the family options in :mod:`depthlab.config_family`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from dataclasses import fields

from depthlab.errors import ConfigError
from depthlab.jsonable import digest


class ConfigBase:
    """JSON round-trip, hashing and field-checking shared by every config dataclass.

    ``RENAMED`` maps a field's current name to the name it first had (old JSON still loads, and keys
    are taken under the first name); ``FIRST_FIELDS`` are the fields of the first release (others are
    left out of the key while they hold their default). A field typed by another config class is a
    nested group (``ModelConfig.family``): its fields are also named flat, as if they sat at the top
    (in :meth:`from_dict`, :meth:`replace` and :meth:`key_dict`), so one name means one field.
    """

    RENAMED: typing.ClassVar[dict[str, str]] = {}
    FIRST_FIELDS: typing.ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict:
        """Every field by name (a nested group as its own dict), as JSON values."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}

    def flat_dict(self) -> dict:
        """Every field by name as JSON values, a nested group's fields in place of the group."""
        return {name: value for name, value, _ in self._flat_items()}

    def key_dict(self) -> dict:
        """The dict every hash of this config is taken of (see the module docstring): the flat fields,
        each value in its canonical form (:func:`canonical`: one number, one spelling), a renamed one
        under its first name, one added since the first release left out while it holds its default."""
        hints = flat_field_types(type(self))
        out = {}
        for name, value, default in self._flat_items():
            value = canonical(value, hints[name])
            if name not in self.FIRST_FIELDS and name not in self.RENAMED:
                if value == canonical(default, hints[name]):
                    continue
            out[self.RENAMED.get(name, name)] = value
        return out

    def value_of(self, name: str):
        """The value of the field named ``name`` flat: a top-level field or a nested group's
        (``cfg.value_of("d_head")`` is ``cfg.family.d_head``)."""
        group = group_of_field(type(self)).get(name)
        return getattr(getattr(self, group) if group else self, name)

    def _flat_items(self):
        """(name, value, default) of every flat field (see :meth:`flat_dict`), as JSON values."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, ConfigBase):
                yield from value._flat_items()
            else:
                yield f.name, _jsonable(value), _jsonable(f.default)

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: dict):
        """The config of a dict of fields, as :meth:`to_dict` writes it or flat (a nested group's fields
        at the top, as JSON written before they were grouped has them), or both at once; JSON lists
        become tuples. A field given twice (flat and in its group) is refused, naming both."""
        if not isinstance(d, dict):
            raise ConfigError(cls.__name__, d, "a JSON object of fields")
        d = one_spelling(cls, d, cls.__name__)
        groups = {name: _group_fields(sub, d.pop(name, {}), name) for name, sub in nested_groups(cls).items()}
        owner = group_of_field(cls)
        for k in list(d):
            if k in owner:
                group = groups[owner[k]]
                if k in group:
                    both = f"given once, as {k} or as {owner[k]}.{k} (both are given)"
                    raise ConfigError(k, d[k], both)
                group[k] = d.pop(k)
        for k in d:
            if k not in {f.name for f in fields(cls)}:
                names = ", ".join(flat_field_names(cls))
                raise ConfigError(k, d[k], f"a field of {cls.__name__}: {names}")
        hints = field_types(cls)
        kwargs = {k: _from_json(hints[k], v) for k, v in d.items()}
        kwargs.update({name: nested_groups(cls)[name].from_dict(g) for name, g in groups.items()})
        return cls(**kwargs)

    @classmethod
    def from_json(cls, s: str):
        try:
            return cls.from_dict(json.loads(s))
        except (TypeError, json.JSONDecodeError) as e:
            raise ConfigError(cls.__name__, str(s)[:40], f"JSON text ({e})") from None

    def replace(self, **changes):
        """A copy with ``changes``; a nested group's field may be named flat (``replace(d_head=8)``)."""
        owner = group_of_field(type(self))
        inner: dict[str, dict] = {}
        for k in [k for k in changes if k in owner]:
            inner.setdefault(owner[k], {})[k] = changes.pop(k)
        for group, values in inner.items():
            changes[group] = dataclasses.replace(changes.get(group, getattr(self, group)), **values)
        return dataclasses.replace(self, **changes)

    def config_hash(self) -> str:
        """16 hex digits of sha256 over :meth:`key_dict` (:func:`depthlab.jsonable.digest`)."""
        return digest(self.key_dict())

    # -- checks used by __post_init__ -------------------------------------------------------------
    def _check_choice(self, name: str, allowed: tuple) -> None:
        value = getattr(self, name)
        if value not in allowed:
            raise ConfigError(name, value, f"one of {', '.join(allowed)}")

    def _check_int(self, name: str, low: int = 1, optional: bool = False, high: int | None = None) -> None:
        value = getattr(self, name)
        if value is None and optional:
            return
        check_int(name, value, low, high)

    def _check_float(
        self,
        name: str,
        low: float = 0.0,
        high: float = math.inf,
        strict_low=False,
        optional=False,
        strict_high=False,
    ) -> None:
        value = getattr(self, name)
        if value is None and optional:
            return
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value)
        ok = ok and (value > low if strict_low else value >= low)
        ok = ok and (value < high if strict_high else value <= high)
        if not ok:
            bound = f"> {low}" if strict_low else f">= {low}"
            top = f" and {'<' if strict_high else '<='} {high}" if high < math.inf else ""
            raise ConfigError(name, value, f"a finite number {bound}{top}")

    def _check_bool(self, name: str) -> None:
        if not isinstance(getattr(self, name), bool):
            raise ConfigError(name, getattr(self, name), "true or false")


# torch seeds a generator with any integer below 2**64; depthlab derives a few streams as seed + k, so
# a seed stays within a signed 64-bit integer (which is also what JSON readers and SQLite hold exactly)
SEED_MAX = 2**63 - 1


def _finite(value) -> bool:
    """Whether a number is finite as a float (an int beyond a float's range is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_int(name: str, value, low: int = 1, high: int | None = None) -> None:
    """ConfigError naming ``name`` unless ``value`` is an integer (not a bool) in [low, high]."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if not ok or (high is not None and value > high):
        raise ConfigError(name, value, f"an integer >= {low}" + ("" if high is None else f" and <= {high}"))


def check_seed(value, name: str = "seed") -> None:
    """ConfigError unless ``value`` is a seed depthlab can use: an integer in [0, SEED_MAX]."""
    check_int(name, value, 0, SEED_MAX)


@functools.cache
def field_types(cls) -> dict:
    """A config class's field types (cached: studies build thousands of configs)."""
    return typing.get_type_hints(cls)


@functools.cache
def nested_groups(cls) -> dict:
    """A config class's nested groups: field name -> its config class (``{"family": FamilyOptions}``)."""
    hints = field_types(cls)
    return {f.name: hints[f.name] for f in fields(cls) if _is_config(hints[f.name])}


@functools.cache
def group_of_field(cls) -> dict:
    """Each field of a nested group -> the group's name (``{"d_head": "family", ...}``)."""
    return {f.name: name for name, sub in nested_groups(cls).items() for f in fields(sub)}


@functools.cache
def flat_field_types(cls) -> dict:
    """A config class's field types by flat name (a nested group's fields in place of the group)."""
    hints = dict(field_types(cls))
    for name, sub in nested_groups(cls).items():
        del hints[name]
        hints.update(flat_field_types(sub))
    return hints


def flat_field_names(cls) -> tuple[str, ...]:
    """A config class's fields as a person names them: the top-level ones, a group's fields in its place."""
    groups = nested_groups(cls)
    names = [[g.name for g in fields(groups[f.name])] if f.name in groups else [f.name] for f in fields(cls)]
    return tuple(n for group in names for n in group)


def _is_config(hint) -> bool:
    return isinstance(hint, type) and issubclass(hint, ConfigBase)


def _group_fields(sub, given, name: str) -> dict:
    """A nested group as given to from_dict (a dict, or the config itself) -> a dict of its fields."""
    if isinstance(given, sub):
        return given.to_dict()
    if not isinstance(given, dict):
        raise ConfigError(name, given, f"a JSON object of {sub.__name__} fields")
    return dict(given)


def current_name(cls, name: str) -> str:
    """A field's current name, given its current or first name (``checkpoint`` -> ``activation_checkpointing``)."""
    return {v: k for k, v in cls.RENAMED.items()}.get(name, name)


def one_spelling(cls, d: dict, where: str) -> dict:
    """``d`` with each key under its current name (``checkpoint`` -> ``activation_checkpointing``);
    ConfigError naming both when one field is given under two names (one of them would be dropped)."""
    out: dict = {}
    given: dict = {}
    for k, v in d.items():
        name = current_name(cls, k)
        if name in out:
            raise ConfigError(
                f"{where}.{k}", v, f"one spelling of the field: {given[name]!r} and {k!r} both set {name}"
            )
        out[name], given[name] = v, k
    return out


def canonical(value, hint):
    """``value`` of a field typed ``hint`` in the one form its key is taken of: a number in a float
    field is a float (``0``, ``0.0`` and ``-0.0`` are one value: every float field depthlab has is a
    magnitude, so its sign at zero means nothing), a tuple a list. Ints, bools, strings and None
    stay as they are, so an int-valued field keeps its ints."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and _floaty(hint):
        value = float(value)
        return 0.0 if value == 0 else value
    return value


@functools.cache
def _floaty(hint) -> bool:
    """Whether a field typed ``hint`` holds a float (``float`` or ``float | None``)."""
    return hint is float or float in typing.get_args(hint)


def _jsonable(v):
    if isinstance(v, ConfigBase):
        return v.to_dict()
    return list(v) if isinstance(v, tuple) else v


def _from_json(hint, v):
    """Undo JSON's tuple -> list for tuple-typed fields (``tuple[...]`` or ``tuple[...] | None``);
    everything else is stored as is."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    options = typing.get_args(hint) if union else (hint,)
    if isinstance(v, list) and any(typing.get_origin(h) is tuple for h in options):
        return tuple(v)
    return v
