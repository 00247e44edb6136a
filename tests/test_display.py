"""Rich displays for notebooks: each result's ``_repr_html_`` holds its table and escapes user strings,
its ``__repr__`` is one short line, its figures show themselves, and importing depthlab leaves
matplotlib's backend alone."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest
from test_study_fakes import fake_study, fill_store

import depthlab
from depthlab import InputError, ModelConfig, TrainConfig
from depthlab.display import InlineFigure
from depthlab.doctor.verdict import Verdict
from depthlab.model.explain import explain
from depthlab.probe.compare import compare
from depthlab.train import RunResult, train
from depthlab.train.run_result import RESULT_KEYS

pytestmark = pytest.mark.usefixtures("one_thread")

EVIL = '<script>alert("x")</script>'
TINY = ModelConfig(arch="decoder", n_layers=4, d_model=16, n_heads=2, vocab_size=256, max_len=32, wrap="post")


def rows_of(html: str) -> list[list[str]]:
    """The cells of every table row of ``html``, tags stripped (header rows included)."""
    return [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, re.S)]
        for tr in re.findall(r"<tr>(.*?)</tr>", html, re.S)
    ]


def assert_one_short_line(text: str) -> None:
    assert "\n" not in text and len(text) < 200, text


@pytest.fixture(scope="module")
def comparison():
    return compare([("post", TINY), (f"pre {EVIL}", TINY.replace(wrap="pre"))], batch_size=2, seq_len=16)


def test_probe_result_display_is_its_table_with_bars_and_coloured_verdicts(comparison):
    result = comparison.runs[0][1]
    html = result._repr_html_()
    table = rows_of(html)
    assert table[0][:3] == ["index", "grad_norm", "log scale: 5 decades"]
    assert set(table[0]) - {"log scale: 5 decades"} <= set(result.layers[1])  # the headers are JSON keys
    assert "stream_rms" in table[0] and "output_change" in table[0]
    assert [row[0] for row in table[1:]] == ["0", "1", "2", "3", "4"]  # a row per stream
    assert [row[1] for row in table[1:]] == [f"{r['grad_norm']:.2e}" for r in result.layers]
    widths = [int(w) for w in re.findall(r"width:(\d+)px", html)]
    assert len(widths) == 5 and max(widths) == 120  # a bar per stream, the largest gradient full width
    assert result.verdicts and all(v.code in html for v in result.verdicts)
    assert "#f9a825" in html  # post-LN's warmup-required warning in the warning colour
    assert_one_short_line(repr(result))
    assert "4 layers" in repr(result) and "warmup-required" in repr(result)


def test_probe_display_escapes_user_strings(comparison):
    label, result = comparison.runs[1]
    result.verdicts = [Verdict("error", "x", EVIL)]
    try:
        for html in (result._repr_html_(), comparison._repr_html_()):
            assert "<script>" not in html and "&lt;script&gt;" in html
    finally:
        result.verdicts = []


def test_comparison_display_is_the_summary_table(comparison):
    html = comparison._repr_html_()
    table = rows_of(html)
    assert table[0] == ["label", "g0_gL", "ctx0_ctxL", "rms_growth", "verdicts"]
    assert [row[0] for row in table[1:]] == ["post", "pre &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"]
    assert table[1][1] == f"{comparison.summary()[0]['g0_gL']:.2e}"
    assert html.count("<details>") == 2  # each probe's verdicts in full
    assert_one_short_line(repr(comparison))


@pytest.fixture(scope="module")
def run():
    cfg = TrainConfig(steps=8, batch_size=2, seq_len=16, log_every=4, eval_every=8, eval_batches=1)
    return train(TINY.replace(n_layers=2), cfg)


def test_run_result_display(run):
    html = run._repr_html_()
    table = dict(row for row in rows_of(html)[1:])
    assert table["val_loss"] == f"{run.val_loss:.4g}" and table["step"] == (
        "-" if run.step is None else str(run.step)
    )
    assert set(table) == set(RESULT_KEYS) - {"outcome", "reason"}  # the outcome and reason head the display
    assert f">{run.outcome}</span>" in html and "3 logged steps, the last at step 8" in html
    assert_one_short_line(repr(run))
    assert repr(run).startswith(f"<RunResult {run.outcome}: val loss") and "8 steps" in repr(run)
    evil = RunResult("stalled", EVIL, 3, 1.0, math.nan, None, None, None, 0.0)
    assert "<script>" not in evil._repr_html_() and "&lt;script&gt;" in evil._repr_html_()


def test_explain_display_is_the_wiring_table_and_still_the_json():
    info = explain(TINY.replace(wrap="deepnorm", residual=("ffn",)))
    assert json.loads(json.dumps(info)) == dict(info)  # still exactly the explain JSON
    table = rows_of(info._repr_html_())
    assert table[0] == ["layers", "sublayer", "wrap", "formula", "skip", "constants"]
    assert table[1][:3] == ["decoder 1-4", "attn", "deepnorm"] and table[1][4] == "OFF"
    assert table[2][1] == "ffn" and table[2][4] == "on" and table[2][5].startswith("alpha=")
    assert "residual off for attn" in info._repr_html_()
    assert_one_short_line(repr(info))
    assert "deepnorm" in repr(info) and "1 warnings" in repr(info)


@pytest.fixture(scope="module")
def evil_store(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("display") / "s.sqlite")
    fill_store(db, fake_study(name=f"fake{EVIL}"))
    return db


def test_study_display_is_the_outcome_map_with_counts_and_escapes_the_name(evil_store):
    study = depthlab.open(evil_store).study()
    html = study._repr_html_()
    assert "<script>" not in html and "fake&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "8 runs:" in html and ">stalled</span> 1" in html and ">trained</span> 7" in html
    tables = re.findall(r"<p><b>([^<]*)</b></p><table>(.*?)</table>", html, re.S)
    assert [t[0] for t in tables] == ["warmup=0", "warmup=5"]  # one outcome table per train setting
    first = rows_of(tables[0][1])
    assert first[0] == ["wrapping", "2 layers", "4 layers"]
    assert first[1] == ["post", "trained 2.57", "stalled 3.21"] and first[2] == [
        "pre",
        "trained 2.57",
        "trained 2.59",
    ]
    assert_one_short_line(repr(study))
    assert "8 runs (1 stalled, 7 trained)" in repr(study)


def test_store_display_lists_its_studies(evil_store):
    store = depthlab.open(evil_store)
    html = store._repr_html_()
    assert "<script>" not in html
    table = rows_of(html)
    assert table[0] == ["id", "study", "runs", "states", "updated", "description"]
    assert table[1][2] == "8" and "stalled 1" in table[1][3]
    assert_one_short_line(repr(store))


def test_open_refuses_what_is_not_a_store(tmp_path):
    with pytest.raises(InputError, match="no study store"):
        depthlab.open(str(tmp_path / "missing.sqlite"))
    assert not (tmp_path / "missing.sqlite").exists()  # opening never creates one
    (tmp_path / "notes.txt").write_text("not a store")
    with pytest.raises(InputError, match="not a depthlab store"):
        depthlab.open(str(tmp_path / "notes.txt"))


def test_open_is_not_exported_by_star_import():
    scope: dict = {}
    exec("from depthlab import *", scope)
    assert "open" not in scope and depthlab.open is depthlab.open_store


def test_a_returned_figure_shows_itself_as_png(comparison):
    fig = comparison.figure()
    assert isinstance(fig, InlineFigure)
    assert fig._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"


BACKEND_CHECK = """
import importlib, pkgutil, sys, tempfile
import matplotlib
{choose}
before = matplotlib.rcParams._get_backend_or_none()
import depthlab
# depthlab.integrations.* import Lightning or transformers' Trainer at their top (imported only by a user
# who asks for them); Lightning itself imports pyplot, which is not depthlab's doing
for m in pkgutil.walk_packages(depthlab.__path__, "depthlab."):
    if m.name != "depthlab.__main__" and not m.name.startswith("depthlab.integrations."):
        importlib.import_module(m.name)
