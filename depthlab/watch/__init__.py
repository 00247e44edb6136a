"""depthlab.watch: depthlab's per-layer instruments and early warnings inside anyone's training loop.

    import depthlab
    watcher = depthlab.watch(model, optimizer, every=10, out="runs/mine")   # hooks on; loop unchanged
    ...
    watcher.close()                                                          # every hook removed

``depthlab.watch`` is this package, and it is callable: ``depthlab.watch(model, ...)`` calls :func:`watch`,
while ``depthlab.watch.outcome`` (and every other module of it) stays reachable as a module.
``depthlab train`` measures through the same :class:`Watcher`: one telemetry implementation. The
integrations (``depthlab.integrations``) attach it to Hugging Face's ``Trainer`` and to Lightning.
"""

from __future__ import annotations

from depthlab.callable_package import make_callable
from depthlab.watch.keys import LAYER_KEYS, RECORD_KEYS
from depthlab.watch.rules import Thresholds, replay
from depthlab.watch.watcher import STDERR, Watcher


def watch(
    model,
    optimizer=None,
    every: int = 10,
    out: str | None = None,
    *,
    blocks=None,
    sublayers=None,
    logits=None,
    when=None,
    attention: bool = True,
    thresholds: Thresholds | None = None,
    unigram_loss: float | None = None,
    steps: int | None = None,
    trackers=None,
    detectors=(),
    loss_from_output: bool = True,
    on_record=None,
    echo=STDERR,
) -> Watcher:
    """Watch ``model`` as it trains; returns the :class:`Watcher` (close it, or use it in a ``with`` block).

    ``optimizer``: its steps count the updates (``register_step_post_hook``); without it call
    ``watcher.step(loss)`` after each update. ``every``: measure step 1 and every ``every``-th update.
    ``out``: a folder for metrics.jsonl, TensorBoard events and watch.json (rank 0 writes; None: keep the
    records in ``watcher.records`` only).

    ``blocks``: the stack, if it cannot be found (depthlab, Hugging Face and torch.nn stacks are);
    ``sublayers``: each block's attention and FFN where their parameter names do not say so
    (``{"attn": "mix", "ffn": "mlp"}``, names of submodules or lists of them, or ``block -> {kind:
    module}``); ``logits``: ``output -> logits`` for a model whose output the watcher cannot read them
    from (or give them each step: ``watcher.step(loss, logits=...)``). Whatever cannot be attached is
    printed once ("blind spot") with the way to point it. ``when(step) -> bool``: which steps are
    measured; ``attention`` (False: no attention scores); ``thresholds`` (:class:`Thresholds`);
    ``unigram_loss`` (the reference of the outcome, else estimated from the batches' tokens); ``steps``
    (the planned updates, for the outcome's trend; else the updates seen); ``trackers``: "wandb",
    "mlflow", "tensorboard" or tracker objects (depthlab.watch.trackers); ``detectors``: published
    divergence detectors to run live, by name (depthlab.watch.detectors: "olmo-stability",
    "megatron-spiky-loss", "loss-above-initial", "lr-alone", "marin-update-norm"); ``loss_from_output`` (read an
    HF output's loss); ``on_record(record)``; ``echo`` (the stream warnings are printed to; None: silent).
    """
    return Watcher(
        model, optimizer, every, out, blocks=blocks, sublayers=sublayers, logits=logits, when=when,
        attention=attention, thresholds=thresholds, unigram_loss=unigram_loss, steps=steps,
        trackers=trackers, detectors=detectors, loss_from_output=loss_from_output, on_record=on_record,
        echo=echo,
    )  # fmt: skip


make_callable(__name__, watch)  # depthlab.watch(model, optimizer) calls watch

__all__ = ["LAYER_KEYS", "RECORD_KEYS", "Thresholds", "Watcher", "replay", "watch"]
