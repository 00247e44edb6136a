"""The warmup length in the learning-rate rule: the step-size limit of renormalising stacks fitted per warmup
on tuning runs, interpolated between them, its support widening the verdict's range, and a warmup
beyond the longest fitted marked as an extrapolation."""

from __future__ import annotations

import math

import pytest
import torch

from depthlab import ModelConfig, build_model
from depthlab.doctor.lr_limit import STEP_LIMIT, STEP_LIMIT_WARMUP, learning_rate, step_limit
from depthlab.probe import probe
from depthlab_lab.calibrate.step_limit_fit import band_limit, best_band, fit_step_limit

pytestmark = pytest.mark.usefixtures("one_thread")

LIMITS = {
    "warmups": [
        {"warmup": 0, "limit": 1.3, "band": [1.0, 1.69]},
        {"warmup": 30, "limit": 4.7, "band": [4.0, None]},
        {"warmup": 300, "limit": 12.0, "band": [10.0, 14.4]},
    ],
    "support": {"d_model": [16, 128], "n_layers": [2, 24], "lr": [1e-4, 1.0], "warmup": [0, 300]},
}


def _row(step, trained):
    return {"step": step, "trained": trained}


def test_the_best_band_is_the_widest_with_the_fewest_errors():
    rows = [_row(0.5, True), _row(1.0, True), _row(2.0, False), _row(8.0, False), _row(1.5, False)]
    assert best_band(rows) == (1.0, 1.5, 0)
    noisy = [*rows, _row(9.0, True)]  # one trained run far above: one error whatever the limit
    low, high, errors = best_band(noisy)
    assert errors == 1 and (low, high) == (1.0, 1.5)
    assert band_limit(1.0, 1.5) == pytest.approx(math.sqrt(1.5))
    assert band_limit(0.0, 2.0) == 2.0 and band_limit(3.0, math.inf) == 3.0


def _run(warmup, step, trained, share=1.0, d_model=32):
    return {
        "status": "done",
        "outcome": "trained" if trained else "stalled",
        "config": {
            "model": {"d_model": d_model, "n_layers": 6},
            "train": {"lr": step / 1000, "warmup": warmup},
        },
        "probe": {"config": {"stack": {"renormalised_share": share}, "probe": {"step_size": step}}},
    }


def test_the_limit_is_fitted_per_warmup_on_renormalising_runs_only():
    runs = []
    for w, cut in ((0, 1.2), (30, 4.5), (300, 11.0)):
        runs += [_run(w, s, s < cut) for s in (0.3, 0.8, 0.9 * cut, 1.1 * cut, 2 * cut, 5 * cut)]
    runs += [_run(30, 100.0, True, share=0.0)]  # a pre-LN run: not this rule's
    runs += [_run(1000, s, True) for s in (1.0, 2.0)]  # one class only: tells no limit
    fit = fit_step_limit(runs)
    got = {p["warmup"]: p for p in fit["warmups"]}
    assert set(got) == {0, 30, 300}
    for w, cut in ((0, 1.2), (30, 4.5), (300, 11.0)):
        assert got[w]["errors"] == 0 and got[w]["runs"] == 6
        assert got[w]["band"] == [pytest.approx(0.9 * cut, rel=1e-3), pytest.approx(1.1 * cut, rel=1e-3)]
        assert got[w]["limit"] == pytest.approx(math.sqrt(0.99) * cut, rel=1e-3)
    assert fit["support"]["warmup"] == [0, 300]
    assert fit_step_limit([_run(0, 1.0, True)]) is None


def test_each_warmups_limit_carries_its_band_per_width():
    runs = [_run(0, s, s < 1.2) for s in (0.3, 0.8, 1.1, 1.3, 3.0)]
    runs += [_run(0, s, s < 4.0, d_model=128) for s in (1.0, 3.0, 5.0)]
    (point,) = fit_step_limit(runs)["warmups"]
    by = {w["d_model"]: w for w in point["by_width"]}
    assert by[32]["band"] == [1.1, 1.3] and by[32]["runs"] == 5 and by[32]["errors"] == 0
    assert by[128]["band"] == [3.0, 5.0] and by[128]["limit"] == pytest.approx(math.sqrt(15), rel=1e-3)
    assert point["runs"] == 8 and point["errors"] == 1  # the pooled limit is still chosen on all runs


