"""The step-size limit per renormalising wrapping: fitted on each wrapping's runs alone where they tell
one, and a wrapping judged by its own limit, calibrated only where its own runs ran."""

from __future__ import annotations

import json
import math

import pytest
import torch

from depthlab import ModelConfig, build_model
from depthlab.cli import main
from depthlab.doctor.lr_limit import for_wrap, learning_rate
from depthlab.probe import probe
from depthlab_lab.calibrate.step_limit_fit import fit_step_limit
from depthlab_lab.docgen.doctor_fits import limit_lines
from lab.tests.tuning_store import tuning_store

pytestmark = pytest.mark.usefixtures("one_thread")


def _run(wrap, step, trained, d_model=32, warmup=0):
    return {
        "status": "done",
        "outcome": "trained" if trained else "stalled",
        "config": {
            "model": {"wrap": wrap, "d_model": d_model, "n_layers": 6},
            "train": {"lr": step / 1000, "warmup": warmup},
        },
        "probe": {"config": {"stack": {"renormalised_share": 1.0}, "probe": {"step_size": step}}},
    }


def test_each_wrapping_whose_runs_tell_a_limit_gets_its_own_beside_the_pooled_one():
    runs = [_run("post", s, s < 3.0, d_model=d) for s in (0.5, 2.0, 4.0, 9.0) for d in (32, 512)]
    runs += [_run("deepnorm", s, s < 0.3, d_model=128) for s in (0.1, 0.2, 0.5, 2.0)]
    runs += [_run("admin", s, True) for s in (0.5, 1.0)]  # one class only: tells no limit of its own
    fit = fit_step_limit(runs)
    assert set(fit["by_wrap"]) == {"post", "deepnorm"}
    post, deep = fit["by_wrap"]["post"]["warmups"][0], fit["by_wrap"]["deepnorm"]["warmups"][0]
    assert post["band"] == [2.0, 4.0] and post["errors"] == 0
    assert deep["band"] == [0.2, 0.5] and deep["limit"] == pytest.approx(math.sqrt(0.1), rel=1e-3)
    assert fit["warmups"][0]["errors"] > 0  # pooled, the two wrappings' runs cannot both be told apart
    assert fit["by_wrap"]["deepnorm"]["support"]["d_model"] == [128, 128]
    assert fit["by_wrap"]["post"]["support"]["d_model"] == [32, 512]
    assert fit["by_wrap"]["deepnorm"]["error_from"] == "band_high"


POOLED = {"warmup": 0, "limit": 3.0, "band": [2.5, 3.6], "runs": 20, "errors": 2}
DEEP = {"warmup": 0, "limit": 0.3, "band": [0.25, 0.36], "runs": 8, "errors": 0}
RECORD = {
    "range": {"d_model": [32, 64], "n_layers": [2, 16], "lr": [1e-4, 1.0], "warmup": [0, 300]},
    "agreement": {},
    "step_limit": {
        "warmups": [POOLED],
        "error_from": "band_high",
        "support": {"d_model": [32, 512], "n_layers": [2, 24], "lr": [1e-4, 1.0], "warmup": [0, 300]},
        "by_wrap": {
            "deepnorm": {
                "warmups": [DEEP],
                "error_from": "band_high",
                "support": {"d_model": [32, 128], "n_layers": [2, 24], "lr": [1e-4, 1.0], "warmup": [0, 300]},
            }
        },
    },
}


