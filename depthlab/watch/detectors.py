"""Published divergence detectors and simple baselines, as rules over what the watcher records.

Each detector reads a run's records in step order (one per logged step: ``loss``, ``grad_norm``, ``lr``
and the per-layer rows of :mod:`depthlab.watch.keys`) and returns the first step at which it raises its
alarm, or None. With ``log_every`` 1 the records are the per-step series the published monitors read.

| name                 | alarm when                                                   | source |
|----------------------|--------------------------------------------------------------|--------|
| olmo-stability       | the loss or the gradient norm > mean + 6 sd of its last 128 values (from the 10th value on) | OLMo-core's StabilityMonitor (allenai/OLMo-core) |
| megatron-spiky-loss  | the loss > 10 x the largest loss seen before                 | Megatron-LM ``--check-for-spiky-loss`` (its rerun state machine) |
| loss-above-initial   | the loss > 1.5 x the first step's loss                       | depthlab train's blow-up rule (:mod:`depthlab.watch.outcome`), read on one value |
| lr-alone             | the peak learning rate >= 0.1 (an alarm at step 1)            | a baseline: what the learning rate alone says |
| marin-update-norm    | a layer's relative update ||dW||/||W|| > 2 x its median so far (from the 2nd value) | marin-community/marin #1368: Adam update-norm spikes of 2x precede loss spikes |
| depthlab:<code>      | the watcher's rule <code> first fires (:mod:`depthlab.watch.rules`, default thresholds) | entropy collapse: Zhai et al. 2023; attention-logit growth: Dehghani et al. 2023, Wortsman et al. 2023a; output-logit growth: Wortsman et al. 2023a |
| depthlab:any         | any of the watcher's divergence rules fires                  | the forecaster "watch" |

The "10th value" of olmo-stability and the lr-alone threshold are depthlab's choices (the monitor's
warm-up is not part of its published description; the threshold was fixed with the benchmark's grid,
before its runs). Not implemented: Wortsman et al. 2023b (Adam's second moment underestimating the
squared gradient: the optimizer state is not recorded) and Rybakov et al. 2024 (linear-layer output
norms: not measured).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from depthlab.errors import ConfigError
from depthlab.watch.rules import Thresholds, replay

OLMO_WINDOW, OLMO_SIGMAS, OLMO_MIN = 128, 6.0, 10
MEGATRON_FACTOR = 10.0
INITIAL_FACTOR = 1.5
LR_ALONE = 0.1
MARIN_FACTOR = 2.0
DIVERGENCE_CODES = (
    "non-finite",
    "loss-spike",
    "attention-entropy-collapse",
    "attention-logit-growth",
    "output-logit-growth",
    "update-ratio-spike",
)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


class Detector:
    """A streaming detector: :meth:`update` sees every step's numbers, :meth:`record` each logged
    step's record; both return True when the alarm is raised (the first time is what counts)."""

    name = ""
    source = ""

    def update(self, step: int, loss: float | None, grad_norm: float | None, lr: float | None) -> bool:
        return False

    def record(self, record: dict) -> bool:
        return False


class OlmoStability(Detector):
    """The loss or the gradient norm above mean + 6 sd of its last 128 values (from the 10th value)."""

    name, source = "olmo-stability", "OLMo-core's StabilityMonitor"

    def __init__(self):
        self.past: dict[str, list[float]] = {"loss": [], "grad_norm": []}

    def update(self, step, loss, grad_norm, lr):
        fired = False
        for key, v in (("loss", loss), ("grad_norm", grad_norm)):
            if not _finite(v):
                continue
            history = self.past[key]
            if len(history) >= OLMO_MIN:
                fired |= v > statistics.fmean(history) + OLMO_SIGMAS * statistics.pstdev(history)
            history.append(v)
            del history[:-OLMO_WINDOW]
        return fired


class MegatronSpikyLoss(Detector):
    """The loss above 10 x the largest loss before it."""

    name, source = "megatron-spiky-loss", "Megatron-LM's --check-for-spiky-loss"

    def __init__(self):
        self.top: float | None = None

    def update(self, step, loss, grad_norm, lr):
        if not _finite(loss):
            return False
        fired = self.top is not None and loss > MEGATRON_FACTOR * self.top
        self.top = loss if self.top is None else max(self.top, loss)
        return fired


class LossAboveInitial(Detector):
    """The loss above 1.5 x the first loss."""

    name, source = "loss-above-initial", "depthlab train's blow-up rule, on one value"

    def __init__(self):
        self.first: float | None = None

    def update(self, step, loss, grad_norm, lr):
        if not _finite(loss):
            return False
        if self.first is None:
            self.first = loss
            return False
        return loss > INITIAL_FACTOR * self.first


