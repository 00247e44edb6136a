"""The doctor: verdicts (:class:`~depthlab.doctor.verdict.Verdict`: level, code, message) read off a probe, the numbers in each message.

Thresholds, and the measurements that placed them (depthlab decoders, d_model 64, 4 heads, xavier
init, a batch of 8 x 64 bytes of the default corpus, LM loss, seed 0 unless a range is given;
``c0/cL`` = context_grad_norm at stream 0 over the top, see :mod:`depthlab.probe.forward_backward`):

| stack (L = 6 / 12 / 24 / 48)              | c0/cL                         | g0/gL          | top token_cos   |
|-------------------------------------------|-------------------------------|----------------|-----------------|
| pre, sandwich, deepnorm, admin, rezero    | 0.77 .. 7.7 at every depth    | 0.77 .. 22     | 0.11 .. 0.90    |
| post                                      | 0.96 / 0.35 / 0.088 / 3.4e-3  | 2.4 .. 9.3     | 0.75 .. 1.000   |
| any wrapping, attention skip off          | ~0.2 / ~1e-2 / ~1e-5 / ~1e-6  | 1.5 .. 52      | 0.98 .. 1.000   |
| relu toy, 24 layers, residual / not (sum) | -                             | 100 / 4.5e-11  | -               |

- ``vanishing-gradient``: r = min(g0/gL, c0/cL). **error** below ``VANISH_ERROR`` = 1e-3 (three
  orders of magnitude: every skip-less attention stack from 24 layers, the toy stacks without skips), **warning**
  below ``VANISH_WARN`` = 0.1 (post-LN from 24 layers, which the literature finds diverging around
  18-20 layers: Liu et al. 2020; Wang et al. 2019), and an **error** below it too when the positions
  have collapsed at the top (mean cosine between positions >= ``COLLAPSE_COS`` = 0.98: attention without
  its skip, which stalls). Good stacks never go below 0.77. A layer is *starved*
  when the gradient at its output is below ``STARVED`` = 1e-2 of the top (the bottom layers of a stack
  without its attention skip get "almost no gradient"); the message counts them from the bottom.
- ``exploding-gradient``: max_i r_i above ``EXPLODE_WARN`` = 100 (**warning**; the residual relu
  toy sits at 100, every good stack below 25) or ``EXPLODE_ERROR`` = 1e4, or any non-finite value
  (**error**).
- ``stream-growth``: stream rms fitted as i^p over the streams after the first block, i = 1..L (the
  embedding's own scale, 0.02 in GPT-2 and Llama, and its jump to the first block's is not growth).
  Reported once rms_L / rms_1 >= 2.
  Pre-LN measures p = 0.40 / 0.52 / 0.53 / 0.58 (rms x2.2 .. x7.9), sandwich 0.57 .. 0.65: the
  sqrt(L) of the independent-sum estimate (L unit-variance updates add to variance L: p = 0.5) and Xiong et al.'s Lemma 2 (energy linear
  in depth). **ok** up to ``GROWTH_WARN_EXPONENT`` = 0.75; faster growth is a **warning**.
- ``missing-final-norm``: no norm takes x_L as input and the last block does not renormalise its
  output. **error** once the stream has drifted (rms_L / rms_0 >= 2: pre-LN without final norm is
  x2.2 at 6 layers, x7.9 at 48), **warning** before (it will drift once layers learn).
- ``warmup-required`` (**warning**): the blocks renormalise the stream (post-LN style) and the
  output change per log-depth, k = (output_change / perturbation) / ln(2L + 1), is at least
  ``WARMUP_K`` = 0.8. Liu et al. 2020 show post-LN's output change grows O(N) in the N sublayers
  and Admin's O(log N). Measured over d_model 32/64/128, 2 seeds: post k = 0.75 .. 1.05 at 2 layers,
  0.97 .. 1.37 at 4 .. 6 layers, 1.6 .. 27 at 96 .. 192; Admin 0.37 .. 0.59 (6 .. 192 layers);
  DeepNorm 0.03 .. 0.05 (96 layers). Literature: post-LN needs warmup from 6 layers (Vaswani et al. 2017, 4000 steps;
  Xiong et al. 2020: 8.45 BLEU without warmup vs ~34 with).
- ``learning-rate`` / ``update-size`` (only when the probe is given the learning rate and warmup the
  model will train with; it then replaces ``warmup-required``): a learning-rate ceiling for every
  wrapping, from the measured update gain and relative update and the calibrated limits, with how often
  the calibration grid agreed and where it was calibrated; an error outside that range is a warning
  marked as an extrapolation. The rules and their measurements: :mod:`depthlab.doctor.lr_limit`.
- ``plateau`` (only with the learning rate): when the run is expected to leave the unigram plateau
  (median and 80% interval of a censored fit of the tuning runs' escape steps on lr, width, depth and
  warmup; where advise's call is made and measured runs lie near, the nearest runs' escape steps) and,
  given its budget of steps, whether that budget would call it stalled (**warning**) or
  leaves it room (**ok**); never an error, and marked as an extrapolation outside the fit's support.
  The model: :mod:`depthlab.doctor.plateau`.
- ``non-finite`` (**error**, reported alone): a stream or the loss is inf or nan: float32 overflowed
  (a norm-free stack's stream grows with depth), so nothing else can be judged.
- ``dead-stream`` (**error**): a stream that is exactly zero (ReZero's a = 0 with its skip off).
- ``ok``: nothing above was a warning or an error.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from depthlab.doctor.lr_limit import learning_rate, width
from depthlab.doctor.plateau import plateau_verdict
from depthlab.doctor.record import evidence, load_record
from depthlab.doctor.uncalibrated import cap_for_topology
from depthlab.doctor.verdict import Verdict
from depthlab.fit import loglog_slope

if TYPE_CHECKING:  # the doctor reads a probe's result; the probe package imports the doctor
    from depthlab.probe.result import ProbeResult

VANISH_ERROR = 1e-3
VANISH_WARN = 0.1
STARVED = 1e-2
EXPLODE_WARN = 1e2
EXPLODE_ERROR = 1e4
GROWTH_REPORT = 2.0
GROWTH_WARN_EXPONENT = 0.75
WARMUP_K = 0.8
COLLAPSE_COS = 0.98


def diagnose(r: ProbeResult) -> list[Verdict]:
    """Every verdict that applies, most severe first; ``ok`` when nothing is a warning or an error.
    A forward pass that overflowed gets ``non-finite`` alone: no other number can be judged then."""
    broken = _non_finite(r)
    if broken is not None:
        return [broken]
    degenerate = _degenerate_loss(r)
    lr_given = r.config["probe"].get("lr") is not None
    checks = [_dead, _missing_final_norm, learning_rate if lr_given else _warmup, _growth]
    if lr_given:
        checks.append(_plateau)
    if degenerate is None:
        checks[1:1] = [_vanishing, _exploding]
    found = [v for v in [degenerate, *(check(r) for check in checks)] if v is not None]
    if not any(v.level != "ok" for v in found):
        found.append(_ok(r))
    return cap_for_topology(r, sorted(found, key=lambda v: v.severity))  # uncalibrated designs: warnings


def _non_finite(r: ProbeResult):
    """An error when a stream (or the loss) is inf or nan: float32 overflowed in the forward pass."""
    rms = r.column("stream_rms")
    bad = next((i for i, v in enumerate(rms) if v is not None and not math.isfinite(v)), None)
    loss = r.config["probe"]["loss_value"]
    if bad is None and math.isfinite(loss):
        return None
    where = (
        f"the stream is not finite from stream {bad} on (rms {rms[bad - 1]:.3g} at stream {bad - 1})"
        if bad
        else "the input stream is not finite"
        if bad == 0
        else f"every stream is finite but the loss is {loss}"
    )
    return Verdict(
        "error",
        "non-finite",
        f"the forward pass overflows float32: {where}, so no gradient or statistic below can be judged; "
        "unnormalised updates add up with depth: add a norm (pre-LN) or scale the branches "
        "(DeepNorm, ReZero)",
    )


def _degenerate_loss(r: ProbeResult):
    """loss "sum" on a stream that a LayerNorm just produced is a constant (each token's vector sums to
    sum(beta)), so every gradient below the top is rounding noise: say so instead of judging it."""
    pr = r.config["probe"]
    if pr["loss"] != "sum" or not r.config["stack"]["stream_normalised"]:
        return None
    n = math.prod(pr["batch_shape"])
    if abs(pr["loss_value"]) > 1e-3 * math.sqrt(n) * r.layers[-1]["stream_rms"]:
        return None
    return Verdict(
        "warning",
        "degenerate-loss",
        f"loss 'sum' is {pr['loss_value']:.2g}, a constant: the last block ends in a norm whose output "
        "sums to a fixed value per token, so the gradients below the top are rounding noise; probe with "
        "loss 'lm' where the model has an LM head; of a stack without one that ends in a norm (a post-LN "
        "torch.nn.TransformerEncoder) only the stream statistics can be read",
    )


def ratios(values: list) -> list[float] | None:
    """values[i] / values[L] (None entries, non-finite entries and a zero top give None)."""
    top = values[-1]
    if top is None or top <= 0 or any(v is None or not math.isfinite(v) for v in values):
        return None
    return [v / top for v in values]


def _dead(r: ProbeResult):
    rms = r.column("stream_rms")
    dead = [i for i, v in enumerate(rms) if v == 0]
    if not dead:
        return None
    return Verdict(
        "error",
        "dead-stream",
        f"stream {dead[0]} is exactly zero ({len(dead)} of {len(rms)} streams): nothing above it can learn "
        "from the input (a zero-initialised branch with its skip turned off)",
    )


def _vanishing(r: ProbeResult):
    plain, ctx = ratios(r.column("grad_norm")), ratios(r.column("context_grad_norm"))
    if plain is None:
        return None
    use_ctx = ctx is not None and ctx[0] < plain[0]
    prof = ctx if use_ctx else plain
    if prof[0] >= VANISH_WARN:
        return None
    top_cos = r.layers[-1].get("token_cos")
    collapsed = use_ctx and top_cos is not None and top_cos >= COLLAPSE_COS
    level = "error" if prof[0] < VANISH_ERROR or collapsed else "warning"
    starved = _starved_from_bottom(prof)
    what = "the gradient that differs between positions" if use_ctx else "the gradient"
    msg = f"{what} reaching stream 0 is {prof[0]:.1e} of its value at the top (stream {r.n_layers}); " + (
        f"the bottom {starved} of {r.n_layers} layers get less than {STARVED:g} of it"
        if starved
        else f"no layer is below {STARVED:g} of it yet, but it shrinks with every layer added"
    )
    if use_ctx:
        cos = r.layers[-1].get("token_cos")
        msg += (
            f" (plain gradient norm ratio {plain[0]:.2g}: what arrives is the same for every position; "
            f"positions collapse to one vector, mean cosine between positions {cos:.3f} at the top vs "
            f"{r.layers[0].get('token_cos'):.3f} at the input: rank collapse, Dong et al. 2021)"
        )
    if collapsed:
        msg += "; with the positions collapsed and this little context gradient reaching the bottom, such runs stall"
    return Verdict(level, "vanishing-gradient", f"{msg}. {_vanishing_advice(r)}")


def _vanishing_advice(r: ProbeResult) -> str:
    """What to change, from the config when it says which skips are off, else from the wiring measured."""
    residual = r.config.get("model", {}).get("residual")
    if isinstance(residual, list) and not {"attn", "ffn"} <= set(residual):
        off = ", ".join(s for s in ("attn", "ffn") if s not in residual)
        return f"Restore the skip around {off} (x = x + F(norm(x)): the identity path carries the gradient down intact; He et al. 2016)."
    if r.config["stack"]["stream_normalised"]:
        return (
            "The norm after each add shrinks the skip path (post-LN; Liu et al. 2020): "
            "pre-LN, Admin or DeepNorm keep it."
        )
    return "Check that every sublayer has its skip connection (the identity path carries the gradient down intact)."


def _starved_from_bottom(prof: list[float]) -> int:
    """How many layers, counted from layer 1 up, have the gradient at their output below STARVED."""
    n = 0
    for value in prof[1:-1]:
        if value >= STARVED:
            break
        n += 1
    return n


def _exploding(r: ProbeResult):
    values = [v for v in r.column("grad_norm") + r.column("context_grad_norm") if v is not None]
    if any(not math.isfinite(v) for v in values):
        return Verdict("error", "exploding-gradient", "the gradient is not finite at some depth (inf or nan)")
    prof = [x for x in (ratios(r.column("grad_norm")), ratios(r.column("context_grad_norm"))) if x]
    if not prof:
        return None
    peak = max(max(p) for p in prof)
    if peak <= EXPLODE_WARN:
        return None
    where = max(range(len(prof[0])), key=lambda i: max(p[i] for p in prof))
    level = "error" if peak > EXPLODE_ERROR else "warning"
    return Verdict(
        level,
        "exploding-gradient",
        f"the gradient at stream {where} is {peak:.3g}x its value at the top; it grows by "
        f"{growth_text(peak ** (1 / max(1, r.n_layers - where)))} per layer on the way down",
    )


def growth_text(factor: float) -> str:
    """``2.22x``, or in percent near 1: over hundreds of layers a 108x gain is 0.47% a layer, which
    three digits would print as "1x"."""
    return f"{factor:.3g}x" if factor >= 1.1 else f"{100 * (factor - 1):.2g}%"


def _growth(r: ProbeResult):
    """Judged on the streams after the first block (1..L): stream 0 is the embedding, whose scale is
    its init's (0.02 in GPT-2 and Llama) and says nothing of how blocks add up; its jump to the first
    block's scale is not growth. At least two blocks are needed."""
    rms = r.column("stream_rms")[1:]
    if len(rms) < 2 or rms[0] <= 0 or rms[-1] / rms[0] < GROWTH_REPORT:
        return None
    p, L = rms_exponent(rms), r.n_layers
    level = "warning" if p > GROWTH_WARN_EXPONENT else "ok"
    tail = (
        "faster than the independent-sum estimate: correlated updates pile up"
        if level == "warning"
        else "close to the independent-sum estimate (L independent unit updates: rms ~ sqrt(L))"
    )
    return Verdict(
        level,
        "stream-growth",
        f"stream rms grows from {rms[0]:.3g} after the first block to {rms[-1]:.3g} (x{rms[-1] / rms[0]:.3g}) "
        f"over {L} layers; fitted rms ~ l^{p:.2f} vs sqrt(L) = {math.sqrt(L):.3g} (exponent 0.5): {tail}; "
        + (evidence(load_record(), f"stream-growth:{level}") or "no calibration run had this verdict"),
    )


