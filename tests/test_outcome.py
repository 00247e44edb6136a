"""The outcome rules (depthlab.watch.outcome): each label on sequences built to produce it, then on
real runs built to produce it."""

from __future__ import annotations

import math

import pytest

from depthlab import ModelConfig, TrainConfig
from depthlab.train import train
from depthlab.watch.outcome import BLOWUP, STREAM_BLOWUP, Monitor


def _feed(m: Monitor, losses: list[float], every: int = 10, rms=None) -> None:
    """Each loss is one update; a logged window every ``every`` updates with the window's mean."""
    window = []
    for t, loss in enumerate(losses, 1):
        if m.update(t, loss, 1.0):
            return
        window.append(loss)
        if t % every == 0 or t == len(losses):
            if m.log(t, sum(window) / len(window), None if rms is None else rms(t)):
                return
            window = []


def test_flat_at_the_unigram_level_is_stalled():
    m = Monitor(steps=100, unigram_loss=3.0)
    _feed(m, [5.5] + [3.0] * 99)
    v = m.decide()
    assert v.outcome == "stalled" and "unigram level" in v.reason and v.step == 50


def test_flat_far_above_the_unigram_level_is_stalled_and_says_so():
    m = Monitor(steps=100, unigram_loss=3.0)
    _feed(m, [5.5] + [5.4 + 0.05 * (t % 2) for t in range(99)])
    v = m.decide()
    assert v.outcome == "stalled" and "above the unigram level" in v.reason and "flat" in v.reason


def test_wiggles_at_the_plateau_are_not_a_fall():
    """At the plateau the trend is not read: a bump and its return (3.28 -> 3.15) stays stalled."""
    m = Monitor(steps=150, unigram_loss=3.15)
    _feed(m, [5.5] + [3.2] * 79 + [3.28] * 20 + [3.15] * 50)
    assert m.decide(final_loss=3.19).outcome == "stalled"


def test_still_falling_above_the_unigram_level_is_undertrained():
    """A small learning rate: 5.5 -> 4.4 and still going down (more steps would help)."""
    m = Monitor(steps=100, unigram_loss=3.15)
    _feed(m, [5.5 - 0.011 * t for t in range(100)])
    v = m.decide()
    assert v.outcome == "undertrained" and "still falling" in v.reason


def test_a_run_too_short_for_three_logs_after_its_stall_point_is_read_over_its_last_three():
    """20 updates logged at 10 and 20: one log after the stall point. Falling 5.0 -> 4.4 -> 3.5 it is
    undertrained, not 'stalled ... flat' (the fall a line through too few points was taken to be)."""
    m = Monitor(steps=20, unigram_loss=3.15)
    m.log(1, 5.0)
    m.log(10, 4.4)
    m.log(20, 3.5)
    v = m.decide()
    assert v.outcome == "undertrained" and "still falling" in v.reason and v.step == 1
    flat = Monitor(steps=20, unigram_loss=3.15)
    for step in (1, 10, 20):
        flat.log(step, 4.0)
    assert flat.decide().outcome == "stalled"  # flat over the last three logs: a stall above the band


def test_where_three_logs_follow_the_stall_point_the_window_and_its_step_are_as_before():
    """100 updates logged every 20 after step 1: the window starts at step 50 (the rule's own start, not
    the first log after it), as it did before short runs were read over their last three logs."""
    m = Monitor(steps=100, unigram_loss=3.0)
    for step in (1, 20, 40, 60, 80, 100):
        m.log(step, 5.4)
    v = m.decide()
    assert v.outcome == "stalled" and v.step == 50 and "over the last 51 steps" in v.reason


def test_with_fewer_than_three_logs_in_all_the_trend_is_unknown_and_the_run_undertrained():
    m = Monitor(steps=4, unigram_loss=3.15)
    m.log(1, 5.0)
    m.log(4, 4.9)
    v = m.decide()
    assert v.outcome == "undertrained" and "too few to tell" in v.reason and "2 logged losses" in v.reason


def test_a_lagging_average_does_not_hide_a_run_below_the_unigram_level():
    """40 updates ending 6% below the unigram level: trained (the final loss decides, not an average
    that still remembers the first updates)."""
    m = Monitor(steps=40, unigram_loss=3.0)
    _feed(m, [5.5 - (5.5 - 2.82) * min(1.0, t / 30) for t in range(40)])
    assert m.ema > 0.95 * 3.0  # the moving average lags above the level ...
    assert m.decide(final_loss=2.82).outcome == "trained"  # ... the final loss is 6% below it


