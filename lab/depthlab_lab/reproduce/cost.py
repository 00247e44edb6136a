"""The expected time of a training reproduction, printed before it starts.

Each planned run's time comes from the library's cost model (:mod:`depthlab.train.cost`, the one
``depthlab study`` and ``coord`` use): per shape a 1-layer and a 3-layer copy of the model are timed for
a few Adam steps on random tokens, here and now, and every run is extrapolated from them (steps x (fixed
+ per-layer x layers), its validation passes, telemetry steps and a probe at init). Runs this process
already trained cost nothing. It is an estimate: a shared machine's load can change under it, and a run
that stops early (diverged) takes less; :class:`depthlab.progress.TimeLeft` corrects it with the run
times measured as the reproduction goes (:func:`depthlab_lab.reproduce.lm_runs.announce`).
"""

from __future__ import annotations

import sys

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.progress import duration
from depthlab.train import cost as library
from depthlab.train.cost import device_of as device_for

__all__ = ["announce", "device_for", "duration", "run_seconds"]


def run_seconds(mcfg: ModelConfig, tcfg: TrainConfig) -> float:
    """The expected seconds of one training run (:func:`depthlab.train.cost.run_seconds`)."""
    return library.run_seconds(mcfg, tcfg)


def announce(
    name: str, planned: list[tuple[ModelConfig, TrainConfig]], done, where: str = "in this process"
) -> float:
    """Print (stderr) how many runs ``name`` plans and its expected time; returns the seconds.

    ``done(mcfg, tcfg)`` says whether a run is already trained (cached ``where``) and so costs nothing.
    """
    todo = [(m, t) for m, t in planned if not done(m, t)]
    seconds = sum(run_seconds(m, t) for m, t in todo)
    device = device_for(planned[0][1]).type if planned else "cpu"
    print(
        f"{name}: {len(planned)} training runs ({len(planned) - len(todo)} already done {where}); "
        f"expected time about {duration(seconds)} on this {device} "
        f"(per-layer step time measured now, x {torch.get_num_threads()} torch threads)",
        file=sys.stderr,
        flush=True,
    )
    return seconds
