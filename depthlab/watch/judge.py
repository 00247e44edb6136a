"""The outcome of a watched run, live and at close: ``depthlab train``'s rules, fed from what the watcher reads.

:class:`depthlab.watch.outcome.Monitor` is the one implementation of trained / undertrained / stalled /
diverged; here it sees every update's loss (and gradient norm, where the loop gives it) as the watcher
reads them at each logged step, and each logged window's mean loss with the largest stream rms. The
reference is the unigram loss the watcher estimates from the batches' tokens, or the one the user gives.
Unlike ``depthlab train`` the loop is not stopped: a divergence is a warning (``diverged``), once.

A live warning ``stuck-at-baseline`` says when the window loss has stayed within ``STALL_MARGIN`` (5%)
of the unigram level for ``STUCK_STEPS`` updates and at least ``STUCK_LOGGED`` logged steps running:
the model predicts tokens by their frequency alone and has learned nothing of the context yet.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from depthlab.watch.outcome import STALL_MARGIN, Monitor

STUCK_STEPS = 50
STUCK_LOGGED = 3


def largest_rms(record: dict) -> float | None:
    """The largest stream rms of a record (a non-finite one if any is), None without streams."""
    values = [r["stream_rms"] for r in record.get("layers") or [] if r.get("stream_rms") is not None]
    bad = [v for v in values if not math.isfinite(v)]
    return bad[0] if bad else max(values, default=None)


def tail_record(window: list[tuple]) -> dict | None:
    """The updates after the last logged step as one window for the outcome (its mean loss), or None."""
    losses = [loss for _, loss, _ in window if loss is not None]
    if not losses:
        return None
    return {"step": window[-1][0], "loss": sum(losses) / len(losses), "layers": []}


class Judge:
    """``steps``: the planned number of updates (None: the updates seen so far, when asked);
    ``unigram()``: the reference loss now (its estimate improves as batches are seen)."""

    def __init__(self, steps: int | None, unigram: Callable[[], float | None]):
        self.planned, self.unigram = steps, unigram
        self.monitor = Monitor(steps or 1, None)
        self.seen = 0  # the last update fed
        self.stuck_since: int | None = None
        self.stuck_logged = 0
        self.fired: list[str] = []

    def see(self, window: list[tuple], record: dict | None) -> list[dict]:
        """Feed the updates (step, loss, grad norm) since the last record, then ``record`` (a logged
        step's, or None); returns the warnings first raised here (``diverged``, ``stuck-at-baseline``)."""
        m = self.monitor
        m.unigram_loss = self.unigram()
        for step, loss, grad in window:
            self.seen = max(self.seen, step)
            if loss is not None:
                m.update(step, loss, grad)
        out = []
        if record is not None:
            self.seen = max(self.seen, record["step"])
            m.log(record["step"], record.get("loss"), largest_rms(record))
            out += self._stuck(record["step"], record.get("loss"), m.unigram_loss)
        if m.diverged is not None and "diverged" not in self.fired:
            self.fired.append("diverged")
            step, reason = m.diverged
            out.append(_warning(step, "diverged", f"{reason} (depthlab train's rule; the loop goes on)"))
        return out

    def _stuck(self, step: int, loss: float | None, U: float | None) -> list[dict]:
        if U is None or loss is None or not math.isfinite(loss) or abs(loss / U - 1) > STALL_MARGIN:
            self.stuck_since, self.stuck_logged = None, 0
            return []
        self.stuck_since = step if self.stuck_since is None else self.stuck_since
        self.stuck_logged += 1
        long = step - self.stuck_since >= STUCK_STEPS and self.stuck_logged >= STUCK_LOGGED
        if not long or "stuck-at-baseline" in self.fired:
            return []
        self.fired.append("stuck-at-baseline")
        return [
            _warning(
                step,
                "stuck-at-baseline",
                f"the loss {loss:.4g} has stayed within {STALL_MARGIN:.0%} of the unigram level {U:.4g} "
                f"since step {self.stuck_since}: the model predicts tokens by their frequency alone and "
                "has learned nothing of the context so far",
                value=loss / U,
                threshold=1 + STALL_MARGIN,
            )
        ]

    def outcome(self) -> dict:
        """{"outcome", "reason", "step"}: the label if the run ended now (trained / undertrained /
        stalled / diverged), or outcome None with the reason when no loss or no reference was seen."""
        m = self.monitor
        m.unigram_loss = self.unigram()
        m.steps = self.planned or max(self.seen, 1)
        if m.diverged is None and not m.logged and m.ema is None:
            return {"outcome": None, "reason": "no loss was seen (give it: watcher.step(loss))", "step": None}
        if m.diverged is None and m.unigram_loss is None:
            return {
                "outcome": None,
                "reason": "no reference loss: no token ids were seen in the batches (pass unigram_loss=)",
                "step": None,
            }
        v = m.decide()
        return {"outcome": v.outcome, "reason": v.reason, "step": v.step}

    def state_dict(self) -> dict:
        return {
            "monitor": self.monitor.state_dict(),
            "seen": self.seen,
            "stuck": [self.stuck_since, self.stuck_logged],
            "fired": self.fired,
        }

    def load_state_dict(self, state: dict) -> None:
        self.monitor.load_state_dict(state["monitor"])
        self.seen, self.fired = state["seen"], list(state["fired"])
        self.stuck_since, self.stuck_logged = state["stuck"]


def _warning(step, code, message, value=None, threshold=None) -> dict:
    return {"step": step, "code": code, "message": f"{code} at step {step}: {message}", "layer": None,
            "value": value, "threshold": threshold}  # fmt: skip
