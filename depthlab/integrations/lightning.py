"""depthlab.watch as a Lightning ``Callback`` (``lightning.pytorch``, or the older ``pytorch_lightning``).

    trainer = L.Trainer(max_steps=..., callbacks=[DepthlabCallback(every=10, out="runs/pl")])

At ``on_fit_start`` a :class:`depthlab.watch.Watcher` is attached to the model and to the first
optimizer: ``model`` if given, else the LightningModule's ``model`` attribute when it has one (the usual
LightningModule wrapping a network it calls in ``training_step``), else the LightningModule itself.
Lightning runs the forward and backward inside ``optimizer.step(closure)``; the watcher's hooks see them
there, and ``on_train_batch_end`` hands it the step's loss (``outputs["loss"]``). ``on_fit_end``
closes the watcher. Rank 0 writes ``out``.
"""

from __future__ import annotations

try:
    from lightning.pytorch import Callback
except ImportError:  # the standalone package of the same library
    from pytorch_lightning import Callback

from torch import nn

from depthlab.watch import Watcher


class DepthlabCallback(Callback):
    """``every``, ``out`` and ``options`` are :func:`depthlab.watch.watch`'s; ``model`` the module to
    watch (see the module docstring). ``watcher`` is the live watcher."""

    def __init__(self, every: int = 10, out: str | None = None, model: nn.Module | None = None, **options):
        self.every, self.out, self.model, self.options = every, out, model, options
        self.watcher: Watcher | None = None

    def on_fit_start(self, trainer, pl_module):
        inner = getattr(pl_module, "model", None)
        model = self.model or (inner if isinstance(inner, nn.Module) else pl_module)
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        self.watcher = Watcher(model, optimizer, self.every, self.out, **self.options)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.watcher is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        self.watcher.step(loss)

    def on_fit_end(self, trainer, pl_module):
        if self.watcher is not None:
            self.watcher.close()
