"""Committed parts of a reproductions page: each claim's whole result, kept in the repository as it
finishes, so that ``depthlab reproduce all`` accumulates across sittings that each end before it does.

A full ``reproduce all`` trains about 1,400 runs: hours more than one sitting, and the run cache
(:mod:`depthlab_lab.reproduce.run_cache`, weights) is too big to commit. A part is small: ``DIR/NAME.json``
holds the claim's :class:`~depthlab_lab.reproduce.reproduction.Reproduction` (its data and every field of
every check, so that :meth:`Reproduction.from_dict` rebuilds it exactly), its seconds, the commit it was
computed at, the run cache's tally for it, where and when it ran, and its key; its plots are copied to
``DIR/img/NAME/`` as they were drawn. Each file is written to a temporary name and renamed: a kill leaves
the old part or the new one, never half of one.

The key is a digest of everything that decides the claim's result (:func:`key_inputs`): its name, scale
and ``quick``, the torch version and threads, the device, the default corpus's bytes, its registration (commit and
values) and :func:`module_digest` of every depthlab module its module imports, transitively (the
claim's own code, the result rules of :mod:`~depthlab_lab.reproduce.reproduction` and
:mod:`depthlab.intervals`, the run readers and the training code all end up there). The page's
rendering (:mod:`depthlab_lab.docgen`) is not in it, nor are docstrings: re-rendering never needs a rerun.
A part whose key is not today's is never used by a sitting that runs claims, and a damaged one (bad
JSON, a missing field, a missing plot) is treated as absent, with one line saying so; neither is removed
until a new part replaces it. ``depthlab reproduce all --render`` is the exception: it runs nothing and
renders the page from every part whatever its key (:func:`load_any`), each claim's section saying at
which commit it was computed and which modules changed since.
A ``--quick`` result never replaces a part of the registered regime.

Non-finite numbers (a diverged run's NaN loss) are written as Python's JSON writes them (``NaN``), as
in the run record beside the page, so that a loaded part gives the same record as the run did.
"""

from __future__ import annotations

import ast
import datetime
import functools
import glob
import hashlib
import json
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from depthlab.config import TrainConfig
from depthlab.errors import InputError
from depthlab.jsonable import digest
from depthlab.paths import check_folder, make_folder, replace_file
from depthlab_lab.reproduce import run_cache
from depthlab_lab.reproduce.moved import actual_name, registered_name
from depthlab_lab.reproduce.reproduction import REGISTRATIONS, REPRODUCTIONS, Reproduction

FORMAT = 1  # what a part holds; a change here makes every older part stale
IMG = "img"
NOT_FOLLOWED = ("depthlab_lab.docgen",)  # rendering: what the page looks like, never what a claim measured
FIELDS = ("name", "key", "inputs", "commit", "seconds", "source", "plots", "result")


class DamagedPart(Exception):
    """A part file that cannot be read back whole (the message says why)."""


@dataclass(frozen=True)
class Part:
    """One claim's committed result: the reproduction, its seconds, the commit it was computed at (None
    outside a git work tree), its key and the inputs digested into it, the run cache's tally for it
    (None without a cache), and the sitting it ran in (host, cpu, cores, date) and when it finished."""

    reproduction: Reproduction
    seconds: float
    commit: str | None
    key: str
    inputs: dict
    cache: dict | None
    sitting: dict
    finished: str
    path: str


def default_folder(doc: str) -> str:
    """The parts of page ``doc``, beside it: docs/reproductions.md -> docs/reproductions-parts."""
    return os.path.splitext(doc)[0] + "-parts"


def short_commit(commit: str | None) -> str:
    """A commit as shown: 10 hex digits, "-dirty" kept; "unknown" outside a git work tree."""
    if not commit:
        return "unknown"
    return commit[:10] + ("-dirty" if commit.endswith("-dirty") else "")


def path_of(folder: str, name: str) -> str:
    return os.path.join(folder, f"{name}.json")


