"""The published-claim reproductions: measurements, verdict plumbing, the `all` document.

The training claims' verdicts need real runs (minutes); here their code paths run on a shrunken regime
(a few steps, d_model 16) so that the JSON shape, the checks and the plots are exercised in CI.
`model-update --quick` runs for real: it is fast.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from depthlab.cli import main
from depthlab.config import ModelConfig
from depthlab.docs import reproductions as all_mod
from depthlab.errors import InputError
from depthlab.model import build_model
from depthlab.reproduce import REPRODUCTIONS, Check, Reproduction, lm_runs, load_all
from depthlab.reproduce.model_update import output_change, tiny_config
from depthlab.reproduce.redundancy import layer_angles, removal_costs, removed
from depthlab.reproduce.skip_ablation import bottom_to_top

CLAIMS = (
    "jacobian",
    "warmup",
    "depth",
    "shallow-post",
    "model-update",
    "skip-ablation",
    "final-norm",
    "redundancy",
    "dyt",
)


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py's, restored after each test


def test_every_claim_is_registered_with_a_docstring():
    registry = load_all()
    for name in CLAIMS:
        assert name in registry, name
        assert registry[name].__doc__.strip()


def test_output_change_is_zero_without_a_step_and_grows_with_the_learning_rate():
    cfg = tiny_config("post", 2)
    assert output_change(cfg, seed=0, steps=2, lr=0.0) == [0.0, 0.0]
    small, large = output_change(cfg, 0, steps=1, lr=1e-5)[0], output_change(cfg, 0, steps=1, lr=1e-3)[0]
    assert 0 < small < large


def test_model_update_quick_cli_json(capsys, tmp_path):
    """The real quick reproduction: JSON shape, and post-LN's update grows from 6 to 48 layers."""
    assert main(["reproduce", "model-update", "--quick", "--out", str(tmp_path), "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["update"]) == {"post", "pre", "deepnorm"}
    for wrap, by_depth in out["update"].items():
        assert list(by_depth) == ["6", "12", "24", "48"], wrap
        assert all(math.isfinite(v) and v > 0 for v in by_depth.values())
    assert out["update"]["post"]["48"] > out["update"]["post"]["6"]
    assert out["update"]["deepnorm"]["48"] < out["update"]["post"]["48"]
    assert {tuple(sorted(c)) for c in out["checks"]} == {("claim", "measured", "ok", "stated")}
    assert len(out["checks"]) == 4
    assert (tmp_path / "model-update" / "model_update.png").is_file()


def test_bottom_to_top_ratios():
    grads = [(1, [1e-6, 2e-6, 1.0]), (10, [3e-6, 1e-6, 1.0]), (20, [None, 1.0, 1.0])]
    r = bottom_to_top(grads, bottom=2)
    assert r == {"max": pytest.approx(2.5e-6), "min": pytest.approx(1e-6)}  # the None step is skipped
    assert math.isnan(bottom_to_top([], bottom=2)["max"])


def test_removing_a_layer_restores_it_and_rezero_layers_cost_nothing_at_init():
    torch.manual_seed(0)
    batches = [torch.randint(0, 256, (2, 9))]
    rezero = build_model(ModelConfig(n_layers=3, d_model=16, n_heads=2, wrap="rezero", norm="none"))
    full, costs = removal_costs(rezero, batches)
    assert costs == [0.0, 0.0, 0.0]  # a = 0 at init: every ReZero layer is the identity
    assert layer_angles(rezero, batches) == pytest.approx([0.0] * 3, abs=1e-3)
    pre = build_model(ModelConfig(n_layers=3, d_model=16, n_heads=2, wrap="pre"))
    kept = pre.stack.layers[1]
    with removed(pre, 1):
        assert pre.stack.layers[1] is not kept
    assert pre.stack.layers[1] is kept
    _, costs = removal_costs(pre, batches)
    assert all(c != 0.0 for c in costs) and all(0 < a < 1 for a in layer_angles(pre, batches))


def test_run_verdict_helpers():
    run = lm_runs.Run("x", {"n_layers": 2}, {}, "trained", None, 3.0, 3.0, 3.1, 0.0)
    assert lm_runs.ended_at_unigram(run, margin=0.2) and not lm_runs.trained_below_unigram(run, 0.2)
    good = lm_runs.Run("y", {"n_layers": 2}, {}, "trained", None, 2.5, 2.5, 3.1, 0.0)
    assert lm_runs.trained_below_unigram(good, 0.2) and not lm_runs.ended_at_unigram(good, 0.2)
    nan = lm_runs.Run("z", {"n_layers": 2}, {}, "diverged", "loss", math.nan, math.nan, 3.1, 0.0)
    assert lm_runs.ended_at_unigram(nan, 0.2) and nan.to_dict()["val_loss"] is None


@pytest.fixture
def shrunk(monkeypatch):
    """The shared regime shrunk to seconds: d_model 16, 4 steps, one evaluation batch."""
    monkeypatch.setitem(lm_runs.TINY_MODEL, "d_model", 16)
    monkeypatch.setitem(lm_runs.TINY_TRAIN, "eval_batches", 1)
    monkeypatch.setitem(lm_runs.TINY_TRAIN, "log_every", 2)
    from depthlab.reproduce import depth, dyt, final_norm, redundancy, shallow_post, skip_ablation, warmup

    for mod in (depth, dyt, final_norm, shallow_post, skip_ablation, warmup):
        monkeypatch.setattr(mod, "STEPS_QUICK", 4)
    monkeypatch.setattr(warmup, "SETTINGS_QUICK", ((2, 1e-3),))
    monkeypatch.setattr(depth, "DEPTHS_QUICK", (3,))
    monkeypatch.setattr(skip_ablation, "DEPTH", 4)
    monkeypatch.setattr(skip_ablation, "BOTTOM", 2)
    monkeypatch.setattr(final_norm, "INIT_DEPTHS", (1, 2))
    monkeypatch.setattr(final_norm, "TRAIN_DEPTHS_QUICK", (2,))
    monkeypatch.setattr(redundancy, "DEPTHS_QUICK", (2,))
    monkeypatch.setattr(redundancy, "STEPS", 4)
    monkeypatch.setattr(redundancy, "EVAL_BATCHES_QUICK", 1)
    monkeypatch.setattr(shallow_post, "DEPTH", 2)
    monkeypatch.setattr(dyt, "DEPTHS_QUICK", (2,))
    lm_runs.clear_cache()
    yield
    lm_runs.clear_cache()


@pytest.mark.parametrize("name", [c for c in CLAIMS if c != "model-update"])
def test_training_claim_shapes(shrunk, name, tmp_path):
    """Each training claim on the shrunken regime: checks with computed verdicts, JSON, plots written."""
    result = load_all()[name](quick=True, out_dir=str(tmp_path))
    assert result.name == name and result.checks and result.source
    assert all(isinstance(c.ok, bool) and c.measured and c.stated for c in result.checks)
    json.dumps(result.to_dict(), allow_nan=True)
    assert result.plots and all((tmp_path / p.split("/")[-1]).is_file() for p in result.plots)
    assert result.format().startswith(name)


def _fake(ok: bool, plot_dir_files: list):
    def fake(quick: bool = False, out_dir: str | None = None) -> Reproduction:
        """A fake claim | with a pipe."""
        import os

        print("progress noise")  # must not reach stdout, which holds the tables or the JSON
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "curve.png")
        with open(path, "wb") as f:
            f.write(b"\x89PNG fake")
        plot_dir_files.append(path)
        return Reproduction("fake", {"x": 1}, [Check("c | 1", "s", "m", ok)], [path], source="a paper")

    return fake


def test_all_writes_the_document_and_refuses_a_foreign_file(tmp_path, monkeypatch, capsys):
    written = []
    monkeypatch.setitem(REPRODUCTIONS, "fake", _fake(False, written))
    monkeypatch.setitem(REPRODUCTIONS, "broken", lambda quick=False, out_dir=None: 1 / 0)
    doc = tmp_path / "docs" / "reproductions.md"
    result = all_mod.run_all(
        quick=True, out_dir=str(tmp_path / "runs"), doc=str(doc), names=["fake", "broken"]
    )
    text = doc.read_text()
    assert text.splitlines()[0] == all_mod.MARKER
    assert "`depthlab reproduce all --quick`" in text and "| c \\| 1 | s | m | **MISMATCH** |" in text
    assert "ZeroDivisionError" in text and "![fake](img/fake-curve.png)" in text
    assert (tmp_path / "docs" / "img" / "fake-curve.png").read_bytes() == b"\x89PNG fake"
    assert [c.claim for c in result.checks] == ["broken: the reproduction runs", "fake: c | 1"]
    assert not result.ok and "fake" in result.format()
    streams = capsys.readouterr()
    assert "progress noise" in streams.err and "progress noise" not in streams.out
    # regenerating over its own output is allowed; a file someone else wrote is not overwritten
    all_mod.run_all(quick=True, out_dir=str(tmp_path / "runs"), doc=str(doc), names=["fake"])
    foreign = tmp_path / "notes.md"
    foreign.write_text("my notes\n")
    with pytest.raises(InputError):
        all_mod.run_all(doc=str(foreign), names=["fake"])
    assert foreign.read_text() == "my notes\n"


def test_cli_all_rejects_unknown_name_and_doc_on_a_single_claim(capsys, tmp_path):
    assert main(["reproduce", "model-update", "--doc", str(tmp_path / "x.md")]) == 2
    assert "--doc" in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()


def test_jacobian_msv_is_one_for_rezero_at_init_and_grows_for_pre_ln():
    from depthlab.reproduce.jacobian import msv

    assert msv("rezero", 8, 4) == pytest.approx(1.0, rel=0.05)  # a = 0: every layer is the identity
    assert msv("pre", 8, 4) > 1.5  # every pre-LN layer adds a branch to the identity path
