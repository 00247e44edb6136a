"""The claim reproductions: measurements, result plumbing over seeds, both scales, the `all` document.

The training claims' results need real runs (minutes to hours); here every claim's code path runs on a
shrunken regime (d_model 16, a few steps, two seeds so that intervals exist), at the small scale through
``--quick`` and at the large scale with its registered regime shrunk the same way: the JSON shape, the
results computed from the per-seed values, the counts and the plots are exercised in CI.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from depthlab.cli import main
from depthlab.config import ModelConfig
from depthlab.errors import ConfigError, InputError
from depthlab.intervals import RESULTS, decide, mean_interval
from depthlab.model import build_model
from depthlab_lab.docgen import reproductions as all_mod
from depthlab_lab.reproduce import REGISTRATIONS, REPRODUCTIONS, Check, Reproduction, lm_runs, load_all
from depthlab_lab.reproduce import reproduction as claim_mod
from depthlab_lab.reproduce.claims.model_update import output_change, tiny_config
from depthlab_lab.reproduce.claims.redundancy import layer_angles, removal_costs, removed
from depthlab_lab.reproduce.claims.skip_ablation import bottom_to_top, falls_then_stalls
from depthlab_lab.reproduce.reproduction import counts, run_claim, seeded_check, unanimous_check

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py's, restored after each test

SEEDS = [0, 1]
# Each training claim's regime, shrunk to seconds (it replaces the registered values in the test only).
TINY = {
    "depth": {"depths": [3], "steps": 4, "seeds": SEEDS},
    "warmup": {"settings": [[2, 1e-3]], "steps": 6, "seeds": {"2": SEEDS}},
    "shallow-post": {"depth": 2, "steps": 4, "warmups": [0, 2], "seeds": SEEDS},
    "dyt": {"depths": [2], "steps": 4, "seeds": SEEDS},
    "final-norm": {"init_depths": [1, 2], "train_depths": [2], "steps": 4, "seeds": SEEDS},
    "skip-ablation": {"depth": 4, "bottom": 2, "steps": 8, "seeds": SEEDS},
    "redundancy": {"depths": [2], "steps": 4, "warmup": 1, "eval_batches": 1, "seeds": SEEDS},
    "recipe": {"n_layers": 2, "steps": 4, "warmup": 2, "seeds": SEEDS},
    "batchnorm": {"d_model": 16, "steps": 4, "seeds": SEEDS},
    "model-update": {"depths": [2, 3], "steps": 2, "seeds": SEEDS},
    "collapse": {"depths": [4, 8], "steps": 2, "warmup": 1, "batch_size": 4, "seq_len": 16, "seeds": SEEDS},
    "post-depth": {"depths": [2, 3], "lrs": [1e-3], "steps": 4, "warmup": 1, "pre_depth": 2, "seeds": SEEDS},
    "post-diverge": {"depth": 2, "lrs": [1e-3, 5.0], "steps": 4, "seeds": SEEDS},
    "original-shape": {
        "d_model": 16,
        "d_ff": 32,
        "n_heads": 2,
        "n_layers": 2,
        "steps": 6,
        "warmup": 2,
        "seeds": SEEDS,
    },
    "no-norm": {"init_depth": 2, "train_depth": 2, "steps": 4, "seeds": SEEDS},
    "no-residual": {"depths": [1, 2], "steps": 4, "seeds": SEEDS},
    "lr-sensitivity": {
        "d_model": 16,
        "depths": [1, 2],
        "lrs": [1e-3, 1e-1],
        "steps": 4,
        "warmup": 1,
        "control_depth": 2,
        "seeds": SEEDS,
    },
}
TRAINING = sorted(TINY)


@pytest.fixture
def shrunk(monkeypatch):
    """Both scales' shared regimes shrunk to d_model 16, one evaluation batch, short sequences."""
    for model in (lm_runs.TINY_MODEL, lm_runs.LARGE_MODEL):
        monkeypatch.setitem(model, "d_model", 16)
        monkeypatch.setitem(model, "n_heads", 2)
        monkeypatch.setitem(model, "max_len", 32)
    for train in (lm_runs.TINY_TRAIN, lm_runs.LARGE_TRAIN):
        monkeypatch.setitem(train, "eval_batches", 1)
        monkeypatch.setitem(train, "log_every", 2)
        monkeypatch.setitem(train, "batch_size", 4)
        monkeypatch.setitem(train, "seq_len", 16)
    import depthlab_lab.reproduce.claims.collapse as collapse

    monkeypatch.setattr(collapse, "CHECKPOINT_FROM", 8)  # the checkpointed path runs too
    lm_runs.clear_cache()
    yield monkeypatch
    lm_runs.clear_cache()


