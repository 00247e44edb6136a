"""The expected time of a training run before it starts: step times measured here and now, extrapolated.

A training step's time grows linearly with the number of layers at a given shape (width, heads, FFN,
vocabulary, batch, sequence length, device, torch threads), so per shape a 1-layer and a 3-layer copy
of the model take a few Adam steps on random tokens, and every run of that shape is extrapolated from
them: steps x (fixed + per layer x layers), a fifth more for the loop's telemetry and bookkeeping, its
validation passes and the study's probe at init, and the run's task set up twice (the probe's and the
training's: windows of the corpus and its unigram entropy, timed here too: at tiny shapes it is most of
a run). Each shape and task is timed once per process. A shape too
large to time quickly is timed at a smaller batch and scaled (a step's time is linear in the batch
once the work dominates). It is an estimate: a shared machine's load changes under it, and a run that
stops early (diverged) takes less; :class:`depthlab.progress.TimeLeft` corrects it with the run times
measured as a study goes. ``depthlab reproduce`` estimates with it too.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from depthlab.config import ModelConfig, TrainConfig
from depthlab.model import build_model
from depthlab.model.memory import param_count
from depthlab.train.tasks import make_task

TIMED_STEPS = 3
LOOP_OVERHEAD = 1.2  # telemetry on logged steps and the loop's bookkeeping: an allowance, not a measurement
TIMING_FLOP = 2e10  # at most this many FLOP in one timed step (about a second of one CPU core)
# The probe at init in Adam steps (a step: a forward, a backward and the update; a forward is about a
# third of it): a forward and backward, one more backward to the streams and two forwards without grad
# (the output change, the update gain); advise's light probe of an alternative: a forward and backward
# and the update gain's forward.
PROBE_STEPS = 2.0
LIGHT_PROBE_STEPS = 4 / 3
TASK_SETUPS = 2  # a study run sets its task up twice: the probe at init's first batch, then training's
# The probes' FLOP above which advise and probe time this machine to say how long they will take: about
# half a minute of one CPU core and more, where the timing's few seconds are a small part of the wait.
ESTIMATE_FLOP = 2e12
_STEP: dict[tuple, tuple[float, float, float]] = {}
_TASK: dict[tuple, float] = {}


def device_of(tcfg: TrainConfig) -> torch.device:
    """The device a run of ``tcfg`` trains on (device "auto": CUDA when available)."""
    if tcfg.device == "cpu" or (tcfg.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda")


def _timed(cfg: ModelConfig, batch: int, seq: int, device: torch.device) -> tuple[float, float]:
    """(seconds to build, seconds per Adam step) of ``cfg`` on random tokens, a warm step first."""
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        model = build_model(cfg).to(device)
    built = time.perf_counter() - start
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), device=device)
    args = (tokens[:, :-1], tokens[:, :-1]) if cfg.arch == "encdec" else (tokens[:, :-1],)

    def step():
        logits = model(*args)
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(TIMED_STEPS):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return built, (time.perf_counter() - start) / TIMED_STEPS


def step_cost(cfg: ModelConfig, batch: int, seq: int, device: torch.device) -> tuple[float, float, float]:
    """(fixed, per layer) seconds of one Adam step of ``cfg``'s shape at ``batch`` x ``seq`` tokens, and
    seconds per layer to build it; measured once per shape and process (module docstring)."""
    key = (cfg.arch, cfg.d_model, cfg.n_heads, cfg.ffn_dim, cfg.vocab_size, cfg.norm, cfg.activation)
    key += (batch, seq, device.type, torch.get_num_threads())
    if key not in _STEP:
        # the parametrization's constants cost nothing; its bases would refuse a 1-layer copy
        one = cfg.replace(n_layers=1, enc_layers=None, dec_layers=None, activation_checkpointing=False,
                          param="sp", base_width=None, base_depth=None)  # fmt: skip
        flop = 6 * param_count(one.replace(n_layers=3)) * seq  # one sequence's training FLOP, 3 layers
        small = max(1, min(batch, int(TIMING_FLOP // max(flop, 1))))
        (b1, t1), (b3, t3) = (_timed(one.replace(n_layers=n), small, seq, device) for n in (1, 3))
        scale = batch / small
        per_layer = max((t3 - t1) / 2, 0.0) * scale
        _STEP[key] = (max(t1 * scale - per_layer, 0.0), per_layer, max((b3 - b1) / 2, 0.0))
    return _STEP[key]


def task_seconds(mcfg: ModelConfig, tcfg: TrainConfig) -> float:
    """Seconds to set up the task of a run of ``mcfg`` as ``tcfg`` says (:func:`make_task`: the corpus's
    windows and unigram entropy, or a synthetic task's generator), measured once per task and process,
    after a first set-up that reads the corpus (each process reads it once, not each run)."""
    key = (tcfg.task, tcfg.data, tcfg.seq_len, tcfg.batch_size, mcfg.arch, mcfg.vocab_size)
    if key not in _TASK:
        make_task(mcfg, tcfg)
        start = time.perf_counter()
        make_task(mcfg, tcfg)
        _TASK[key] = time.perf_counter() - start
    return _TASK[key]


def run_seconds(mcfg: ModelConfig, tcfg: TrainConfig, bare: bool = False, task: bool = True) -> float:
    """The expected seconds of one training run of ``mcfg`` as ``tcfg`` says, on this machine now: the
    build, its steps (a third more with activation checkpointing, which recomputes the forward), the
    validation passes, the probe at init (a forward and two backward passes) and the task's set-ups
    (:func:`task_seconds`; ``task`` False: set up already, as in a ``train`` that says its plan). ``bare``:
    the build and the Adam steps only (a loop without validation or telemetry: a coordinate check's)."""
    fixed, per_layer, build = step_cost(mcfg, tcfg.batch_size, tcfg.seq_len, device_of(tcfg))
    layers = mcfg.enc_depth + mcfg.dec_depth
    step = (fixed + per_layer * layers) * (4 / 3 if mcfg.activation_checkpointing else 1)
    if bare:
        return build * layers + step * tcfg.steps
    evals = tcfg.steps // tcfg.eval_every + 1
    forward = step / 3  # a forward pass is about a third of forward, backward and update
    loop = LOOP_OVERHEAD * step * tcfg.steps + evals * tcfg.eval_batches * forward
    setups = TASK_SETUPS * task_seconds(mcfg, tcfg) if task else 0.0
    return build * layers + loop + PROBE_STEPS * step + setups


def probe_seconds(mcfg: ModelConfig, tcfg: TrainConfig, light: bool = False) -> float:
    """The expected seconds of the study's probe at init of ``mcfg`` on the run's batch on this machine's
    CPU now (where advise probes): its build and about :data:`PROBE_STEPS` Adam steps; ``light`` (advise's
    probe of an alternative, :func:`depthlab.study.worker.probe_run`) :data:`LIGHT_PROBE_STEPS`."""
    fixed, per_layer, build = step_cost(mcfg, tcfg.batch_size, tcfg.seq_len, torch.device("cpu"))
    layers = mcfg.enc_depth + mcfg.dec_depth
    return build * layers + (fixed + per_layer * layers) * (LIGHT_PROBE_STEPS if light else PROBE_STEPS)


def probes_seconds(probes, tcfg: TrainConfig) -> dict | None:
    """{key: expected seconds} of the probes at init ``probes`` ((key, ModelConfig, light) triples, each
    :func:`probe_seconds`' on ``tcfg``'s batch), from step times measured here now; None where they are
    quick (under :data:`ESTIMATE_FLOP`: timing would be much of the wait) or cannot be timed."""
    tokens = tcfg.batch_size * tcfg.seq_len  # a step: about 6 FLOP per weight a token
    flop = sum(
        6 * param_count(m) * tokens * (LIGHT_PROBE_STEPS if light else PROBE_STEPS) for _, m, light in probes
    )
    if flop < ESTIMATE_FLOP:
        return None
    try:
        return {key: probe_seconds(m, tcfg, light) for key, m, light in probes}
    except (ValueError, RuntimeError, MemoryError):  # a shape this machine cannot time: no estimate
        return None


def estimate(runs, threads: int = 1, bare: bool = False, task: bool = True) -> dict | None:
    """{key: expected seconds} of ``runs`` ((key, ModelConfig, TrainConfig) triples) with ``threads``
    torch threads each (each worker's; ``bare``, ``task``: :func:`run_seconds`'), or None when the step times
    cannot be measured here (a shape this machine cannot build: its run is refused anyway)."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        return {key: run_seconds(m, t, bare, task) for key, m, t in runs}
    except (ValueError, RuntimeError, MemoryError):  # InputError (memory) is a ValueError
        return None
    finally:
        torch.set_num_threads(before)
