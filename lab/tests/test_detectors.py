"""The divergence detectors on series built to trip each, and the benchmark's scoring (hits, false
alarms, lead times, Wilson intervals)."""

from __future__ import annotations

import pytest

from depthlab.intervals import wilson_interval
from depthlab.watch.detectors import (
    DETECTORS,
    loss_above_initial,
    lr_alone,
    marin_update_norm,
    megatron_spiky_loss,
    olmo_stability,
)
from depthlab_lab.forecast.detectors import benchmark, format_benchmark, score


def _series(losses, grads=None, lr=1e-3, updates=None):
    out = []
    for i, loss in enumerate(losses):
        rows = [{"index": 0}, {"index": 1, "param_update": (updates or {}).get(i + 1, 0.01)}]
        out.append({"step": i + 1, "loss": loss, "grad_norm": (grads or [1.0] * len(losses))[i], "lr": lr,
                    "layers": rows})  # fmt: skip
    return out


def test_olmo_fires_on_a_six_sigma_spike_of_the_loss_or_the_gradient_norm():
    calm = [3.0 + 0.01 * (i % 3) for i in range(20)]
    assert olmo_stability(_series(calm)) is None
    assert olmo_stability(_series([*calm, 3.5])) == 21
    grads = [1.0 + 0.01 * (i % 3) for i in range(20)] + [2.0]
    assert olmo_stability(_series([3.0] * 21, grads)) == 21
    assert olmo_stability(_series([3.0] * 5 + [30.0])) is None  # fewer than 10 values: no statistics yet


def test_megatron_initial_and_lr_baselines():
    assert megatron_spiky_loss(_series([5.0, 4.0, 49.0])) is None
    assert megatron_spiky_loss(_series([5.0, 4.0, 51.0])) == 3
    assert loss_above_initial(_series([5.0, 7.4, 7.6])) == 3
    assert lr_alone(_series([5.0], lr=0.1)) == 1 and lr_alone(_series([5.0], lr=0.03)) is None


def test_marin_fires_on_a_doubling_of_a_layers_update():
    assert marin_update_norm(_series([3.0] * 4, updates={4: 0.019})) is None
    assert marin_update_norm(_series([3.0] * 4, updates={4: 0.021})) == 4


def test_scoring_counts_hits_before_the_outcome_false_alarms_and_lead_times():
    def run(outcome, alarm_at, end):
        losses = [5.0] * end
        if alarm_at is not None:
            losses[alarm_at - 1] = 9.0  # loss-above-initial fires here
        return {"outcome": outcome, "outcome_step": end if outcome == "diverged" else None,
                "records": _series(losses)}  # fmt: skip

    runs = [run("diverged", 3, 10), run("diverged", 6, 10), run("diverged", None, 10),
            run("trained", 4, 10), run("stalled", None, 10)]  # fmt: skip
    s = score(runs, loss_above_initial)
    assert (s["hits"], s["false_alarms"], s["diverged"]) == (2, 1, 3)
    assert s["recall"] == pytest.approx(2 / 3) and s["precision"] == pytest.approx(2 / 3)
    assert s["recall_interval"] == wilson_interval(2, 3) and s["leads"] == [7, 4] and s["lead_median"] == 5.5
    late = [{"outcome": "diverged", "outcome_step": 8, "records": _series([5.0] * 9 + [9.0])}]
    # the alarm at step 10, after the outcome step 8, is a miss
    assert score(late, loss_above_initial)["hits"] == 0
    table = benchmark(runs)
    assert set(table) == set(DETECTORS) and "| loss-above-initial | 2/3 | 1 |" in format_benchmark(table)


def test_wilson_interval_known_values():
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert (
        wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4) and wilson_interval(3, 3)[1] == 1.0
    )
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(4, 3)


def test_published_detectors_run_live_in_the_watcher():
    import io

    import torch
    import torch.nn.functional as F

    import depthlab
    from depthlab import ModelConfig, build_model

    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=2, d_model=32, n_heads=4, max_len=32))
    opt = torch.optim.Adam(model.parameters(), lr=1.0)
    echo = io.StringIO()
    names = ["loss-above-initial", "lr-alone", "megatron-spiky-loss"]
    with depthlab.watch(model, opt, every=2, echo=echo, detectors=names) as w:
        for t in range(8):
            x = torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(t))
            loss = F.cross_entropy(model(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
            w.step(loss)
    codes = {x["code"]: x for x in w.warnings}
    assert codes["detector:lr-alone"]["step"] == 1 and "detector:loss-above-initial" in codes
    offline = loss_above_initial([{"step": r["step"], "loss": r["loss"]} for r in w.records])
    assert (
        codes["detector:loss-above-initial"]["step"] <= offline
    )  # live sees every step, offline the records
    assert all(x["message"] in echo.getvalue() for x in codes.values())
    with pytest.raises(depthlab.ConfigError, match="detectors"):
        depthlab.watch(model, detectors=["zloss"], echo=None)
