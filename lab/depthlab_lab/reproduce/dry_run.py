"""A claim's training runs, found without training anything.

Every training claim announces its runs (:func:`depthlab_lab.reproduce.cost.announce`) before its first
training step. Here a claim is started with that announcement recorded instead of printed and its first
training call stopped, so the runs listed are exactly the ones the claim would train. A claim that
trains nothing is stopped at the first model it builds or coordinate check it starts (it would measure
at init): it has no runs. The training entry points are the training loop (:func:`depthlab.train.train`,
which the run cache calls) and the study runner; a claim may import either under its own name, so every
module of depthlab_lab.reproduce is searched for attributes that *are* one of these functions (by identity).
Used by ``depthlab reproduce all --plan`` (which also says which claims have a current committed part,
:mod:`depthlab_lab.reproduce.parts`, and so nothing to train) and, for the large scale, ``benchmarks/gpu.py``.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from depthlab.config import ModelConfig, TrainConfig
from depthlab_lab.reproduce import cost, lm_runs, parts, run_cache
from depthlab_lab.reproduce.reproduction import REPRODUCTIONS

TRAINING = (("depthlab.train", "train"), ("depthlab.study.runner", "run_study"))
# What a claim that trains nothing starts with; its own copies are stopped, the cost model's and the
# run cache's are not (they time steps and rebuild stored runs).
MEASURING = (("depthlab.model", "build_model"), ("depthlab.probe.coord", "coord_check"))
KEPT = ("depthlab_lab.reproduce.cost", "depthlab_lab.reproduce.run_cache")
NOT_TRAINING = {
    "build_model": "no training runs (measures models at init)",
    "coord_check": "no training runs (coordinate checks: a few Adam steps per model, its own loop)",
}


class _Stop(Exception):
    """Raised by a stopped entry point (its name the argument): the claim's runs are announced, nothing
    trains."""


def _stopper(name: str):
    def stop(*args, **kwargs):
        raise _Stop(name)

    return stop


@dataclass(frozen=True)
class Planned:
    """One run a claim would train, and whether its own store already holds it (a study claim's store:
    the announcement's ``done``)."""

    model: ModelConfig
    train: TrainConfig
    done_in_store: bool


def _entries(pairs) -> dict[int, str]:
    """{id: name} of the functions of ``pairs`` (module, attribute) whose module is loaded."""
    found = {}
    for mod_name, attr in pairs:
        module = sys.modules.get(mod_name)
        if module is not None and hasattr(module, attr):
            found[id(getattr(module, attr))] = attr
    return found


@contextlib.contextmanager
def recording(planned: list[Planned], measuring: bool = True) -> Iterator[None]:
    """``cost.announce`` records its runs into ``planned``; the training entry points (and with
    ``measuring`` the measuring ones, outside :data:`KEPT`) raise :class:`_Stop`."""
    saved = [(cost, "announce", cost.announce)]
    training, measures = _entries(TRAINING), _entries(MEASURING) if measuring else {}
    for mod_name, module in list(sys.modules.items()):
        if module is None or not mod_name.startswith("depthlab_lab.reproduce"):
            continue
        for attr, value in list(vars(module).items()):
            entry = training.get(id(value)) or (measures.get(id(value)) if mod_name not in KEPT else None)
            if entry:
                saved.append((module, attr, value))
                setattr(module, attr, _stopper(entry))

    def record(name, runs, done, where="in this process"):
        planned.extend(Planned(m, t, bool(done(m, t))) for m, t in runs)
        return 0.0

    cost.announce = record
    try:
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)


