"""The report's learning-rate transfer figures: a study sweeping lr across depth gets the best lr against
depth, one across width that and the loss against lr a line per width, a study with neither axis none."""

from __future__ import annotations

import re

import pytest
from matplotlib.figure import Figure
from test_study_fakes import fake_study, fill_store, lr_task

from depthlab import InputError
from depthlab.report import load, write_report
from depthlab.report.figures import report_figure
from depthlab.report.plots import title_of
from depthlab.study import StudyConfig

LRS = [1e-4 * 10 ** (k / 2) for k in range(7)]  # 1e-4 .. 1e-1, half decades


def _study(name: str, axes: dict) -> StudyConfig:
    return StudyConfig.from_dict(
        {
            "name": name,
            "model": {"d_model": 16, "n_heads": 2, "max_len": 16},
            "train": {"steps": 20, "log_every": 5, "seq_len": 16, "batch_size": 2},
            "axes": {**axes, "lr": LRS, "seed": [0, 1]},
        }
    )


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("transfer-report")
    out = {}
    for name, axes in [
        ("depth", {"wrap": ["post", "pre"], "n_layers": [2, 4, 8]}),
        ("width", {"wrap": ["pre"], "n_layers": [2], "d_model": [16, 32]}),
        ("none", None),
    ]:
        out[name] = str(root / f"{name}.sqlite")
        fill_store(
            out[name],
            fake_study() if axes is None else _study(name, axes),
            task=None if axes is None else lr_task,
        )
    return out


def _images(db: str, out) -> list[str]:
    page = open(write_report(db, str(out)), encoding="utf-8").read()
    return re.findall(r'<img src="([^"]+)"', page)


def test_a_study_sweeping_lr_across_depth_shows_the_best_lr_against_depth(stores, tmp_path):
    imgs = _images(stores["depth"], tmp_path / "depth")
    assert "lr_curves.png" in imgs and "transfer_best_lr.png" in imgs  # loss against lr, a line per depth
    assert "width_lr_curves.png" not in imgs
    assert imgs.index("lr_curves.png") < imgs.index("transfer_best_lr.png")
    data = load(stores["depth"])
    fig = report_figure("transfer_best_lr").draw(data)
    assert "Best learning rate against depth" in title_of(fig)
    (ax,) = fig.axes[:1]
    assert ax.get_xlabel() == "depth" and len(ax.containers) == 2  # a line per setting: post, pre
    # lr_task's best lr is 1e-2 at 2 layers, falling as 1 / depth: the drawn points follow it
    pre = next(t for t in data.transfers["depth"] if t.setting == "pre")
    assert [r.size for r in pre.rows] == [2, 4, 8]
    assert pre.rows[0].best_lr[0] == pytest.approx(1e-2, rel=0.05) and pre.slope[0] == pytest.approx(
        -1, abs=0.05
    )


def test_a_study_sweeping_lr_across_width_shows_both(stores, tmp_path):
    imgs = _images(stores["width"], tmp_path / "width")
    assert "transfer_best_lr.png" in imgs and "width_lr_curves.png" in imgs
    data = load(stores["width"])
    fig = report_figure("width_lr_curves").draw(data)
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert [line.get_label() for line in ax.lines] == ["width 16", "width 32"]
    assert "against width" in title_of(report_figure("transfer_best_lr").draw(data))


def test_a_study_without_lr_across_sizes_has_no_transfer_figure(stores, tmp_path):
    imgs = _images(stores["none"], tmp_path / "none")
    assert imgs and not {"transfer_best_lr.png", "width_lr_curves.png"} & set(imgs)
    data = load(stores["none"])
    assert data.transfers == {"depth": [], "width": []}
    assert report_figure("transfer_best_lr").draw(data) is None


def test_the_transfer_figures_draw_into_the_callers_axes(stores):
    data = load(stores["width"])
    for name in ("transfer_best_lr", "width_lr_curves"):  # one panel each here: width, one setting
        mine = Figure()
        ax = mine.subplots()
        assert report_figure(name).draw(data, axes=ax) is mine and ax.has_data() and not mine.get_suptitle()
        with pytest.raises(InputError, match="this figure draws 1 panel: pass 1 Axes, got 2"):
            report_figure(name).draw(data, axes=Figure().subplots(1, 2))
