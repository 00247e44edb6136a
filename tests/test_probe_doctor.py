"""The doctor's thresholds on synthetic profiles, and its verdicts on known-good and known-bad stacks."""

from __future__ import annotations

import math

import pytest
import torch

from depthlab import ModelConfig, build_model
from depthlab.doctor.checks import EXPLODE_WARN, VANISH_ERROR, VANISH_WARN, WARMUP_K, rms_exponent
from depthlab.probe import diagnose, probe
from depthlab.probe.result import ProbeResult


def fake(
    grad, ctx=None, rms=None, *, loss="lm", loss_value=5.0, final_norm=True, normalised=False, change=None
):
    """A ProbeResult with the given per-stream profiles (everything else neutral)."""
    L = len(grad) - 1
    rows = [
        {
            "index": i,
            "grad_norm": g,
            "stream_rms": rms[i] if rms else 1.0,
            "update_ratio": None if i == 0 else 0.1,
            "cos_prev": None if i == 0 else 0.99,
            "context_grad_norm": ctx[i] if ctx else None,
            "token_cos": 0.5,
        }
        for i, g in enumerate(grad)
    ]
    config = {
        "model": {},
        "stack": {
            "path": "layers",
            "kind": "generic",
            "n_layers": L,
            "note": "",
            "final_norm": final_norm,
            "stream_normalised": normalised,
        },
        "probe": {
            "loss": loss,
            "loss_value": loss_value,
            "batch_shape": [2, 4, 8],
            "perturbation": 1e-3,
            "output_change": change,
        },
    }
    return ProbeResult(config, rows)


def geometric(ratio: float, L: int = 10) -> list[float]:
    """grad[i] = ratio ** ((L - i) / L): ratio at the bottom, 1 at the top."""
    return [ratio ** ((L - i) / L) for i in range(L + 1)]


def levels(result) -> dict[str, str]:
    return {v.code: v.level for v in diagnose(result)}


@pytest.mark.parametrize(
    "ratio, expected",
    [(VANISH_ERROR / 2, "error"), (VANISH_WARN / 2, "warning"), (VANISH_WARN * 2, None)],
)
def test_vanishing_thresholds(ratio, expected):
    assert levels(fake(geometric(ratio))).get("vanishing-gradient") == expected


def test_vanishing_counts_starved_bottom_layers_and_uses_the_context_gradient():
    ctx = [1e-6] * 7 + [0.5, 0.8, 0.9, 1.0]  # streams 0..6 below 1e-2 of the top: layers 1..6 starved
    [v] = [v for v in diagnose(fake([1.0] * 11, ctx=ctx)) if v.code == "vanishing-gradient"]
    assert v.level == "error" and "the bottom 6 of 10 layers" in v.message + v.detail
    assert "differs between positions" in v.message + v.detail and "1.0e-06" in v.message + v.detail


@pytest.mark.parametrize(
    "ratio, expected", [(EXPLODE_WARN * 10, "warning"), (1e5, "error"), (math.nan, "error")]
)
def test_exploding(ratio, expected):
    grad = [ratio] + [1.0] * 10
    assert levels(fake(grad)).get("exploding-gradient") == expected


@pytest.mark.parametrize("depth, per_layer", [(10, "1.7x per layer"), (1000, "0.53% per layer")])
def test_exploding_says_the_growth_per_layer_readably_at_any_depth(depth, per_layer):
    """At 1,000 layers a 200x gain is 1.0053x a layer: it read "grows by 1x per layer"."""
    v = next(v for v in diagnose(fake([200.0] + [1.0] * depth)) if v.code == "exploding-gradient")
    assert f"grows by {per_layer} on the way down" in v.message


def test_stream_growth_exponent_and_level():
    sqrt_growth = [0.02] + [math.sqrt(i) for i in range(1, 49)]  # an unscaled embedding, then sqrt(l)
    assert rms_exponent(sqrt_growth[1:]) == pytest.approx(0.5)
    v = next(v for v in diagnose(fake([1.0] * 49, rms=sqrt_growth)) if v.code == "stream-growth")
    assert v.level == "ok" and "^0.50" in v.message + v.detail and "sqrt(L) = 6.93" in v.message + v.detail
    linear = [0.02] + [float(i) for i in range(1, 49)]
    assert levels(fake([1.0] * 49, rms=linear))["stream-growth"] == "warning"


def test_an_embeddings_jump_to_the_first_blocks_scale_is_not_growth():
    """DeepNorm re-wiring a Llama-shaped model: rms 0.02 at the embedding, then LayerNorm's 1.0 throughout."""
    assert "stream-growth" not in levels(fake([1.0] * 7, rms=[0.02] + [1.0] * 6))