def _module(name: str):
    return __import__(REPRODUCTIONS[name].__module__, fromlist=["REGISTRATION"])


def _assert_well_formed(result: Reproduction, name: str, tmp_path):
    assert result.name == name and result.checks and result.source
    for c in result.checks:
        assert c.result in RESULTS and c.measured and c.stated
        if c.interval is not None and c.interval.n > 1:  # the result is the interval's, not a seed's
            assert c.interval.n == len(SEEDS)
    n = counts(result.checks)
    assert sum(n.values()) == len(result.checks)
    json.dumps(result.to_dict(), allow_nan=True)
    assert result.plots or name == "batchnorm"  # batchnorm's findings are tables, not curves
    assert all(p.endswith(".png") and (tmp_path / name).is_dir() for p in result.plots)
    assert result.format().startswith(name) and "agree" in result.format()


@pytest.mark.slow
@pytest.mark.parametrize("name", TRAINING)
def test_training_claim_small_scale_quick(shrunk, name, tmp_path):
    """--quick at the small scale, with the claim's quick changes set to the tiny regime."""
    shrunk.setattr(_module(name), "QUICK", TINY[name])
    result = run_claim(name, quick=True, out_dir=str(tmp_path / name), scale="small")
    _assert_well_formed(result, name, tmp_path)
    assert result.data["scale"] == "small"


@pytest.mark.slow
@pytest.mark.parametrize("name", TRAINING)
def test_training_claim_large_scale_code_path(shrunk, name, tmp_path, capsys):
    """--scale large: the registered large regime, shrunk to a tiny size; the expected time is printed first."""
    reg = REGISTRATIONS[name]
    assert "large" in reg.regimes, f"{name} is a training claim: it needs a large scale"
    shrunk.setitem(reg.regimes, "large", {**reg.regimes["large"], **TINY[name]})
    result = run_claim(name, quick=False, out_dir=str(tmp_path / name), scale="large")
    _assert_well_formed(result, name, tmp_path)
    assert result.data["scale"] == "large"
    err = capsys.readouterr().err
    assert err.startswith(name) and "expected time about" in err


def test_large_regimes_are_large():
    """Registered large scales: d_model >= 256 (the shared large model or the claim's own) and >= 2,000
    steps, except model-update, which measures the first updates of DeepNet's own 64-128-2 models."""
    assert lm_runs.LARGE_MODEL["d_model"] >= 256
    for name in TRAINING:
        large = REGISTRATIONS[name].regimes["large"]
        if name != "model-update":
            assert large["steps"] >= 2000, name
            assert large.get("d_model", lm_runs.LARGE_MODEL["d_model"]) >= 256, name
        seeds = large["seeds"] if isinstance(large["seeds"], list) else min(large["seeds"].values(), key=len)
        assert len(seeds) >= 3, name


def test_lr_sensitivity_small_regime_is_the_preset():
    """The registered small regime runs the lr-sensitivity preset itself, so a preset run is reused."""
    from depthlab.study.presets import preset
    from depthlab_lab.reproduce.claims import lr_sensitivity

    ours, _ = lr_sensitivity._studies(lr_sensitivity.SMALL, "small", quick=False)
    assert ours.to_dict() == preset("lr-sensitivity").to_dict()


