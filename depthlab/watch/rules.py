"""Live warnings: the rules, their thresholds, and the state that lets each fire once.

Each rule looks at what the watcher already measures and, the first time its condition holds, returns
one warning (a dict: step, code, message with the numbers, layer or None, value, threshold). The
watcher prints it once and records it in that step's ``warnings``.

| code                    | condition (defaults in :class:`Thresholds`)                                       |
|-------------------------|------------------------------------------------------------------------------------|
| non-finite              | the loss, the gradient norm or a layer's number is inf/NaN; names the first stream where it appeared |
| loss-spike              | a step's loss > ``spike_ratio`` x the median of the previous ``spike_window`` losses |
| gradient-starvation     | bottom-quarter layers' sublayer gradient norm < ``starved_ratio`` x the top quarter's, ``starved_logged`` logged steps running (stacks of >= 4 layers) |
| attention-entropy-collapse | a layer's attention entropy < ``entropy_share`` x its value at the first logged step |
| attention-logit-growth  | a layer's largest attention logit > ``attn_logit_factor`` x its first value, and above ``attn_logit_floor`` |
| output-logit-growth     | the mean output log-partition (log Z) > its first value + ``lse_rise`` nats          |
| composite-gain          | a residual topology's composite gain (the largest row or column sum of the product of its H_res maps up to a layer) > ``composite_gain`` (hyper-connections; Xie et al. 2025) |
| update-ratio-spike      | a layer's relative weight update ||dW||/||W||, or its stream update ratio ||x_i - x_(i-1)||/||x_(i-1)||, > ``update_factor`` x its median over the previous logged steps (from the 2nd: a stream growing 10,000-fold by the second logged step is a spike) |

The defaults were written before any tuning run, from the literature's descriptions and the probe's
at-init measurements; ``depthlab forecast`` (the lab) re-chooses them on a tuning study kept apart from
the one the forecast is measured on and reports the choice; the defaults stay as written
(docs/watch.md has the measurements and the commands).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from depthlab.watch.keys import GRAD_KEYS, LAYER_KEYS

SUBLAYER_GRADS = tuple(k for k in GRAD_KEYS if k != "cross_grad_norm")


@dataclass(frozen=True)
class Thresholds:
    spike_ratio: float = 2.0
    spike_window: int = 20
    starved_ratio: float = 0.01
    starved_logged: int = 3
    entropy_share: float = 0.2
    attn_logit_factor: float = 4.0
    attn_logit_floor: float = 10.0
    lse_rise: float = 5.0
    update_factor: float = 10.0
    composite_gain: float = 10.0


LOSS_CODES = ("non-finite", "loss-spike")  # what the loss alone can tell
# what update-ratio-spike compares with its own past: the weights' relative update and the stream's
UPDATE_KEYS = (("param_update", "relative weight update ||dW||/||W||"),
               ("update_ratio", "stream update ratio ||x_i - x_(i-1)|| / ||x_(i-1)||"))  # fmt: skip


@dataclass
class Rules:
    """The rules' memory: recent losses, each layer's first values and update history, what has fired."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    losses: list[float] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)
    first: dict = field(default_factory=dict)  # "entropy"/"logit": per-layer first values; "lse"
    updates: dict = field(default_factory=dict)  # per UPDATE_KEYS key, per layer, its values at logged steps
    starved_run: int = 0

    def _fire(self, step, code, message, layer=None, value=None, threshold=None) -> list[dict]:
        if code in self.fired:
            return []
        self.fired.append(code)
        return [
            {"step": step, "code": code, "message": f"{code} at step {step}: {message}", "layer": layer,
             "value": value, "threshold": threshold}
        ]  # fmt: skip

    # -- every step ---------------------------------------------------------------------------------
    def check_loss(self, step: int, loss: float | None, grad_norm: float | None = None) -> list[dict]:
        """Rules on one step's loss (and gradient norm, where the loop gives it every step)."""
        out = []
        for what, v in (("loss", loss), ("gradient norm", grad_norm)):
            if v is not None and not math.isfinite(v):
                out += self._fire(step, "non-finite", f"the {what} is {v}", value=v)
        if loss is None or not math.isfinite(loss):
            return out
        th = self.thresholds
        recent = self.losses[-th.spike_window :]
        if len(recent) >= min(5, th.spike_window):
            med = statistics.median(recent)
            if med > 0 and loss > th.spike_ratio * med:
                out += self._fire(
                    step, "loss-spike",
                    f"loss {loss:.4g} is {loss / med:.2f} x the median {med:.4g} of the last {len(recent)} "
                    f"steps (threshold {th.spike_ratio:g} x)", value=loss / med, threshold=th.spike_ratio,
                )  # fmt: skip
        self.losses = [*recent, loss][-th.spike_window :]
        return out

    # -- logged steps --------------------------------------------------------------------------------
    def check_record(self, record: dict) -> list[dict]:
        """Rules on a logged step's record (its per-layer numbers)."""
        step, layers = record["step"], record.get("layers") or []
        out = self._non_finite(step, record, layers)
        rows = layers[1:]
        out += self._starvation(step, rows)
        out += self._attention(step, rows)
        out += self._output_logits(step, record.get("logit_lse"))
        out += self._updates(step, rows)
        out += self._composite(step, record.get("topology"))
        return out

    def _composite(self, step, topology) -> list[dict]:
        """A residual topology's skip paths amplifying the stream (hyper-connections' composite gain)."""
        gains = [g for g in (topology or {}).get("composite_gain") or [] if g is not None]
        back = [g for g in (topology or {}).get("composite_gain_back") or [] if g is not None]
        worst = max(gains + back, default=0.0)
        th = self.thresholds.composite_gain
        if not worst > th:
            return []
        layer = max(range(len(gains)), key=lambda i: max(gains[i], back[i]) if back else gains[i]) + 1
        return self._fire(
            step, "composite-gain",
            f"the product of the H_res maps amplifies the stream {worst:.3g}x by layer {layer} (largest row or "
            f"column sum; above {th:g}x; unconstrained hyper-connections reach ~3,000x at 27B, Xie et al. 2025)",
            layer=layer, value=worst, threshold=th,
        )  # fmt: skip

    def _non_finite(self, step, record, layers) -> list[dict]:
        bad = [
            (row["index"], k)
            for row in layers
            for k in LAYER_KEYS
            if isinstance(row.get(k), float) and not math.isfinite(row[k])
        ]
        top = [v for v in (record.get("loss"), record.get("grad_norm")) if v is not None]
        if not bad and all(math.isfinite(v) for v in top):
            return []
        forward = [b for b in bad if b[1] in ("stream_rms", "update_ratio", "cos_prev")]
        if forward:
            where = f"first in the forward pass at stream {forward[0][0]} ({forward[0][1]})"
            layer = forward[0][0]
        elif bad:
            top_first = max(b[0] for b in bad)  # the backward pass runs from the top down
            where, layer = f"first in the backward pass at stream {top_first} ({bad[-1][1]})", top_first
        else:
            where, layer = "in the loss or gradient norm; every layer's numbers are finite", None
        shown = ", ".join(f"{k} {record.get(k)}" for k in ("loss", "grad_norm"))
        return self._fire(step, "non-finite", f"{shown}; {where}", layer=layer)

    def _starvation(self, step, rows) -> list[dict]:
        th = self.thresholds
        if len(rows) < 4:
            return []
        q = len(rows) // 4
        bottom, top = _sublayer_grad(rows[:q]), _sublayer_grad(rows[-q:])
        if bottom is None or top is None or top <= 0:
            return []
        ratio = bottom / top
        self.starved_run = self.starved_run + 1 if ratio < th.starved_ratio else 0
        if self.starved_run < th.starved_logged:
            return []
        return self._fire(
            step, "gradient-starvation",
            f"the bottom {q} layers' sublayer gradient norm is {ratio:.2e} x the top {q} layers' for "
            f"{self.starved_run} logged steps (threshold {th.starved_ratio:g} x, {th.starved_logged} steps)",
            value=ratio, threshold=th.starved_ratio,
        )  # fmt: skip

    def _attention(self, step, rows) -> list[dict]:
        th, out = self.thresholds, []
        ent = self.first.setdefault("entropy", {})
        logit = self.first.setdefault("logit", {})
        for row in rows:
            i, h, m = str(row["index"]), row.get("attn_entropy"), row.get("attn_logit_max")
            if h is not None and math.isfinite(h):
                h0 = ent.setdefault(i, h)
                if h0 > 0 and h < th.entropy_share * h0:
                    out += self._fire(
                        step, "attention-entropy-collapse",
                        f"layer {i}'s attention entropy fell to {h:.3g} nats from {h0:.3g} ({h / h0:.1%}; "
                        f"threshold {th.entropy_share:.0%})", layer=int(i), value=h / h0, threshold=th.entropy_share,
                    )  # fmt: skip
            if m is not None and math.isfinite(m):
                m0 = logit.setdefault(i, m)
                if m > th.attn_logit_floor and m0 > 0 and m > th.attn_logit_factor * m0:
                    out += self._fire(
                        step, "attention-logit-growth",
                        f"layer {i}'s largest attention logit grew to {m:.3g} from {m0:.3g} ({m / m0:.1f} x; "
                        f"threshold {th.attn_logit_factor:g} x and > {th.attn_logit_floor:g})",
                        layer=int(i), value=m / m0, threshold=th.attn_logit_factor,
                    )  # fmt: skip
        return out

    def _output_logits(self, step, lse) -> list[dict]:
        if lse is None or not math.isfinite(lse):
            return []
        th = self.thresholds
        lse0 = self.first.setdefault("lse", lse)
        if lse - lse0 <= th.lse_rise:
            return []
        return self._fire(
            step, "output-logit-growth",
            f"the output log-partition log Z rose to {lse:.3g} from {lse0:.3g} (+{lse - lse0:.3g} nats; "
            f"threshold +{th.lse_rise:g})", value=lse - lse0, threshold=th.lse_rise,
        )  # fmt: skip

    def _updates(self, step, rows) -> list[dict]:
        th, out = self.thresholds, []
        for key, what in UPDATE_KEYS:
            history = self.updates.setdefault(key, [])
            while len(history) < len(rows):
                history.append([])
            for row, past in zip(rows, history):
                u = row.get(key)
                if u is None or not math.isfinite(u):
                    continue
                med = statistics.median(past) if past else None
                if med is not None and med > 0 and u > th.update_factor * med:
                    out += self._fire(
                        step, "update-ratio-spike",
                        f"layer {row['index']}'s {what} {u:.4g} is {u / med:.1f} x its median {med:.3g} over "
                        f"the {len(past)} earlier logged steps (threshold {th.update_factor:g} x)",
                        layer=row["index"], value=u / med, threshold=th.update_factor,
                    )  # fmt: skip
                past.append(u)
                del past[:-20]
        return out

    def state_dict(self) -> dict:
        d = asdict(self)
        d.pop("thresholds")
        return d

    def load_state_dict(self, d: dict) -> None:
        for k, v in d.items():
            if k == "updates" and isinstance(v, list):  # a state written when only param_update was kept
                v = {"param_update": v}
            setattr(self, k, v)


def _sublayer_grad(rows: list[dict]) -> float | None:
    """The mean over ``rows`` of sqrt(sum of squared attention and FFN gradient norms), None if absent."""
    vals = []
    for row in rows:
        parts = [row.get(k) for k in SUBLAYER_GRADS if row.get(k) is not None]
        if parts:
            vals.append(math.sqrt(sum(p * p for p in parts)))
    return sum(vals) / len(vals) if vals else None


def replay(records: list[dict], thresholds: Thresholds | None = None) -> list[dict]:
    """The warnings the rules raise over a run's stored records (each record's loss taken as that step's:
    exact for records logged every step, the window mean otherwise). Used to set thresholds offline."""
    rules = Rules(thresholds or Thresholds())
    out = []
    for r in records:  # in the watcher's order: the record's rules, then the loss's
        out += rules.check_record(r)
        out += rules.check_loss(r["step"], r.get("loss"), r.get("grad_norm"))
    return out
