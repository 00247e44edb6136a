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


def olmo_stability(records: list[dict]) -> int | None:
    """The first step whose loss or gradient norm is a spike against its own last 128 values."""
    past: dict[str, list[float]] = {"loss": [], "grad_norm": []}
    for r in records:
        for key, history in past.items():
            v = r.get(key)
            if not _finite(v):
                continue
            if len(history) >= OLMO_MIN:
                mean, sd = statistics.fmean(history), statistics.pstdev(history)
                if v > mean + OLMO_SIGMAS * sd:
                    return r["step"]
            history.append(v)
            del history[:-OLMO_WINDOW]
    return None


def megatron_spiky_loss(records: list[dict]) -> int | None:
    """The first step whose loss is more than 10 x the largest loss before it."""
    top = None
    for r in records:
        v = r.get("loss")
        if not _finite(v):
            continue
        if top is not None and v > MEGATRON_FACTOR * top:
            return r["step"]
        top = v if top is None else max(top, v)
    return None


def loss_above_initial(records: list[dict]) -> int | None:
    """The first step whose loss is above 1.5 x the first logged loss."""
    first = None
    for r in records:
        v = r.get("loss")
        if not _finite(v):
            continue
        if first is None:
            first = v
        elif v > INITIAL_FACTOR * first:
            return r["step"]
    return None


def lr_alone(records: list[dict]) -> int | None:
    """Step 1 when the run's peak learning rate is at least 0.1, else None."""
    lrs = [r["lr"] for r in records if _finite(r.get("lr"))]
    return records[0]["step"] if lrs and max(lrs) >= LR_ALONE else None


def marin_update_norm(records: list[dict]) -> int | None:
    """The first step where a layer's relative weight update exceeds 2 x its median over earlier steps."""
    past: dict[int, list[float]] = {}
    for r in records:
        for row in r.get("layers") or []:
            u = row.get("param_update")
            if not row.get("index") or not _finite(u):
                continue
            history = past.setdefault(row["index"], [])
            if history and u > MARIN_FACTOR * statistics.median(history):
                return r["step"]
            history.append(u)
    return None


def depthlab_rule(codes: tuple[str, ...], thresholds: Thresholds | None = None) -> Callable:
    """A detector firing at the first warning of the watcher's rules whose code is in ``codes``."""

    def detect(records: list[dict]) -> int | None:
        steps = [w["step"] for w in replay(records, thresholds) if w["code"] in codes]
        return min(steps) if steps else None

    return detect


DETECTORS: dict[str, Callable[[list[dict]], int | None]] = {
    "olmo-stability": olmo_stability,
    "megatron-spiky-loss": megatron_spiky_loss,
    "loss-above-initial": loss_above_initial,
    "lr-alone": lr_alone,
    "marin-update-norm": marin_update_norm,
    **{f"depthlab:{code}": depthlab_rule((code,)) for code in DIVERGENCE_CODES},
    "depthlab:any": depthlab_rule(DIVERGENCE_CODES),
}
