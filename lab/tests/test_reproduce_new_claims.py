"""The claims registered to fit what their sources state (post-fails, lr-reference, stream-trained,
model-update-stream, batchnorm-same, original-peak): each decision, on inputs built to agree and to
fail, and each claim's quick smoke version on a shrunk regime."""

from __future__ import annotations

import math

import pytest

from depthlab.intervals import AGREE, INCONCLUSIVE, MISMATCH, RESULTS
from depthlab_lab.reproduce import lm_runs
from depthlab_lab.reproduce.claims import (
    batchnorm_same,
    lr_reference,
    model_update_stream,
    original_peak,
    post_fails,
    stream_trained,
)
from depthlab_lab.reproduce.lm_runs import Run
from depthlab_lab.reproduce.reproduction import counts, run_claim

UNIGRAM = 3.4
NEW = (
    "post-fails",
    "lr-reference",
    "stream-trained",
    "model-update-stream",
    "batchnorm-same",
    "original-peak",
)


def _runs(*vals: float, outcome: str = "") -> list[Run]:
    """One run per value: its validation loss (its outcome trained below the stall level, else stalled)."""
    out = []
    for i, v in enumerate(vals):
        label = outcome or ("trained" if v / UNIGRAM - 1 < -0.05 else "stalled")
        out.append(Run("r", {"vocab_size": 256}, {"seed": i}, label, None, v, v, UNIGRAM, 0.0))
    return out


STALLED, TRAINED = (3.39, 3.41, 3.40), (2.80, 2.85, 2.90)


def test_post_fails_agrees_only_when_every_lr_fails_and_the_control_trains():
    stalled = {lr: _runs(*STALLED) for lr in (1e-3, 1e-2)}
    failure, control = post_fails.fails_checks(24, stalled, _runs(*TRAINED))
    assert failure.result == AGREE and control.result == AGREE
    one_trains = {**stalled, 3e-2: _runs(*TRAINED)}
    assert post_fails.fails_checks(24, one_trains, _runs(*TRAINED))[0].result == MISMATCH
    # a diverged run that still reported a low finite loss counts as ln V: it failed
    diverged = {1e-3: _runs(2.5, 2.6, 2.7, outcome="diverged"), 1e-2: _runs(*STALLED)}
    assert post_fails.fails_checks(24, diverged, _runs(*TRAINED))[0].result == AGREE
    failure, control = post_fails.fails_checks(24, stalled, _runs(*STALLED))
    assert control.result == MISMATCH and failure.result == INCONCLUSIVE


def _curves(post_deep: float, pre_deep: float) -> dict:
    """{(wrap, depth, lr): per-seed capped losses}: at 2 layers both wrappings' curves alike; at 24 each
    curve flat at the given loss except one good lr for pre-LN."""
    lrs, out = (1e-3, 1e-2, 1e-1), {}
    for i, lr in enumerate(lrs):
        for w in lr_reference.WRAPS:
            out[(w, 2, lr)] = [2.5 + 0.3 * i + 0.01 * s for s in range(3)]
        out[("post", 24, lr)] = [post_deep + 0.01 * s for s in range(3)]
        out[("pre", 24, lr)] = [(2.4 if i == 1 else pre_deep) + 0.01 * s for s in range(3)]
    return out


def test_lr_reference_does_not_reward_a_curve_bad_everywhere():
    bad_everywhere = _curves(post_deep=5.5, pre_deep=3.0)
    check = lr_reference.growth_check(bad_everywhere, [2, 24], (1e-3, 1e-2, 1e-1), 3)
    assert check.result == AGREE  # own-best sensitivity would score the flat post-LN curve 0
    good_post = _curves(post_deep=2.45, pre_deep=4.0)
    assert lr_reference.growth_check(good_post, [2, 24], (1e-3, 1e-2, 1e-1), 3).result == MISMATCH
    assert lr_reference.capped(_runs(9.0)[0]) == pytest.approx(math.log(256))


def test_stream_trained_needs_trained_stacks_and_a_ratio_above_one():
    up = {6: [1.3, 1.4, 1.35], 12: [1.6, 1.5, 1.7]}
    ctx = {6: "outcomes", 12: "outcomes"}
    assert stream_trained.trained_check(up, {6: True, 12: True}, ctx).result == AGREE
    down = {6: [0.7, 0.75, 0.72], 12: [1.6, 1.5, 1.7]}
    assert stream_trained.trained_check(down, {6: True, 12: True}, ctx).result == MISMATCH
    untrained = stream_trained.trained_check(up, {6: True, 12: False}, ctx)
    assert untrained.result == INCONCLUSIVE and "not every run trained" in untrained.measured


