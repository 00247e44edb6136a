"""DataFrames: every ``to_pandas()`` has its documented columns and the values of the result it came from."""

from __future__ import annotations

import ast
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_study_fakes import fake_study, fill_store

import depthlab
from depthlab import InputError, ModelConfig, TrainConfig
from depthlab.model.explain import FRAME as WIRING_FRAME
from depthlab.model.explain import explain
from depthlab.probe.compare import FRAMES as COMPARE_FRAMES
from depthlab.probe.compare import compare
from depthlab.probe.result import FRAMES as PROBE_FRAMES
from depthlab.report.tables import FRAMES as STUDY_FRAMES
from depthlab.study.schema import LAYER_COLUMNS, METRIC_COLUMNS, PROBE_LAYER_COLUMNS
from depthlab.train import train
from depthlab.train.run_result import FRAMES as RUN_FRAMES
from depthlab.watch.keys import LAYER_KEYS

pytest.importorskip("pandas")
pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ModelConfig(arch="decoder", n_layers=3, d_model=16, n_heads=2, vocab_size=256, max_len=32, wrap="post")


def same(frame_value, value) -> bool:
    """A frame's cell equals the result's value (a missing value is NaN or None in the frame)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return frame_value is None or (isinstance(frame_value, float) and math.isnan(frame_value))
    return frame_value == pytest.approx(value) if isinstance(value, float) else frame_value == value


def assert_frame_is(
    frame, records: list[dict], columns: tuple, rename: dict | None = None, exact=True
) -> None:
    """``frame`` has exactly ``columns`` (``exact``; else at least them) and in each of them row k holds
    records[k]'s value (its key ``rename.get(c, c)``)."""
    assert tuple(frame.columns) == tuple(columns) if exact else set(columns) <= set(frame.columns)
    assert len(frame) == len(records) > 0
    rename = rename or {}
    for k, rec in enumerate(records):
        for c in columns:
            assert same(frame.iloc[k][c], rec.get(rename.get(c, c))), (k, c, frame.iloc[k][c], rec.get(c))


@pytest.fixture(scope="module")
def comparison():
    return compare([("post", TINY), ("pre", TINY.replace(wrap="pre"))], batch_size=2, seq_len=16)


def test_probe_frames(comparison):
    result = comparison.runs[0][1]
    assert PROBE_FRAMES["layers"][:5] == ("layer", "grad_norm", "stream_rms", "update_ratio", "cos_prev")
    layers = result.to_pandas()
    assert_frame_is(layers, result.layers, PROBE_FRAMES["layers"], rename={"layer": "index"})
    assert str(layers["grad_norm"].dtype) == "float64" and math.isnan(layers["cross_grad_norm"][1])
    verdicts = [v.to_dict() for v in result.verdicts]
    assert_frame_is(result.to_pandas("verdicts"), verdicts, ("level", "code", "message"))
    with pytest.raises(InputError, match="one of layers, verdicts"):
        result.to_pandas("steps")


def test_comparison_frames(comparison):
    layers = comparison.to_pandas()
    expected = [{"label": label, **row} for label, r in comparison.runs for row in r.layers]
    assert_frame_is(layers, expected, COMPARE_FRAMES["layers"], rename={"layer": "index"})
    summary = comparison.to_pandas("summary")
    assert_frame_is(summary, comparison.summary(), COMPARE_FRAMES["summary"])
    post = comparison.runs[0][1]
    assert summary["g0_gL"][0] == pytest.approx(post.layers[0]["grad_norm"] / post.layers[-1]["grad_norm"])
    verdicts = comparison.to_pandas("verdicts")
    assert list(verdicts["label"]) == [label for label, r in comparison.runs for _ in r.verdicts]


def test_run_frames():
    cfg = TrainConfig(steps=8, batch_size=2, seq_len=16, log_every=4, eval_every=8, eval_batches=1)
    run = train(TINY.replace(n_layers=2), cfg)
    assert RUN_FRAMES["layers"] == ("step", "layer", *LAYER_KEYS)
    metrics = run.to_pandas()
    assert_frame_is(metrics, run.metrics, ("step", "loss", "lr", "grad_norm", "val_loss", "tokens_per_s"))
    assert list(metrics["step"]) == [1, 4, 8]
    layers = run.to_pandas("layers")
    expected = [{"step": rec["step"], **row} for rec in run.metrics for row in rec["layers"]]
    assert_frame_is(layers, expected, RUN_FRAMES["layers"], rename={"layer": "index"})
    assert len(layers) == 3 * 3  # three logged steps, three streams each


