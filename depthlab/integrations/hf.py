"""depthlab.watch as a Hugging Face ``TrainerCallback``.

    trainer = Trainer(model, args, train_dataset=..., callbacks=[DepthlabCallback(out="runs/hf")])

At ``on_train_begin`` a :class:`depthlab.watch.Watcher` is attached to the model and to the torch
optimizer inside the Trainer's (``AcceleratedOptimizer.optimizer``), so steps are counted as the
Trainer counts them (``state.global_step``); the loss is read from the model's output (``.loss``, each
micro-batch's under gradient accumulation), and the gradient norms at the end of each backward pass,
before the Trainer clips them. ``every`` defaults to ``args.logging_steps``. On ``on_log`` the last
record's headline numbers join the Trainer's logs (``depthlab/...``); ``on_train_end`` closes the
watcher, removing every hook. Under DDP every process watches and rank 0 writes ``out``.
"""

from __future__ import annotations

from transformers import TrainerCallback

from depthlab.watch import Watcher


class DepthlabCallback(TrainerCallback):
    """``every``, ``out`` and ``options`` are :func:`depthlab.watch.watch`'s. ``watcher`` is the live
    watcher during training (its ``records`` and ``warnings`` stay readable after it)."""

    def __init__(self, every: int | None = None, out: str | None = None, **options):
        self.every, self.out, self.options = every, out, options
        self.watcher: Watcher | None = None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        inner = getattr(optimizer, "optimizer", optimizer)
        every = self.every or max(1, int(args.logging_steps))
        self.watcher = Watcher(model, inner, every, self.out, **self.options)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.watcher is None or logs is None or not self.watcher.records:
            return
        last = self.watcher.records[-1]
        for key in ("grad_norm", "logit_lse"):
            if last.get(key) is not None:
                logs[f"depthlab/{key}"] = last[key]
        logs["depthlab/warnings"] = len(self.watcher.warnings)

    def on_train_end(self, args, state, control, **kwargs):
        if self.watcher is not None:
            self.watcher.close()
