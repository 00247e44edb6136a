"""The doctor at the widths people train: a learning-rate ceiling for every wrapping, each verdict's evidence
and calibrated range, extrapolations at warning level at most, and the misdiagnoses it used to make."""

from __future__ import annotations

import pytest
import torch

from depthlab import ModelConfig, build_model
from depthlab.doctor.checks import prediction
from depthlab.doctor.lr_limit import GATED_LIMIT, UPDATE_TRAINED, update_limit
from depthlab.doctor.record import evidence, load_record, outside, range_text
from depthlab.probe import probe

pytestmark = pytest.mark.usefixtures("one_thread")

RECORD = {
    "where": "the test grid",
    "range": {"d_model": [32, 64], "n_layers": [2, 16], "lr": [1e-3, 5e-2], "warmup": [0, 40]},
    "agreement": {
        "learning-rate:error": {"runs": 44, "agreed": 41, "what": "with this verdict stalled or diverged"}
    },
}


def verdicts(lr, warmup=0, seq=32, **kw):
    torch.manual_seed(0)
    model = build_model(ModelConfig(**{"n_heads": 4, "d_model": 32, "n_layers": 6, **kw}))
    result = probe(model, torch.randint(0, 256, (4, seq)), lr=lr, warmup=warmup)
    return {v.code: v for v in result.verdicts}, result


def test_the_range_names_each_quantity_outside_it_and_nothing_inside():
    assert outside(RECORD, {"d_model": 32, "n_layers": 16, "lr": 1e-3, "warmup": 40}) == []
    out = outside(RECORD, {"d_model": 512, "n_layers": 1, "lr": 0.5, "warmup": None})
    assert out == [
        "width 512 is above the calibrated widths 32-64",
        "depth 1 is below the calibrated depths 2-16",
        "lr 0.5 is above the calibrated lrs 0.001-0.05",
    ]
    assert range_text(RECORD) == "widths 32-64, depths 2-16, lrs 0.001-0.05, warmups 0-40 (the test grid)"


def test_evidence_is_the_records_count_or_nothing():
    assert evidence(RECORD, "learning-rate:error") == (
        "on the calibration grid, 41 of 44 runs with this verdict stalled or diverged"
    )
    assert evidence(RECORD, "learning-rate:ok") is None


def test_the_committed_record_covers_the_grids_it_names():
    rec = load_record()
    assert rec["range"]["d_model"][0] <= 32 and rec["range"]["n_layers"][1] >= 16
    assert all(a["agreed"] <= a["runs"] for a in rec["agreement"].values())


def test_a_wide_post_ln_model_that_trained_is_not_a_failure():
    """6 post-LN layers at d_model 512, lr 7e-4, 50 warmup steps trained; the doctor must not call it a
    failure, and must say whether width 512 is inside its calibrated range."""
    found, result = verdicts(7e-4, 50, d_model=512, n_heads=8, wrap="post")
    v = found["learning-rate"]
    # ok or a warning (which, depends on the fitted limit), never an error
    assert v.level in ("ok", "warning") and "lr <= " in v.message + v.detail
    assert (
        "Extrapolation" in v.message + v.detail and "width 512" in v.message + v.detail
    ) or "widths 32-512" in v.message + v.detail
    assert prediction(result.to_dict()) == "trains"


def test_in_range_post_ln_at_a_large_step_is_still_an_error_with_its_evidence():
    v = verdicts(5e-2, 0, wrap="post")[0]["learning-rate"]
    assert v.level == "error" and "Extrapolation" not in v.message + v.detail
    assert "on the calibration grid" in v.message + v.detail


def _rho_limit(family: str, constant: float) -> str:
    """How the verdict names its limit on rho: the committed record's fitted one, else the constant."""
    fit = update_limit(family, load_record())
    return f"rho <= {fit['limit']:.3g}" if fit else f"rho <= {constant:g}"


def test_pre_ln_at_lr_half_is_not_ok():
    """A warning under the constant (no calibration run went there), an error under a fitted limit
    whose failures lie below rho 14."""
    v = verdicts(0.5, wrap="pre")[0]["learning-rate"]
    assert v.level in ("warning", "error") and "lr <= " in v.message + v.detail
    assert _rho_limit("free", UPDATE_TRAINED) in v.message + v.detail


@pytest.mark.parametrize("wrap", ["post", "pre", "sandwich", "reorder", "deepnorm", "admin", "rezero", "lns"])
def test_every_wrapping_gets_a_ceiling(wrap):
    found = verdicts(1e-3, n_layers=2, wrap=wrap)[0]
    [v] = [v for code, v in found.items() if code in ("learning-rate", "update-size")]
    assert v.message.startswith("lr 0.001 is within the limit: safe lr <= ")