def planned_runs(
    name: str, scale: str = "small", quick: bool = False, measuring: bool = True
) -> tuple[list[Planned], str | None]:
    """(the runs claim ``name`` would train at ``scale``, the entry point it was stopped at: None when it
    ran to its end). A run announced twice, as when two of its settings share one, is counted once.
    Nothing trains; the run cache is off meanwhile, and what the claim prints is dropped."""
    planned: list[Planned] = []
    stopped = None
    lm_runs.clear_cache()
    # what a claim prints before training (a study's store line) is not the plan's; a claim that keeps
    # a store beside its plots gets a folder removed afterwards
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    try:
        with run_cache.using(None), tempfile.TemporaryDirectory() as out, quiet[0], quiet[1]:
            with recording(planned, measuring):
                REPRODUCTIONS[name](quick=quick, scale=scale, out_dir=out)
    except _Stop as e:
        stopped = e.args[0]
    unique = {(p.model.config_hash(), p.train.config_hash()): p for p in planned}
    return list(unique.values()), stopped


@dataclass(frozen=True)
class ClaimPlan:
    """One claim's runs: how many, how many already stored (run cache or the claim's own study store),
    the expected seconds of the rest, and the keys of the runs left (for a total without duplicates)."""

    name: str
    runs: int
    stored: int
    seconds: float
    left: dict
    stopped: str | None


def claim_plan(name: str, scale: str, quick: bool, cache: str | None) -> ClaimPlan:
    """The plan of claim ``name``: its runs against the run cache folder ``cache``."""
    runs, stopped = planned_runs(name, scale, quick)
    left = {
        (p.model.config_hash(), p.train.config_hash()): cost.run_seconds(p.model, p.train)
        for p in runs
        if not (p.done_in_store or (cache and run_cache.is_stored(p.model, p.train, cache)))
    }
    return ClaimPlan(name, len(runs), len(runs) - len(left), sum(left.values()), left, stopped)


def print_plan(
    names: list[str], scale: str, quick: bool, cache: str | None, out=None, parts_dir: str | None = None
) -> list[ClaimPlan]:
    """Print (``out``, default stdout) each claim's runs, how many are stored, and the expected time of
    the rest, then the total (a run two claims share counted once); returns the plans. With
    ``parts_dir``, a claim whose committed part there has today's key (:mod:`depthlab_lab.reproduce.parts`)
    is loaded, not run: it has nothing to train; the others say why they run (no part, a stale or a
    damaged one)."""
    out = out or sys.stdout
    print(f"{'claim':20} {'runs':>5} {'stored':>7} {'to train':>9}  expected", file=out)
    plans, current = [], 0
    for name in names:
        part, why = (
            parts.status(parts_dir, name, parts.key_inputs(name, scale, quick)) if parts_dir else (None, "")
        )
        if part is not None:
            current += 1
            done = f"part current (commit {parts.short_commit(part.commit)}): nothing to train"
            print(f"{name:20} {'-':>5} {'-':>7} {'-':>9}  {done}", file=out)
            continue
        tail = f"; part: {why}" if why else ""
        p = claim_plan(name, scale, quick, cache)
        plans.append(p)
        if not p.runs:
            what = NOT_TRAINING.get(p.stopped, "trains nothing")
            print(f"{name:20} {'-':>5} {'-':>7} {'-':>9}  {what}; not timed, not cached{tail}", file=out)
            continue
        shown = cost.duration(p.seconds)
        print(f"{name:20} {p.runs:5} {p.stored:7} {p.runs - p.stored:9}  {shown}{tail}", file=out, flush=True)
    left = {k: v for p in plans for k, v in p.left.items()}
    runs, stored = sum(p.runs for p in plans), sum(p.stored for p in plans)
    print(
        f"{'all':20} {runs:5} {stored:7} {len(left):9}  {cost.duration(sum(left.values()))} "
        "(a run two claims share trained once; claims without training runs not timed)",
        file=out,
    )
    where = f"the run cache {cache}" if cache else "no run cache"
    print(f"stored: in {where} or the claim's own study store; step times measured now", file=out)
    if parts_dir:
        print(
            f"parts in {parts_dir}: {current} of {len(names)} claims current (loaded, nothing to train), "
            f"{len(names) - current} to run",
            file=out,
        )
    return plans