def test_lr_sensitivity_compares_like_with_like():
    """Attention values of two runs read at different steps (one stopped early) are not compared; a
    setting with no curve gives an empty one (inconclusive checks), not a KeyError."""
    from depthlab_lab.reproduce.claims import lr_sensitivity as lrs

    rows = [
        {"step": s, "layer": i, "attn_logit_max": 5.0 * s, "attn_entropy": 2.0}
        for s in (10, 20)
        for i in (0, 1, 2)
    ]
    rows += [{"step": 30, "layer": 1, "attn_logit_max": None, "attn_entropy": None}]
    rows = [r if r["layer"] else {**r, "attn_logit_max": None, "attn_entropy": None} for r in rows]
    assert lrs._attention({"layers": rows}) == (100.0, 2.0, 20)  # step 30 has a non-finite layer
    x, y = {0: (100.0, 2.0, 20), 1: (50.0, 2.0, 10)}, {0: (10.0, 2.5, 20), 1: (10.0, 2.5, 20)}
    values = lrs._paired(x, y, lambda u, v: lrs._log_ratio(u[0], v[0]))
    assert values[0] == pytest.approx(1.0) and math.isnan(values[1])
    assert math.isnan(lrs._log_ratio(0.0, 1.0)) and lrs._index([])[("pre", 6)].per_seed_sensitivity() == {}


def test_small_regimes_have_enough_seeds():
    for name, reg in REGISTRATIONS.items():
        seeds = reg.regimes.get("small", {}).get("seeds")
        if seeds is not None:
            groups = seeds.values() if isinstance(seeds, dict) else [seeds]
            assert all(len(g) >= 3 for g in groups), name


def test_scale_and_quick_are_refused_where_they_do_not_apply(capsys, tmp_path):
    with pytest.raises(ConfigError):
        run_claim("seeds", scale="large")  # trains nothing: no large scale
    with pytest.raises(ConfigError):
        run_claim("depth", quick=True, scale="large")
    assert main(["reproduce", "depth", "--quick", "--scale", "large", "--out", str(tmp_path)]) == 2
    assert main(["reproduce", "init-scaling", "--scale", "large", "--out", str(tmp_path)]) == 2
    assert "scale" in capsys.readouterr().err


def test_seeded_check_decides_on_the_interval_not_on_one_seed():
    agree = seeded_check("c", "s", [0.21, 0.25, 0.19], at_least=0.1)
    assert agree.result == "agree" and "per seed 0.21/0.25/0.19" in agree.measured
    straddles = seeded_check("c", "s", [0.30, 0.02, 0.25], at_least=0.1)
    assert straddles.result == decide(mean_interval([0.30, 0.02, 0.25]), at_least=0.1) == "inconclusive"
    assert seeded_check("c", "s", [0.05, 0.02, 0.04], at_least=0.1).result == "MISMATCH"
    assert seeded_check("c", "s", [0.5], at_least=0.1).result == "inconclusive"  # one seed decides nothing
    assert seeded_check("c", "s", [0.5, math.nan], at_least=0.1).result == "inconclusive"
    sanity = seeded_check("c", "s", [1.0, 1.0], at_least=0.1, sanity="by construction")
    assert not sanity.counted and counts([agree, straddles, sanity]) == {
        "agree": 1,
        "MISMATCH": 0,
        "inconclusive": 1,
        "sanity": 1,
    }


def test_unanimous_check():
    assert unanimous_check("c", "s", [True, True, True], "m").result == "agree"
    assert unanimous_check("c", "s", [False, False], "m").result == "MISMATCH"
    assert unanimous_check("c", "s", [True, False, True], "m").result == "inconclusive"
    assert unanimous_check("c", "s", [True], "m").result == "inconclusive"


def test_check_accepts_a_bool_and_refuses_an_unknown_verdict():
    assert Check("c", "s", "m", True).result == "agree" and Check("c", "s", "m", False).result == "MISMATCH"
    with pytest.raises(ValueError):
        Check("c", "s", "m", "maybe")


def test_output_change_starts_from_the_loops_theta_0_and_grows_with_the_learning_rate(one_thread):
    cfg = tiny_config("post", 2)
    small, large = output_change(cfg, 0, steps=1, lr=1e-6), output_change(cfg, 0, steps=1, lr=1e-3)
    assert 0 < small < 1e-3 < large  # a tiny step barely moves f(x): theta_0 is the loop's own


