"""Learning-rate sensitivity (depthlab.study.sensitivity) and its report: the numbers against a hand
computation on runs built with a known curve, then the figure, the tables and the layout."""

from __future__ import annotations

import math

import pytest
from test_study_fakes import UNIGRAM, fill_store, lr_task

from depthlab.report import load, render, summary_table
from depthlab.report.lr_tables import lr_summary
from depthlab.study import StudyConfig
from depthlab.study.sensitivity import (
    Point,
    best_lr_slope,
    curves,
    mean_interval,
    recommend,
    setting_key,
    setting_label,
)

LRS = [1e-4 * 10 ** (k / 2) for k in range(9)]  # 1e-4 .. 1e0, half decades


def _study(name="lr") -> StudyConfig:
    return StudyConfig.from_dict(
        {
            "name": name,
            "model": {"d_model": 16, "n_heads": 2, "max_len": 16},
            "train": {"steps": 20, "log_every": 5, "seq_len": 16, "batch_size": 2},
            "axes": {"wrap": ["post", "pre"], "n_layers": [2, 8], "lr": LRS, "seed": [0, 1, 2]},
        }
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("lr") / "s.sqlite")
    fill_store(db, _study(), task=lr_task)
    return load(db)


def test_mean_interval_is_the_t_interval():
    m, lo, hi = mean_interval([1.0, 2.0, 3.0])
    assert m == 2.0 and hi - m == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-3)
    assert mean_interval([5.0]) == (5.0, 5.0, 5.0) and math.isnan(mean_interval([])[0])


def test_sensitivity_by_hand(data):
    """Wortsman et al.'s definition, on the known curves: per seed, mean over lr of min(l, l0) - l*."""
    (c,) = [c for c in data.lr_curves if c.label == "pre" and c.depth == 2]
    assert c.l0 == 5.5 and c.seeds == [0, 1, 2] and [p.lr for p in c.points] == pytest.approx(LRS)
    best = 1e-2  # lr_best at 2 layers
    per_seed = []
    for seed in (0, 1, 2):
        vals = [5.5 if lr >= 30 * best else min(2.5 + 0.25 * math.log10(lr / best) ** 2 + 0.01 * seed, 5.5)
                for lr in LRS]  # fmt: skip
        per_seed.append(sum(v - min(vals) for v in vals) / len(vals))
    m, lo, hi = c.sensitivity()
    assert m == pytest.approx(sum(per_seed) / 3) and lo < m < hi
    assert list(c.per_seed_sensitivity().values()) == pytest.approx(per_seed)
    assert c.best()["lr"] == pytest.approx(1e-2, rel=1e-6) and not c.best()["at_edge"]
    assert c.best()["loss"][0] == pytest.approx(2.51)
    assert any(p.diverged(0) for p in c.points) and c.points[-1].capped(0, c.l0) == 5.5


def test_a_sharper_valley_is_more_sensitive_and_its_usable_range_narrower(data):
    by = {(c.label, c.depth): c for c in data.lr_curves}
    assert by[("post", 2)].sensitivity()[0] > by[("pre", 2)].sensitivity()[0]
    assert by[("post", 2)].usable_range(0.1)[2] < by[("pre", 2)].usable_range(0.1)[2]
    lo, hi, decades = by[("pre", 2)].usable_range(margin=0.1)  # half a decade off costs 0.0625 nats
    assert (lo, hi, decades) == (pytest.approx(10**-2.5), pytest.approx(10**-1.5), pytest.approx(1.0))


def test_best_lr_falls_with_depth_at_the_built_slope(data):
    slopes = best_lr_slope(data.lr_curves)
    m, lo, hi = slopes["pre"]
    assert m == pytest.approx(-1.0, abs=0.05) and lo <= m <= hi
    per_seed = best_lr_slope(data.lr_curves, per_seed=True)["pre"]
    assert len(per_seed) == 3 and sum(per_seed) / 3 == pytest.approx(m)


def test_a_setting_is_named_from_its_axes():
    key = setting_key(
        {"wrapping": {"wrap": "pre", "qk_norm": True, "residual": ["ffn"]}, "lr": 1e-3, "seed": 1}
    )
    assert key == {"wrap": "pre", "qk_norm": True, "residual": "ffn"}
    assert setting_label(key) == "pre qk_norm=True residual=ffn" and setting_label({}) == "all runs"
    assert setting_label({"qk_norm": True, "wrap": "pre"}) == "pre qk_norm=True"  # the store sorts keys


def test_recommendation_ranks_by_best_loss(data):
    ranked = recommend(data.lr_curves)[8]
    assert [r["setting"] for r in ranked][0] in ("post", "pre")
    assert all(r["tied_with_first"] for r in ranked)  # both reach 2.5 + seed: tied


def test_point_caps_at_l0_and_counts_divergence():
    p = Point(1e-3, {0: 7.0, 1: None, 2: 2.0}, {0: "trained", 1: "diverged", 2: "trained"})
    assert (p.capped(0, 5.5), p.capped(1, 5.5), p.capped(2, 5.5)) == (5.5, 5.5, 2.0)
    assert p.diverged(1) and not p.diverged(2)
    # a run stopped as diverged with a finite loss below l0 (a stream blow-up) still counts as l0
    assert Point(1e-3, {0: 3.2}, {0: "diverged"}).capped(0, 5.5) == 5.5


def test_curves_need_two_learning_rates():
    run = {"config": {"model": {"n_layers": 2}, "train": {"lr": 1e-3, "seed": 0}}, "axes": {}, "outcome": "trained",
           "val_loss": 2.0, "metrics": []}  # fmt: skip
    assert curves([run]) == []


def test_the_report_lays_learning_rates_across_and_shows_the_curves(data, tmp_path):
    lay = data.layout
    assert lay.x == "lr" and lay.columns == pytest.approx(LRS)
    assert lay.rows == ["post", "pre"] and lay.panels == ["n_layers=2", "n_layers=8"]
    assert "lr 0.01" in summary_table(data)
    page = open(render(data, str(tmp_path / "report")), encoding="utf-8").read()
    assert "Learning-rate sensitivity" in page and "Wortsman" in page and "Recommendation" in page
    assert (tmp_path / "report" / "lr_curves.png").is_file()
    text = lr_summary(data)
    assert "slope of log10 best lr against log10 depth, pre" in text and "best at 8 layers" in text


def test_x_can_be_chosen(tmp_path):
    db = str(tmp_path / "s.sqlite")
    fill_store(db, _study(), task=lr_task)
    assert load(db, x="n_layers").layout.columns == [2, 8]
    assert UNIGRAM > 0


def test_lr_curves_draw_into_the_callers_axes(data):
    from matplotlib.figure import Figure

    from depthlab.errors import InputError
    from depthlab.report.lr_plots import lr_curves

    fig = Figure()
    axes = fig.subplots(1, 2)  # one panel per setting: post, pre
    assert lr_curves(data, axes=axes) is fig and all(ax.lines for ax in axes)
    with pytest.raises(InputError, match="pass 2 Axes"):
        lr_curves(data, axes=axes[:1])
