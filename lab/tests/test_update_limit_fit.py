"""The doctor's limits on the relative update rho: fitted per family on tuning runs (the zero-gated one on
deep runs only, a one-class family left out, a band per width as evidence), read by the learning-rate
verdict (error from the band's high end, warning between the limit and it, ok below, an extrapolation
outside the fit's support), and written into the record by refit and `depthlab calibrate`."""

from __future__ import annotations

import json
import math

import pytest
import torch

from depthlab import ModelConfig, build_model
from depthlab.cli import main
from depthlab.doctor.lr_limit import GATED_DEPTH, UPDATE_TRAINED, learning_rate, update_limit
from depthlab.errors import InputError
from depthlab.probe import probe
from depthlab.study.grid import StudyConfig
from depthlab.study.store import Store
from depthlab_lab.calibrate.refit import FITTED, keep_fitted, refit, tuning_runs
from depthlab_lab.calibrate.update_limit_fit import fit_update_limits, update_rows
from lab.tests.tuning_store import tuning_store

pytestmark = pytest.mark.usefixtures("one_thread")


def _run(wrap, rho, trained, d_model=32, n_layers=6, lr=1e-3, warmup=0, share=0.0, outcome=None):
    return {
        "status": "done",
        "outcome": outcome or ("trained" if trained else "diverged"),
        "config": {
            "model": {"wrap": wrap, "d_model": d_model, "n_layers": n_layers},
            "train": {"lr": lr, "warmup": warmup},
        },
        "probe": {"config": {"stack": {"renormalised_share": share}, "probe": {"relative_update": rho}}},
    }


def test_the_free_limit_is_the_band_that_classifies_best_and_others_are_left_out():
    runs = [_run("pre", rho, rho < 2.0) for rho in (0.1, 0.5, 1.5, 2.5, 4.0)]
    runs += [_run("sandwich", 3.0, True)]  # one trained run above: one error whatever the limit
    runs += [_run("post", 50.0, True, share=1.0)]  # renormalises the stream: the step limit's
    runs += [_run("pre", 0.2, True, outcome="trained") | {"status": "failed"}]  # not finished
    runs += [_run("pre", None, False)]  # no relative update measured
    fit = fit_update_limits(runs)
    assert set(fit["families"]) == {"free"}  # no gated run: left out, the doctor keeps its constant
    free = fit["families"]["free"]
    assert free["band"] == [1.5, 2.5] and free["errors"] == 1 and free["runs"] == 6
    assert free["limit"] == pytest.approx(math.sqrt(1.5 * 2.5), rel=1e-3)
    assert free["above"] == {"runs": 3, "failed": 2}  # rho 2.5, 3.0 (trained) and 4.0
    assert free["support"] == {"d_model": [32, 32], "n_layers": [6, 6], "lr": [1e-3, 1e-3], "warmup": [0, 0]}


def test_a_family_with_one_outcome_only_tells_no_limit():
    runs = [_run("pre", rho, True) for rho in (0.1, 1.0, 10.0)]
    assert fit_update_limits(runs) is None
    runs += [_run("rezero", rho, rho < 0.5, n_layers=12) for rho in (0.1, 0.3, 0.8, 1.6)]
    assert set(fit_update_limits(runs)["families"]) == {"gated"}


def test_zero_gated_runs_of_every_depth_decide_the_gated_limit():
    deep = [_run("rezero", rho, rho < 0.6, n_layers=16, lr=rho / 30) for rho in (0.1, 0.3, 0.9, 2.0)]
    shallow = [_run("rezero", rho, rho < 0.6, n_layers=2) for rho in (0.2, 0.9, 5.0)]
    gated = fit_update_limits(deep + shallow)["families"]["gated"]
    assert gated["band"] == [0.3, 0.9] and gated["errors"] == 0 and gated["runs"] == 7
    assert gated["all_depths"] is True and gated["support"]["n_layers"] == [2, 16]
    assert gated["above"] == {"runs": 4, "failed": 4}
    assert len(update_rows(deep + shallow)["gated"]) == 7