from depthlab.probe.plot import probe_figure
from depthlab.report.figures import FIGURES
probe_figure([])._repr_png_()  # drawing and rendering a figure chooses no backend either
after = matplotlib.rcParams._get_backend_or_none()
assert "matplotlib.pyplot" not in sys.modules, "importing depthlab imported pyplot"
assert after == before, f"importing depthlab changed the backend from {{before}} to {{after}}"
print("backend", after)
"""


@pytest.mark.parametrize("choose, expect", [("", "None"), ("matplotlib.use('svg')", "svg")])
def test_importing_depthlab_leaves_matplotlibs_backend_alone(choose, expect):
    """A notebook's inline backend (or any backend a user chose, or none yet) survives ``import depthlab``."""
    code = BACKEND_CHECK.format(choose=choose)
    env = {k: v for k, v in __import__("os").environ.items() if k != "MPLBACKEND"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == f"backend {expect}"


def test_the_reproductions_plots_are_figures_first(tmp_path):
    """reproduce's shared plots are functions returning a Figure; the PNG writers only save them."""
    from depthlab_lab.reproduce.claim_plots import loss_curves, loss_curves_figure, profiles, profiles_figure

    class Run:  # the two things loss_curves reads of a reproduction's run
        label, curve = "post", [(0, 5.0), (10, 3.0), (20, float("nan"))]

        def short(self):
            return "trained"

    fig = loss_curves_figure({"6 layers": [Run()]}, "title", unigram=3.1)
    assert isinstance(fig, InlineFigure) and fig.get_suptitle() == "title"
    assert [len(line.get_xdata()) for line in fig.axes[0].lines] == [
        2,
        2,
    ]  # the NaN skipped; the unigram line
    prof = profiles_figure({"a": [1.0, None, 4.0]}, "t", "layer", "grad", log=True)
    assert list(prof.axes[0].lines[0].get_xdata()) == [0, 2] and prof.axes[0].get_yscale() == "log"
    assert loss_curves({"p": [Run()]}, None, "x", "t") is None  # no folder: numbers only
    path = profiles({"a": [1.0, 2.0]}, str(tmp_path), "p", "t", "layer", "v")
    assert open(path, "rb").read(4) == b"\x89PNG"