def _change(post: float, deepnorm: float, pre: float) -> dict:
    """{wrap: {depth: per seed}}: 6 layers at 0.01, 96 layers at 0.01 x the given factor."""
    return {
        w: {6: [0.01, 0.011, 0.009], 96: [0.01 * f, 0.011 * f * 1.02, 0.009 * f * 0.98]}
        for w, f in (("post", post), ("deepnorm", deepnorm), ("pre", pre))
    }


def test_model_update_stream_decides_deepnet_and_admin_both_ways():
    assert [c.result for c in model_update_stream.stream_checks(_change(5.0, 1.0, 1.5))] == [AGREE] * 3
    assert [c.result for c in model_update_stream.stream_checks(_change(1.0, 4.0, 3.0))] == [MISMATCH] * 3
    assert all(c.interval.scale == "log" for c in model_update_stream.stream_checks(_change(5.0, 1.0, 1.5)))


def test_batchnorm_same_measure_gap_both_ways():
    def gaps(bn: float, ln: float) -> dict:
        return {
            "batchnorm": [{"gap": bn + 0.01 * s} for s in range(5)],
            "layernorm": [{"gap": ln - 0.01 * s} for s in range(5)],
        }

    assert batchnorm_same.gap_check(gaps(0.3, 0.05)).result == AGREE
    assert batchnorm_same.gap_check(gaps(0.0, 0.2)).result == MISMATCH


def test_original_peak_runs_differ_in_the_ramp_alone_and_decide_both_ways():
    r = {**original_peak.SMALL}
    a, b = original_peak.schedules(r).values()
    assert a["lr"] == b["lr"] == pytest.approx(128**-0.5 * 4000**-0.5) and a["warmup"] == r["warmup"]
    assert (a["schedule"], b["schedule"], b["warmup"]) == ("linear", "constant", 0)
    check, control = original_peak.peak_checks(_runs(*STALLED), _runs(*TRAINED), r)
    assert (check.result, control.result) == (AGREE, AGREE)
    assert original_peak.peak_checks(_runs(*TRAINED), _runs(*TRAINED), r)[0].result == MISMATCH
    assert original_peak.peak_checks(_runs(*STALLED), _runs(*STALLED), r)[0].result == INCONCLUSIVE


# The new claims' regimes shrunk to seconds (the quick smoke version is shrunk further for the test).
TINY = {
    "post-fails": {"depth": 2, "lrs": [1e-3, 5.0], "steps": 4, "control_lr": 1e-3, "seeds": [3, 4]},
    "lr-reference": {"depths": [1, 2], "lrs": [1e-3, 1e-1], "steps": 4, "warmup": 1, "seeds": [3, 4]},
    "stream-trained": {"depths": [2, 3], "steps": 4, "warmup": 1, "seeds": [0, 1]},
    "model-update-stream": {"depths": [2, 3], "steps": 2, "seeds": [5, 6]},
    "batchnorm-same": {"d_model": 16, "steps": 4, "seeds": [5, 6]},
    "original-peak": {
        "d_model": 16,
        "d_ff": 32,
        "n_heads": 2,
        "n_layers": 2,
        "steps": 6,
        "warmup": 2,
        "seeds": [0, 1],
    },
}
MODULES = {
    "post-fails": post_fails,
    "lr-reference": lr_reference,
    "stream-trained": stream_trained,
    "model-update-stream": model_update_stream,
    "batchnorm-same": batchnorm_same,
    "original-peak": original_peak,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW)
def test_new_claim_quick_smoke(monkeypatch, name, tmp_path, one_thread):
    for train in (lm_runs.TINY_TRAIN,):
        monkeypatch.setitem(train, "eval_batches", 1)
        monkeypatch.setitem(train, "batch_size", 4)
        monkeypatch.setitem(train, "seq_len", 16)
    monkeypatch.setitem(lm_runs.TINY_MODEL, "d_model", 16)
    monkeypatch.setitem(lm_runs.TINY_MODEL, "n_heads", 2)
    monkeypatch.setattr(MODULES[name], "QUICK", TINY[name])
    lm_runs.clear_cache()
    result = run_claim(name, quick=True, out_dir=str(tmp_path / name))
    lm_runs.clear_cache()
    assert result.name == name and result.checks and result.source
    assert all(c.result in RESULTS and c.measured and c.stated for c in result.checks)
    assert sum(counts(result.checks).values()) == len(result.checks)
    assert result.format().startswith(name)