def test_the_band_per_width_is_evidence_beside_the_pooled_limit():
    runs = [_run("pre", rho, rho < 2.0, d_model=32) for rho in (0.5, 1.5, 3.0, 6.0)]
    runs += [_run("pre", rho, rho < 8.0, d_model=128) for rho in (1.0, 5.0, 10.0, 20.0)]
    runs += [_run("pre", rho, True, d_model=512) for rho in (0.2, 0.4)]  # one class at this width
    free = fit_update_limits(runs)["families"]["free"]
    by = {w["d_model"]: w for w in free["by_width"]}
    assert list(by) == [32, 128, 512]
    assert by[32]["band"] == [1.5, 3.0] and by[32]["errors"] == 0 and by[32]["runs"] == 4
    assert by[128]["band"] == [5.0, 10.0] and by[128]["limit"] == pytest.approx(math.sqrt(50), rel=1e-3)
    assert by[512]["band"] == [0.4, None] and by[512]["limit"] == 0.4  # all trained: open above
    # the pooled limit is still chosen on all runs together
    assert free["runs"] == 10 and free["band"] == [1.5, 3.0] and free["errors"] == 1


FIT = {
    "limit": 2.0,
    "band": [1.0, 4.0],
    "runs": 40,
    "errors": 3,
    "above": {"runs": 12, "failed": 11},
    "support": {"d_model": [32, 128], "n_layers": [2, 24], "lr": [1e-4, 1.0], "warmup": [0, 300]},
}
RECORD = {
    "range": {"d_model": [32, 64], "n_layers": [2, 16], "lr": [1e-3, 5e-2], "warmup": [0, 40]},
    "agreement": {},
    "update_limit": {"families": {"free": FIT, "gated": dict(FIT, min_depth=GATED_DEPTH)}},
}


def _probe(wrap, lr, n_layers=6, d_model=32):
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_heads=4, d_model=d_model, n_layers=n_layers, wrap=wrap))
    return probe(model, torch.randint(0, 256, (4, 32)), lr=lr)


def _lr_for(wrap, rho, **kw):
    """The lr at which this model's relative update is ``rho`` (rho grows in proportion to lr)."""
    return rho / (_probe(wrap, 1e-3, **kw).config["probe"]["relative_update"] / 1e-3)


@pytest.mark.parametrize(("rho", "level"), [(6.0, "error"), (3.0, "warning"), (1.5, "ok")])
def test_a_free_stack_is_judged_against_the_fitted_band(rho, level):
    lr = _lr_for("pre", rho)
    result = _probe("pre", lr)
    v = learning_rate(result, RECORD)
    assert v.level == level and v.code == "learning-rate" and "Extrapolation" not in v.message + v.detail
    per_lr = result.config["probe"]["relative_update"] / lr
    assert (
        f"safe lr <= {2.0 / per_lr:.2g}" in v.message
        and f"trained up to 1 (lr {1.0 / per_lr:.2g}) and failed from 4 (lr {4.0 / per_lr:.2g})" in v.detail
    )
    assert "the limit is rho <= 2 (" in v.detail and "stacks that never renormalise the stream" in v.message
    assert ("11 of 12 tuning runs there failed" in v.message + v.detail) == (level == "error")
    assert ("not expected to be safe" in v.message + v.detail) == (level == "warning")
    assert "widths 32-128, depths 2-24" in v.message + v.detail  # the fit's support widens the range


def test_outside_the_fits_support_an_error_is_a_marked_warning():
    lr = _lr_for("pre", 50.0, d_model=256, n_layers=2)
    v = learning_rate(_probe("pre", lr, d_model=256, n_layers=2), RECORD)
    assert v.level == "warning" and "11 of 12 tuning runs there failed" in v.message + v.detail
    assert "Extrapolation: width 256 is above the calibrated widths 32-128" in v.message + v.detail


def test_a_zero_gated_stack_errs_from_the_band_only_at_depth():
    lr = _lr_for("rezero", 6.0)
    deep = learning_rate(_probe("rezero", lr), RECORD)
    assert (
        deep.level == "error"
        and deep.code == "update-size"
        and "runs there failed" in deep.message + deep.detail
    )
    shallow = learning_rate(_probe("rezero", lr, n_layers=2), RECORD)
    assert shallow.level == "warning" and f"of {GATED_DEPTH} layers or more" in shallow.message
    assert learning_rate(_probe("rezero", _lr_for("rezero", 1.5)), RECORD).level == "ok"


