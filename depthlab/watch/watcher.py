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
               scores (depthlab.watch.attention_stats); the output logits' log-partition; the batch's tokens
    backward:  a hook on each stream tensor -> ||d loss / d x_i||; at the end of the pass (an autograd
               callback, after DDP has averaged the gradients) the parameter-gradient norms, before any
               clipping the loop applies afterwards
    update:    each layer's weights are copied at the logged forward and compared after the update

A logged step's record (depthlab.watch.keys) is finished when the step ends and goes, with the warnings
of depthlab.watch.rules and of the outcome rules (depthlab.watch.judge), to ``out`` (rank 0 only), to the
trackers (depthlab.watch.trackers), to ``on_record`` and to ``watcher.records``. What cannot be attached
is said once, at attach (depthlab.watch.gaps).
Other steps only keep their loss, as a tensor (reading it would synchronise a GPU every step); the
losses are read and checked at the next logged step. ``close()`` removes every hook it added.

A step's loss read from the outputs of several forwards (gradient accumulation) is their mean, unless
a forward was given ``num_items_in_batch`` (Hugging Face's convention, which its ``Trainer`` follows):
each micro-batch's loss is then its summed token losses over the step's whole token count, a share of
the step's loss, and the step's loss is their sum.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Callable

import torch
from torch import nn

from depthlab.probe.locate import locate_stack, stack_of, with_sublayers
from depthlab.probe.topology import TopologyTap, stack_state, watch_summary
from depthlab.watch.attention_stats import AttentionTap, combined_values
from depthlab.watch.detectors import LiveDetectors
from depthlab.watch.dist import all_reduce, rank, world_size
from depthlab.watch.gaps import attach_gaps, logits_gap, loss_gap
from depthlab.watch.judge import Judge, tail_record
from depthlab.watch.keys import layer_rows, new_record
from depthlab.watch.options import check_options
from depthlab.watch.output import WatchOutput, closing_line
from depthlab.watch.params import LayerParams
from depthlab.watch.rules import Rules, Thresholds
from depthlab.watch.streams import StreamTap
from depthlab.watch.tokens import (
    TokenCounts,
    batch_tokens,
    log_partition,
    loss_value,
    mean_log_partition,
    output_logits,
    output_loss,
)
from depthlab.watch.trackers import check_trackers, make_trackers, scalars


class _Stderr:
    """``echo``'s default: ``sys.stderr`` as it is when a line is printed, not when depthlab was imported,
    so that a stream redirected afterwards (``contextlib.redirect_stderr``, pytest's capsys) gets the lines."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def __repr__(self) -> str:
        return "sys.stderr"


STDERR = _Stderr()


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
        echo=STDERR,
        sublayers=None,
        logits: Callable | None = None,
        steps: int | None = None,
        outcome: bool = True,
        trackers=None,
        detectors=(),
    ):
        detectors = check_options(
            every, out, detectors=detectors, blocks=blocks, when=when, attention=attention, measure=measure,
            thresholds=thresholds, unigram_loss=unigram_loss, loss_from_output=loss_from_output,
            on_record=on_record, echo=echo, logits=logits, steps=steps, outcome=outcome,
        )  # fmt: skip
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer must be a torch.optim.Optimizer (or None: then call watcher.step(loss) after each "
                f"update), not {type(optimizer).__name__}"
            )
        inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        self.stack = with_sublayers(locate_stack(inner) if blocks is None else stack_of(blocks), sublayers)
        self.model, self.optimizer, self.every, self.when = model, optimizer, every, when
        self.logits_of = logits
        self.measure = measure
        self.params = LayerParams(inner, self.stack)
        self.streams = StreamTap(inner, self.stack, self._on_stream_grad)
        self.tap = AttentionTap() if attention else None
        # a residual topology's maps (composite gain, H_res's distance from I) on logged steps
        ours = blocks is None and stack_state(inner) is not None
        self.topology = TopologyTap(inner.stack) if ours else None
        self.rules = Rules(thresholds or Thresholds())
        self.tokens, self.unigram_given = TokenCounts(), unigram_loss
        self.loss_from_output, self.on_record, self.echo = loss_from_output, on_record, echo
        self.world, self.is_main = world_size(), rank() == 0
        self.detectors = LiveDetectors(detectors) if detectors else None  # the published ones, by name
        check_trackers(trackers, out)  # every option checked before out is made or a tracker started
        self.out = WatchOutput(out) if (out is not None and self.is_main) else None
        try:  # after out: it may refuse
            self.trackers = make_trackers(trackers, out) if self.is_main else []
        except BaseException:  # a tracker that cannot start leaves no half-made out folder
            if self.out is not None:
                self.out.discard()
            raise
        self.t, self.records, self.warnings, self.gaps = 1, [], [], []
        self.judge = Judge(steps, self.unigram_loss) if outcome else None
        self._window: list[list] = []  # [step, loss (float | tensor | list of tensors), grad norm or None]
        self._given_grad = None
        self._reset_step()
        self._pending: dict | None = None
        self._output_type = None  # the type of the first measured training forward's output
        self._handles = [
            model.register_forward_pre_hook(self._before_forward, with_kwargs=True),
            model.register_forward_hook(self._after_forward, with_kwargs=True, always_call=True),
        ]
        if optimizer is not None:
            self._handles += [
                optimizer.register_step_pre_hook(self._before_optimizer),
                optimizer.register_step_post_hook(self._after_optimizer),
            ]
        self.closed = False
        self._name_gaps(attach_gaps(self.stack, optimizer is not None, attention))

    def _reset_step(self) -> None:
        self._forwards, self._losses, self._explicit, self._shares = 0, [], None, False
        self._force, self._snapshot, self._grads, self._lse, self._lr = False, None, None, None, None
        self._queued = self._requeued = False
        self._topology = None

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
            if self.topology is not None:
                self.topology.start()
            self._attach_attention()
            self.tokens.add(batch_tokens(args, kwargs))
        return None

    def _after_forward(self, module, args, kwargs, output):
        if self.streams.capture is not None:
            self.streams.stop()
            if self.topology is not None and self.topology.rec is not None:
                self._topology = watch_summary(self.topology.stack, self.topology.stop())
            self._detach_attention()
            logits = self.logits_of(output) if self.logits_of else output_logits(output, self.stack.kind)
            if isinstance(logits, torch.Tensor):
                self._lse = log_partition(logits)
            self._output_type = type(output)
        if self.loss_from_output and torch.is_grad_enabled() and module.training:
            loss = output_loss(output)
            if loss is not None:
                self._losses.append(loss.detach())
        return None

    def _attach_attention(self) -> None:
        if self.tap is not None:
            self.tap.attach(self.stack.blocks)

    def _detach_attention(self) -> None:
        if self.tap is not None:
            self.tap.detach()

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
        self,
        loss=None,
        *,
        lr: float | None = None,
        grad_norm: float | None = None,
        applied: bool = True,
        logits: torch.Tensor | None = None,
    ):
        """End the step in progress (without an optimizer) or give the loss of the step just ended by
        ``optimizer.step()`` (with one). ``loss``: a float or a tensor (read lazily); ``lr``,
        ``grad_norm``: where the loop knows them better (grad_norm every step lets a non-finite gradient
        be seen on any step); ``applied=False``: the update was skipped; ``logits``: the step's output
        logits (..., V), for a model whose output the watcher cannot read them from (read on logged steps
        only). Returns the logged step's record (a dict, depthlab.watch.keys) when this call finished
        one, else None."""
        if lr is not None:
            self._lr = lr
        if isinstance(loss, torch.Tensor):
            if loss.numel() != 1:
                raise ValueError(
                    f"watcher.step: loss must be one number, not a tensor of shape {tuple(loss.shape)}"
                )
            loss = loss.detach()
        elif loss is not None and not _one_number(loss):
            raise TypeError(
                f"watcher.step: loss must be a float or a one-element tensor, not {type(loss).__name__}"
            )
        if self.optimizer is not None and self._forwards == 0 and self._window:
            last = self._window[-1]
            last[1] = loss if loss is not None else last[1]
            last[2] = grad_norm if grad_norm is not None else last[2]
            if logits is not None and self._pending is not None and self._pending["logit_lse"] is None:
                self._pending["logit_lse"] = mean_log_partition(all_reduce(log_partition(logits)))
            return self._emit() if self._pending is not None else None
        if logits is not None and self.measuring():
            self._lse = log_partition(logits)
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
        total, sub = self._grads or (None, [])
        n = len(self.stack.blocks)
        attn = combined_values(self.tap.stats, n, self.world) if self.tap is not None else [(None, None)] * n
        lse = all_reduce(self._lse) if self._lse is not None else None
        layers = layer_rows(self.streams.table(self.world), sub, updates, attn)
        lr = self._lr if self._lr is not None else self._optimizer_lr()
        grad = grad_norm if grad_norm is not None else total
        record = new_record(self.t, lr, grad, mean_log_partition(lse), layers)
        if self._topology is not None:  # a residual topology's maps; absent for a single stream
            record["topology"] = self._topology
        return record

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
        if self.judge is not None:
            warnings += self.judge.see(window, record)
        if self.detectors is not None:
            warnings += self.detectors.see(window, record, record["lr"])
        record["warnings"] = warnings
        if not self.records and record["logit_lse"] is None and self._output_type is not None:
            self._name_gaps([logits_gap(self._output_type)])
        if not self.records and record["loss"] is None:  # the first logged step had none: say it once
            self._name_gaps([loss_gap(record["step"])])
        self.records.append(record)
        self._speak(warnings)
        for tracker in self.trackers:
            tracker.log(record["step"], scalars(record, len(self.warnings)))
            for w in warnings:
                tracker.warn(w)
        if self.out is not None:
            self.out.write(record, self.summary())
        if self.on_record is not None and self.is_main:
            self.on_record(record)
        return record

    def _name_gaps(self, gaps: list[dict]) -> None:
        """Say each instrument that cannot be attached, once (depthlab.watch.gaps)."""
        self.gaps += gaps
        if self.is_main and self.echo is not None:
            for g in gaps:
                print(f"depthlab.watch: blind spot: {g['message']}", file=self.echo, flush=True)

    def flush(self) -> dict | None:
        """Finish the pending record now, for a loop that gives no loss by :meth:`step` after the update
        (the Hugging Face callback, at ``on_step_end``). Returns it, or None when none was pending."""
        return self._emit() if self._pending is not None else None

    def _read_window(self) -> list[tuple[int, float | None, float | None]]:
        """(step, loss, gradient norm) of each update since the last record, read now; the window empties."""
        window = [(step, loss_value(value), grad) for step, value, grad in self._window]
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

    def outcome(self) -> dict | None:
        """{"outcome", "reason", "step"}: trained / undertrained / stalled / diverged by depthlab train's
        rules (depthlab.watch.judge), as if the run ended now (final once closed); None with
        ``outcome=False``."""
        return self.judge.outcome() if self.judge is not None else None

    def summary(self) -> dict:
        """What was watched, what it could not see, what it raised and the outcome so far (watch.json)."""
        losses = [r["loss"] for r in self.records if r.get("loss") is not None]
        return {
            "stack": self.stack.path,
            "n_layers": len(self.stack.blocks),
            "every": self.every,
            "steps": self.t - 1,
            "lr": self.records[-1]["lr"] if self.records else None,
            "final_loss": losses[-1] if losses else None,
            "unigram_loss": self.unigram_loss(),
            "outcome": self.outcome(),
            "blind_spots": self.gaps,
            "warnings": self.warnings,
        }

    def close(self) -> None:
        """Finish the last record, check the losses since, remove every hook; idempotent."""
        if self.closed:
            return
        if self._pending is not None:
            self._emit()
        window = self._read_window()
        warnings = [w for step, loss, grad in window for w in self.rules.check_loss(step, loss, grad)]
        if self.judge is not None:
            warnings += self.judge.see(window, tail_record(window))
        self._speak(warnings)
        outcome = self.outcome()
        if outcome is not None and self.is_main and self.echo is not None:  # the label, said at close
            print(f"depthlab.watch: {closing_line(outcome, self.summary())}", file=self.echo, flush=True)
        for tracker in self.trackers:
            for w in warnings:
                tracker.warn(w)
            if outcome is not None:
                tracker.summary(outcome)
            tracker.close()
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._detach_attention()
        self.streams.remove()
        if self.out is not None:
            self.out.close(self.summary(), outcome)
        self.closed = True

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def state_dict(self) -> dict:
        """The rules' memory and the step counter, as plain data (a resumed loop continues exactly)."""
        window = [[s, loss_value(v), g] for s, v, g in self._window]
        judge = self.judge.state_dict() if self.judge is not None else None
        return {"t": self.t, "rules": self.rules.state_dict(), "window": window, "warnings": self.warnings,
                "judge": judge}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        self.t, self._window, self.warnings = state["t"], state["window"], state["warnings"]
        self.rules.load_state_dict(state["rules"])
        if self.judge is not None and state.get("judge") is not None:  # older states have none
            self.judge.load_state_dict(state["judge"])


def _one_number(x) -> bool:
    """Whether ``x`` is a loss given as one number: a real number or anything of one element that
    float() reads (a numpy scalar or 0-d array), never text or a bool."""
    if isinstance(x, (str, bytes, bool)):
        return False
    if isinstance(x, numbers.Real):
        return True
    try:
        float(x)
    except (TypeError, ValueError):
        return False
    return getattr(x, "size", 1) == 1
