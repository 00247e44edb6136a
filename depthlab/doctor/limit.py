"""``LrLimit``: the learning-rate limit of one stack at one warmup, the one number every page quotes.

The doctor's rule compares one measured quantity against limits fitted on tuning runs: the step size s
(how far Adam's first step moves the output, in output norms) for stacks whose blocks renormalise the
stream, the relative update rho (Adam's first step against the block matrices' size) for the others.
Both grow in proportion to the learning rate (s = G lr, rho = (rho / lr) lr), so a limit on the quantity
is a limit on the lr: ``per_lr`` converts. A limit holds three values of the quantity:

- ``warn_above``: the limit itself; above it a run is not expected to be safe (a warning);
- ``error_from``: where the tuning runs failed (an error from there; None: no run above the limit
  failed, so no error), compared rounded (``reaches``) or strictly (``error_strict``);
- ``trained_to``: the largest value at which tuning runs trained (the band's low end).

:meth:`LrLimit.level` is the verdict's level; :attr:`lr_limit`, :attr:`lr_trained` and
:attr:`lr_fails` are the same numbers in lr. ``depthlab probe``, ``probe --compare`` and ``depthlab
advise`` all print them from here (:func:`depthlab.doctor.lr_limit.limit_of` computes one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from depthlab.doctor.record import DIGITS


def reaches(value: float, high: float | None) -> bool:
    """Whether a measured value reaches a band's high end as the record stores it: rounded to the same
    ``DIGITS`` decimals, so that the tuning run the end was taken from reaches it."""
    return high is not None and math.isfinite(high) and round(value, DIGITS) >= round(high, DIGITS)


@dataclass(frozen=True)
class LrLimit:
    """A stack's learning-rate limit (see the module docstring). ``family``: "renormalising", "gated"
    or "free"; ``quantity``: "s" or "rho"; ``who``: the stacks the limit was fitted on ("post stacks",
    "stacks that never renormalise the stream"); ``fitted``: False for the constants of the first tuning
    grid; ``error_min_depth``: an error only from this depth (a gated limit fitted on deep runs only)."""

    family: str
    quantity: str
    per_lr: float
    warn_above: float
    error_from: float | None
    trained_to: float | None
    who: str
    warmup: int
    fitted: bool = True
    error_strict: bool = False
    error_min_depth: int | None = None
    width_exponent: float = 0.0  # a limit on the width-scaled s: s x (d / width_ref)^-a
    scale: float = 1.0  # that factor at this stack's width (per_lr includes it)
    above: tuple[int, int] | None = None  # (failed, runs) of the tuning runs from error_from on
    note: str = ""  # how the limit was placed for this warmup ("interpolated between the fitted warmups")

    def value(self, lr: float) -> float:
        """The quantity at learning rate ``lr``."""
        return self.per_lr * lr

    def level(self, lr: float, depth: int) -> str:
        """ "error", "warning" or "ok" for a run at ``lr`` of a stack ``depth`` layers deep."""
        q = self.value(lr)
        if self.error_from is not None and (
            q > self.error_from if self.error_strict else reaches(q, self.error_from)
        ):
            return "error" if not self.error_min_depth or depth >= self.error_min_depth else "warning"
        return "warning" if q > self.warn_above else "ok"

    @property
    def lr_limit(self) -> float:
        """The largest lr within the limit (no warning up to here)."""
        return self.warn_above / self.per_lr

    @property
    def lr_trained(self) -> float | None:
        """The lr at which this stack takes the largest step a tuning run trained with."""
        return None if self.trained_to is None else self.trained_to / self.per_lr

    @property
    def lr_fails(self) -> float | None:
        """The lr from which such stacks failed on the tuning runs (None: none failed above the limit)."""
        if self.error_from is None or not math.isfinite(self.error_from):
            return None
        return self.error_from / self.per_lr

    def range_text(self) -> str:
        """'lr <= 0.00044 (trained up to 0.00024, failed from 0.00079)': the limit in lr, one line."""
        parts = [f"trained up to {self.lr_trained:.2g}"] if self.lr_trained else []
        parts += [f"failed from {self.lr_fails:.2g}"] if self.lr_fails else ["no failure above it measured"]
        return f"lr <= {self.lr_limit:.2g} ({', '.join(parts)})"

    def to_dict(self) -> dict:
        return {
            "family": self.family,
            "quantity": self.quantity,
            "per_lr": self.per_lr,
            "limit": self.warn_above,
            "error_from": self.error_from,
            "trained_to": self.trained_to,
            "lr_limit": self.lr_limit,
            "lr_trained": self.lr_trained,
            "lr_fails": self.lr_fails,
            "who": self.who,
            "warmup": self.warmup,
            "fitted": self.fitted,
        }
