"""The training loop: one run of a model on a task, with telemetry, outcome detection and checkpoints.

    for t in 1..steps:                                    (update t; batch = task.train_batch(t))
        forward -> loss -> backward -> clip               (the watcher's hooks measure logged steps)
        monitor(loss, grad norm): diverged? -> log this step, stop without the update
        optimizer.step(); scheduler.step()
        log on logged steps (1, every log_every, every eval_every, the last): metrics.jsonl, TensorBoard, on_log
        checkpoint every checkpoint_every steps and at the end

The per-layer telemetry and the warnings are :class:`depthlab.watch.Watcher`'s, the same instrument a
user attaches to their own loop: its hooks measure the logged steps, ``watcher.step`` ends each update
and returns the logged steps' records, to which the loop adds the validation loss and the throughput.

Each process computes the same records (sums are combined over processes), so every rank returns the same
RunResult; only rank 0 writes files, calls ``on_log`` and shows the progress bar.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from tqdm.auto import tqdm

from depthlab.config import ModelConfig, TrainConfig
from depthlab.errors import ConfigError, InputError, option
from depthlab.model import build_model
from depthlab.paths import check_path_type
from depthlab.progress import Progress, duration, say
from depthlab.train import checkpoint
from depthlab.train.batch import shard
from depthlab.train.cost import estimate
from depthlab.train.distributed import Dist, setup, teardown, wrap_ddp
from depthlab.train.evaluate import evaluate, token_loss_sum, z_loss_sum
from depthlab.train.run_result import RunResult
from depthlab.train.rundir import RunDir, RunOutput
from depthlab.train.schedules import make_optimizer, make_scheduler, run_lr
from depthlab.train.tasks import check_train_memory, make_task
from depthlab.watch import Watcher
from depthlab.watch.outcome import Monitor


def train(
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    out_dir: str | None = None,
    *,
    resume: bool = False,
    force: bool = False,
    progress: bool = False,
    on_log: Callable[[dict], None] | None = None,
    force_memory: bool = False,
) -> RunResult:
    """Train ``model_cfg`` as ``train_cfg`` says; returns the RunResult (a diverged run is a result too).

    ``out_dir``: the run folder (depthlab.train.rundir), or None to write nothing. ``resume`` continues
    the run in ``out_dir`` from its last checkpoint (or returns its result if it finished); ``force``
    starts over in a used ``out_dir``. ``on_log(record)`` gets each metrics record. Under torchrun every
    process calls this and trains its share of each batch. Before anything is built, a run that would
    not fit in free memory is refused (InputError with the estimate; ``force_memory`` runs it anyway).
    """
    for name, value, cls in (("model_cfg", model_cfg, ModelConfig), ("train_cfg", train_cfg, TrainConfig)):
        if not isinstance(value, cls):
            raise TypeError(f"{name} must be a depthlab.{cls.__name__}, not {type(value).__name__}")
    check_path_type(out_dir, "out_dir", "the run folder's path", none_ok=True)
    if (resume or force) and out_dir is None:
        flag = option("resume" if resume else "force")
        raise InputError(
            f"{flag} needs {option('out')} (the run folder to {'continue' if resume else 'start over'})"
        )
    if out_dir is not None:
        RunDir(out_dir).check(resume, force)  # before the data is read and the model built
    dist = setup(train_cfg.device)
    try:
        check_train_memory(model_cfg, train_cfg, dist.device, dist.world, force_memory)
        result = _run(Trainer(model_cfg, train_cfg, out_dir, dist, on_log), resume, force, progress)
        dist.barrier()  # no process closes the group while another still writes or reduces
        return result
    finally:
        teardown(dist)


def _run(trainer: Trainer, resume: bool, force: bool, progress: bool) -> RunResult:
    """The trainer's run; the trainer (and its DDP wrapper) is no one's once this returns, so that
    teardown can free the process group (depthlab.train.distributed.teardown)."""
    return trainer.run(resume=resume, force=force, progress=progress)


@dataclass
class Window:
    """The tokens and seconds since the last logged step (the record's tokens/s), and in all. (The
    record's loss, the mean since the last logged step, is the watcher's.)"""

    tokens: int = 0
    seconds: float = 0.0
    total_tokens: int = 0
    total_seconds: float = 0.0

    def add(self, tokens: int, seconds: float) -> None:
        self.tokens, self.seconds = self.tokens + tokens, self.seconds + seconds
        self.total_tokens, self.total_seconds = self.total_tokens + tokens, self.total_seconds + seconds

    def close(self) -> float:
        """tokens/s of the window, which then starts again."""
        out = self.tokens / max(self.seconds, 1e-9)
        self.tokens, self.seconds = 0, 0.0
        return out

    @classmethod
    def from_state(cls, state: dict) -> Window:
        """A checkpointed window (one written before the loss moved to the watcher has extra keys)."""
        return cls(**{k: v for k, v in state.items() if k in cls.__dataclass_fields__})


class _BarEcho:
    """A stream for the watcher's warnings that prints above the progress bar, not through it."""

    def write(self, text: str) -> None:
        if text.strip():
            tqdm.write(text.rstrip("\n"), file=sys.stderr)

    def flush(self) -> None:
        pass


