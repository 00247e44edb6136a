"""The expected time of a training reproduction, printed before it starts.

The time of one training step grows linearly with the number of layers at a given width and batch, so
per shape (width, heads, FFN, batch, sequence length, device) a 1-layer and a 3-layer copy of the model
are timed for a few Adam steps on random tokens, here and now, and every planned run is extrapolated
from them: steps x (fixed + per-layer x layers), plus its validation passes and telemetry steps. Runs
this process already trained cost nothing. It is an estimate: a shared machine's load can change under
it, and a run that stops early (diverged) takes less.
"""

from __future__ import annotations

import sys
import time

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.model import build_model

TIMED_STEPS = 3
# the loop's work beyond the bare step (telemetry on logged steps, bookkeeping): a rough allowance,
# not a measurement
LOOP_OVERHEAD = 1.2
_STEP: dict[tuple, tuple[float, float]] = {}


def device_for(tcfg: TrainConfig) -> torch.device:
    """The device a run of ``tcfg`` trains on (device "auto": CUDA when available)."""
    if tcfg.device == "cpu" or (tcfg.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda")


def _time_steps(
    mcfg: ModelConfig, tcfg: TrainConfig, n_layers: int, device: torch.device
) -> tuple[float, float]:
    """(seconds to build, seconds per Adam step) of ``mcfg`` with ``n_layers`` layers on random tokens
    (the step timed after a warm one)."""
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        model = build_model(mcfg.replace(n_layers=n_layers)).to(device)
    built = time.perf_counter() - start
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, mcfg.vocab_size, (tcfg.batch_size, tcfg.seq_len + 1), device=device)

    def step():
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(TIMED_STEPS):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return built, (time.perf_counter() - start) / TIMED_STEPS


def step_cost(mcfg: ModelConfig, tcfg: TrainConfig) -> tuple[float, float, float]:
    """(fixed, per layer) seconds of one training step of this shape, and seconds per layer to build the
    model, measured once per process."""
    device = device_for(tcfg)
    key = (mcfg.arch, mcfg.d_model, mcfg.n_heads, mcfg.ffn_dim, mcfg.norm, tcfg.batch_size, tcfg.seq_len)
    key += (device.type,)
    if key not in _STEP:
        (b1, one), (b3, three) = (_time_steps(mcfg, tcfg, n, device) for n in (1, 3))
        per_layer = max((three - one) / 2, 0.0)
        _STEP[key] = (max(one - per_layer, 0.0), per_layer, max((b3 - b1) / 2, 0.0))
    return _STEP[key]


def run_seconds(mcfg: ModelConfig, tcfg: TrainConfig) -> float:
    """The expected seconds of one training run: building the model, its steps (a third more with
    activation checkpointing, which recomputes the forward pass), validation passes and telemetry."""
    fixed, per_layer, build = step_cost(mcfg, tcfg)
    step = (fixed + per_layer * mcfg.n_layers) * (4 / 3 if mcfg.activation_checkpointing else 1)
    evals = tcfg.steps // tcfg.eval_every + 1
    forward_only = step / 3  # a forward pass is about a third of forward + backward + update
    steps = LOOP_OVERHEAD * step * tcfg.steps + evals * tcfg.eval_batches * forward_only
    return build * mcfg.n_layers + steps


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


def duration(seconds: float) -> str:
    """``seconds`` as the plan says it: "40 s", "12 min", "2.3 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
