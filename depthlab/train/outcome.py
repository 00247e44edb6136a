"""Did the run train, stall or diverge? The rules, their thresholds, and the monitor that applies them.

Every update t feeds the monitor the global training loss and the gradient norm (before clipping):

- **diverged** (the run stops at t, before applying the update):
  the loss or the gradient norm is not finite; or the smoothed loss (an exponential moving average with
  weight ``EMA_WEIGHT`` = 0.1 per step, i.e. over about the last 10 steps) exceeds ``spike_factor``
  (TrainConfig, default 3) times its running minimum. The minimum is floored at ``SPIKE_FLOOR`` = 0.1
  nats so that the noise of a near-perfect loss (0.01 -> 0.05) is not taken for a spike.
- **stalled** (a label; the run goes on to the end): the smoothed loss is still at the unigram level,
  i.e. >= (1 - ``STALL_MARGIN``) x unigram loss with ``STALL_MARGIN`` = 0.05, both at update
  ceil(``stall_share`` x steps) (TrainConfig, default half of the steps) and at the last update. A model
  there has learned which tokens are common and nothing of the context (where a stack without its attention skip stays). A run that leaves
  the level later (a long warmup) is ``trained``.
- **trained**: anything else.

``outcome.step`` is the update at which the run diverged or was first found stalled (None if trained).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

EMA_WEIGHT = 0.1
SPIKE_FLOOR = 0.1
STALL_MARGIN = 0.05


@dataclass
class Verdict:
    outcome: str  # trained | stalled | diverged
    reason: str | None
    step: int | None


@dataclass
class Monitor:
    """Applies the rules above, one update at a time. Its state is plain numbers (checkpointed)."""

    steps: int
    unigram_loss: float | None
    spike_factor: float = 3.0
    stall_share: float = 0.5
    ema: float | None = None
    min_ema: float = math.inf
    stalled_at_share: bool | None = None
    diverged: tuple | None = None  # (step, reason)

    @property
    def stall_step(self) -> int:
        return max(1, math.ceil(self.stall_share * self.steps))

    @property
    def stall_level(self) -> float | None:
        return None if self.unigram_loss is None else (1 - STALL_MARGIN) * self.unigram_loss

    def update(self, step: int, loss: float, grad_norm: float) -> bool:
        """Feed update ``step``; True if the run diverged here (then stop without applying the update)."""
        for what, value in (("loss", loss), ("gradient norm", grad_norm)):
            if not math.isfinite(value):
                self.diverged = (step, f"{what} became {value} at step {step}")
                return True
        self.ema = loss if self.ema is None else (1 - EMA_WEIGHT) * self.ema + EMA_WEIGHT * loss
        self.min_ema = min(self.min_ema, self.ema)
        floor = max(self.min_ema, SPIKE_FLOOR)
        if self.ema > self.spike_factor * floor:
            self.diverged = (
                step,
                f"smoothed loss {self.ema:.3g} rose above {self.spike_factor:g} x its minimum "
                f"{self.min_ema:.3g} at step {step}",
            )
            return True
        if step == self.stall_step and self.stall_level is not None:
            self.stalled_at_share = self.ema >= self.stall_level
        return False

    def verdict(self) -> Verdict:
        """The outcome once the run has ended (at the last update or at a divergence)."""
        if self.diverged is not None:
            return Verdict("diverged", self.diverged[1], self.diverged[0])
        level = self.stall_level
        if self.stalled_at_share and self.ema is not None and self.ema >= level:
            share = f"{self.stall_share:.0%} of {self.steps}"
            return Verdict(
                "stalled",
                f"smoothed loss {self.ema:.3f} not below the unigram level {self.unigram_loss:.3f} "
                f"(by more than {STALL_MARGIN:.0%}) at step {self.stall_step} ({share} steps) nor at the end",
                self.stall_step,
            )
        return Verdict("trained", None, None)

    def state_dict(self) -> dict:
        d = asdict(self)
        d["diverged"] = list(self.diverged) if self.diverged else None
        return d

    def load_state_dict(self, d: dict) -> None:
        for k, v in d.items():
            setattr(self, k, tuple(v) if k == "diverged" and v is not None else v)
