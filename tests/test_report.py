"""The report: figures, captions, the verdict-vs-outcome table, escaping, the terminal summary, the CLI."""

from __future__ import annotations

import os
import re
import shutil

import pytest
from matplotlib.figure import Figure
from test_study_fakes import fake_study, fill_store

import depthlab
from depthlab import InputError
from depthlab.cli import main
from depthlab.report import FIGURES, MARKER, load, render, summary_table, write_report
from depthlab.report.figures import report_figure
from depthlab.report.grouping import cells, layout, predicted
from depthlab.report.plots import title_of
from depthlab.study import StudyConfig

EVIL = '<script>alert("x")</script>&$x^{2$'  # HTML, and a broken mathtext formula for the figures'


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """A store with the fake study (8 runs: post/pre x 2, 4 layers x warmup 0, 5), all finished."""
    path = str(tmp_path_factory.mktemp("report") / "s.sqlite")
    fill_store(path, fake_study())
    return path


def test_layout_reads_rows_columns_panels_from_the_configs(db):
    data = load(db)
    lay = data.layout
    assert (lay.rows, lay.depths, lay.panels) == (["post", "pre"], [2, 4], ["warmup=0", "warmup=5"])
    table = cells(data.runs, lay)
    assert table[("warmup=0", "post", 4)].state == "stalled"
    assert table[("warmup=5", "post", 4)].state == "trained"
    assert table[("warmup=0", "pre", 2)].val_loss == pytest.approx(2.5 + 0.02 + 0.05)


def test_residual_variants_and_seeds_in_the_layout():
    runs = []
    for wrap, residual, seed, outcome in [
        ("pre", ["attn", "cross", "ffn"], 0, "trained"),
        ("pre", ["attn", "cross", "ffn"], 1, "stalled"),
        ("pre", ["cross", "ffn"], 0, "stalled"),
    ]:
        cfg = {
            "model": {"wrap": wrap, "residual": residual, "n_layers": 4, "arch": "decoder"},
            "train": {"seed": seed},
        }
        runs.append({"config": cfg, "status": "done", "outcome": outcome, "val_loss": 3.0})
    lay = layout(runs)
    assert lay.rows == ["pre", "pre no attn skip"] and lay.panels == ["all runs"]
    tie = cells(runs, lay)[("all runs", "pre", 4)]
    assert tie.state == "stalled" and tie.label() == "3.00\n1/2 stalled"  # a tie shows the worse state


def test_a_wrapping_axis_names_the_wrapping_first():
    """The store keeps an axis value's keys sorted ({"qk_norm": .., "wrap": ..}): the row still reads
    "pre qk_norm=True", the way the grid was written."""
    run = {
        "config": {"model": {"wrap": "pre", "qk_norm": True, "n_layers": 2}, "train": {"seed": 0}},
        "axes": {"n_layers": 2, "wrapping": {"qk_norm": True, "wrap": "pre"}},
        "status": "done",
        "outcome": "trained",
        "val_loss": 2.5,
    }
    assert layout([run], ["wrapping", "n_layers"]).row(run) == "pre qk_norm=True"


def test_a_stored_study_keeps_its_grid_axes_in_order(tmp_path):
    """The report lays rows and panels out in the grid's axis order, read back from the store: "post
    norm=rmsnorm" and "warmup=0 lr=0.01" as the grid lists them (a store that sorted the grid's keys
    gave "norm=rmsnorm post" and "lr=0.01 warmup=0", and its configuration section the same)."""
    study = StudyConfig.from_dict(
        {
            "name": "order",
            "model": {"d_model": 16, "n_heads": 2, "max_len": 16, "n_layers": 2},
            "train": {"steps": 10, "log_every": 5, "seq_len": 16, "batch_size": 2},
            "axes": {"wrap": ["post", "pre"], "norm": ["rmsnorm"], "warmup": [0], "lr": [0.01, 0.02]},
        }
    )
    db = str(tmp_path / "s.sqlite")
    fill_store(db, study)
    data = load(db)
    assert list(data.study["config"]["axes"]) == ["wrap", "norm", "warmup", "lr"]
    assert data.layout.rows == ["post norm=rmsnorm", "pre norm=rmsnorm"]
    assert data.layout.panels == ["warmup=0 lr=0.01", "warmup=0 lr=0.02"]


