"""The watcher: per-layer instruments on any training loop, attached by hooks, costly on logged steps only.

    watcher = depthlab.watch(model, optimizer, every=10, out="runs/mine")
    for batch in data:                      # the user's loop, unchanged
        loss = model(**batch).loss          # (HF models: the loss is read from the output)
        loss.backward(); optimizer.step(); optimizer.zero_grad()
    watcher.close()                         # or: with depthlab.watch(...) as watcher: ...

Steps are counted by ``optimizer.step()`` (a step post-hook) when an optimizer is given, else by
``watcher.step(loss)`` after each update. On every training forward a cheap pre-hook on the model asks
whether the step in progress is logged (step 1 and every ``every``-th, or ``when(step)``); only then does
it attach the expensive hooks for that forward:

    forward:   block hooks -> the streams x_0..x_L (depthlab.watch.streams); the attention modules'
               scores (depthlab.watch.attention); the output logits' log-partition; the batch's tokens
    backward:  a hook on each stream tensor -> ||d loss / d x_i||; at the end of the pass (an autograd
               callback, after DDP has averaged the gradients) the parameter-gradient norms, before any
               clipping the loop applies afterwards
    update:    each layer's weights are copied at the logged forward and compared after the update

A logged step's record (depthlab.watch.keys) is finished when the step ends and goes, with the warnings
of depthlab.watch.rules, to ``out`` (rank 0 only), to ``on_record`` and to ``watcher.records``.
Other steps only keep their loss, as a tensor (reading it would synchronise a GPU every step); the
losses are read and checked at the next logged step. ``close()`` removes every hook it added.

A step's loss read from the outputs of several forwards (gradient accumulation) is their mean, unless
a forward was given ``num_items_in_batch`` (Hugging Face's convention, which its ``Trainer`` follows):
each micro-batch's loss is then its summed token losses over the step's whole token count, a share of
the step's loss, and the step's loss is their sum.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import torch
from torch import nn

from depthlab.errors import ConfigError
from depthlab.probe.locate import locate_stack, stack_of
from depthlab.watch.attention import AttentionTap, attention_module, layer_values
from depthlab.watch.dist import all_reduce, rank, world_size
from depthlab.watch.keys import ATTN_KEYS, GRAD_KEYS, RECORD_KEYS, STREAM_KEYS
from depthlab.watch.output import WatchOutput
from depthlab.watch.params import LayerParams
from depthlab.watch.rules import Rules, Thresholds
from depthlab.watch.streams import StreamTap
from depthlab.watch.tokens import TokenCounts, batch_tokens, output_logits, output_loss


class Watcher:
    """Hooks on ``model`` (and ``optimizer``); see the module docstring. Build it with
    :func:`depthlab.watch.watch`."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        every: int = 10,
        out: str | None = None,
        *,
        blocks=None,
        when: Callable[[int], bool] | None = None,
        attention: bool = True,
        measure: bool = True,
        thresholds: Thresholds | None = None,
        unigram_loss: float | None = None,
        loss_from_output: bool = True,
        on_record: Callable[[dict], None] | None = None,
        echo=sys.stderr,
    ):
        if not isinstance(every, int) or every < 1:
            raise ConfigError("every", every, "an integer >= 1 (log every that many steps)")
        inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        self.stack = locate_stack(inner) if blocks is None else stack_of(blocks)
        self.model, self.optimizer, self.every, self.when = model, optimizer, every, when
        self.measure = measure
        self.params = LayerParams(inner, self.stack)
        self.streams = StreamTap(inner, self.stack, self._on_stream_grad)
        self.tap = AttentionTap() if attention else None
        self.rules = Rules(thresholds or Thresholds())
        self.tokens, self.unigram_given = TokenCounts(), unigram_loss
        self.loss_from_output, self.on_record, self.echo = loss_from_output, on_record, echo
        self.world, self.is_main = world_size(), rank() == 0
        self.out = WatchOutput(out) if (out is not None and self.is_main) else None
        self.t, self.records, self.warnings = 1, [], []
        self._window: list[list] = []  # [step, loss (float | tensor | list of tensors), grad norm or None]
        self._given_grad = None
        self._reset_step()
        self._pending: dict | None = None
        self._handles = [
            model.register_forward_pre_hook(self._before_forward, with_kwargs=True),
            model.register_forward_hook(self._after_forward, with_kwargs=True, always_call=True),
        ]
        if optimizer is not None:
            self._handles += [
                optimizer.register_step_pre_hook(self._before_optimizer),
                optimizer.register_step_post_hook(self._after_optimizer),
            ]
        self._attn_handles: list = []
        self.closed = False

    def _reset_step(self) -> None:
        self._forwards, self._losses, self._explicit, self._shares = 0, [], None, False
        self._force, self._snapshot, self._grads, self._lse, self._lr = False, None, None, None, None
        self._queued = self._requeued = False

    def logged(self, t: int) -> bool:
        """Whether update ``t`` is measured: ``when(t)`` if given, else step 1 and every ``every``-th."""
        return self.when(t) if self.when is not None else (t == 1 or t % self.every == 0)

    def measuring(self) -> bool:
        """Whether the step in progress is measured (logged, or forced, and ``measure`` is on)."""
        return self.measure and (self._force or self.logged(self.t))

    def log_this_step(self) -> None:
        """Measure the step in progress even if it is not a logged one (its next forward on)."""
        self._force = True

    # -- hooks -----------------------------------------------------------------------------------
    def _before_forward(self, module, args, kwargs):
        if not (torch.is_grad_enabled() and module.training):
            return None  # evaluation passes are not training steps
        if self._pending is not None and self._forwards == 0:
            self._emit()
        self._forwards += 1
        if kwargs.get("num_items_in_batch") is not None:  # the output's loss is a share of the step's
            self._shares = True
        if self.measuring():
            if self._snapshot is None:
                self._snapshot = self.params.snapshot()
            self.streams.start()
            self._attach_attention()
            self.tokens.add(batch_tokens(args, kwargs))
        return None

    def _after_forward(self, module, args, kwargs, output):
        if self.streams.capture is not None:
            self.streams.stop()
            self._detach_attention()
            logits = output_logits(output, self.stack.kind)
            if logits is not None:
                with torch.no_grad():
                    lse = torch.logsumexp(logits.detach().float(), dim=-1)
                    self._lse = torch.stack(
                        [
                            lse.sum().double(),
                            torch.tensor(float(lse.numel()), dtype=torch.float64, device=lse.device),
                        ]
                    )
        if self.loss_from_output and torch.is_grad_enabled() and module.training:
            loss = output_loss(output)
            if loss is not None:
                self._losses.append(loss.detach())
        return None

    def _attach_attention(self) -> None:
        if self.tap is None:
            return
        self.tap.stats = {}
        for j, block in enumerate(self.stack.blocks):
            m = attention_module(block)
            self._attn_handles += [
                m.register_forward_pre_hook(lambda *_, j=j: self.tap.enter(j)),
                m.register_forward_hook(lambda *_: self.tap.leave(), always_call=True),
            ]

    def _detach_attention(self) -> None:
        for h in self._attn_handles:
            h.remove()
        self._attn_handles.clear()

    def _on_stream_grad(self) -> None:
        if not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)

    def _end_of_backward(self) -> None:
        # under DDP the gradients are averaged by DDP's own end-of-backward callback, queued when its last
        # bucket is ready (after this one): run once more, behind it
        if self.world > 1 and not self._requeued:
            self._requeued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
            return
        self._grads = self.params.grad_norms()
        self._queued = self._requeued = False

    def _before_optimizer(self, optimizer, args, kwargs):
        self._lr = optimizer.param_groups[0]["lr"]
        if self._snapshot is not None and self._grads is None:  # no stream gradient was seen
            self._grads = self.params.grad_norms()

    def _after_optimizer(self, optimizer, args, kwargs):
        self._end_step(applied=True)

    # -- steps -----------------------------------------------------------------------------------
    def step(
        self, loss=None, *, lr: float | None = None, grad_norm: float | None = None, applied: bool = True
    ):
        """End the step in progress (without an optimizer) or give the loss of the step just ended by
        ``optimizer.step()`` (with one). ``loss``: a float or a tensor (read lazily); ``lr``,
        ``grad_norm``: where the loop knows them better (grad_norm every step lets a non-finite gradient
        be seen on any step); ``applied=False``: the update was skipped. Returns the logged step's record
        (a dict, depthlab.watch.keys) when this call finished one, else None."""
        if lr is not None:
            self._lr = lr
        if isinstance(loss, torch.Tensor):
            loss = loss.detach()
        if self.optimizer is not None and self._forwards == 0 and self._window:
            last = self._window[-1]
            last[1] = loss if loss is not None else last[1]
            last[2] = grad_norm if grad_norm is not None else last[2]
            return self._emit() if self._pending is not None else None
        self._explicit, self._given_grad = loss, grad_norm
        if self.optimizer is not None:
            return None
        self._end_step(applied)
        return self._emit() if self._pending is not None else None

    def _end_step(self, applied: bool) -> None:
        loss = self._explicit if self._explicit is not None else (self._losses or None)
        if isinstance(loss, list) and self._shares:  # the micro-batches' shares add up to the step's loss
            loss = torch.stack([v.float() for v in loss]).sum()
        grad, self._given_grad = self._given_grad, None
        self._window.append([self.t, loss, grad])
        if self._force or self.logged(self.t):
            updates = None
            if self._snapshot is not None:
                if self._grads is None:
                    self._grads = self.params.grad_norms()
                updates = self.params.updates(self._snapshot) if applied else None
            self._pending = self._record(updates, grad)
        self.t += 1
        self._reset_step()

    def _record(self, updates, grad_norm) -> dict:
        """The logged step's record, all but its loss and warnings (known when the step's loss is)."""
        rows = self.streams.table(self.world)
        total, sub = self._grads or (None, [])
        attn = self._attention_values(len(self.stack.blocks))
        lse = all_reduce(self._lse) if self._lse is not None else None
        layers = []
        for row in rows:
            i = row["index"]
            grads = sub[i - 1] if i and sub else (None,) * len(GRAD_KEYS)
            upd = updates[i - 1] if (i and updates) else None
            att = attn[i - 1] if i else (None, None)
            layers.append(
                {"index": i, **{k: row.get(k) for k in STREAM_KEYS}, **dict(zip(GRAD_KEYS, grads)),
                 "param_update": upd, **dict(zip(ATTN_KEYS, att))}
            )  # fmt: skip
        lr = self._lr if self._lr is not None else self._optimizer_lr()
        values = {
            "step": self.t,
            "loss": None,
            "lr": lr,
            "grad_norm": grad_norm if grad_norm is not None else total,
            "logit_lse": float(lse[0] / lse[1]) if lse is not None and float(lse[1]) else None,
            "val_loss": None,
            "tokens_per_s": None,
            "layers": layers,
            "warnings": [],
        }
        return {k: values[k] for k in RECORD_KEYS}

    def _attention_values(self, n: int) -> list[tuple]:
        if self.tap is None:
            return [(None, None)] * n
        packed = torch.tensor([[0.0, 0.0, -math.inf]] * n, dtype=torch.float64)
        for j, s in self.tap.stats.items():
            packed[j] = s.cpu()
        if self.world > 1:
            packed[:, :2] = all_reduce(packed[:, :2].contiguous())
            packed[:, 2] = all_reduce(packed[:, 2].contiguous(), op="max")
        seen = {j: packed[j] for j in range(n) if packed[j, 1] > 0 or j in self.tap.stats}
        return layer_values(seen, n)

    def _optimizer_lr(self):
        return self.optimizer.param_groups[0]["lr"] if self.optimizer is not None else None

    def _emit(self) -> dict:
        """Finish the pending record: the window's losses, the rules, the outputs. Returns the record."""
        record, self._pending = self._pending, None
        window = self._read_window()
        losses = [loss for _, loss, _ in window if loss is not None]
        record["loss"] = sum(losses) / len(losses) if losses else None
        # the record's rules first: a non-finite number found there names the layer where it appeared
        warnings = self.rules.check_record(record)
        warnings += [w for step, loss, grad in window for w in self.rules.check_loss(step, loss, grad)]
        record["warnings"] = warnings
        self.records.append(record)
        self._speak(warnings)
        if self.out is not None:
            self.out.write(record, self.summary())
        if self.on_record is not None and self.is_main:
            self.on_record(record)
        return record

    def flush(self) -> dict | None:
        """Finish the pending record now, for a loop that gives no loss by :meth:`step` after the update
        (the Hugging Face callback, at ``on_step_end``). Returns it, or None when none was pending."""
        return self._emit() if self._pending is not None else None

    def _read_window(self) -> list[tuple[int, float | None, float | None]]:
        """(step, loss, gradient norm) of each update since the last record, read now; the window empties."""
        window = [(step, _as_float(value), grad) for step, value, grad in self._window]
        self._window = []
        return window

    def _speak(self, warnings: list[dict]) -> None:
        self.warnings += warnings
        if self.is_main and self.echo is not None:
            for w in warnings:
                print(f"depthlab.watch: warning: {w['message']}", file=self.echo, flush=True)

    # -- the end ---------------------------------------------------------------------------------
    def unigram_loss(self) -> float | None:
        """The loss of predicting tokens by their frequency alone: given, or estimated from the tokens of
        the logged batches (the level a model that learned nothing of the context sits at)."""
        return self.unigram_given if self.unigram_given is not None else self.tokens.entropy()

    def summary(self) -> dict:
        """What was watched and what it raised (watch.json)."""
        return {
            "stack": self.stack.path,
            "n_layers": len(self.stack.blocks),
            "every": self.every,
            "steps": self.t - 1,
            "unigram_loss": self.unigram_loss(),
            "warnings": self.warnings,
        }

    def close(self) -> None:
        """Finish the last record, check the losses since, remove every hook; idempotent."""
        if self.closed:
            return
        if self._pending is not None:
            self._emit()
        self._speak(
            [w for step, loss, grad in self._read_window() for w in self.rules.check_loss(step, loss, grad)]
        )
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._detach_attention()
        self.streams.remove()
        if self.tap is not None:
            self.tap.leave()
        if self.out is not None:
            self.out.close(self.summary())
        self.closed = True

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def state_dict(self) -> dict:
        """The rules' memory and the step counter, as plain data (a resumed loop continues exactly)."""
        window = [[s, _as_float(v), g] for s, v, g in self._window]
        return {"t": self.t, "rules": self.rules.state_dict(), "window": window, "warnings": self.warnings}

    def load_state_dict(self, state: dict) -> None:
        self.t, self._window, self.warnings = state["t"], state["window"], state["warnings"]
        self.rules.load_state_dict(state["rules"])


def _as_float(value) -> float | None:
    """A step's loss as a float: the mean of its micro-batches' losses when it has several."""
    if value is None:
        return None
    if isinstance(value, list):
        return float(torch.stack([v.detach().float() for v in value]).mean()) if value else None
    return float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