def test_a_gated_fit_of_every_depth_errs_at_every_depth():
    every = dict(RECORD, update_limit={"families": {"gated": dict(FIT, all_depths=True)}})
    shallow = learning_rate(_probe("rezero", _lr_for("rezero", 6.0), n_layers=2), every)
    assert shallow.level == "error" and "layers or more" not in shallow.message + shallow.detail


def test_without_a_fitted_family_the_constants_decide():
    record = dict(RECORD, update_limit={"families": {"gated": FIT}})
    assert update_limit("free", record) is None and update_limit("gated", record) is FIT
    v = learning_rate(_probe("pre", _lr_for("pre", 6.0)), record)
    assert (
        v.level == "warning" and f"rho <= {UPDATE_TRAINED:g} (the first tuning grid's constant)" in v.detail
    )


def _store(path: str) -> str:
    """A store of one study (pre-LN and ReZero x 3 depths x 6 lrs), finished with probes whose relative
    update is 30 x lr and outcomes that fail from rho 1 (ReZero from 0.3)."""

    def judge(spec):
        rho = 30 * spec.train.lr
        cut = 1.0 if spec.model.wrap == "pre" else 0.3
        probe = {"stack": {"renormalised_share": 0.0}, "probe": {"relative_update": rho}}
        return probe, {"outcome": "trained" if rho < cut else "diverged"}

    study = {
        "name": "rho-tuning",
        "model": {"d_model": 16, "n_heads": 2, "max_len": 16},
        "train": {"steps": 20, "seq_len": 16, "batch_size": 2},
        "axes": {
            "wrap": ["pre", "rezero"],
            "n_layers": [2, 6, 12],
            "lr": [1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1],
        },
    }
    return tuning_store(path, study, judge)


def test_refit_and_calibrate_write_the_update_limits(tmp_path, capsys):
    db = _store(str(tmp_path / "rho.sqlite"))
    rec = refit({"range": {}, "agreement": {}}, [(db, "rho-tuning")], None)
    free, gated = rec["update_limit"]["families"]["free"], rec["update_limit"]["families"]["gated"]
    assert free["band"] == [0.9, 3.0] and free["errors"] == 0 and free["runs"] == 18
    assert gated["band"] == [0.09, 0.3] and gated["runs"] == 18 and gated["support"]["n_layers"] == [2, 12]
    assert [w["d_model"] for w in free["by_width"]] == [16]
    assert "update_limit" in FITTED and keep_fitted({"range": {}}, rec)["update_limit"] == rec["update_limit"]
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"range": {}, "agreement": {}}))
    assert main(["calibrate", "--from", db, "rho-tuning", "--record", str(path)]) == 0
    assert json.loads(path.read_text())["update_limit"] == rec["update_limit"]
    out = capsys.readouterr().out
    assert (
        "limit on rho, stacks that never renormalise the stream" in out and "by width: 16 band 0.9-3" in out
    )


def test_a_held_out_study_is_refused_by_name_and_by_id_and_its_runs_never_fitted(tmp_path):
    db = _store(str(tmp_path / "rho.sqlite"))
    study = StudyConfig.from_dict(
        {
            "name": "doctor-scale-heldout-families",
            "model": {"d_model": 16, "n_heads": 2, "max_len": 16},
            "train": {"steps": 20, "seq_len": 16, "batch_size": 2},
            "axes": {"wrap": ["pre"], "n_layers": [2], "lr": [1e-3, 3e-3]},
        }
    )
    with Store(db) as s:  # a held-out grid sharing two runs with the tuning study
        held_id = s.add_study(study.name, study.to_dict(), study.config_hash(), study.expand())
        shared = {r["config_hash"] for r in s.runs(held_id)}
    for which in ("doctor-scale-heldout-families", str(held_id)):
        with pytest.raises(InputError, match="is a held-out grid"):
            tuning_runs([(db, which)])
    runs, summary = tuning_runs([(db, "rho-tuning")])
    assert shared and not shared & {r["config_hash"] for r in runs} and summary[0]["runs"] == 36 - 2
