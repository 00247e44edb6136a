"""depthlab.watch as a Lightning ``Callback`` (``lightning.pytorch``, or the older ``pytorch_lightning``).

    trainer = L.Trainer(max_steps=..., callbacks=[DepthlabCallback(every=10, out="runs/pl")])

At ``on_fit_start`` a :class:`depthlab.watch.Watcher` is attached to the model and to the first
optimizer: ``model`` if given, else the LightningModule's ``model`` attribute when it has one (the usual
LightningModule wrapping a network it calls in ``training_step``), else the LightningModule itself.
At ``on_train_start`` (after a checkpoint's loops are restored) its step count is set to
``trainer.global_step`` + 1, so a resumed run goes on from its checkpoint's step. Lightning runs the
forward and backward inside ``optimizer.step(closure)``; the watcher's hooks see them there. The loss
comes from ``on_train_batch_end``'s ``outputs["loss"]``: under ``accumulate_grad_batches`` = k Lightning
has divided each micro-batch's loss by k, so the callback multiplies it back and gives the watcher,
when the optimizer step has run, the mean of the step's micro-batch losses (``training_step``'s own
values). ``on_fit_end`` closes the watcher. Rank 0 writes ``out``.

Trackers: by default the per-layer scalars, warnings and outcome go to the Trainer's loggers
(``trainer.loggers``; depthlab.watch.trackers): a wandb, MLflow or TensorBoard logger's own run,
any other logger through ``log_metrics`` and ``log_hyperparams``. ``trackers=[...]`` names others,
``trackers=[]`` none.
"""

from __future__ import annotations

try:
    from lightning.pytorch import Callback
except ImportError:  # the standalone package of the same library
    try:
        from pytorch_lightning import Callback
    except ModuleNotFoundError as e:  # neither is installed: say which extra brings it
        if e.name != "pytorch_lightning":
            raise
        raise ModuleNotFoundError(
            "depthlab.integrations.lightning needs Lightning: pip install 'depthlab[lightning]'",
            name="lightning",
        ) from None

import torch
from torch import nn

from depthlab.errors import ConfigError
from depthlab.watch import Watcher
from depthlab.watch.options import check_callback
from depthlab.watch.trackers import tracker_of


class DepthlabCallback(Callback):
    """``every``, ``out`` and ``options`` are :func:`depthlab.watch.watch`'s; ``model`` the module to
    watch (see the module docstring). ``watcher`` is the live watcher."""

    def __init__(
        self,
        every: int = 10,
        out: str | None = None,
        model: nn.Module | None = None,
        trackers=None,
        **options,
    ):
        check_callback(every, out, trackers, options)  # now, not when fitting starts
        if model is not None and not isinstance(model, nn.Module):
            raise ConfigError(
                "model",
                model,
                "the torch.nn.Module to watch, or None (the LightningModule's model, else itself)",
            )
        self.every, self.out, self.model, self.trackers, self.options = every, out, model, trackers, options
        self.watcher: Watcher | None = None
        self._micro: list[torch.Tensor] = []  # the optimizer step in progress: its micro-batches' losses
        self._stepped = 0  # trainer.global_step when the last optimizer step was handed to the watcher

    def on_fit_start(self, trainer, pl_module):
        inner = getattr(pl_module, "model", None)
        model = self.model or (inner if isinstance(inner, nn.Module) else pl_module)
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        trackers = self.trackers
        if trackers is None:  # the Trainer's loggers (rank 0 logs; Lightning's loggers do the same)
            trackers = [tracker_of(lg) for lg in trainer.loggers] if trainer.is_global_zero else []
        planned = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        options = {"steps": planned, **self.options}  # the outcome's "still falling" trend
        self.watcher = Watcher(model, optimizer, self.every, self.out, trackers=trackers, **options)

    def on_train_start(self, trainer, pl_module):
        if self.watcher is not None:
            self.watcher.t = trainer.global_step + 1
            self._stepped, self._micro = trainer.global_step, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.watcher is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            k = trainer.accumulate_grad_batches if pl_module.automatic_optimization else 1
            self._micro.append(loss.detach().float() * k)
        if trainer.global_step == self._stepped:
            return  # a micro-batch whose optimizer step is still to come
        self._stepped = trainer.global_step
        micro, self._micro = self._micro, []
        self.watcher.step(torch.stack(micro).mean() if micro else None)

    def on_fit_end(self, trainer, pl_module):
        if self.watcher is not None:
            self.watcher.close()