def test_bottom_to_top_ratios():
    grads = [(1, [1e-6, 2e-6, 1.0]), (10, [3e-6, 1e-6, 1.0]), (20, [None, 1.0, 1.0])]
    r = bottom_to_top(grads, bottom=2)
    assert r["max"] == pytest.approx(2.5e-6) and r["min"] == pytest.approx(1e-6)  # the None step is skipped
    assert r["orders"] == pytest.approx(6.0)  # 1e-6 of the top: six orders of magnitude
    assert math.isnan(bottom_to_top([], bottom=2)["max"])


def test_falls_then_stalls_reads_the_curve():
    falling_then_flat = [(s, 5.5 - 0.05 * s if s <= 40 else 3.5) for s in range(0, 121, 10)]
    shape = falls_then_stalls(falling_then_flat)
    assert shape["falls"] == pytest.approx(2.0) and shape["progress"] == pytest.approx(0.0)
    still_falling = [(s, 5.5 - 0.01 * s) for s in range(0, 121, 10)]
    assert falls_then_stalls(still_falling)["progress"] > 0.5
    assert math.isnan(falls_then_stalls([(1, 3.0)])["falls"])


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


def test_final_loss_counts_a_diverged_run_as_an_untrained_model():
    run = lm_runs.Run(
        "z", {"n_layers": 2, "vocab_size": 256}, {}, "diverged", "loss", math.nan, math.nan, 3.1, 0.0
    )
    assert lm_runs.final_loss(run) == pytest.approx(math.log(256))
    assert (
        lm_runs.below_unigram(run) == pytest.approx(math.log(256) - 3.1) and run.to_dict()["val_loss"] is None
    )
    good = lm_runs.Run("y", {"n_layers": 2}, {}, "trained", None, 2.5, 2.5, 3.1, 0.0)
    assert lm_runs.relative_to_unigram(good) == pytest.approx(2.5 / 3.1 - 1)


def _fake(result, plot_dir_files: list, name: str = "fake"):
    def fake(quick: bool = False, out_dir: str | None = None, scale: str = "small") -> Reproduction:
        """A fake claim | with a pipe."""
        import os

        print("progress noise")  # must not reach stdout, which holds the tables or the JSON
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "curve.png")
        with open(path, "wb") as f:
            f.write(b"\x89PNG fake")
        plot_dir_files.append(path)
        checks = [
            Check("c | 1", "s", "m", result),
            seeded_check("seeded", ">= 0", [0.4, -0.3, 0.1], at_least=0.0),
            Check("by construction", "s", "m", True, sanity="holds by construction"),
        ]
        table = {"title": "a measured table", "columns": ["step", "x"], "rows": [["0", "1.5"]]}
        return Reproduction(name, {"x": 1, "tables": [table]}, checks, [path], source="a paper")

    return fake


def test_all_writes_the_document_and_refuses_a_foreign_file(tmp_path, monkeypatch, capsys):
    written = []
    monkeypatch.setitem(REPRODUCTIONS, "fake", _fake(False, written))
    monkeypatch.setitem(REPRODUCTIONS, "broken", lambda quick=False, out_dir=None, scale="small": 1 / 0)
    doc = tmp_path / "docs" / "reproductions.md"
    result = all_mod.run_all(
        quick=True, out_dir=str(tmp_path / "runs"), doc=str(doc), names=["fake", "broken"]
    )
    text = doc.read_text()
    assert text.splitlines()[0] == all_mod.MARKER
    assert "`depthlab reproduce all --quick`" in text and "| c \\| 1 | s | m | **MISMATCH** |" in text
    assert "| seeded | >= 0 | mean 0.0667 [" in text and "*inconclusive*" in text
    assert "Sanity checks (not counted):" in text and "holds by construction" in text
    assert "a measured table" in text and "| 0 | 1.5 |" in text and "## Revisions" in text
    assert "ZeroDivisionError" in text and "![fake](img/fake-curve.png)" in text
    # the sanity check is not counted; no revised rule; Holm over the one check with an interval
    assert "| **all** | | | **0** | **2** | **1** | 0/2/1 | 0/2/1 | **1** |" in text
    assert "Under the first registrations: 0 of 3 counted checks agree" in text
    assert (tmp_path / "docs" / "img" / "fake-curve.png").read_bytes() == b"\x89PNG fake"
    assert [c.claim for c in result.checks][:2] == ["broken: the reproduction runs", "fake: c | 1"]
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