def test_rezero_at_a_large_update_is_an_error_from_six_layers():
    found, result = verdicts(5e-2, wrap="rezero")
    v = found["update-size"]
    assert v.level == "error" and _rho_limit("gated", GATED_LIMIT) in v.message + v.detail
    assert prediction(result.to_dict()) == "fails"
    shallow = verdicts(5e-2, n_layers=2, wrap="rezero")[0]["update-size"].level
    gated = update_limit("gated", load_record()) or {}
    # fitted on every depth's runs, the limit holds at 2 layers too; else under 6 layers a warning at most
    assert shallow == ("error" if gated.get("all_depths") else "warning")
    assert verdicts(1e-2, wrap="rezero")[0]["update-size"].level == "ok"


def test_deepnorm_rewiring_of_a_small_init_model_is_not_stream_growth():
    """A Llama-shaped config re-wired to DeepNorm: a 0.02 embedding, then LayerNorm's scale throughout."""
    kw = dict(d_model=128, wrap="deepnorm", norm="rmsnorm", activation="swiglu", position="rope")
    found, result = verdicts(1e-3, 50, init="normal", embed_scale=False, bias=False, **kw)
    assert result.layers[0]["stream_rms"] < 0.1 < result.layers[1]["stream_rms"]
    assert "stream-growth" not in found


def test_the_missing_attention_skip_at_depth_is_an_error():
    found = verdicts(1e-3, n_layers=12, d_model=64, wrap="pre", residual=("ffn",))[0]
    v = found["vanishing-gradient"]
    assert v.level == "error" and "stall" in v.message + v.detail


def _run(outcome, verdicts, warmup=0):
    return {
        "status": "done",
        "outcome": outcome,
        "config": {"train": {"warmup": warmup}},
        "probe": {"verdicts": [{"level": lv, "code": c, "message": ""} for lv, c in verdicts]},
    }


def test_the_record_counts_each_verdict_and_prediction_against_the_outcomes():
    from depthlab_lab.calibrate.calibration import agreement

    runs = [
        _run("stalled", [("error", "learning-rate")]),
        _run("trained", [("error", "learning-rate")]),
        _run("trained", [("ok", "learning-rate"), ("ok", "stream-growth")]),
        _run("diverged", [("ok", "learning-rate")]),
        dict(_run("trained", [("ok", "learning-rate")]), status="failed"),  # not counted
    ]
    table = agreement(runs)
    assert table["learning-rate:error"] == {
        "runs": 2,
        "agreed": 1,
        "what": "with this verdict stalled or diverged",
    }
    assert table["learning-rate:ok"]["runs"] == 2 and table["learning-rate:ok"]["agreed"] == 1
    assert table["prediction:fails"]["agreed"] == 1 and table["prediction:trains"]["runs"] == 2
    assert table["stream-growth:ok"] == {"runs": 1, "agreed": 1, "what": "with this verdict trained"}
    assert "ok:ok" not in table


def test_the_grid_range_spans_every_run_of_the_grids():
    from depthlab.study import StudyConfig
    from depthlab_lab.calibrate.calibration import grid_range

    grid = StudyConfig.from_dict(
        {
            "name": "g",
            "model": {"d_model": 32, "n_heads": 4},
            "axes": {"n_layers": [2, 24], "lr": [1e-4, 1.0]},
        }
    )
    assert grid_range([grid]) == {
        "d_model": [32, 32],
        "n_layers": [2, 24],
        "lr": [1e-4, 1.0],
        "warmup": [0, 0],
    }


# What each level's message says: a level never says another's words (the out-of-range case included).
LEVEL_WORDS = {
    "ok": "is within the limit",
    "warning": "not expected to be safe",
    "error": "is where such stacks failed",
}
POST_OWN = "post stacks (fitted on that wrapping's tuning runs alone)"


def _post_limit():
    """A post-LN limit on s (G = 1 per unit lr): within up to 2, a warning to 4, failures from 4."""
    from depthlab.doctor.limit import LrLimit

    return LrLimit("renormalising", "s", 1.0, warn_above=2.0, error_from=4.0, trained_to=1.0, who=POST_OWN,
                   warmup=0)  # fmt: skip


COUNTS = {
    "learning-rate:error": {"runs": 219, "agreed": 205, "what": "with this verdict stalled or diverged"},
    "learning-rate:ok": {"runs": 466, "agreed": 422, "what": "with this verdict trained"},
    "prediction:fails": {"runs": 263, "agreed": 242, "what": "predicted to fail stalled or diverged"},
    "prediction:trains": {"runs": 514, "agreed": 465, "what": "predicted to train trained"},
}


