"""Reading a grid file: UTF-8 YAML, bounded before it is built into anything.

A grid file is refused (InputError, one line) when it is not a regular file, larger than
``MAX_BYTES``, not UTF-8 text (binary, UTF-16, invalid bytes), not YAML, when a mapping repeats a key
(PyYAML would keep the last one silently: an axis would vanish), when it nests deeper than
``MAX_DEPTH``, or when its aliases would expand it beyond ``MAX_NODES`` values (the "billion laughs":
a few lines that stand for 10^9 strings) or name a value that contains them. The limits are checked
on the file's bytes and on the parser's events, before a single value is built, so a hostile file is
refused in milliseconds.
"""

from __future__ import annotations

import codecs
import os

import yaml

from depthlab.errors import InputError
from depthlab.paths import check_input_file

MAX_BYTES = 1 << 20  # a grid is a screenful of YAML; a megabyte is thousands of axis values
MAX_NODES = 100_000  # values (scalars, lists, mappings) the document may stand for, aliases expanded
MAX_DEPTH = 32  # nesting levels (a grid uses 5: top, axes, an axis, a mapping value, a list in it)
_MERGE = "tag:yaml.org,2002:merge"
# libyaml's parser (when PyYAML has it) is linear in the text and caps nesting itself; PyYAML's own
# scanner is quadratic in the nesting depth and slower, so libyaml is used where it is installed
_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOMS = {
    codecs.BOM_UTF32_LE: "UTF-32",
    codecs.BOM_UTF32_BE: "UTF-32",
    codecs.BOM_UTF16_LE: "UTF-16",
    codecs.BOM_UTF16_BE: "UTF-16",
}


def read_grid_file(path: str):
    """The Python value of the YAML grid file at ``path`` (see the module docstring for what is refused)."""
    check_input_file(path, "grid file")
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        raise InputError(f"grid file {path} is {size:,} bytes; a grid is at most {MAX_BYTES:,}")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise InputError(f"cannot read grid file {path}: {e.strerror}") from None
    return parse_grid_text(decode(raw, path), path)


def decode(raw: bytes, path: str) -> str:
    """The text of a grid file: UTF-8 (a UTF-8 byte-order mark is allowed); anything else is refused."""
    for bom, name in _BOMS.items():
        if raw.startswith(bom):
            raise InputError(f"grid file {path} is {name} text; save it as UTF-8")
    if b"\x00" in raw:
        raise InputError(f"grid file {path} holds NUL bytes: it is binary, not YAML text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(
            f"grid file {path} is not UTF-8 text (byte {e.start} is 0x{raw[e.start]:02x})"
        ) from None


def parse_grid_text(text: str, path: str = "<grid>"):
    """The Python value of one YAML document: its shape bounded first, duplicate keys refused."""
    where = f"grid file {path}"
    try:
        check_shape(text, where)
        loader = GridLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        raise InputError(f"{where} is not valid YAML: {' '.join(str(e).split())}") from None
    except DuplicateKey as e:
        shown = repr(e.key) if len(repr(e.key)) <= 40 else repr(e.key)[:36] + "..."
        raise InputError(
            f"{where}: the key {shown} appears twice in one mapping (line {e.line}); one of them would be lost"
        ) from None


def check_shape(text: str, where: str) -> None:
    """InputError when the document nests deeper than MAX_DEPTH, stands for more than MAX_NODES values
    once its aliases are expanded, or has an alias inside the value it names. One pass over the
    parser's events (no value is built), stopped as soon as a limit is passed."""
    sizes: dict[str, int] = {}  # anchor -> the number of values it stands for
    stack: list[list] = []  # open collections: [anchor, values so far]
    for event in yaml.parse(text, Loader=_BASE):
        if isinstance(event, yaml.CollectionStartEvent):
            stack.append([event.anchor, 1])
            if len(stack) > MAX_DEPTH:
                raise InputError(f"{where} nests deeper than {MAX_DEPTH} levels; a grid needs 5")
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, n = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, n = event.anchor, 1
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor not in sizes:  # an open collection's anchor: the value would contain itself
                raise InputError(f"{where}: the YAML alias *{event.anchor} names a value that contains it")
            anchor, n = None, sizes[event.anchor]
        else:
            continue
        if anchor is not None:
            sizes[anchor] = n
        if stack:
            stack[-1][1] += n
        if n > MAX_NODES or (stack and stack[0][1] > MAX_NODES):
            raise InputError(f"{where} stands for more than {MAX_NODES:,} values (its YAML aliases expanded)")


class DuplicateKey(Exception):
    """A mapping that repeats ``key`` (at ``line``)."""

    def __init__(self, key, line: int):
        super().__init__(key, line)
        self.key, self.line = key, line


class GridLoader(_BASE):
    """PyYAML's safe loader, refusing a mapping that repeats a key (keys merged in with ``<<`` may be
    overridden, as YAML intends)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: PyYAML refuses it itself
                    continue
                if duplicate:
                    raise DuplicateKey(key, key_node.start_mark.line + 1)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)
