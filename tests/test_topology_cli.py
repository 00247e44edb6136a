"""The residual topologies through the commands, like any wrapping: explain (the state, the extra parameters
and their count), probe --compare, train, a study grid; their flags refused in one line where unread."""

from __future__ import annotations

import json

import pytest
import torch

from depthlab import ModelConfig, build_model
from depthlab.cli import main
from depthlab.model.explain import explain

pytestmark = pytest.mark.usefixtures("one_thread")
SMALL = ["--layers", "2", "--d-model", "16", "--heads", "2"]


@pytest.mark.parametrize(
    "wrap", ["hc", "dhc", "mhc", "frac", "denseformer", "attnres", "attnres_block", "vres_learned"]
)
def test_explain_counts_the_parameters_beyond_pre_ln(wrap):
    cfg = ModelConfig(n_layers=3, d_model=16, n_heads=2, vocab_size=32, max_len=8, wrap=wrap)
    info = explain(cfg)
    extra = info["topology"]["extra_total"]
    torch.manual_seed(0)
    pre = sum(p.numel() for p in build_model(cfg.replace(wrap="pre")).parameters())
    assert extra == info["params"]["total"] - pre > 0
    assert "parameters beyond pre-LN's" in info.format() and info["topology"]["state"]
    assert "topology" not in explain(cfg.replace(wrap="pre"))


def test_probe_compares_topologies_and_writes_their_fields(tmp_path, capsys):
    out = tmp_path / "p.json"
    args = ["probe", *SMALL, "--compare", "--wrap", "pre,hc,mhc", "--seq-len", "8", "--batch-size", "2"]
    assert main([*args, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "wrap=hc" in text and "wrap=mhc" in text
    pre, hc, mhc = json.loads(out.read_text())  # in the order given
    assert "state" not in pre["config"]["stack"] and hc["config"]["stack"]["state"]["design"] == "hc"
    assert mhc["layers"][-1]["composite_gain"] == pytest.approx(1.0)


def test_train_and_a_study_take_a_topology(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["train", *SMALL, "--wrap", "mhc", "--streams", "2", "--steps", "4", "--batch-size", "2"]
    assert main([*args, "--seq-len", "8", "--log-every", "2", "--out", str(run)]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["topology"]["composite_gain"][-1] == pytest.approx(1.0) for r in records)
    grid = tmp_path / "g.yaml"
    grid.write_text(
        "name: topo\nmodel: {d_model: 16, n_heads: 2, n_layers: 2, max_len: 16}\n"
        "train: {steps: 2, batch_size: 2, seq_len: 8, log_every: 1, eval_batches: 1}\n"
        "axes:\n  wrap: [pre, hc, denseformer]\n"
    )
    db = str(tmp_path / "s.sqlite")
    assert main(["study", "--grid", str(grid), "--db", db, "--workers", "1"]) == 0
    assert "3 of 3 runs" in capsys.readouterr().out
    assert main(["report", "--db", db, "--out", str(tmp_path / "rep")]) == 0  # hc's gain is drawn
    assert (tmp_path / "rep" / "composite_gains.png").is_file()


@pytest.mark.parametrize(
    "args,words",
    [
        (
            ["--wrap", "pre", "--streams", "8"],
            "--streams 8 is not allowed: to be left unset with wrap=pre, which does not read it (read by hc",
        ),
        (
            ["--wrap", "pre", "--streams", "4"],  # given at its default value: still a flag that does nothing
            "--streams 4 is not allowed: to be left unset with wrap=pre, which does not read it (read by hc",
        ),
        (["--wrap", "frac", "--streams", "3"], "--streams 3 is not allowed: a divisor of d_model=16"),
        (["--wrap", "hc", "--sinkhorn-tol", "0.5"], "--sinkhorn-tol 0.5 is not allowed"),
        (
            ["--wrap", "attnres", "--param", "completep", "--base-depth", "1"],
            "--param completep is not allowed",
        ),
    ],
)
def test_bad_topology_flags_are_one_line_and_exit_2(args, words, capsys):
    code = main(["probe", *SMALL, *args])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1