def test_the_limit_grows_with_the_warmup_between_the_fitted_ones_and_stays_beyond():
    record = {"step_limit": LIMITS}
    assert step_limit(0, record)[0] == pytest.approx(1.3)
    assert step_limit(30, record) == (pytest.approx(4.7), (pytest.approx(4.0), pytest.approx(4.7)))
    assert step_limit(300, record)[0] == pytest.approx(12.0)
    mid = step_limit(100, record)[0]
    f = (math.log(101) - math.log(31)) / (math.log(301) - math.log(31))
    assert mid == pytest.approx(math.exp(math.log(4.7) + f * (math.log(12.0) - math.log(4.7))))
    assert 4.7 < step_limit(50, record)[0] < mid < 12.0
    assert step_limit(2000, record)[0] == pytest.approx(12.0)
    assert step_limit(0, {}) == (STEP_LIMIT, (1.05, 1.68))
    assert step_limit(2000, {})[0] == STEP_LIMIT_WARMUP


def _post(lr, warmup, d_model=32):
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_heads=4, d_model=d_model, n_layers=6, wrap="post"))
    return probe(model, torch.randint(0, 256, (4, 32)), lr=lr, warmup=warmup)


def test_the_warmup_length_decides_where_the_old_rule_saw_only_whether_there_was_one():
    record = {"range": dict(LIMITS["support"]), "agreement": {}, "step_limit": LIMITS}
    gain = _post(1e-3, 30).config["probe"]["update_gain"]
    lr = 8.0 / gain  # s = 8: above the limit for 30 warmup steps, within the one for 300
    short, long = learning_rate(_post(lr, 30), record), learning_rate(_post(lr, 300), record)
    assert (
        short.level == "error"
        and "with a 30-step warmup" in short.message
        and "the limit is s <= 4.7" in short.detail
    )
    assert (
        long.level == "ok"
        and "with a 300-step warmup" in long.message
        and "the limit is s <= 12" in long.detail
    )
    assert "Extrapolation" not in long.message + long.detail
    beyond = learning_rate(_post(lr * 3, 2000), record)
    assert (
        beyond.level == "warning"
        and "warmup 2000 is above the calibrated warmups 0-300" in beyond.message + beyond.detail
    )


def test_the_limits_support_widens_the_range_of_the_verdict():
    record = {
        "range": {"d_model": [32, 64], "n_layers": [2, 16], "lr": [1e-3, 5e-2], "warmup": [0, 40]},
        "agreement": {},
        "step_limit": LIMITS,
    }
    v = learning_rate(_post(1e-4, 300), record)
    assert (
        "warmups 0-300" in v.message + v.detail
        and "depths 2-24" in v.message + v.detail
        and "Extrapolation" not in v.message + v.detail
    )


def test_a_longer_warmup_never_lowers_the_limit_the_warmups_are_pooled_instead():
    runs = [_run(0, s, s < 1.2) for s in (0.3, 0.8, 1.1, 1.3, 3.0)]
    runs += [_run(30, s, s < 4.5) for s in (1.0, 3.0, 4.0, 5.0, 9.0)]
    runs += [_run(300, s, s < 2.5) for s in (1.0, 2.0, 3.0, 6.0)]  # falls: other runs, not the warmup
    got = {p["warmup"]: p for p in fit_step_limit(runs)["warmups"]}
    assert got[0]["limit"] < got[30]["limit"] == got[300]["limit"]
    assert got[30]["pooled_with"] == [30, 300] and got[30]["runs"] == 9 and "pooled_with" not in got[0]
    assert got[30]["errors"] == 1


def test_between_the_limit_and_the_bands_high_end_a_warning_an_error_from_there():
    """The tuning runs place the limit only within its band (trained below its low end, failed from its
    high end): a step inside the band is a warning, not a confident error."""
    band = {"warmup": 0, "limit": math.sqrt(2.0 * 6.0), "band": [2.0, 6.0], "runs": 10, "errors": 1}
    points = {"warmups": [band], "error_from": "band_high", "support": LIMITS["support"]}
    record = {"range": dict(LIMITS["support"]), "agreement": {}, "step_limit": points}
    gain = _post(1e-3, 0).config["probe"]["update_gain"]
    inside = learning_rate(_post(4.0 / gain, 0), record)
    first_form = dict(record, step_limit={k: v for k, v in points.items() if k != "error_from"})
    assert learning_rate(_post(4.0 / gain, 0), first_form).level == "error"  # a record fitted before
    assert (
        inside.level == "warning"
        and "not expected to be safe" in inside.message
        and "failed from 6 (lr" in inside.detail
    )
    above = learning_rate(_post(7.0 / gain, 0), record)
    assert above.level == "error" and "failed from 6 (lr" in above.detail
    at_end = learning_rate(_post(6.0 / gain, 0), record)  # the run the end was taken from: an error
    assert at_end.level == "error"
    open_band = dict(band, band=[2.0, None], limit=2.0)
    no_end = dict(record, step_limit=dict(points, warmups=[open_band]))
    never = learning_rate(_post(50.0 / gain, 0), no_end)  # no failed run above the limit: no error
    assert never.level == "warning" and "where no tuning run above it failed" in never.message
    below = learning_rate(_post(1.5 / gain, 0), record)
    assert below.level == "ok"