def test_a_blow_up_relative_to_the_initial_loss_is_diverged_and_stops_the_run():
    """5.5 -> 13.0 -> 5.9: worse than at init by far for two logged windows."""
    m = Monitor(steps=200, unigram_loss=3.15, spike_factor=1e9)  # the spike rule out of the way
    losses = [5.5] * 10 + [13.0] * 30 + [5.9] * 160
    _feed(m, losses)
    v = m.decide()
    assert v.outcome == "diverged" and "initial loss" in v.reason and v.step == 30
    assert 13.0 > BLOWUP * 5.5


def test_one_high_window_is_not_a_blow_up():
    m = Monitor(steps=100, unigram_loss=3.15, spike_factor=1e9)
    _feed(m, [5.5] * 10 + [9.0] * 10 + [2.5] * 80)
    assert m.decide().outcome == "trained"


def test_a_stream_blow_up_without_learning_is_diverged():
    m = Monitor(steps=100, unigram_loss=3.15, spike_factor=1e9)
    _feed(m, [5.5] + [3.2] * 99, rms=lambda t: 1.0 if t < 50 else 2 * STREAM_BLOWUP)
    v = m.decide()
    assert v.outcome == "diverged" and "stream rms" in v.reason


def test_a_large_stream_that_learns_is_not_a_blow_up():
    m = Monitor(steps=100, unigram_loss=3.15, spike_factor=1e9)
    _feed(m, [5.5] + [2.4] * 99, rms=lambda t: 1.0 if t < 50 else 2 * STREAM_BLOWUP)
    assert m.decide().outcome == "trained"


def test_non_finite_and_spike_rules_still_hold():
    nan = Monitor(steps=10, unigram_loss=3.0)
    assert not nan.update(1, 3.0, 1.0) and nan.update(2, 2.0, math.inf)
    v = nan.decide()
    assert (v.outcome, v.step) == ("diverged", 2) and "gradient norm" in v.reason
    spike = Monitor(steps=100, unigram_loss=3.0)
    fed = [spike.update(t, 1.0 if t < 20 else 50.0, 1.0) for t in range(1, 30)]
    assert fed.index(True) + 1 == 20 and "rose above 3 x" in spike.decide().reason
    noisy = Monitor(steps=100, unigram_loss=3.0)  # tiny losses jittering 5x are not a spike (floor)
    assert not any(noisy.update(t, 0.01 if t % 2 else 0.05, 1.0) for t in range(1, 100))
    assert noisy.decide(final_loss=0.03).outcome == "trained"


def test_state_round_trips():
    m = Monitor(steps=100, unigram_loss=3.0)
    _feed(m, [5.5] + [3.0] * 59)
    again = Monitor(steps=100, unigram_loss=3.0)
    again.load_state_dict(m.state_dict())
    _feed(m, [3.0] * 40)
    assert again.logged == m.logged[: len(again.logged)] and again.initial_loss == 5.5


TINY = dict(arch="decoder", d_model=16, n_heads=2, vocab_size=256, max_len=32)
RUN = dict(task="lm", steps=80, batch_size=8, seq_len=16, log_every=5, eval_every=40, eval_batches=2)


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, train_cfg, expected",
    [
        ({"n_layers": 2, "wrap": "pre"}, {"lr": 1e-2}, "trained"),
        ({"n_layers": 2, "wrap": "pre"}, {"lr": 1e-3}, "undertrained"),  # 5.9 -> 4.0, still falling
        ({"n_layers": 8, "wrap": "pre", "residual": ("ffn",)}, {"lr": 1e-2}, "stalled"),  # no attention skip
        ({"n_layers": 2, "wrap": "pre"}, {"lr": 1.0}, "diverged"),  # 5.9 -> 22: a blow-up
    ],
)
def test_real_runs_get_the_label_they_were_built_for(model, train_cfg, expected):
    r = train(ModelConfig(**TINY, **model), TrainConfig(**RUN, **train_cfg))
    assert r.outcome == expected, (r.outcome, r.reason, r.val_loss, r.unigram_loss)
