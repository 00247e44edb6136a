"""Did the run train, fall short, stall or diverge? The rules, their thresholds, and the monitor that applies them.

One implementation for every run: ``depthlab train`` feeds its :class:`Monitor` and stops a diverged
run; a watched loop's :class:`depthlab.watch.Watcher` feeds its own (the run goes on: the label is
reported, live and at close).

**diverged** (the run stops there: the outcome is decided, so stopping cannot change it):

- the loss or the gradient norm of an update is not finite (the run stops before applying it);
- the smoothed loss (an exponential moving average with weight ``EMA_WEIGHT`` = 0.1 per update, about
  the last 10 updates) exceeds ``spike_factor`` (TrainConfig, default 3) times its running minimum,
  floored at ``SPIKE_FLOOR`` = 0.1 nats so that a near-perfect loss jittering (0.01 -> 0.05) is no spike;
- blow-up: the training loss of ``BLOWUP_LOGS`` = 2 consecutive logged windows is above ``BLOWUP`` = 1.5
  times the initial loss (the loss of the first update: the model at init). A model 50% worse than
  its random initialisation has left any useful region; byte-level runs that train never come near it
  (their worst window after update 1 is below the initial loss), while learning rates of 0.1 and more
  send tiny models to 8-13 nats from an initial 5.5;
- stream blow-up: at a logged step with telemetry, some stream's rms is above ``STREAM_BLOWUP`` = 1e4
  times the largest stream rms of the first logged step, while the loss is not below the unigram level:
  the residual stream grew by orders of magnitude and the model learned nothing from it.

**At the end** the final loss F (the validation loss, else the last logged window's training loss)
decides, against the unigram loss U (a model that learned only which tokens are common):

- **trained**: F < (1 - ``STALL_MARGIN``) U, ``STALL_MARGIN`` = 0.05;
- **stalled**: F within ``STALL_MARGIN`` of U: at the unigram plateau (the model learned which tokens
  are common and nothing of the context), or F above that band and flat;
- **undertrained**: F above the band and still falling: over the part of the run after ``stall_share``
  x steps (TrainConfig, default half), the least-squares line through the logged losses drops by more
  than ``FALL_MARGIN`` = 2% of its level (a small learning rate: more steps would help). Runs at the
  plateau wiggle by a few percent from window to window, which is why the trend is read only above it.
  A trend needs three logged losses: a run with fewer after that point is read over its last three, and
  one with fewer than three in all is undertrained (too short to tell a slow fall from a stall).

``outcome.step`` is the update at which the run diverged, or the first update of the window where a
stall or a fall was judged (None if trained).

**The escape step** (:func:`escape_step`): the first logged step from which every logged training loss
is below the band, (1 - ``STALL_MARGIN``) U: where the run left the unigram plateau for good. A run can
sit on the plateau for hundreds of steps and then train; a fixed budget that ends before its escape
calls it a stall, which is why studies store the escape step beside the outcome.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

EMA_WEIGHT = 0.1
SPIKE_FLOOR = 0.1
BLOWUP = 1.5
BLOWUP_LOGS = 2
STREAM_BLOWUP = 1e4
STALL_MARGIN = 0.05
FALL_MARGIN = 0.02
OUTCOMES = ("trained", "undertrained", "stalled", "diverged")


@dataclass(frozen=True)
class Outcome:
    """How a run ended (:meth:`Monitor.decide`): ``outcome``, why (None when it trained) and at which step."""

    outcome: str  # one of OUTCOMES
    reason: str | None
    step: int | None


@dataclass
class Monitor:
    """Applies the rules above. ``update`` sees every update; ``log`` sees each logged window (its mean
    loss and, with telemetry, the largest stream rms). Its state is plain numbers (checkpointed)."""

    steps: int
    unigram_loss: float | None
    spike_factor: float = 3.0
    stall_share: float = 0.5
    ema: float | None = None
    min_ema: float = math.inf
    initial_loss: float | None = None
    initial_rms: float | None = None
    high_logs: int = 0
    logged: list = field(default_factory=list)  # [(step, window loss)]
    diverged: tuple | None = None  # (step, reason)

    @property
    def stall_level(self) -> float | None:
        return None if self.unigram_loss is None else (1 - STALL_MARGIN) * self.unigram_loss

    def update(self, step: int, loss: float, grad_norm: float | None) -> bool:
        """Feed update ``step`` (``grad_norm`` None where the loop does not know it); True if the run
        diverged here (then stop without applying the update)."""
        if self.diverged is not None:
            return True
        for what, value in (("loss", loss), ("gradient norm", grad_norm)):
            if value is not None and not math.isfinite(value):
                return self._diverge(step, f"{what} became {value} at step {step}")
        if self.initial_loss is None:
            self.initial_loss = loss
        self.ema = loss if self.ema is None else (1 - EMA_WEIGHT) * self.ema + EMA_WEIGHT * loss
        self.min_ema = min(self.min_ema, self.ema)
        floor = max(self.min_ema, SPIKE_FLOOR)
        if self.ema > self.spike_factor * floor:
            return self._diverge(
                step,
                f"smoothed loss {self.ema:.3g} rose above {self.spike_factor:g} x its minimum "
                f"{self.min_ema:.3g} at step {step}",
            )
        return False

    def log(self, step: int, window_loss: float | None, stream_rms_max: float | None = None) -> bool:
        """Feed a logged window; True if it decides that the run diverged (stop after this step)."""
        if self.diverged is not None or window_loss is None or not math.isfinite(window_loss):
            return self.diverged is not None
        self.logged.append((step, window_loss))
        limit = BLOWUP * self.initial_loss if self.initial_loss is not None else math.inf
        self.high_logs = self.high_logs + 1 if window_loss > limit else 0
        if self.high_logs >= BLOWUP_LOGS:
            return self._diverge(
                step,
                f"loss {window_loss:.3g} above {BLOWUP:g} x the initial loss {self.initial_loss:.3g} for "
                f"{BLOWUP_LOGS} logged windows at step {step}",
            )
        if stream_rms_max is not None and math.isfinite(stream_rms_max):
            if self.initial_rms is None:
                self.initial_rms = stream_rms_max
            grew = stream_rms_max / max(self.initial_rms, 1e-30)
            not_learning = self.stall_level is None or window_loss >= self.stall_level
            if grew > STREAM_BLOWUP and not_learning:
                return self._diverge(
                    step,
                    f"stream rms {stream_rms_max:.3g} is {grew:.3g} x its value at the first log while the "
                    f"loss {window_loss:.3g} is not below the unigram level (step {step})",
                )
        elif stream_rms_max is not None:  # a non-finite stream is a blow-up whatever the loss says
            return self._diverge(step, f"a stream became {stream_rms_max} at step {step}")
        return False

    def _diverge(self, step: int, reason: str) -> bool:
        self.diverged = (step, reason)
        return True

    def decide(self, final_loss: float | None = None) -> Outcome:
        """The outcome once the run has ended; ``final_loss`` is the final validation loss (default: the
        last logged window's training loss)."""
        if self.diverged is not None:
            return Outcome("diverged", self.diverged[1], self.diverged[0])
        final = final_loss if final_loss is not None and math.isfinite(final_loss) else self._last_loss()
        level, U = self.stall_level, self.unigram_loss
        if level is None or final is None or final < level:
            return Outcome("trained", None, None)
        start = max(1, math.ceil(self.stall_share * self.steps))
        if final <= (1 + STALL_MARGIN) * U:
            return Outcome(
                "stalled",
                f"final loss {final:.3f} at the unigram level {U:.3f} (within {STALL_MARGIN:.0%}): the model "
                "learned which tokens are common and nothing of the context",
                start,
            )
        fell = self._fitted_drop(start)
        if fell is None:
            return Outcome(
                "undertrained",
                f"final loss {final:.3f} above the unigram level {U:.3f}; {len(self.logged)} logged "
                "losses are too few to tell a slow fall from a stall (a trend needs three): a longer run would tell",
                start,
            )
        drop, start = fell[0], min(start, fell[1])  # the window reaches back only where it had to
        trend = f"the fitted loss fell {drop:.1%} over the last {self.steps - start + 1} steps"
        if drop > FALL_MARGIN:
            return Outcome(
                "undertrained",
                f"final loss {final:.3f} above the unigram level {U:.3f}, still falling: {trend}",
                start,
            )
        return Outcome(
            "stalled", f"final loss {final:.3f} above the unigram level {U:.3f} and flat: {trend}", start
        )

    def escape(self) -> int | None:
        """The escape step of the windows logged so far (:func:`escape_step`)."""
        return escape_step(self.logged, self.unigram_loss)

    def _last_loss(self) -> float | None:
        if self.logged:
            return self.logged[-1][1]
        return self.ema

    def _fitted_drop(self, start: int) -> tuple[float, int] | None:
        """(how much the least-squares line through the logged losses from ``start`` on falls over that
        window, relative to its mean; the window's first step). A trend needs three logs: where fewer fall
        after ``start`` the window reaches back to the last three; None with fewer than three in all."""
        pts = [(s, v) for s, v in self.logged if s >= start]
        if len(pts) < 3:
            pts = list(self.logged[-3:])
        if len(pts) < 3:
            return None
        ms, mv = sum(s for s, _ in pts) / len(pts), sum(v for _, v in pts) / len(pts)
        sxx = sum((s - ms) ** 2 for s, _ in pts)
        slope = sum((s - ms) * (v - mv) for s, v in pts) / sxx if sxx else 0.0
        return -slope * (pts[-1][0] - pts[0][0]) / mv, pts[0][0]

    def state_dict(self) -> dict:
        d = asdict(self)
        d["diverged"] = list(self.diverged) if self.diverged else None
        d["logged"] = [list(x) for x in self.logged]
        return d

    def load_state_dict(self, d: dict) -> None:
        for k, v in d.items():
            if k == "diverged" and v is not None:
                v = tuple(v)
            elif k == "logged":
                v = [tuple(x) for x in v]
            setattr(self, k, v)


def escape_step(logged, unigram_loss: float | None) -> int | None:
    """The first step of ``logged`` ((step, loss) pairs in step order) from which every loss is below
    (1 - STALL_MARGIN) x ``unigram_loss``; None when the last one is not (or without a unigram loss).
    Non-finite and missing losses count as not below."""
    if unigram_loss is None or not math.isfinite(unigram_loss):
        return None
    level, found = (1 - STALL_MARGIN) * unigram_loss, None
    for step, loss in logged:
        below = loss is not None and math.isfinite(loss) and loss < level
        found = (found if found is not None else step) if below else None
    return found


def outcome_line(outcome: dict) -> str:
    """'diverged at step 12: reason' (or the reason alone when there is no label)."""
    label = outcome.get("outcome") or "no outcome"
    at = f" at step {outcome['step']}" if outcome.get("step") is not None else ""
    return f"{label}{at}" + (f": {outcome['reason']}" if outcome.get("reason") else "")
