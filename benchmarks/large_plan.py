"""The registered large scale's runs and cost, without training anything.

Every training claim announces its runs (``depthlab.reproduce.cost.announce``) before its first training
step. Here each claim with a large scale is started with that announcement recorded instead of printed
and its first training call stopped, so the runs listed are exactly the ones the claim would train.
Per claim: runs, tokens (steps x batch x sequence length) and passes over the default corpus, training
FLOP (6 x parameters x tokens, forward and backward), and the cost model's expected seconds on this
device (step times measured now; on a CPU, one torch thread a run). A benchmark helper, not part of the
library: it reaches into the claims' modules to stop their training.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from dataclasses import dataclass

from depthlab.model.memory import param_count
from depthlab.reproduce import REPRODUCTIONS, cost, lm_runs


class _Stop(Exception):
    """Raised by the stopped training entry points: the claim's runs are announced, nothing trains."""


def _stop(*args, **kwargs):
    raise _Stop


# Where the claims' training starts: the shared runner's train function, depthlab.train.train and the
# study runner. A claim may import any of them under its own name, so every module of
# depthlab.reproduce is searched for attributes that *are* one of these functions (by identity).
ENTRY_POINTS = (
    ("depthlab.reproduce.lm_runs", "run_training"),
    ("depthlab.train", "train"),
    ("depthlab.reproduce.claims.lr_sensitivity", "run_study"),
)


def _entry_functions() -> set[int]:
    """The ids of the training entry functions (those of :data:`ENTRY_POINTS` that are loaded)."""
    found = set()
    for mod_name, attr in ENTRY_POINTS:
        module = sys.modules.get(mod_name)
        if module is not None and hasattr(module, attr):
            found.add(id(getattr(module, attr)))
    return found


@dataclass(frozen=True)
class ClaimCost:
    """One claim's registered large scale: its runs and what they cost."""

    name: str
    runs: int
    tokens: int
    flop: float
    seconds: float
    max_steps: int


@contextlib.contextmanager
def _recording(planned: list):
    """``cost.announce`` records its runs; the training entry points raise :class:`_Stop`."""
    saved = [(cost, "announce", cost.announce)]
    entries = _entry_functions()
    for mod_name, module in list(sys.modules.items()):
        if module is None or not mod_name.startswith("depthlab.reproduce"):
            continue
        for attr, value in list(vars(module).items()):
            if id(value) in entries:
                saved.append((module, attr, value))
                setattr(module, attr, _stop)

    def record(name, runs, done, where="in this process"):
        planned.extend(runs)
        return 0.0

    cost.announce = record
    try:
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)


def planned_runs(name: str) -> list:
    """The (ModelConfig, TrainConfig) pairs claim ``name`` trains at the large scale (duplicates, as
    when two claims share a run, counted once)."""
    planned: list = []
    lm_runs.clear_cache()
    # what a claim prints before training (a study's store line) is not the plan's; a claim that keeps
    # a store beside its plots gets a folder removed afterwards
    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
        with _recording(planned), contextlib.suppress(_Stop):
            REPRODUCTIONS[name](scale="large", out_dir=out)
    unique = {(m.config_hash(), t.config_hash()): (m, t) for m, t in planned}
    return list(unique.values())


def claim_cost(name: str) -> ClaimCost:
    """Runs, tokens, FLOP and expected seconds (cost model, this device) of claim ``name``'s large scale."""
    runs = planned_runs(name)
    tokens = flop = seconds = 0.0
    for m, t in runs:
        n = t.steps * t.batch_size * t.seq_len
        tokens += n
        flop += 6 * param_count(m) * n
        seconds += cost.run_seconds(m, t)
    steps = max((t.steps for _, t in runs), default=0)
    return ClaimCost(name, len(runs), int(tokens), flop, seconds, steps)