def test_the_document_shows_registrations_and_revisions(tmp_path, monkeypatch):
    """A registered claim's section names its registration date, expectation and regime; its revisions
    appear in the revisions section with old value, new value and whether results were known."""
    written = []
    monkeypatch.setitem(REPRODUCTIONS, "warmup", _fake(True, written, "warmup"))
    doc = tmp_path / "reproductions.md"
    all_mod.run_all(quick=True, out_dir=str(tmp_path / "runs"), doc=str(doc), names=["warmup"])
    text = doc.read_text()
    reg = REGISTRATIONS["warmup"]
    assert (
        f"**Registered** in commit {reg.commit[:7]}" in text
        and "`clear` = 0.1" in text
        and "- regime (small):" in text
    )
    assert (
        "| warmup | 2026-11-30 07:48 UTC (commit 0ed7622fcf, before the registration's) "
        "| `expectation.failed_run_counts_as_worse` | False | True |" in text
    )
    assert text.count("| warmup |") == len(reg.revisions)


def test_all_at_the_large_scale_runs_only_claims_with_a_large_scale():
    todo = all_mod.names_to_run(load_all(), scale="large")
    assert "seeds" not in todo and "jacobian" not in todo and set(TRAINING) <= set(todo)
    assert all_mod.names_to_run(load_all(), ["seeds", "depth"]) == ["seeds", "depth"]


def test_cli_all_rejects_unknown_name_and_doc_on_a_single_claim(capsys, tmp_path):
    assert main(["reproduce", "model-update", "--doc", str(tmp_path / "x.md")]) == 2
    assert "--doc" in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()