def check_writable(folder: str, flag: str = "--parts") -> None:
    """Make ``folder`` and write a file in it and remove it, before any claim runs: InputError (one line
    naming ``flag``) when it is a file, cannot be made, or takes no file (a folder of /proc)."""
    check_folder(folder, flag)
    make_folder(folder, flag, folder)
    try:
        fd, probe = tempfile.mkstemp(prefix=".parts.", suffix=".tmp", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InputError(f"{flag} {folder}: cannot write a file there: {e.strerror}") from None


def key_inputs(name: str, scale: str, quick: bool) -> dict:
    """What claim ``name``'s key digests (JSON-able): everything that decides its result."""
    registration = REGISTRATIONS.get(name)
    return {
        "format": FORMAT,
        "name": name,
        "scale": scale,
        "quick": quick,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": "cuda" if torch.cuda.is_available() else "cpu",  # where "auto" runs train
        "corpus": corpus_digest(),
        "registration": (
            {"commit": registration.commit, "values": registration.values()} if registration else None
        ),
        "source": sources(name),
    }


def corpus_digest() -> str:
    """The sha256 of the default corpus (the running Python's standard library): the claims' data."""
    return run_cache.data_digest(TrainConfig())


def claim_modules(name: str) -> list[str]:
    """The modules claim ``name``'s result depends on: its module, the result rules, the modules its
    module names as deciding its checks (``DECIDED_ELSEWHERE``), and every depthlab module these import,
    transitively (:func:`depthlab_lab.reproduce.run_cache._imports`), except the page's rendering."""
    fn = REPRODUCTIONS[name]
    elsewhere = getattr(sys.modules.get(fn.__module__), "DECIDED_ELSEWHERE", ())
    todo = [fn.__module__, "depthlab_lab.reproduce.reproduction", *(ref.split(":")[0] for ref in elsewhere)]
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen or module.startswith(NOT_FOLLOWED) or run_cache._source_path(module) is None:
            continue
        seen.add(module)
        todo += _imports_of(module)
    return sorted(seen)


@functools.cache
def _imports_of(module: str) -> tuple[str, ...]:
    return tuple(run_cache._imports(Path(run_cache._source_path(module)).read_text(encoding="utf-8")))


def sources(name: str) -> dict[str, str]:
    """{module: :func:`module_digest`} over :func:`claim_modules` of claim ``name`` (kept whole in the
    part, so that a stale part can say which module changed)."""
    return {registered_name(m): module_digest(m) for m in claim_modules(name)}


@functools.cache
def module_digest(module: str) -> str:
    """16 hex digits of ``module``'s syntax tree without its docstrings: a comment, the layout or a
    docstring changes nothing (they decide no result), any change to what the code does changes it."""
    tree = ast.parse(Path(run_cache._source_path(module)).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:  # a module's move is not a change of code
            node.module = registered_name(node.module)
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant):
                if isinstance(first.value.value, str):
                    node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()[:16]


def status(folder: str, name: str, inputs: dict) -> tuple[Part | None, str]:
    """(the part of ``name`` in ``folder`` if its key is ``inputs``'s, else None; why not): "" for a
    current part, else "no part", "damaged (...)" or "stale (X changed)"."""
    path = path_of(folder, name)
    if not os.path.lexists(path):
        return None, "no part"
    try:
        part = read(path, name)
    except DamagedPart as e:
        return None, f"damaged ({e})"
    if part.key != digest(inputs):
        return None, f"stale ({changes(part.inputs, inputs) or 'its key'} changed)"
    return part, ""


def load_any(folder: str, name: str, inputs: dict) -> tuple[Part | None, str]:
    """The part of ``name`` in ``folder`` whatever its key, for a page rendered without running
    anything: (the part, "" when its key is ``inputs``'s, else what changed since it was computed, as
    :func:`changes` says it); (None, why) when there is none or it is damaged."""
    path = path_of(folder, name)
    if not os.path.lexists(path):
        return None, "no part"
    try:
        part = read(path, name)
    except DamagedPart as e:
        return None, f"damaged ({e})"
    if part.key == digest(inputs):
        return part, ""
    return part, changes(part.inputs, inputs) or "its key"


def changes(stored: dict, inputs: dict, shown: int = 3) -> str:
    """Which of ``inputs`` differ from the ``stored`` ones, e.g. "threads, depthlab.intervals" (the
    modules by name; "" when none does)."""
    now = json.loads(json.dumps(inputs))  # as it would be stored
    out = [k for k in now if k != "source" and stored.get(k) != now[k]]
    before = stored.get("source") if isinstance(stored.get("source"), dict) else {}
    moved = sorted(m for m in set(before) | set(now["source"]) if before.get(m) != now["source"].get(m))
    moved = sorted({actual_name(m) for m in moved})  # named as they are imported today
    out += moved[:shown] + ([f"{len(moved) - shown} more modules"] if len(moved) > shown else [])
    return ", ".join(out)


def read(path: str, name: str) -> Part:
    """The part at ``path`` for claim ``name``; :class:`DamagedPart` when it cannot be read back whole."""
    folder = os.path.dirname(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise DamagedPart("not a regular file")
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        missing = [k for k in FIELDS if k not in d]
        if missing:
            raise DamagedPart(f"no {', '.join(missing)}")
        if d["name"] != name:
            raise DamagedPart(f"it is the part of {d['name']!r}")
        if d["key"] != digest(d["inputs"]):
            raise DamagedPart("its key is not the digest of its inputs")
        plots = []
        for rel in d["plots"]:
            if os.path.normpath(rel).split(os.sep)[:2] != [IMG, name] or ".." in rel.split("/"):
                raise DamagedPart(f"plot {rel!r} is outside {IMG}/{name}/")
            plots.append(os.path.join(folder, rel))
            if not os.path.isfile(plots[-1]):
                raise DamagedPart(f"its plot {rel} is missing")
        reproduction = Reproduction.from_dict(d["result"], name, plots, d["source"])
        return Part(
            reproduction,
            float(d["seconds"]),
            d["commit"],
            d["key"],
            dict(d["inputs"]),
            d.get("cache"),
            dict(d.get("sitting") or {}),
            str(d.get("finished", "")),
            path,
        )
    except DamagedPart:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # JSONDecodeError is a ValueError
        raise DamagedPart(f"{type(e).__name__}: {e}") from None


def registered_kept(folder: str, name: str, quick: bool) -> bool:
    """Whether a ``quick`` result must not replace claim ``name``'s part in ``folder``: the part there
    holds the registered regime's result (a smoke version never overwrites hours of runs)."""
    if not quick or not os.path.lexists(path_of(folder, name)):
        return False
    try:
        return read(path_of(folder, name), name).inputs.get("quick") is False
    except DamagedPart:
        return False


def write(
    folder: str,
    reproduction: Reproduction,
    seconds: float,
    inputs: dict,
    cache: dict | None,
    sitting: dict,
) -> str:
    """Write claim ``reproduction.name``'s part to ``folder`` (its plots first, then its JSON, each whole
    or not at all; plots of an older part that this one has not are removed last). Returns its path."""
    name = reproduction.name
    img = os.path.join(folder, IMG, name)
    plots = [p for p in reproduction.plots if os.path.isfile(p)]
    if plots:
        os.makedirs(img, exist_ok=True)
    rel = []
    for src in plots:
        base = os.path.basename(src)
        replace_file(os.path.join(img, base), Path(src).read_bytes(), "--parts")
        rel.append(f"{IMG}/{name}/{base}")
    payload = {
        "format": FORMAT,
        "name": name,
        "key": digest(inputs),
        "inputs": inputs,
        "commit": run_cache.current_commit(),
        "seconds": seconds,
        "cache": cache,
        "sitting": {k: sitting.get(k) for k in ("host", "cpu", "cores", "load_at_start", "python", "date")},
        "finished": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "source": reproduction.source,
        "plots": rel,
        "result": reproduction.to_dict(),
    }
    path = path_of(folder, name)
    replace_file(path, json.dumps(payload, separators=(",", ":"), default=_none) + "\n", "--parts")
    kept = {os.path.basename(r) for r in rel}
    for old in glob.glob(os.path.join(glob.escape(img), "*.png")):
        if os.path.basename(old) not in kept:
            os.remove(old)
    return path


def _none(v):
    """What JSON cannot hold is written as null, as the run record writes it (the same record either way)."""
    return None
