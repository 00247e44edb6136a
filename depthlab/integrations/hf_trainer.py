"""depthlab.watch as a Hugging Face ``TrainerCallback``.

    trainer = Trainer(model, args, train_dataset=..., callbacks=[DepthlabCallback(out="runs/hf")])

At ``on_train_begin`` a :class:`depthlab.watch.Watcher` is attached to the model and to the torch
optimizer inside the Trainer's (``AcceleratedOptimizer.optimizer``), so steps are counted as the
Trainer counts them: from ``state.global_step`` + 1 (a resumed run goes on from its checkpoint's
step). The loss is read from the model's output (``.loss``); under gradient accumulation the Trainer
passes ``num_items_in_batch`` to a model that takes it, each micro-batch's loss is then a share of the
step's, and the watcher adds the shares, so a step's loss is the one the Trainer logs (a model that
does not take it returns each micro-batch's mean, and the step's loss is their mean, as the Trainer's
is). The gradient norms are read at the end of each backward pass, before the Trainer clips them.
``every`` defaults to the Trainer's logging interval (``state.logging_steps``: ``args.logging_steps``,
or that share of ``max_steps`` when it is below 1), under any ``logging_strategy``; like every watcher,
it also measures step 1, the model at init, which the warnings' "compared with the start" checks and
the outcome's stream growth read as their baseline. So the first record after it holds the loss of
steps 2 to ``every``, where the Trainer's first logged loss covers steps 1 to ``every`` (and step 1
alone is logged by the Trainer only with ``logging_first_step``); under ``logging_strategy`` "steps"
the later windows are the Trainer's (under "epoch" or "no" the Trainer logs at epoch ends or never,
and the records keep their own interval).
At ``on_step_end`` the step's record is finished, so ``on_log`` at the same step adds that step's
headline numbers to the Trainer's loss log (``depthlab/...``; not to an evaluation's log or the closing
summary); ``on_train_end`` closes the watcher, removing every hook. Under DDP every process watches and
rank 0 writes ``out``: its loss is its own micro-batches' (with the Trainer's
``average_tokens_across_devices``, their share of the loss over all processes' tokens).

Trackers: by default the watcher's per-layer scalars, warnings and outcome go to the Trainer's own
``report_to`` loggers (depthlab.watch.trackers): wandb's and MLflow's runs the Trainer started, and
TensorBoard events in the Trainer's TensorBoard folder (``TENSORBOARD_LOGGING_DIR``, else the newest
folder under ``output_dir/runs``, which the Trainer's TensorBoard callback has just made).
``trackers=[...]`` names others; ``trackers=[]`` none.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

try:
    from transformers import TrainerCallback
except ModuleNotFoundError as e:  # not installed: say which extra brings it (a broken install says its own)
    if e.name != "transformers":
        raise
    raise ModuleNotFoundError(
        "depthlab.integrations.hf_trainer needs transformers: pip install 'depthlab[hf]'", name="transformers"
    ) from None

from depthlab.watch import Watcher
from depthlab.watch.options import check_callback
from depthlab.watch.trackers import TRACKER_NAMES, make_tracker, tracker_of


def logging_interval(args, state) -> int:
    """The Trainer's logging interval in steps: ``state.logging_steps`` (which the Trainer computes from
    a fractional ``args.logging_steps`` and ``max_steps``), else computed here the same way."""
    steps = getattr(state, "logging_steps", None) or args.logging_steps
    if steps < 1:
        steps = math.ceil(state.max_steps * steps)
    return max(1, int(steps))


class DepthlabCallback(TrainerCallback):
    """``every``, ``out`` and ``options`` are :func:`depthlab.watch.watch`'s. ``watcher`` is the live
    watcher during training (its ``records`` and ``warnings`` stay readable after it)."""

    def __init__(self, every: int | None = None, out: str | None = None, trackers=None, **options):
        check_callback(every, out, trackers, options, none_ok=True)  # now, not when training starts
        self.every, self.out, self.trackers, self.options = every, out, trackers, options
        self.watcher: Watcher | None = None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        inner = getattr(optimizer, "optimizer", optimizer)
        every = self.every or logging_interval(args, state)
        trackers = self.trackers
        if trackers is None:
            trackers = report_to_trackers(args) if state.is_world_process_zero else []
        options = {"steps": state.max_steps or None, **self.options}  # the outcome's "still falling" trend
        self.watcher = Watcher(model, inner, every, self.out, trackers=trackers, **options)
        self.watcher.t = state.global_step + 1

    def on_step_end(self, args, state, control, **kwargs):
        if self.watcher is not None:
            self.watcher.flush()

    def on_log(self, args, state, control, logs=None, **kwargs):
        w = self.watcher
        if w is None or logs is None or not w.records or w.records[-1]["step"] != state.global_step:
            return
        if "loss" not in logs:  # an evaluation's log or the closing summary at that step
            return
        last = w.records[-1]
        for key in ("loss", "grad_norm", "logit_lse"):
            if last.get(key) is not None:
                logs[f"depthlab/{key}"] = last[key]
        logs["depthlab/warnings"] = len(w.warnings)

    def on_train_end(self, args, state, control, **kwargs):
        if self.watcher is not None:
            self.watcher.close()


def report_to_trackers(args) -> list:
    """Trackers on the Trainer's ``report_to`` loggers that depthlab knows (wandb, mlflow, tensorboard)
    and that have a run (a logger the Trainer did not start is skipped)."""
    names = [n for n in (args.report_to or []) if n in TRACKER_NAMES]
    out = []
    for name in names:
        if name == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter  # imported here: tensorboard is slow

            out.append(tracker_of(SummaryWriter(log_dir=trainer_tensorboard_dir(args))))
        else:
            tracker = make_tracker(name, None, attach_only=True)
            out += [tracker] if tracker is not None else []
    return out


def trainer_tensorboard_dir(args) -> str:
    """The folder of the Trainer's TensorBoard events: ``TENSORBOARD_LOGGING_DIR``, else the newest folder
    under ``output_dir/runs`` (made by its TensorBoard callback at train begin), else ``output_dir/runs``."""
    env = os.getenv("TENSORBOARD_LOGGING_DIR")
    if env:
        return os.path.expanduser(env)
    runs = Path(args.output_dir) / "runs"
    folders = [p for p in runs.iterdir() if p.is_dir()] if runs.is_dir() else []
    return str(max(folders, key=lambda p: p.stat().st_mtime)) if folders else str(runs)