class Trainer:
    """One run's state: model, optimizer, schedule, monitor, telemetry, and where it writes."""

    def __init__(self, model_cfg: ModelConfig, cfg: TrainConfig, out_dir, dist: Dist, on_log=None):
        if cfg.batch_size % dist.world:
            raise ConfigError("batch_size", cfg.batch_size, f"a multiple of the {dist.world} processes")
        self.model_cfg, self.cfg, self.dist, self.on_log = model_cfg, cfg, dist, on_log
        self.task = make_task(model_cfg, cfg)  # checks the data before anything is written
        self.val = self.task.val_batches()
        torch.manual_seed(cfg.seed)
        self.model = build_model(model_cfg).to(dist.device)
        self.opt = make_optimizer(self.model, cfg)
        self.sched = make_scheduler(self.opt, cfg, model_cfg.d_model)
        self.monitor = Monitor(cfg.steps, self.task.unigram_loss, cfg.spike_factor, cfg.stall_share)
        self.watcher = Watcher(
            self.model, when=self.logged, measure=cfg.telemetry, loss_from_output=False, echo=None,
            outcome=False,  # the loop's own Monitor (the same rules) decides, and stops a diverged run
        )  # fmt: skip
        # measured steps run eagerly: the watcher's hooks observe the eager module's blocks
        self.eager = wrap_ddp(self.model, dist)
        self.fwd = torch.compile(self.eager) if cfg.compile else self.eager
        self.step, self.window, self.metrics, self.last_eval = 0, Window(), [], None
        self.out = RunOutput(out_dir, self) if out_dir is not None else None
        self.bar = None

    def autocast(self):
        if not self.cfg.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.dist.device.type, dtype=torch.bfloat16)

    # -- the run ------------------------------------------------------------------------------------
    def run(self, resume: bool = False, force: bool = False, progress: bool = False) -> RunResult:
        if self.out is not None:
            finished = self.out.open(resume, force)
            if finished is not None:
                return finished
        show = progress and self.dist.is_main
        self.watcher.echo = _BarEcho() if show else None
        # the plan is said on a terminal too; off one tqdm draws nothing: a log gets plain lines instead
        lines = self._plan(plain=not sys.stderr.isatty()) if show else None
        self.bar = tqdm(
            total=self.cfg.steps,
            initial=self.step,
            unit="step",
            disable=None if show else True,
            desc=f"{self.model_cfg.wrap} x{self.model_cfg.n_layers}",
            leave=True,
        )
        try:
            while self.step < self.cfg.steps and self.monitor.diverged is None:
                self.train_step(self.step + 1)
                self.bar.update(1)
                if lines is not None:
                    lines.advance()
            result = self.result()
            self.bar.set_postfix_str(result.outcome)
        finally:
            self.bar.close()
            self.watcher.close()
            if self.out is not None:
                self.out.close()
        if self.out is not None:
            self.out.write_result(result)
        return result

    def _plan(self, plain: bool) -> Progress | None:
        """Say (stderr) what is left to run and its expected time (the cost model: step times measured
        now), and whether it ends inside its warmup; with ``plain`` (off a terminal) return the progress
        that prints a line per tenth of those steps with the time left, else None (tqdm draws the bar)."""
        left, m = self.cfg.steps - self.step, self.model_cfg
        what = f"train {m.wrap} x{m.enc_depth + m.dec_depth}"
        expected = estimate([(0, m, self.cfg)], torch.get_num_threads(), task=False)  # its task is set up
        seconds = expected[0] * left / self.cfg.steps if expected else None
        guess = f"about {duration(seconds)} (step times measured now)" if seconds is not None else "unknown"
        from_step = f" from step {self.step + 1}" if self.step else ""
        inside = (f"; it ends inside its {self.cfg.warmup:,}-step warmup: the run is of a rising lr"
                  if self.cfg.warmup >= self.cfg.steps else "")  # as advise says of such a budget  # fmt: skip
        say(f"{what}: {left:,} steps{from_step} of {self.cfg.batch_size} x {self.cfg.seq_len} tokens; "
            f"expected time: {guess}{inside}")  # fmt: skip
        return Progress(left, what, unit="step", expected_s=seconds, plain=True) if plain else None

    def logged(self, t: int) -> bool:
        c = self.cfg
        return t == 1 or t % c.log_every == 0 or t % c.eval_every == 0 or t == c.steps

    def train_step(self, t: int) -> None:
        """Update ``t``: see the module docstring."""
        start = time.perf_counter()
        batch = shard(self.task.train_batch(t), self.dist.rank, self.dist.world).to(self.dist.device)
        measured = self.watcher.measuring()
        loss, gnorm = self.forward_backward(batch, measured)
        lr = run_lr(self.opt, self.cfg.lr)  # the run's, not the first group's scaled lr
        if self.monitor.update(t, loss, gnorm):  # diverged: record this step, do not apply the update
            self.watcher.log_this_step()
            if self.cfg.telemetry and not measured:  # same weights, same batch: the layers at the failure
                self.forward_backward(batch, True)
            self.window.add(batch.n_tokens * self.dist.world, time.perf_counter() - start)
            self.finish_step(t, loss, lr, gnorm, applied=False)
            return
        self.opt.step()
        self.sched.step()
        self.window.add(batch.n_tokens * self.dist.world, time.perf_counter() - start)
        self.finish_step(t, loss, lr, gnorm, applied=True)

    def forward_backward(self, batch, measured: bool):
        """Loss (global mean per target token) and gradient norm before clipping; gradients are left
        (clipped) in the parameters. ``measured`` steps run the eager module (the watcher's hooks)."""
        self.opt.zero_grad(set_to_none=True)
        with self.autocast():
            logits = (self.eager if measured else self.fwd)(*batch.args, **batch.kwargs)
        loss_sum = token_loss_sum(logits, batch.targets)
        objective = loss_sum
        if self.cfg.z_loss:  # the objective only: the logged loss stays the cross-entropy
            objective = loss_sum + self.cfg.z_loss * z_loss_sum(logits, batch.targets)
        # every process divides by the global target count; DDP averages over processes, hence * world
        (objective * (self.dist.world / batch.n_targets)).backward()
        loss = float(self.dist.all_reduce(loss_sum.detach().double().reshape(1))[0]) / batch.n_targets
        params = [p for p in self.model.parameters() if p.grad is not None]
        if self.cfg.clip > 0:
            gnorm = torch.nn.utils.clip_grad_norm_(params, self.cfg.clip, foreach=True)
        else:
            gnorm = torch.nn.utils.get_total_norm([p.grad for p in params], foreach=True)
        return loss, float(gnorm)

    def finish_step(self, t, loss, lr, gnorm, applied: bool) -> None:
        """End update ``t`` in the watcher; log (on logged steps and at the end) and checkpoint (on
        checkpoint steps and at the end)."""
        self.step = t
        record = self.watcher.step(loss, lr=lr, grad_norm=gnorm, applied=applied)
        end = t == self.cfg.steps or self.monitor.diverged is not None
        if record is not None:  # every logged step, the last and a diverged one included
            self.log(t, record, end)
        end = end or self.monitor.diverged is not None  # a logged window may decide a blow-up
        if self.out is not None and (t % self.cfg.checkpoint_every == 0 or end):
            self.out.checkpoint(t, self.state_dict())

    def log(self, t, record: dict, end: bool) -> None:
        rms = max(
            (r["stream_rms"] for r in record.get("layers") or [] if r.get("stream_rms") is not None),
            default=None,
        )
        end = self.monitor.log(t, record["loss"], rms) or end  # a blow-up ends the run here
        val = None
        if t % self.cfg.eval_every == 0 or end:
            val = self.last_eval = evaluate(
                self.model, self.val, self.dist, self.autocast, self.cfg.task == "lm"
            )
        record["val_loss"] = val["loss"] if val else None
        record["tokens_per_s"] = self.window.close()
        loss = record["loss"]
        self.metrics.append(record)
        if not self.dist.is_main:
            return
        if self.out is not None:
            self.out.log(record, val)
        if self.on_log is not None:
            self.on_log(record)
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.3f}", refresh=False)

    def result(self) -> RunResult:
        last, ev = self.metrics[-1], self.last_eval or {}
        v = self.monitor.decide(ev.get("loss"))
        nan = lambda x: math.nan if x is None else x  # noqa: E731 (JSON stores NaN as null)
        return RunResult(
            outcome=v.outcome,
            reason=v.reason,
            step=v.step,
            final_train_loss=nan(last["loss"]),
            val_loss=nan(ev.get("loss")),
            val_bpb=ev.get("bpb"),
            unigram_loss=self.task.unigram_loss,
            accuracy=ev.get("accuracy"),
            tokens_per_s=self.window.total_tokens / max(self.window.total_seconds, 1e-9),
            escape_step=self.monitor.escape(),
            metrics=self.metrics,
            data_info=self.task.data_info,
            model=self.model,
        )

    # -- checkpoints ----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything a resumed run needs to continue exactly (plain data; see depthlab.train.checkpoint)."""
        return {
            "step": self.step,
            "data_position": self.step,  # batches are a function of the step
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "rng": checkpoint.rng_state(),
            "monitor": self.monitor.state_dict(),
            "window": asdict(self.window),
            "watch": self.watcher.state_dict(),
            "last_eval": self.last_eval,
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        checkpoint.set_rng_state(state["rng"])
        self.monitor.load_state_dict(state["monitor"])
        self.window = Window.from_state(state["window"])
        if "watch" in state:  # a checkpoint written before the watcher kept no state of it
            self.watcher.load_state_dict(state["watch"])
        else:
            self.watcher.t = state["step"] + 1
        self.step, self.last_eval = state["step"], state["last_eval"]