def test_a_run_table_names_the_lr_where_the_map_puts_it_in_columns():
    """With the learning rate on the map's x axis, a table of runs (every run, the verdict beside the
    outcome) still tells the runs at each lr apart: their setting names it."""
    runs = [
        {
            "config": {"model": {"wrap": wrap, "n_layers": n}, "train": {"seed": 0, "lr": lr}},
            "axes": {"wrap": wrap, "n_layers": n, "lr": lr},
            "status": "done",
            "outcome": "trained",
            "val_loss": 2.5,
        }
        for wrap in ("post", "pre")
        for n in (2, 4)
        for lr in (1e-3, 1e-2, 1.0)
    ]
    lay = layout(runs, ["wrap", "n_layers", "lr"])
    assert lay.x == "lr" and lay.panel(runs[0]) == "n_layers=2"
    assert [lay.setting(r) for r in runs[:3]] == [
        "n_layers=2 lr=0.001",
        "n_layers=2 lr=0.01",
        "n_layers=2 lr=1",
    ]
    assert len({(lay.row(r), lay.setting(r)) for r in runs}) == len(runs)
    by_depth = layout(runs, ["wrap", "n_layers", "lr"], x="n_layers")
    assert by_depth.setting(runs[0]) == by_depth.panel(runs[0]) == "lr=0.001"


def test_verdict_prediction_rule():
    run = lambda warmup: {"config": {"train": {"warmup": warmup}}}  # noqa: E731
    warm = {"verdicts": [{"level": "warning", "code": "warmup-required"}]}
    err = {"verdicts": [{"level": "error", "code": "vanishing-gradient"}, {"level": "ok", "code": "x"}]}
    assert predicted(run(0), warm) == "fails" and predicted(run(10), warm) == "trains"
    assert (
        predicted(run(10), err) == "fails" and predicted(run(0), {"verdicts": []}) is None
    )  # no verdict: no prediction
    assert predicted(run(0), None) is None