def _probe(wrap, step, d_model=32):
    """The probe of a 6-layer stack of ``wrap`` at the lr that makes its step size ``step``."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_heads=4, d_model=d_model, n_layers=6, wrap=wrap))
    x = torch.randint(0, 256, (4, 32))
    gain = probe(model, x, lr=1e-3).config["probe"]["update_gain"]
    return probe(model, x, lr=step / gain, warmup=0)


def test_a_wrapping_with_its_own_limit_is_judged_by_it_and_the_others_by_the_pooled_one():
    deep = learning_rate(_probe("deepnorm", 1.0), RECORD)
    assert deep.level == "error" and "deepnorm's own limit" in deep.message
    assert "failed from 0.36 (lr" in deep.detail and "Extrapolation" not in deep.message + deep.detail
    post = learning_rate(_probe("post", 1.0), RECORD)
    assert post.level == "ok" and "without warmup" in post.message and "the limit is s <= 3 (" in post.detail
    assert for_wrap(RECORD, "post") == (RECORD, None)
    without = dict(RECORD, step_limit={k: v for k, v in RECORD["step_limit"].items() if k != "by_wrap"})
    assert learning_rate(_probe("deepnorm", 1.0), without).level == "ok"  # a record fitted before: pooled


def test_a_wrapping_judged_by_its_own_limit_is_calibrated_only_where_its_runs_ran():
    wide = learning_rate(_probe("deepnorm", 1.0, d_model=192), RECORD)
    assert wide.level == "warning" and "Extrapolation" in wide.message + wide.detail
    assert "width 192 is above the calibrated widths 32-128" in wide.message + wide.detail
    post = learning_rate(_probe("post", 5.0, d_model=192), RECORD)  # the pooled support reaches 512
    assert post.level == "error" and "Extrapolation" not in post.message + post.detail


def test_the_document_shows_each_wrappings_own_limit_and_a_record_fitted_before_shows_none():
    lines = "\n".join(limit_lines(RECORD))
    assert "| deepnorm | 0 | 0.3 | 0.25-0.36 | 8 | 0 | widths 32-128," in lines
    without = dict(RECORD, step_limit={k: v for k, v in RECORD["step_limit"].items() if k != "by_wrap"})
    assert "deepnorm" not in "\n".join(limit_lines(without))


def test_a_wrappings_own_range_replaces_a_wider_record_range():
    wide_range = dict(RECORD, range=dict(RECORD["range"], d_model=[32, 512]))
    v = learning_rate(_probe("deepnorm", 1.0, d_model=192), wide_range)
    assert v.level == "warning" and "width 192 is above the calibrated widths 32-128" in v.message + v.detail
    assert "(the deepnorm runs of the tuning grids)" in v.message + v.detail


def test_a_wrappings_own_support_holds_every_warmup_its_runs_ran_at():
    runs = [_run("deepnorm", s, s < 0.3) for s in (0.1, 0.2, 0.5, 2.0)]
    runs += [_run("deepnorm", s, True, warmup=300) for s in (0.1, 0.4, 0.9)]  # one class: tells no limit
    own = fit_step_limit(runs)["by_wrap"]["deepnorm"]
    assert [p["warmup"] for p in own["warmups"]] == [0] and own["support"]["warmup"] == [0, 300]


def test_warmups_pooled_into_one_limit_are_not_called_interpolated():
    pooled = {"limit": 2.0, "band": [1.5, 2.7], "runs": 9, "errors": 1, "pooled_with": [30, 300]}
    section = {
        "warmups": [DEEP, {"warmup": 30} | pooled, {"warmup": 300} | pooled],
        "error_from": "band_high",
        "support": RECORD["step_limit"]["by_wrap"]["deepnorm"]["support"],
    }
    record = dict(RECORD, step_limit=dict(RECORD["step_limit"], by_wrap={"deepnorm": section}))
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_heads=4, d_model=32, n_layers=6, wrap="deepnorm"))
    x = torch.randint(0, 256, (4, 32))
    gain = probe(model, x, lr=1e-3).config["probe"]["update_gain"]
    v = learning_rate(probe(model, x, lr=5.0 / gain, warmup=100), record)
    assert v.level == "error" and "the fitted warmups around it pooled into one limit" in v.message + v.detail
    assert "interpolated between" not in v.message + v.detail


def test_calibrate_prints_each_wrappings_own_limit(tmp_path, capsys):
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"range": {}, "agreement": {}}))
    study = {
        "name": "wrap-tuning",
        "model": {"d_model": 16, "n_heads": 2, "max_len": 16, "n_layers": 2},
        "train": {"steps": 20, "seq_len": 16, "batch_size": 2},
        "axes": {"wrap": ["post", "deepnorm"], "lr": [1e-3, 1e-2, 1e-1, 1.0]},
    }

    def judge(spec):
        step, cut = 100 * spec.train.lr, 5.0 if spec.model.wrap == "post" else 0.5
        probe = {"stack": {"renormalised_share": 1.0}, "probe": {"step_size": step}}
        return probe, {"outcome": "trained" if step < cut else "stalled"}

    db = tuning_store(str(tmp_path / "s.sqlite"), study, judge)
    assert main(["calibrate", "--from", db, "wrap-tuning", "--record", str(record)]) == 0
    out = capsys.readouterr().out
    assert "step limit of deepnorm at warmup 0: 0.316 (0 of 4 runs misclassified)" in out
    assert "step limit of post at warmup 0: 3.16 (0 of 4 runs misclassified)" in out


def test_a_wrapping_whose_limit_moves_with_width_is_fitted_on_width_scaled_steps():
    """DeepNorm-like runs whose tolerated step falls as 1 / width: no limit on s classifies every width,
    one on s x (d / 128) does; the exponent found is the smallest |a| that classifies them all."""
    runs = [
        _run("deepnorm", f * 128 / d, f < 1.0, d_model=d)
        for d in (32, 128, 512)
        for f in (0.5, 0.8, 1.25, 2.0)
    ]
    own = fit_step_limit(runs)["by_wrap"]["deepnorm"]
    assert -1.35 < own["width_exponent"] < -0.65 and own["width_ref"] == 128
    assert own["misclassified"]["scaled"] == 0 < own["misclassified"]["unscaled"]
    same = [_run("post", s, s < 3.0, d_model=d) for s in (0.5, 2.0, 4.0, 9.0) for d in (32, 512)]
    assert fit_step_limit(same)["by_wrap"]["post"]["width_exponent"] == 0  # a limit on s holds: no scaling


def test_the_doctor_compares_a_width_scaled_step_with_a_wrappings_width_scaled_limit():
    section = RECORD["step_limit"]["by_wrap"]["deepnorm"]
    wide = {
        **section,
        "width_exponent": -1.0,
        "width_ref": 128,
        "support": {**section["support"], "d_model": [32, 512]},
    }
    record = dict(RECORD, step_limit=dict(RECORD["step_limit"], by_wrap={"deepnorm": wide}))
    narrow = learning_rate(_probe("deepnorm", 1.0, d_model=32), record)  # 1.0 x (32 / 128) = 0.25
    assert narrow.level == "ok" and "the limit is s <= 0.3 (" in narrow.detail
    assert "0.25 width-scaled" in narrow.detail and "s = 1 output norms" in narrow.detail
    at_64 = learning_rate(_probe("deepnorm", 1.0, d_model=64), record)  # 0.5: above the band's high end
    assert at_64.level == "error" and "failed from 0.36 (lr" in at_64.detail
    assert learning_rate(_probe("deepnorm", 1.0, d_model=32), RECORD).level == "error"  # on s itself


def test_the_width_scaled_form_is_kept_only_where_it_tells_a_width_left_out_better():
    """With two widths, leaving one out leaves one width, where every exponent fits alike: the scaled
    form cannot show that it transfers, so the limit on s itself is kept, even though in sample the
    scaled form classifies every run."""
    runs = [
        _run("deepnorm", f * 128 / d, f < 1.0, d_model=d) for d in (32, 512) for f in (0.5, 0.8, 1.25, 2.0)
    ]
    own = fit_step_limit(runs)["by_wrap"]["deepnorm"]
    assert own["width_exponent"] == 0
    n = own["misclassified"]
    assert n["scaled"] == 0 < n["unscaled"] and n["held_out_scaled"] >= n["held_out_unscaled"]
    assert n["runs"] == 8
    three = [
        _run("deepnorm", f * 128 / d, f < 1.0, d_model=d)
        for d in (32, 128, 512)
        for f in (0.5, 0.8, 1.25, 2.0)
    ]
    kept = fit_step_limit(three)["by_wrap"]["deepnorm"]["misclassified"]
    assert kept["held_out_scaled"] < kept["held_out_unscaled"]  # what the three-width case above adopts