class LrAlone(Detector):
    """The learning rate at or above 0.1 (a baseline: what the learning rate alone says)."""

    name, source = "lr-alone", "a baseline"

    def update(self, step, loss, grad_norm, lr):
        return _finite(lr) and lr >= LR_ALONE


class MarinUpdateNorm(Detector):
    """A layer's relative weight update above 2 x its median over the earlier logged steps."""

    name, source = "marin-update-norm", "marin-community/marin #1368"

    def __init__(self):
        self.past: dict[int, list[float]] = {}

    def record(self, record):
        fired = False
        for row in record.get("layers") or []:
            u = row.get("param_update")
            if not row.get("index") or not _finite(u):
                continue
            history = self.past.setdefault(row["index"], [])
            fired |= bool(history) and u > MARIN_FACTOR * statistics.median(history)
            history.append(u)
        return fired


PUBLISHED: dict[str, type[Detector]] = {
    d.name: d for d in (OlmoStability, MegatronSpikyLoss, LossAboveInitial, LrAlone, MarinUpdateNorm)
}


def first_alarm(detector: Detector, records: list[dict]) -> int | None:
    """The first logged step at which ``detector`` raises its alarm over ``records`` (each record's
    loss, gradient norm and lr taken as its step's: exact when every step is logged)."""
    for r in records:
        hit = detector.update(r["step"], r.get("loss"), r.get("grad_norm"), r.get("lr"))
        if detector.record(r) or hit:
            return r["step"]
    return None


def offline(cls: type[Detector]) -> Callable[[list[dict]], int | None]:
    """The detector ``cls`` as a function of a run's records: its first alarm step, or None."""
    return lambda records: first_alarm(cls(), records)


olmo_stability = offline(OlmoStability)
megatron_spiky_loss = offline(MegatronSpikyLoss)
loss_above_initial = offline(LossAboveInitial)


def lr_alone(records: list[dict]) -> int | None:
    """Offline, the baseline knows the run's planned peak: step 1 when the peak learning rate is at
    least 0.1, else None (live, :class:`LrAlone` sees the learning rate as it is at each step)."""
    lrs = [r["lr"] for r in records if _finite(r.get("lr"))]
    return records[0]["step"] if lrs and max(lrs) >= LR_ALONE else None


marin_update_norm = offline(MarinUpdateNorm)


def depthlab_rule(codes: tuple[str, ...], thresholds: Thresholds | None = None) -> Callable:
    """A detector firing at the first warning of the watcher's rules whose code is in ``codes``."""

    def detect(records: list[dict]) -> int | None:
        steps = [w["step"] for w in replay(records, thresholds) if w["code"] in codes]
        return min(steps) if steps else None

    return detect


DETECTORS: dict[str, Callable[[list[dict]], int | None]] = {
    **{name: offline(cls) for name, cls in PUBLISHED.items()},
    "lr-alone": lr_alone,
    **{f"depthlab:{code}": depthlab_rule((code,)) for code in DIVERGENCE_CODES},
    "depthlab:any": depthlab_rule(DIVERGENCE_CODES),
}


class LiveDetectors:
    """The published detectors named in ``depthlab.watch(..., detectors=[...])``, fed by the watcher
    with every step's loss and gradient norm (read at each logged step) and each record; each raises one
    warning ``detector:<name>``, once."""

    def __init__(self, names):
        unknown = [n for n in names if n not in PUBLISHED]
        if unknown:
            raise ConfigError("detectors", unknown[0], f"one of {', '.join(PUBLISHED)}")
        self.detectors = [PUBLISHED[n]() for n in names]
        self.fired: list[str] = []

    def see(self, window: list[tuple], record: dict, lr: float | None) -> list[dict]:
        """Warnings first raised by the updates (step, loss, grad norm) of ``window`` and ``record``."""
        out = []
        for d in self.detectors:
            if d.name in self.fired:
                continue
            step = next((s for s, loss, g in window if d.update(s, loss, g, lr)), None)
            if d.record(record) and step is None:
                step = record["step"]
            if step is not None:
                self.fired.append(d.name)
                code = f"detector:{d.name}"
                out.append({"step": step, "code": code, "message": f"{code} at step {step}: "
                            f"{d.__doc__.strip()} ({d.source})", "layer": None, "value": None, "threshold": None})  # fmt: skip
        return out