def test_report_page_has_every_part(db, tmp_path):
    path = write_report(db, str(tmp_path / "rep"))
    html = open(path, encoding="utf-8").read()
    imgs = re.findall(r'<img src="([^"]+)"', html)
    assert imgs == ["outcome_map.png", "loss_curves.png", "layer_profiles.png", "bottom_vs_top.png"]
    for name in imgs:
        with open(tmp_path / "rep" / name, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert html.count("<figcaption>") == 4 and html.count("<h2>") >= 8
    assert "The verdict predicted 7 of 8 outcomes (88%)" in html  # post, 2 layers, no warmup: a miss
    assert "always answering" in html
    assert html.count("<tr>") >= 1 + 8 + 3 + 8  # tables: confusion (3 rows), verdicts (8), runs (8)
    assert "axes:" in html and "warmup-required" in html
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing from the network


def test_the_page_answers_first_with_the_outcome_per_cell(db, tmp_path):
    """Before any explanation or figure: per setting, each wrapping's outcome and final validation loss at
    each depth, the store's runs (seeds pooled) as the terminal's summary gives them."""
    html = open(write_report(db, str(tmp_path / "rep")), encoding="utf-8").read()
    top = html[: html.index("<h2>How to read this report</h2>")]
    assert "<img " not in top and "<h2>Outcome per cell (final validation loss)</h2>" in top
    data = load(db)
    found = cells(data.runs, data.layout)
    for panel in data.layout.panels:
        part = top[top.index(f"<b>{panel}</b>") :]
        part = part[: part.index("</table>")]
        rows = [re.sub(r"<[^>]+>", " ", tr).split() for tr in part.split("<tr>")[2:]]
        want = [
            [row, *(w for d in data.layout.depths for w in (found[(panel, row, d)].state,
                                                          f"{found[(panel, row, d)].val_loss:.2f}"))]
            for row in data.layout.rows
        ]  # fmt: skip
        assert rows == want
    assert rows[0] == ["post", "trained", "2.57", "trained", "2.59"]  # warmup=5: post trains at both depths


def test_config_strings_are_escaped(tmp_path):
    data = [tmp_path / f"{EVIL}.txt", tmp_path / "$y.txt"]  # a grid's data files must exist
    for path in data:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("some text to model, some text to model. " * 20)
    study = StudyConfig.from_dict(
        {
            "name": f"evil{EVIL}",
            "description": EVIL,
            "model": {"d_model": 16, "n_heads": 2, "max_len": 16},
            "train": {"steps": 10, "log_every": 5, "seq_len": 16},
            "axes": {
                "wrap": ["post", "pre"],
                "n_layers": [2],
                "train.data": [str(p) for p in data],
            },
        }
    )
    db = str(tmp_path / "s.sqlite")
    fill_store(db, study)
    html = open(write_report(db, str(tmp_path / "rep")), encoding="utf-8").read()
    assert "<script>" not in html and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;$x^{2$" in html
    assert html.count("<img ") == 4  # the data paths are panel titles in every figure: all drawn


def test_summary_table(db):
    text = summary_table(load(db))
    lines = text.splitlines()
    assert lines[0] == "warmup=0" and lines[1].split() == ["wrapping", "2", "layers", "4", "layers"]
    assert lines[2].split() == ["post", "trained", "2.57", "stalled", "3.21"]
    assert "warmup=5" in lines and all(line == line.rstrip() for line in lines)


def test_report_folder_rules(db, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    with pytest.raises(InputError, match="not a depthlab report"):
        write_report(db, str(mine))
    assert (mine / "notes.txt").read_text() == "precious"
    rep = tmp_path / "rep"
    write_report(db, str(rep))
    assert (rep / MARKER).exists()
    write_report(db, str(rep))  # an earlier report is rewritten


def test_partial_study_report_skips_missing_figures(tmp_path):
    db = str(tmp_path / "s.sqlite")
    fill_store(db, fake_study(), leave_queued=8)  # nothing ran yet
    data = load(db)
    path = render(data, str(tmp_path / "rep"))
    html = open(path, encoding="utf-8").read()
    assert re.findall(r'<img src="([^"]+)"', html) == ["outcome_map.png"]
    assert "8 queued" in html and "No run has both a probe and an outcome yet." in html
    assert not os.path.exists(tmp_path / "rep" / "loss_curves.png")


def test_report_cli(db, tmp_path, capsys):
    out = str(tmp_path / "cli")
    assert main(["report", "--db", db, "--out", out]) == 0
    text = capsys.readouterr().out
    assert f"report: {out}/index.html" in text and "stalled 3.21" in text
    assert main(["report", "--db", str(tmp_path / "none.sqlite"), "--out", out]) == 2
    assert f"--db {tmp_path / 'none.sqlite'}: no study store there" in capsys.readouterr().err
    assert main(["report", "--db", db, "--study", "nope"]) == 2


def test_a_report_folder_refused_on_the_command_line_names_the_flag(db, tmp_path, capsys):
    """A file given as --out, or a default folder holding someone's files: one line naming --out, exit 2,
    the file untouched; from Python the message names the folder alone."""
    target = tmp_path / "report.html"
    target.write_text("<p>mine</p>")
    assert main(["report", "--db", db, "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: --out: report folder {target} exists and is not a folder" in err
    assert target.read_text() == "<p>mine</p>"
    run = tmp_path / "run"
    (run / "report").mkdir(parents=True)
    (run / "report" / "notes.txt").write_text("precious")
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0, "layers": [], "warnings": []}\n')
    assert main(["report", "--run", str(run)]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "is not a depthlab report folder; choose another report folder with --out" in err
    )
    with pytest.raises(InputError, match=r"^report folder .* choose another report folder$"):
        write_report(db, str(target))


def test_a_default_report_folder_that_cannot_be_made_says_how_to_choose_another(db, tmp_path, capsys):
    """A file where the default folder's parent goes: the line ends on --out, after the reason's
    parenthesis, not inside it."""
    mine = tmp_path / "s.sqlite"
    shutil.copy(db, mine)
    (tmp_path / "report").write_text("mine")
    assert main(["report", "--db", str(mine)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.rstrip().endswith(
        "is not a writable folder); choose another report folder with --out"
    )


def test_a_folder_where_the_report_writes_a_file_is_refused_before_any_figure(db, tmp_path, capsys):
    """An earlier report folder holding a folder named index.html (or a figure's name): one line naming
    it, exit 2, before a figure is drawn or an old one removed."""
    out = tmp_path / "rep"
    assert main(["report", "--db", db, "--out", str(out)]) == 0
    capsys.readouterr()
    figures = sorted(p.name for p in out.glob("*.png"))
    (out / "index.html").unlink()
    (out / "index.html").mkdir()
    assert main(["report", "--db", db, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds a folder index.html where the report writes a file" in err
    assert sorted(p.name for p in out.glob("*.png")) == figures  # nothing removed


def test_every_report_figure_is_a_function_returning_a_figure(db):
    data = load(db)
    assert [f.name for f in FIGURES] == [
        "outcome_map",
        "lr_curves",
        "transfer_best_lr",
        "width_lr_curves",
        "loss_curves",
        "layer_profiles",
        "bottom_vs_top",
        "composite_gains",
    ]
    for spec in FIGURES:
        fig = spec.draw(data)
        if spec.name in ("lr_curves", "transfer_best_lr", "width_lr_curves", "composite_gains"):  # one lr;
            assert fig is None  # no residual topology (tests/test_topology_probes.py draws that one)
            continue
        assert isinstance(fig, Figure) and title_of(fig), spec.name
        assert fig._repr_png_()[:4] == b"\x89PNG"  # a notebook shows it


@pytest.mark.parametrize(
    "name, panels", [("outcome_map", 2), ("loss_curves", 4), ("layer_profiles", 4), ("bottom_vs_top", 2)]
)
def test_report_figures_draw_into_the_callers_axes(db, name, panels):
    """A figure drawn into the caller's Axes uses exactly those, adds no title, and refuses a wrong count."""
    data = load(db)
    mine = Figure()
    axes = mine.subplots(1, panels)
    spec = report_figure(name)
    assert spec.draw(data, axes=axes) is mine
    assert all(ax.has_data() for ax in axes) and len(mine.axes) == panels and not mine.get_suptitle()
    assert depthlab.open(db).study().figure(name, axes=Figure().subplots(1, panels)) is not None
    with pytest.raises(InputError, match=f"this figure draws {panels} panels: pass {panels} Axes, got 1"):
        spec.draw(data, axes=Figure().subplots())


def test_unknown_figure_name_is_refused(db):
    with pytest.raises(InputError, match="no figure .nope.: one of outcome_map, lr_curves, transfer_best_lr"):
        depthlab.open(db).study().figure("nope")


def test_a_page_that_cannot_be_replaced_is_named_in_the_callers_words(db, tmp_path, capsys):
    """index.html a FIFO in an earlier report folder: from Python the refusal names out_dir, on the
    command line --out."""
    rep = tmp_path / "rep"
    rep.mkdir()
    (rep / MARKER).write_text("")
    os.mkfifo(rep / "index.html")
    with pytest.raises(InputError, match=r"^out_dir .*index\.html is a named pipe"):
        write_report(db, str(rep))
    assert main(["report", "--db", db, "--out", str(rep)]) == 2
    assert "error: --out " in capsys.readouterr().err


def test_a_study_the_store_lacks_is_named_by_the_flag_that_asked(db, tmp_path, capsys):
    """report --study nope: the line names --study (it said "no study 'nope' in ...", naming no flag),
    and lists the studies the store holds; nothing is written."""
    out = tmp_path / "r"
    assert main(["report", "--db", db, "--study", "nope", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("depthlab report: error: --study nope: no such study in ") and "(studies: fake" in err
    )
    assert err.count("\n") == 1 and not out.exists()


@pytest.mark.parametrize(
    "lrs, depths, x", [(2, 1, "n_layers"), (3, 1, "lr"), (3, 3, "n_layers"), (4, 3, "lr")]
)
def test_auto_columns_are_the_lr_where_the_grid_sweeps_more_of_them_and_at_least_3(lrs, depths, x):
    """The rule report --help and the studies page state: two learning rates at one depth stay panels."""
    runs = [
        {
            "config": {"model": {"wrap": "pre", "n_layers": n}, "train": {"seed": 0, "lr": lr}},
            "axes": {"wrap": "pre", "n_layers": n, "lr": lr},
            "status": "done",
            "outcome": "trained",
            "val_loss": 2.5,
        }
        for n in (2, 4, 8)[:depths]
        for lr in (1e-3, 1e-2, 1e-1, 1.0)[:lrs]
    ]
    assert layout(runs, ["wrap", "n_layers", "lr"]).x == x