def test_a_warning_cites_both_sides_never_the_runs_predicted_to_train_alone():
    """A warning says "not expected to be safe": it must not cite the runs predicted to train that
    trained as its evidence. No tuning run had it, so it gets the counts of both sides, each named."""
    from depthlab.doctor.lr_limit import render

    record = dict(RECORD, agreement=COUNTS)
    v = render(_post_limit(), 3.0, 6, record, [])
    assert v.level == "warning" and "not expected to be safe" in v.message
    assert "predicted to train" not in v.detail and "with this verdict" not in v.detail
    assert (
        "no calibration run had this verdict; on the calibration grid, 205 of 219 runs with an error "
        in v.detail
    )
    assert "and 422 of 466 runs with ok trained" in v.detail
    # a record that counts predictions only: both, and how a warning was counted
    only = dict(RECORD, agreement={k: a for k, a in COUNTS.items() if k.startswith("prediction:")})
    v = render(_post_limit(), 3.0, 6, only, [])
    assert (
        "a warning counts as predicted to train; on the calibration grid, 242 of 263 runs predicted to "
        in v.detail
    )
    assert "and 465 of 514 runs predicted to train trained" in v.detail
    # an ok and an error keep their own count
    assert "422 of 466 runs with this verdict trained" in render(_post_limit(), 1.0, 6, record, []).detail
    err = render(_post_limit(), 5.0, 6, record, [])
    assert err.level == "error" and "205 of 219 runs with this verdict stalled or diverged" in err.detail


def test_a_wrappings_own_limit_names_whose_runs_each_count_is_of():
    """Calibrated on post's own runs, the verdict gives their count and names the pooled count's runs
    (every wrapping's), instead of the pooled count beside "(the post runs of the tuning grids)"."""
    from depthlab.doctor.lr_limit import for_wrap, render

    section = {"warmups": [{"warmup": 0, "limit": 2.0, "band": [1.0, 4.0]}], "error_from": "band_high",
               "width_exponent": 0.0, "misclassified": {"runs": 89, "scaled": 7, "unscaled": 10}}  # fmt: skip
    record, who = for_wrap(dict(RECORD, agreement=COUNTS, step_limit={"by_wrap": {"post": section}}), "post")
    v = render(_post_limit(), 5.0, 6, record, [])
    assert who == "post" and v.level == "error"
    assert "(the post runs of the tuning grids): the limit classified 79 of those 89 runs right" in v.detail
    assert (
        "on the calibration grid (every wrapping's tuning runs), 205 of 219 runs with this verdict"
        in v.detail
    )
    # width-scaled (an exponent kept): the count of that form
    scaled, _ = for_wrap(
        dict(RECORD, step_limit={"by_wrap": {"post": dict(section, width_exponent=-1.0)}}), "post"
    )
    assert "classified 82 of those 89 runs right" in render(_post_limit(), 5.0, 6, scaled, []).detail
    # the committed record: post's own count, of its own runs
    own = load_record()["step_limit"]["by_wrap"]["post"]["misclassified"]["runs"]
    v = verdicts(5e-2, 0, wrap="post")[0]["learning-rate"]
    assert f"of those {own} runs right" in v.detail and "(every wrapping's tuning runs)" in v.detail


def test_an_error_held_back_by_the_range_is_a_warning_that_says_it_is_an_extrapolation():
    from depthlab.doctor.lr_limit import render

    out = ["depth 48 is above the calibrated depths 2-16"]
    v = render(_post_limit(), 5.0, 48, dict(RECORD, agreement=COUNTS), out)
    assert v.level == "warning"
    assert v.message.startswith(
        "lr 5 is above where such stacks failed (from 4), but outside the calibrated range: "
    )
    assert "an extrapolation, not expected to be safe; safe lr <= 2" in v.message
    assert "is where such stacks failed" not in v.message
    assert (
        "205 of 219 runs with an error stalled or diverged" in v.detail
        and "with this verdict" not in v.detail
    )
    assert "Extrapolation: depth 48 is above the calibrated depths 2-16" in v.detail


@pytest.mark.parametrize("wrap", ["post", "pre", "rezero", "deepnorm"])
def test_outside_the_calibrated_range_a_level_never_contradicts_its_message(wrap):
    """tests/test_advise.py's check of every level's words, at width 16 (below every calibrated width)
    and up to lr 1e6: never an error, a warning that says what it is, every message an extrapolation."""
    from depthlab.doctor.lr_limit import learning_rate
    from depthlab.probe.from_config import probe_config

    cfg = ModelConfig(n_layers=6, d_model=16, n_heads=4, wrap=wrap)
    held_back = 0
    for lr in (1e-4, 1e-2, 0.3, 1e6):
        v = learning_rate(probe_config(cfg, lr=lr, warmup=0, attribute=False))
        assert "Extrapolation: width 16 is below the calibrated widths" in v.detail, (lr, v.detail)
        assert v.level != "error" and "extrapolation" in v.message, (lr, v.message)
        if "at 6 layers they trained" in v.message:
            continue  # an error held back by depth says so instead
        assert LEVEL_WORDS[v.level] in v.message, (lr, v.level, v.message)
        assert all(words not in v.message for level, words in LEVEL_WORDS.items() if level != v.level)
        held_back += "above where such stacks failed" in v.message
    assert held_back  # lr 1e6 is above where every such stack failed: held back to a warning
