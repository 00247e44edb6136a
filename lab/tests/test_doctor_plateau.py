"""The doctor's plateau prediction: a censored fit of the escape step on a built store (half its runs never
escape), the verdict's text, its budget and its extrapolation marking, and `depthlab calibrate`."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from depthlab import ModelConfig, build_model
from depthlab.cli import main
from depthlab.doctor.plateau import FEATURES, family, p_within, plateau_verdict, predict
from depthlab.errors import InputError
from depthlab.probe import probe
from depthlab.study.grid import StudyConfig
from depthlab.study.store import Store
from depthlab_lab.calibrate.escape_fit import escape_rows, fit_escape, tobit
from depthlab_lab.calibrate.refit import keep_fitted, refit
from lab.tests.tuning_store import tuning_store

pytestmark = pytest.mark.usefixtures("one_thread")

BUDGET = 200
# the law the built store's escape steps follow (ln step = A + B_LR ln lr + B_DEPTH ln depth, spread
# SPREAD in ln steps): its median escape is near the budget, so about half the runs never escape
A, B_LR, B_DEPTH, SPREAD = -0.9, -0.9, 0.8, 0.3


def _law(lr, depth):
    return A + B_LR * math.log(lr) + B_DEPTH * math.log(depth)


def _built_store(path: str) -> str:
    """A store of one study (post-LN and pre-LN x 4 depths x 6 lrs x 2 warmups), each run finished with a
    probe and an escape step drawn from the law above: about half of them beyond the budget (None)."""
    study = StudyConfig.from_dict(
        {
            "name": "plateau-tuning",
            "model": {"d_model": 16, "n_heads": 2, "max_len": 16},
            "train": {"steps": BUDGET, "log_every": 5, "seq_len": 16, "batch_size": 2},
            "axes": {
                "wrap": ["post", "pre"],
                "n_layers": [2, 4, 8, 16],
                "lr": [3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1],
                "warmup": [0, 10],
            },
        }
    )
    rng = random.Random(0)

    def judge(spec):
        m, t = spec.model, spec.train
        step = math.exp(_law(t.lr, m.n_layers) + rng.gauss(0, SPREAD))
        escaped = int(step) if step <= BUDGET else None
        share = 1.0 if m.wrap == "post" else 0.0
        gain = 50.0 * m.n_layers**0.5  # a step size that varies apart from the lr
        probe = {"stack": {"renormalised_share": share}, "probe": {"step_size": gain * t.lr}}
        return probe, {"outcome": "trained" if escaped else "stalled", "escape_step": escaped}

    return tuning_store(path, study.to_dict(), judge)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return _built_store(str(tmp_path_factory.mktemp("plateau") / "tuning.sqlite"))


def _runs(db):
    with Store(db, create=False) as s:
        runs = s.runs(s.find_study("plateau-tuning")["id"])
        for r in runs:
            r["probe"] = s.probe(r["id"])
    return runs


def test_tobit_recovers_a_slope_that_dropping_or_clipping_the_censored_runs_bias():
    rng = random.Random(1)
    x, y, cens, budget = [], [], [], math.log(100)
    for _ in range(400):
        u = rng.uniform(-2, 2)
        v = 4.6 + 1.0 * u + rng.gauss(0, 0.5)
        x.append([1.0, u])
        y.append(min(v, budget))
        cens.append(v > budget)
    assert 0.3 < sum(cens) / len(cens) < 0.7
    (const, slope), sigma = tobit(x, y, cens)
    assert slope == pytest.approx(1.0, abs=0.12) and sigma == pytest.approx(0.5, abs=0.08)
    (_, clipped), _ = tobit(x, y, [False] * len(y))  # censored runs taken as escaping at the budget
    kept = [i for i, c in enumerate(cens) if not c]
    (_, dropped), _ = tobit([x[i] for i in kept], [y[i] for i in kept], [False] * len(kept))
    assert clipped < 0.8 and dropped < 0.8  # both flatten the slope


def test_the_fit_on_a_store_where_half_the_runs_never_escape(store):
    runs = _runs(store)
    rows = escape_rows(runs)
    share = sum(r["censored"] for r in rows) / len(rows)
    assert 0.3 < share < 0.7, share
    section = fit_escape(runs)
    assert set(section["families"]) == {"renormalising", "pre-ln-like"}
    fit = section["families"]["renormalising"]
    assert fit["runs"] == 48 and fit["censored"] == sum(
        r["censored"] for r in rows if r["family"] == "renormalising"
    )
    assert fit["support"]["lr"] == [3e-4, 1e-1] and fit["support"]["n_layers"] == [2, 16]
    assert fit["support"]["d_model"] == [16, 16] and "ln_d_model" in fit["left_out"]
    assert fit["sigma"] == pytest.approx(SPREAD, abs=0.1)
    for lr, depth in ((3e-3, 8), (1e-3, 4), (1e-1, 2)):
        values = {"lr": lr, "d_model": 16, "n_layers": depth, "warmup": 0, "step_size": 50 * depth**0.5 * lr}
        assert math.log(predict(fit, values)["median"]) == pytest.approx(_law(lr, depth), abs=0.35)
    # a configuration whose escape lies beyond the budget is predicted beyond it, not at it
    late = {"lr": 3e-4, "d_model": 16, "n_layers": 16, "warmup": 0, "step_size": 50 * 4 * 3e-4}
    assert predict(fit, late)["median"] > 1.5 * BUDGET
    assert fit["in_sample"]["agreed"] >= 0.8 * fit["runs"]


def test_diverged_runs_are_left_out_of_the_fit():
    run = {
        "status": "done",
        "outcome": "diverged",
        "escape_step": None,
        "config": {
            "model": {"wrap": "post", "d_model": 16, "n_layers": 2},
            "train": {"lr": 1.0, "steps": 10},
        },
        "probe": {"config": {"stack": {"renormalised_share": 1.0}, "probe": {"step_size": 3.0}}},
    }
    assert escape_rows([run]) == []
    assert escape_rows([dict(run, outcome="stalled")])[0]["censored"]


def test_the_family_is_the_renormalised_share_or_else_the_layer_plan():
    assert family("pre", 0.5, 6) == "renormalising" and family("post", 0.0, 6) == "pre-ln-like"
    assert family("deepnorm", None, 6) == "renormalising" and family("sandwich", None, 6) == "pre-ln-like"
    # Mix-LN's post-LN floor is floor(mix_ratio x L) blocks: none at 3 layers, one from 4
    assert family("mix", None, 3) == "pre-ln-like" and family("mix", None, 4) == "renormalising"


def _fit_record(store):
    return {"range": {"d_model": [16, 16]}, "escape": fit_escape(_runs(store))}


def _probe(wrap="post", d_model=16, lr=1e-3, warmup=0, steps=None, n_layers=4):
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_heads=2, d_model=d_model, n_layers=n_layers, wrap=wrap, max_len=16))
    return probe(model, torch.randint(0, 256, (2, 16)), lr=lr, warmup=warmup, steps=steps)


def test_the_verdict_gives_the_step_its_interval_and_what_the_budget_would_call_it(store):
    record = _fit_record(store)
    r = _probe(lr=3e-4, n_layers=16, steps=100)
    v = plateau_verdict(r, record, 16)
    fit = record["escape"]["families"]["renormalising"]
    values = {
        "lr": 3e-4,
        "d_model": 16,
        "n_layers": 16,
        "warmup": 0,
        "step_size": r.config["probe"]["step_size"],
    }
    pred = predict(fit, values)
    assert v.code == "plateau" and v.level == "warning"
    assert (
        f"around step {pred['median']:,.0f} (80% interval {pred['low']:,.0f}-{pred['high']:,.0f})"
        in v.message + v.detail
    )
    assert "a 100-step budget would likely be called stalled" in v.message + v.detail
    assert f"probability {p_within(pred, 100):.2f}" in v.message + v.detail
    assert (
        f"fitted on {fit['runs']} runs of stacks whose blocks renormalise the stream" in v.message + v.detail
    )
    assert "Extrapolation" not in v.message + v.detail
    roomy = plateau_verdict(_probe(lr=1e-2, n_layers=2, steps=5000), record, 16)
    assert roomy.level == "ok" and "a 5,000-step budget leaves it room" in roomy.message + roomy.detail
    plain = plateau_verdict(_probe(lr=1e-2, n_layers=2), record, 16)
    assert plain.level == "ok" and "budget" not in plain.message


def test_outside_the_fits_support_it_is_an_extrapolation_never_an_error(store):
    record = _fit_record(store)
    v = plateau_verdict(_probe(d_model=32, lr=0.5, n_layers=2, steps=10), record, 32)
    assert (
        v.level != "error"
        and "Extrapolation: " in v.message + v.detail
        and v.detail.endswith("a rough guess")
    )
    assert (
        "width 32 is above the fitted widths 16-16" in v.message + v.detail
        and "lr 0.5 is above the fitted lrs" in v.message + v.detail
    )
    assert "step size 58.6 is above the fitted step sizes 0.0212-20" in v.message + v.detail
    late = plateau_verdict(_probe(d_model=32, lr=1e-4, n_layers=16, steps=10), record, 32)
    assert late.level == "warning" and "would likely be called stalled" in late.message + late.detail


def test_no_fit_no_plateau_verdict():
    assert plateau_verdict(_probe(), {"range": {}}, 16) is None


def test_the_probe_refuses_a_budget_without_a_learning_rate_or_below_one(capsys):
    assert main("probe --layers 2 --d-model 16 --heads 2 --steps 100".split()) == 2
    assert main("probe --layers 2 --d-model 16 --heads 2 --lr 1e-3 --steps 0".split()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "--steps" in err and "Traceback" not in err


def test_calibrate_writes_the_fits_and_what_they_were_fitted_on(store, tmp_path, capsys):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"where": "w", "range": {"d_model": [16, 16]}, "agreement": {}}))
    assert main(["calibrate", "--from", store, "plateau-tuning", "--record", str(path)]) == 0
    rec = json.loads(path.read_text())
    assert rec["where"] == "w" and rec["agreement"] == {}  # the rest of the record is kept
    assert set(rec["escape"]["families"]) == {"renormalising", "pre-ln-like"}
    assert set(rec["escape"]["families"]["renormalising"]["coef"]) == set(FEATURES)
    (study,) = rec["fitted_from"]["studies"]
    assert study["study"] == "plateau-tuning" and study["runs"] == study["done"] == 96
    assert "wrote" in capsys.readouterr().out
    # reproduce doctor rewrites the counts and keeps the fitted sections
    kept = keep_fitted({"where": "new", "range": {}, "agreement": {"a": 1}}, rec)
    assert (
        kept["where"] == "new"
        and kept["escape"] == rec["escape"]
        and kept["fitted_from"] == rec["fitted_from"]
    )


def test_calibrate_refuses_a_held_out_study_and_a_missing_store(store, tmp_path, capsys):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"range": {}, "agreement": {}}))
    assert main(["calibrate", "--from", store, "doctor-scale-heldout", "--record", str(path)]) == 2
    assert main(["calibrate", "--from", str(tmp_path / "none.sqlite"), "x", "--record", str(path)]) == 2
    assert main(["calibrate", "--from", store, "plateau-tuning", "--record", str(tmp_path / "no.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 3 and "held-out" in err and "Traceback" not in err
    assert json.loads(path.read_text()) == {"range": {}, "agreement": {}}  # nothing written


def test_refit_without_runs_to_fit_is_refused_and_never_drops_a_section(tmp_path):
    db = str(tmp_path / "empty.sqlite")
    study = StudyConfig.from_dict(
        {"name": "t", "model": {"d_model": 16, "n_heads": 2}, "train": {"steps": 5}, "axes": {"lr": [1e-3]}}
    )
    with Store(db) as s:
        s.add_study(study.name, study.to_dict(), study.config_hash(), study.expand())
    with pytest.raises(InputError, match=r"\(0 of 1 runs done\): no finished run to fit on"):
        refit({"range": {}, "escape": {"old": 1}}, [(db, "t")], None)


def test_a_record_that_is_not_json_and_db_for_another_reproduction_are_refused(store, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["calibrate", "--from", store, "plateau-tuning", "--record", str(bad)]) == 2
    assert main(["reproduce", "seeds", "--db", str(tmp_path / "x.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "not a readable calibration record" in err and "--db applies to" in err
    assert bad.read_text() == "{not json"