def test_wiring_frame():
    info = explain(TINY.replace(wrap="deepnorm"))
    frame = info.to_pandas()
    expected = [
        {**s, "side": lay["side"], "layer": lay["index"]} for lay in info["layers"] for s in lay["sublayers"]
    ]
    assert_frame_is(frame, expected, WIRING_FRAME)
    assert list(frame["name"]) == ["attn", "ffn"] * 3 and set(frame["constants"][0]) == {"alpha", "beta"}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("frames") / "s.sqlite")
    fill_store(db, fake_study())
    return depthlab.open(db).study("fake")


def test_study_runs_frame(study):
    frame = study.runs()
    runs = study.data.runs
    assert tuple(frame.columns) == (*STUDY_FRAMES["runs"], "wrap", "warmup", "config")
    assert list(frame["run_id"]) == [r["id"] for r in runs] and len(frame) == 8
    for k, r in enumerate(runs):
        row = frame.iloc[k]
        for c in ("status", "outcome", "val_loss", "final_train_loss", "probe_level", "config_hash", "host"):
            assert same(row[c], r[c]), c
        assert (
            row["n_layers"] == r["config"]["model"]["n_layers"]
            and row["seed"] == r["config"]["train"]["seed"]
        )
        assert row["wrap"] == r["config"]["model"]["wrap"] and row["warmup"] == r["config"]["train"]["warmup"]
        assert row["wrapping"] == row["wrap"] and row["setting"] == f"warmup={row['warmup']}"
    stalled = frame[frame.state == "stalled"]
    assert list(zip(stalled.wrap, stalled.n_layers, stalled.warmup)) == [("post", 4, 0)]


def test_study_metrics_and_layer_frames(study):
    runs = study.data.runs
    metrics = study.metrics()
    assert (
        tuple(metrics.columns)
        == STUDY_FRAMES["metrics"]
        == (*STUDY_FRAMES["metrics"][:5], "step", *METRIC_COLUMNS)
    )
    assert_frame_is(
        metrics,
        [{**m, "run_id": r["id"]} for r in runs for m in r["metrics"]],
        STUDY_FRAMES["metrics"][5:],
        exact=False,
    )
    layers = study.layer_metrics()
    assert tuple(layers.columns) == (*STUDY_FRAMES["metrics"][:5], "step", "layer", *LAYER_COLUMNS)
    assert_frame_is(
        layers,
        [m for r in runs for m in r["layers"]],
        ("run_id", *STUDY_FRAMES["layer_metrics"][5:]),
        exact=False,
    )
    assert len(layers) == sum(len(r["layers"]) for r in runs) and list(layers["run_id"])[0] == runs[0]["id"]
    probes = study.probe_layers()
    assert tuple(probes.columns) == (*STUDY_FRAMES["metrics"][:5], "layer", *PROBE_LAYER_COLUMNS)
    assert_frame_is(
        probes,
        [m for r in runs for m in r["probe_layers"]],
        ("run_id", *STUDY_FRAMES["probe_layers"][5:]),
        exact=False,
    )
    assert study.to_pandas("metrics").equals(metrics)
    with pytest.raises(InputError, match="one of runs, metrics, layer_metrics, probe_layers"):
        study.to_pandas("nope")


def test_store_frame(study):
    frame = depthlab.open(study.data.db).to_pandas()
    assert tuple(frame.columns) == (
        "id",
        "name",
        "description",
        "runs",
        "created_at",
        "updated_at",
        "config_hash",
    )
    assert list(frame["name"]) == ["fake"] and list(frame["runs"]) == [8]


def test_import_depthlab_does_not_import_pandas():
    code = "import sys, depthlab; assert 'pandas' not in sys.modules, 'import depthlab imported pandas'"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr


def test_a_frame_without_pandas_says_which_extra_to_install(monkeypatch):
    from depthlab.doctor.atlas import Atlas
    from depthlab.frames import PANDAS_HINT

    monkeypatch.setitem(sys.modules, "pandas", None)  # importing pandas fails, as when it is not installed
    for frame in (Atlas.load().to_pandas, explain(TINY).to_pandas):
        with pytest.raises(ModuleNotFoundError, match=re.escape(PANDAS_HINT)):
            frame()


def test_pandas_is_imported_by_depthlab_frames_alone():
    """frames.to_frame names the extra when pandas is missing; a module importing pandas itself would
    fail with a bare "No module named 'pandas'"."""
    root = Path(depthlab.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] == "pandas" for n in names):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert {f.split(":")[0] for f in found} == {"frames.py"}, found
