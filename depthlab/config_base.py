"""The machinery every config dataclass shares: JSON round-trip, stable keys, field checks.

:class:`ConfigBase` gives ``to_dict``/``from_dict`` (exact inverses, tuples restored from JSON lists),
``key_dict``/``config_hash`` (the digest every store key is taken of) and the ``_check_*`` helpers that
``__post_init__`` methods use to raise :class:`depthlab.ConfigError` naming the field. The configs
themselves (``ModelConfig``, ``TrainConfig``) are in :mod:`depthlab.config`.
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
    left out of the key while they hold their default).
    """

    RENAMED: typing.ClassVar[dict[str, str]] = {}
    FIRST_FIELDS: typing.ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict:
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}

    def key_dict(self) -> dict:
        """The dict every hash of this config is taken of: each value in its canonical form
        (:func:`canonical`: one number, one spelling), a renamed field under its first name, a field
        added since the first release left out while it holds its default."""
        hints = field_types(type(self))
        out = {}
        for f in fields(self):
            value = canonical(getattr(self, f.name), hints[f.name])
            if f.name not in self.FIRST_FIELDS and f.name not in self.RENAMED:
                if value == canonical(f.default, hints[f.name]):
                    continue
            out[self.RENAMED.get(f.name, f.name)] = value
        return out

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: dict):
        if not isinstance(d, dict):
            raise ConfigError(cls.__name__, d, "a JSON object of fields")
        d = one_spelling(cls, d, cls.__name__)
        known = {f.name: f for f in fields(cls)}
        for k in d:
            if k not in known:
                raise ConfigError(k, d[k], f"a field of {cls.__name__}: {', '.join(known)}")
        hints = field_types(cls)
        kwargs = {k: _from_json(hints[k], v) for k, v in d.items()}
        return cls(**kwargs)

    @classmethod
    def from_json(cls, s: str):
        try:
            return cls.from_dict(json.loads(s))
        except (TypeError, json.JSONDecodeError) as e:
            raise ConfigError(cls.__name__, str(s)[:40], f"JSON text ({e})") from None

    def replace(self, **changes):
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
        self, name: str, low: float = 0.0, high: float = math.inf, strict_low=False, optional=False
    ) -> None:
        value = getattr(self, name)
        if value is None and optional:
            return
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value)
        ok = ok and (value > low if strict_low else value >= low) and value <= high
        if not ok:
            bound = f"> {low}" if strict_low else f">= {low}"
            raise ConfigError(
                name, value, f"a finite number {bound}" + (f" and <= {high}" if high < math.inf else "")
            )

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
    return list(v) if isinstance(v, tuple) else v


def _from_json(hint, v):
    """Undo JSON's tuple -> list for tuple-typed fields (``tuple[...]`` or ``tuple[...] | None``);
    everything else is stored as is."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    options = typing.get_args(hint) if union else (hint,)
    if isinstance(v, list) and any(typing.get_origin(h) is tuple for h in options):
        return tuple(v)
    return v
