"""The reproductions' run cache: every training run stored as it finishes, and loaded instead of trained
when a later sitting asks for the same run, so that a killed ``depthlab reproduce all`` resumes where it
stopped.

A run is one file, ``KEY.pt`` in the cache folder (default ``runs/reproduce/cache``), written to a
temporary name and renamed, so that a kill leaves either the whole run or nothing. KEY is a digest of
everything that determines the run: the model and training configs in full (the seed, and so the scale's
regime, among them), the torch threads and torch version, and :func:`code_digest`, a digest of the
source of the training code (every depthlab module the training loop imports, transitively: model,
train, data, the watcher's outcome rules, and this module's own saving and loading). The claims' check
code is not in it: fixing a check does not retrain. Nor is what turns a stored result into a claim's
numbers (:func:`depthlab_lab.reproduce.lm_runs._summarise` and the claims' readers): that runs again on
every load, so a change to it takes effect without retraining. The file holds the loop's
:class:`~depthlab.train.run_result.RunResult` (metrics, losses, outcome) with the trained module's
state_dict and its submodules' train/eval modes, the global torch RNG state the run left behind (a
claim that draws after training draws the same numbers whether the run was trained or loaded), the
training seconds and the commit it was trained at. Loading rebuilds the module from its config.

Only eager runs on the CPU are cached: there, with the threads fixed, training is deterministic, and a
loaded run is the trained one bit for bit. A CUDA run is not (its kernels need not be deterministic), nor
a compiled one, so they always train.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.util
import os
import pickle
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.corpus import load_corpus, read_data_file
from depthlab.jsonable import digest
from depthlab.model import build_model
from depthlab.progress import say
from depthlab.train import train as run_training
from depthlab.train.run_result import RunResult

DEFAULT_FOLDER = "cache"  # under the reproductions' --out folder
# Where the training code starts; every depthlab module these import (transitively) is in the digest.
TRAINING_ROOTS = ("depthlab.train.loop", "depthlab.model", "depthlab.watch.outcome", "depthlab.corpus")
FORMAT = 1  # what a cached file holds; a change here makes every older file a miss


@dataclass(frozen=True)
class Trained:
    """One run as a claim gets it: the loop's result, its training seconds, the commit it was trained
    at (None outside a git work tree) and whether it came from the cache."""

    result: RunResult
    seconds: float
    commit: str | None
    loaded: bool


@dataclass
class Tally:
    """Runs of this process: trained and stored, and loaded from the cache."""

    trained: int = 0
    loaded: int = 0


_ACTIVE: list[str] = []  # the cache folder in use (empty: no cache)
TALLY = Tally()


def use(folder: str | None) -> None:
    """Cache runs in ``folder`` from now on (None: no cache)."""
    _ACTIVE.clear()
    if folder:
        _ACTIVE.append(folder)


@contextlib.contextmanager
def using(root: str | None) -> Iterator[None]:
    """Cache runs in ``root`` (None: no cache) for the ``with`` block, then as before."""
    before = folder()
    use(root)
    try:
        yield
    finally:
        use(before)


def reset_tally() -> None:
    """Start counting trained and loaded runs again (at the start of a document's runs)."""
    TALLY.trained = TALLY.loaded = 0


def folder() -> str | None:
    """The cache folder in use, or None."""
    return _ACTIVE[0] if _ACTIVE else None


def cacheable(tcfg: TrainConfig) -> bool:
    """Whether a run of ``tcfg`` is cached: only eager CPU runs (deterministic at fixed threads; "auto"
    is the CPU where no CUDA device is seen; a compiled run's kernels are generated, not fixed)."""
    on_cpu = tcfg.device == "cpu" or (tcfg.device == "auto" and not torch.cuda.is_available())
    return on_cpu and not tcfg.compile


def data_digest(tcfg: TrainConfig) -> str:
    """The sha256 of the bytes the run trains on: the data file's, or the default corpus's (the running
    interpreter's standard library: another Python gives other data, under the same config)."""
    if tcfg.data is None:
        return load_corpus(None, 1).info["sha256"]
    return hashlib.sha256(read_data_file(tcfg.data)).hexdigest()


def run_key(mcfg: ModelConfig, tcfg: TrainConfig) -> str:
    """The cache key of one run: a digest of the configs in full, the data's sha256, the torch threads
    and version, the training code's digest and the file format."""
    return digest(
        {
            "model": mcfg.to_dict(),
            "train": tcfg.to_dict(),
            "data": data_digest(tcfg),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "code": code_digest(),
            "format": FORMAT,
        }
    )


def path_of(root: str, key: str) -> str:
    """The file of run ``key`` in cache folder ``root``."""
    return os.path.join(root, f"{key}.pt")


def is_stored(mcfg: ModelConfig, tcfg: TrainConfig, root: str | None = None) -> bool:
    """Whether (mcfg, tcfg) is in the cache folder ``root`` (default: the one in use)."""
    root = root or folder()
    return bool(root) and cacheable(tcfg) and os.path.isfile(path_of(root, run_key(mcfg, tcfg)))


def train_cached(mcfg: ModelConfig, tcfg: TrainConfig) -> Trained:
    """The run of (mcfg, tcfg): loaded from the cache in use when it is there, else trained (and, if a
    cache is in use and the run is cacheable, stored before it is returned)."""
    root = folder() if cacheable(tcfg) else None
    key = run_key(mcfg, tcfg) if root else None
    if root and os.path.isfile(path_of(root, key)):
        try:
            loaded = load(path_of(root, key), mcfg)
        except (OSError, RuntimeError, KeyError, ValueError, EOFError, pickle.UnpicklingError) as e:
            # a file this module cannot read back is a miss: the run trains again and replaces it
            say(f"run cache: {path_of(root, key)} unreadable ({type(e).__name__}); training the run again")
        else:
            TALLY.loaded += 1
            return loaded
    start = time.perf_counter()
    result = run_training(mcfg, tcfg)
    trained = Trained(result, time.perf_counter() - start, current_commit(), loaded=False)
    if root:
        save(path_of(root, key), trained)
        TALLY.trained += 1
    return trained


def train(mcfg: ModelConfig, tcfg: TrainConfig) -> RunResult:
    """:func:`depthlab.train.train` of (mcfg, tcfg) through the cache in use: the RunResult."""
    return train_cached(mcfg, tcfg).result


def save(path: str, trained: Trained) -> None:
    """Write one run to ``path`` whole or not at all (a temporary file, then renamed)."""
    result = trained.result
    model = result.model
    payload = {
        "format": FORMAT,
        "result": {**vars(replace(result, model=None)), "model": None},
        "state_dict": model.state_dict() if model is not None else None,
        "modes": {name: m.training for name, m in model.named_modules()} if model is not None else None,
        "rng": torch.get_rng_state(),
        "seconds": trained.seconds,
        "commit": trained.commit,
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.part"  # a name no reader takes for a run
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load(path: str, mcfg: ModelConfig) -> Trained:
    """The run stored at ``path``, its module rebuilt from ``mcfg`` with the stored weights and modes; the
    global torch RNG is set to the state the run left behind."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    model = None
    if payload["state_dict"] is not None:
        with torch.random.fork_rng(devices=[]):
            model = build_model(mcfg)
        model.load_state_dict(payload["state_dict"])
        for name, m in model.named_modules():
            m.training = payload["modes"].get(name, m.training)
    torch.set_rng_state(payload["rng"])
    result = RunResult(**{**payload["result"], "model": model})
    return Trained(result, payload["seconds"], payload["commit"], loaded=True)


@functools.cache
def current_commit() -> str | None:
    """The git commit of this checkout, with "-dirty" when depthlab/ differs from it (None outside a git
    work tree)."""
    here = os.path.dirname(os.path.abspath(__file__))
    head = _git(here, "rev-parse", "HEAD")
    if not head:
        return None
    return head + ("-dirty" if _git(here, "status", "--porcelain", "--", "..") else "")


def _git(here: str, *args: str) -> str:
    try:
        out = subprocess.run(
            ["git", "-C", here, *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def training_modules() -> list[str]:
    """The depthlab modules in the training code's digest: :data:`TRAINING_ROOTS`, every depthlab module
    they import (transitively), and this module."""
    seen: set[str] = set()
    todo = [*TRAINING_ROOTS, __name__]
    while todo:
        name = todo.pop()
        if name in seen or _source_path(name) is None:
            continue
        seen.add(name)
        todo += _imports(Path(_source_path(name)).read_text(encoding="utf-8"))
    return sorted(seen)


@functools.cache
def code_digest() -> str:
    """16 hex digits over the syntax trees of :func:`training_modules` (comments and layout change
    nothing; any change to what the code does changes it)."""
    h = hashlib.sha256()
    for name in training_modules():
        tree = ast.parse(Path(_source_path(name)).read_text(encoding="utf-8"))
        h.update(f"{name}\n{ast.dump(tree, include_attributes=False)}\n".encode())
    return h.hexdigest()[:16]


def _source_path(name: str) -> str | None:
    spec = importlib.util.find_spec(name)
    return spec.origin if spec and spec.origin and spec.origin.endswith(".py") else None


def _imports(source: str) -> list[str]:
    """The depthlab modules ``source`` imports (depthlab imports absolutely): ``from a.b import c``
    gives a.b and, when it is a module, a.b.c."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return [m for m in out if m.split(".")[0] in ("depthlab", "depthlab_lab") and _is_module(m)]


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ModuleNotFoundError, ValueError):
        return False
