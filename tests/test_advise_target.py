"""advise --to-depth/--to-width --transfer: the study's shape and budget, the user's wrapping, and the
same reading of each slope as depthlab transfer (a best lr at the sweep's edge is a bound, never used)."""

from __future__ import annotations

import math

from test_study_fakes import fill_store, lr_task

from depthlab.advise.target import transfer_advice
from depthlab.config import ModelConfig, TrainConfig
from depthlab.study.grid import StudyConfig
from depthlab.study.transfer import reading, transfers
from depthlab.study.transfer_text import format_transfer, slope_text

LRS = [1e-3, 3e-3, 1e-2, 3e-2]


def store(tmp_path, best, name="t", params=("sp",), axes=None) -> str:
    """A store holding one finished lr x depth study of pre-LN (width 16, 20 steps of 2 x 16, seeds 0-2)
    whose final loss is a parabola in log10 lr around ``best(spec)``."""

    def task(spec):
        payload = lr_task(spec)
        loss = 2.5 + 0.25 * math.log10(spec.train.lr / best(spec)) ** 2 + 0.01 * spec.train.seed
        payload["result"] = dict(payload["result"], val_loss=loss, final_train_loss=loss, outcome="trained")
        return payload

    grid = {"wrap": ["pre"], "param": list(params), "n_layers": [2, 4, 8], "lr": LRS, "seed": [0, 1, 2]}
    study = StudyConfig.from_dict(
        {
            "name": name,
            "model": {"d_model": 16, "n_heads": 2, "max_len": 16},
            "train": {"steps": 20, "log_every": 5, "seq_len": 16, "batch_size": 2},
            "axes": axes or grid,
        }
    )
    db = str(tmp_path / f"{name}.sqlite")
    fill_store(db, study, task=task)
    return db


def falling(spec) -> float:
    """1e-2 at 2 layers, falling as depth^-1 with a per-seed tilt (slopes -1.1, -1, -0.9)."""
    L, s = spec.model.n_layers, spec.train.seed
    return 1e-2 * (2 / L) ** (1 + 0.1 * (s - 1))


def by_param(spec) -> float:
    """completep's best lr holds across depth (a per-seed tilt around 0); sp's falls as depth^-1."""
    if spec.model.param == "sp":
        return falling(spec)
    return 1e-2 * (2 / spec.model.n_layers) ** (0.05 * (spec.train.seed - 1))


def above_the_sweep(spec) -> float:
    return 0.2  # beyond the largest lr swept (3e-2) at every depth


def pre(**kw) -> ModelConfig:
    return ModelConfig(**{"n_layers": 4, "d_model": 16, "n_heads": 2, "max_len": 16, **kw})


def test_the_first_line_states_the_studys_shape_and_budget_and_says_when_yours_differs(tmp_path):
    db = store(tmp_path, falling)
    out = transfer_advice(pre(), "depth", 32, db, train=TrainConfig(steps=1000, batch_size=64, seq_len=64))
    assert (
        out["lines"][0]
        == "transfer to depth 32 (study t: width 16, depths 2-8, 20 steps of 2 x 16; 1 setting):"
    )
    assert out["lines"][1].startswith("  your run is 1,000 steps of 64 x 64, the study's 20 steps of 2 x 16:")
    same = transfer_advice(pre(), "depth", 32, db, train=TrainConfig(steps=20, batch_size=2, seq_len=16))
    assert not any("your run is" in line for line in same["lines"])
    assert out["recommended"] == "pre param=sp" and out["lines"][2].startswith(
        "  use pre param=sp: fitted lr at depth 32 "
    )


def test_the_flat_setting_is_recommended_with_transfers_own_words(tmp_path):
    db = store(tmp_path, by_param, params=("sp", "completep"))
    out = transfer_advice(pre(param="completep", base_depth=2), "depth", 32, db)
    assert "2 settings" in out["lines"][0] and out["recommended"].startswith("pre param=completep")
    results = {t.setting: t for t in transfers(load_runs(db), "depth", 32)}
    flat = results[out["recommended"]]
    assert reading(flat) == "flat" and reading(results["pre param=sp"]) == "moves"
    assert f"slope {slope_text(flat)}" in out["lines"][1] and slope_text(flat) in format_transfer(flat)


def load_runs(db: str) -> list[dict]:
    from depthlab.report.data import load

    return load(db).runs


def test_a_best_lr_at_the_sweeps_edge_is_not_an_estimate_and_is_never_recommended(tmp_path):
    db = store(tmp_path, above_the_sweep)
    out = transfer_advice(pre(), "depth", 32, db)
    text = "\n".join(out["lines"])
    assert out["recommended"] is None and "flat" not in text and "\n  use " not in text
    assert "none is recommended: no setting's slope is an estimate" in text
    (t,) = transfers(load_runs(db), "depth", 32)
    assert reading(t) == "unknown" and slope_text(t) in text and slope_text(t) in format_transfer(t)
    assert "the best lr at depth 2, 4, 8 is the largest lr swept, 0.03" in text


def test_a_study_without_the_users_wrapping_says_what_it_answers_from_and_recommends_nothing(tmp_path):
    db = store(tmp_path, falling)
    out = transfer_advice(pre(wrap="post"), "depth", 32, db)
    assert out["lines"][1].startswith(
        "  the study holds no run of post: these are pre's settings, for reference"
    )
    assert out["recommended"] is None and out["other_wraps"] == ["pre"]
    assert not any(line.startswith("  use ") for line in out["lines"])
    assert transfer_advice(pre(), "depth", 32, db)["recommended"] == "pre param=sp"


def test_a_question_along_the_axis_the_study_did_not_sweep_says_so(tmp_path):
    db = store(tmp_path, falling)
    out = transfer_advice(pre(), "width", 512, db)
    assert out["lines"] == [
        "transfer to width 512: this study sweeps depth (2, 4, 8 layers at width 16); --to-width needs "
        "a study that sweeps width: depthlab study --preset width-transfer-quick --depth 4"
    ]
    other = transfer_advice(pre(d_model=32, n_heads=4), "depth", 32, db)["lines"]
    assert len(other) == 1 and "the study ran at width 16, not 32" in other[0] and "about 1/width" in other[0]
