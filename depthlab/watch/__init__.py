"""depthlab.watch: depthlab's per-layer instruments and early warnings inside anyone's training loop.

    import depthlab
    watcher = depthlab.watch(model, optimizer, every=10, out="runs/mine")   # hooks on; loop unchanged
    ...
    watcher.close()                                                          # every hook removed

``depthlab.watch`` is both this package and its function :func:`watch` (calling the module calls it).
``depthlab train`` measures through the same :class:`Watcher`: one telemetry implementation. The
integrations (``depthlab.integrations``) attach it to Hugging Face's ``Trainer`` and to Lightning.
"""

from __future__ import annotations

import sys
import types

from depthlab.watch.keys import LAYER_KEYS, RECORD_KEYS
from depthlab.watch.rules import Thresholds, replay
from depthlab.watch.watcher import Watcher


def watch(model, optimizer=None, every: int = 10, out: str | None = None, **options) -> Watcher:
    """Watch ``model`` as it trains; returns the :class:`Watcher` (close it, or use it in a ``with`` block).

    ``optimizer``: its steps count the updates (``register_step_post_hook``); without it call
    ``watcher.step(loss)`` after each update. ``every``: measure step 1 and every ``every``-th update.
    ``out``: a folder for metrics.jsonl, TensorBoard events and watch.json (rank 0 writes; None: keep the
    records in ``watcher.records`` only). ``options``: ``blocks`` (the stack, if it cannot be found:
    depthlab, Hugging Face and torch.nn stacks are), ``when(step) -> bool``, ``attention`` (False: no
    attention scores), ``thresholds`` (:class:`Thresholds`), ``unigram_loss`` (else estimated from the
    batches), ``loss_from_output`` (read an HF output's loss), ``on_record(record)``, ``echo`` (the stream
    warnings are printed to; None: silent).
    """
    return Watcher(model, optimizer, every, out, **options)


class _CallableModule(types.ModuleType):
    """``depthlab.watch(model, ...)`` calls :func:`watch`, while ``depthlab.watch.Watcher`` etc. stay
    reachable as attributes of the package."""

    def __call__(self, *args, **kwargs) -> Watcher:
        return watch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["LAYER_KEYS", "RECORD_KEYS", "Thresholds", "Watcher", "replay", "watch"]