def test_list_gives_each_claim_whole_in_one_aligned_column(capsys):
    """A claim whose first sentence runs over two source lines is listed whole ('jacobian' stopped at
    "for post-LN,"), and a name longer than 16 characters does not push its claim out of the column."""
    assert main(["reproduce", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == sorted(REPRODUCTIONS)
    assert all(ln.rstrip().endswith((".", ")", "?")) for ln in lines), [ln[-30:] for ln in lines]
    (jacobian,) = [ln for ln in lines if ln.startswith("jacobian ")]
    assert jacobian.endswith("near 1 for ReZero (Bachlechner et al. 2020).")
    starts = {len(ln) - len(ln[len(ln.split()[0]) :].lstrip()) for ln in lines}
    assert len(starts) == 1


def test_claim_module_has_no_pyplot():
    import sys

    assert "matplotlib.pyplot" not in sys.modules or all(
        "pyplot" not in getattr(sys.modules[m.__module__], "__dict__", {}) for m in REPRODUCTIONS.values()
    )
    assert claim_mod.SCALES == ("small", "large")


def test_hutchinson_msv_whole_sequence_and_per_token():
    """On maps with known Jacobians: 2x has MSV 4 either way; x + (x shifted by one token) has a
    whole-sequence MSV of 2 (two unit entries per row) but a per-token MSV of 1 (its diagonal blocks are I)."""
    from depthlab_lab.reproduce.jacobian_setups import hutchinson_msv

    x, gen = torch.randn(2, 6, 8), torch.Generator().manual_seed(0)
    assert hutchinson_msv(lambda h: 2 * h, x, 64, gen) == pytest.approx(4.0, rel=0.05)
    assert hutchinson_msv(lambda h: 2 * h, x, 64, gen, per_token=True) == pytest.approx(4.0, rel=0.1)
    shift = lambda h: h + torch.roll(h, 1, dims=1)  # noqa: E731
    assert hutchinson_msv(shift, x, 64, gen) == pytest.approx(2.0, rel=0.05)
    assert hutchinson_msv(shift, x, 64, gen, per_token=True) == pytest.approx(1.0, rel=0.1)


def test_jacobian_walks_from_the_notebook_setup_to_depthlabs(monkeypatch, tmp_path):
    import depthlab_lab.reproduce.claims.jacobian as jac
    from depthlab_lab.reproduce.jacobian_setups import START, STEPS, setup_msv

    assert setup_msv("rezero", 3, START, 0, 4) == pytest.approx(1.0, rel=0.1)  # a = 0: J = I
    monkeypatch.setattr(jac, "QUICK", {"depth": 3, "probes": 2, "seeds": [0, 1], "walk_seeds": [0]})
    result = jac.reproduce_jacobian(quick=True, out_dir=str(tmp_path))
    # depthlab's ReZero row is sanity (a = 0); the reconstruction's four rows were added with results known
    assert (
        len(result.checks) == 8
        and [c.counted for c in result.checks] == [True] * 2 + [False] + [True] + [False] * 4
    )
    cell, table = result.data["tables"]  # the notebook's own cell is run only in the full regime
    assert cell["rows"] == [] and "ReZero weight 0.1" in cell["title"]
    assert [row[1] for row in table["rows"]] == [label for label, _ in STEPS]
    assert result.data["where_they_part"] in table["title"]
    json.dumps(result.to_dict())


def test_where_they_part_names_the_first_step_that_leaves_the_vanishing_regime():
    from depthlab_lab.reproduce.claims.jacobian import where_they_part

    rows = [{"step": s, "msv": {"post": [v]}} for s, v in (("a", 1e-3), ("b", 2e-3), ("c", 0.5), ("d", 7.0))]
    assert where_they_part(rows, 1e-2) == "post-LN's MSV first reaches 0.01 or more at step 2: c"
    assert "stays below" in where_they_part(rows[:2], 1e-2)
    assert "even in depthlab's reconstruction of the ReZero setup" in where_they_part(rows[2:], 1e-2)


def test_stream_growth_tiny(monkeypatch, tmp_path):
    import depthlab_lab.reproduce.claims.stream_growth as sg

    monkeypatch.setattr(sg, "QUICK", {"depths": [2, 4], "d_model": 16, "n_heads": 2, "seeds": [0, 1]})
    result = sg.reproduce_stream_growth(quick=True, out_dir=str(tmp_path))
    assert len(result.checks) == 1  # the 96-layer bound needs the 96-layer stack: not in this regime
    growth = result.data["growth"]
    assert all(x["rms_ratio"] > 1 and x["correlated_ratio"] > 0 for g in growth.values() for x in g)
    assert result.checks[0].result in RESULTS and result.plots


def test_jacobian_msv_is_one_for_rezero_at_init_and_grows_for_pre_ln():
    from depthlab_lab.reproduce.claims.jacobian import msv

    assert msv("rezero", 8, 4) == pytest.approx(1.0, rel=0.05)  # a = 0: every layer is the identity
    assert msv("pre", 8, 4) > 1.5  # every pre-LN layer adds a branch to the identity path


@pytest.mark.slow
def test_the_gpu_script_launches_the_large_scale(shrunk, tmp_path, capsys):
    """benchmarks/gpu.py --reproduce runs `reproduce all --scale large` (here one claim, its large regime
    shrunk to a tiny size) and writes the large-scale document."""
    import importlib.util
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    shrunk.syspath_prepend(str(bench))
    spec = importlib.util.spec_from_file_location("gpu_bench", bench / "gpu.py")
    gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu)
    reg = REGISTRATIONS["depth"]
    shrunk.setitem(reg.regimes, "large", {**reg.regimes["large"], **TINY["depth"]})
    doc = tmp_path / "reproductions-large.md"
    assert gpu.reproduce_large("depth", str(doc), str(tmp_path / "runs")) == 0
    text = doc.read_text()
    assert "`depthlab reproduce all --scale large` (scale: large)" in text and "- regime (large):" in text
    assert (
        "![depth](img-large/depth-depth.png)" in text
        and (tmp_path / "img-large" / "depth-depth.png").is_file()
    )
    assert "all:" in capsys.readouterr().out
    sys.modules.pop("gpu_bench", None)