def _plateau(r: ProbeResult):
    """Whether and when the run leaves the unigram plateau (:mod:`depthlab.doctor.plateau`)."""
    return plateau_verdict(r, load_record(), width(r))


def rms_exponent(rms: list[float]) -> float:
    """p of the fit rms[j] ~ (j + 1)^p over the entries with rms > 0 (0 when it cannot be fitted); the
    doctor passes streams 1..L, so j + 1 counts the blocks applied."""
    return loglog_slope(range(1, len(rms) + 1), rms) or 0.0


def _missing_final_norm(r: ProbeResult):
    st = r.config["stack"]
    if st["final_norm"] or st["stream_normalised"]:
        return None
    rms = r.column("stream_rms")
    growth = rms[-1] / rms[0] if rms[0] > 0 else math.inf
    level = "error" if growth >= GROWTH_REPORT else "warning"
    return Verdict(
        level,
        "missing-final-norm",
        f"no norm between the last block and the output: the stream reaches the head at rms "
        f"{rms[-1]:.3g} (x{growth:.3g} its input's) and will drift further as layers learn; add a final "
        "norm (GPT-2's ln_f, LLaMA's final RMSNorm)",
    )


def _warmup(r: ProbeResult):
    st, pr = r.config["stack"], r.config["probe"]
    change, delta = pr.get("output_change"), pr.get("perturbation")
    if not st["stream_normalised"] or not change or not delta:
        return None
    amp = change / delta
    k = amp / math.log(2 * r.n_layers + 1)
    if k < WARMUP_K:
        return None
    return Verdict(
        "warning",
        "warmup-required",
        f"each block renormalises the stream (post-LN style) and a {delta:g} relative weight perturbation "
        f"moves the output by {change:.2e} ({amp:.3g}x, {k:.2f} per ln(2L+1) >= {WARMUP_K}): post-LN's "
        "output change grows linearly with depth (Liu et al. 2020); train it with a learning-rate warmup "
        "(Vaswani et al. 2017: 4000 steps) or use pre-LN, Admin or DeepNorm",
    )


def prediction(probe: dict, warmup: int | None = None) -> str | None:
    """What a probe's verdicts predict for the run: "fails" (an error, or ``warmup-required`` for a run
    without warmup), "trains", or None (no verdicts). ``probe`` is the Probe JSON; ``warmup`` the run's
    (default: the one the probe was given)."""
    verdicts = (probe or {}).get("verdicts") or []
    if not verdicts:
        return None
    if warmup is None:
        warmup = ((probe.get("config") or {}).get("probe") or {}).get("warmup") or 0
    for v in verdicts:
        if v.get("level") == "error":
            return "fails"
        if v.get("code") == "warmup-required" and v.get("level") == "warning" and not warmup:
            return "fails"
    return "trains"


def _ok(r: ProbeResult) -> Verdict:
    g = ratios(r.column("grad_norm"))
    rms = r.column("stream_rms")
    span = f"{min(g):.2g}x .. {max(g):.2g}x its top value" if g else "not measured"
    return Verdict(
        "ok",
        "ok",
        f"gradient by depth within {span}; stream rms {rms[0]:.3g} -> {rms[-1]:.3g} over {r.n_layers} layers",
    )