def test_missing_final_norm():
    grown = [1.0 + 0.2 * i for i in range(11)]  # x3 at the top
    assert levels(fake([1.0] * 11, rms=grown, final_norm=False))["missing-final-norm"] == "error"
    assert levels(fake([1.0] * 11, final_norm=False))["missing-final-norm"] == "warning"
    assert "missing-final-norm" not in levels(fake([1.0] * 11, rms=grown, final_norm=False, normalised=True))


def test_warmup_required_from_output_change_per_log_depth():
    L = 10
    change = lambda k: k * math.log(2 * L + 1) * 1e-3  # noqa: E731
    assert (
        levels(fake([1.0] * 11, normalised=True, change=change(WARMUP_K * 1.2)))["warmup-required"]
        == "warning"
    )
    assert "warmup-required" not in levels(fake([1.0] * 11, normalised=True, change=change(WARMUP_K * 0.8)))
    assert "warmup-required" not in levels(fake([1.0] * 11, normalised=False, change=change(2.0)))


def test_ok_only_when_nothing_is_wrong_and_degenerate_sum_loss():
    assert levels(fake([1.0] * 11)) == {"ok": "ok"}
    d = levels(fake(geometric(1e-9), loss="sum", loss_value=1e-6, normalised=True))
    assert d == {"degenerate-loss": "warning"}  # no gradient verdict from a constant loss


@pytest.mark.parametrize(
    "kw, code, level",
    [
        ({"wrap": "post"}, "warmup-required", "warning"),
        ({"wrap": "rezero", "residual": ()}, "dead-stream", "error"),
        ({"wrap": "pre", "residual": ("ffn",), "n_layers": 24}, "vanishing-gradient", "error"),
    ],
)
def test_known_bad_stacks(kw, code, level, one_thread):
    torch.manual_seed(0)
    kw = {"n_layers": 8, **kw}
    model = build_model(ModelConfig(d_model=32, n_heads=4, **kw))
    assert levels(probe(model, torch.randint(0, 256, (4, 32))))[code] == level


@pytest.mark.parametrize("wrap", ["pre", "deepnorm", "admin"])
def test_known_good_stacks_have_no_error_or_warning(wrap, one_thread):
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=24, d_model=32, n_heads=4, wrap=wrap))
    assert set(levels(probe(model, torch.randint(0, 256, (4, 32)))).values()) == {"ok"}  # verdicts, all ok


def test_seed_004_toy_without_skips_vanishes(one_thread):
    """The interview answer's 48 tanh layers without skips: the probe says vanishing, with the starved layers counted."""
    from depthlab.probe.toys import TanhBlock, ToyStack

    torch.manual_seed(0)
    layers = [torch.nn.Linear(64, 64) for _ in range(48)]
    x = torch.randn(8, 64)
    verdicts = probe(ToyStack([TanhBlock(f, False) for f in layers]), x, loss="sum").verdicts
    [v] = [v for v in verdicts if v.code == "vanishing-gradient"]
    assert v.level == "error" and "of 48 layers get less than 0.01" in v.message + v.detail
    with_skips = probe(ToyStack([TanhBlock(f, True) for f in layers]), x, loss="sum").verdicts
    assert with_skips and "vanishing-gradient" not in {v.code for v in with_skips}


@pytest.mark.parametrize(
    ("rms", "loss_value", "where"),
    [
        ([1.0, 30.0, math.inf, math.nan], 5.0, "from stream 2 on (rms 30 at stream 1)"),
        ([1.0, 2.0, 3.0, 4.0], math.nan, "the loss is nan"),
    ],
)
def test_non_finite_forward_is_one_error_and_nothing_else(rms, loss_value, where):
    v = diagnose(fake([1.0, 1.0, 1.0, 1.0], rms=rms, loss_value=loss_value, final_norm=False))
    assert [(x.level, x.code) for x in v] == [("error", "non-finite")]
    assert where in v[0].message


def test_a_verdict_is_a_record_whose_json_is_the_probe_jsons():
    from depthlab.doctor.verdict import Verdict

    assert Verdict("ok", "ok", "fine").to_dict() == {"level": "ok", "code": "ok", "message": "fine"}
    assert Verdict("error", "x", "m", "init").to_dict()["cause"] == "init"
    for bad in (("fatal", "x", "m"), ("error", "x", "m", "luck")):
        with pytest.raises(ValueError):
            Verdict(*bad)
    assert (
        sorted([Verdict("ok", "a", ""), Verdict("error", "b", "")], key=lambda v: v.severity)[0].code == "b"
    )


def test_a_verdicts_summary_never_repeats_ok():
    """The compare table's cell: level then code, and the all-clear verdict once ("ok", not "ok ok")."""
    from depthlab.doctor.verdict import Verdict

    assert Verdict("ok", "ok", "fine").summary == "ok"
    assert Verdict("warning", "stream-growth", "grows").summary == "warning stream-growth"
    assert Verdict("ok", "learning-rate", "within").summary == "ok learning-rate"
