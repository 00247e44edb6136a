"""The registered large scale's runs and cost, without training anything.

Every training claim announces its runs (``depthlab_lab.reproduce.cost.announce``) before its first training
step. Here each claim with a large scale is started with that announcement recorded instead of printed
and its first training call stopped (:mod:`depthlab_lab.reproduce.dry_run`, which ``depthlab reproduce all
--plan`` uses too), so the runs listed are exactly the ones the claim would train.
Per claim: runs, tokens (steps x batch x sequence length) and passes over the default corpus, training
FLOP (6 x parameters x tokens, forward and backward), and the cost model's expected seconds on this
device (step times measured now; on a CPU, one torch thread a run). A benchmark helper, not part of the
library.
"""

from __future__ import annotations

from dataclasses import dataclass

from depthlab.model.memory import param_count
from depthlab_lab.reproduce import cost
from depthlab_lab.reproduce.dry_run import planned_runs as _planned


@dataclass(frozen=True)
class ClaimCost:
    """One claim's registered large scale: its runs and what they cost."""

    name: str
    runs: int
    tokens: int
    flop: float
    seconds: float
    max_steps: int


def planned_runs(name: str) -> list:
    """The (ModelConfig, TrainConfig) pairs claim ``name`` trains at the large scale (duplicates, as
    when two claims share a run, counted once): :func:`depthlab_lab.reproduce.dry_run.planned_runs`."""
    runs, _ = _planned(name, "large", measuring=False)
    return [(p.model, p.train) for p in runs]


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
