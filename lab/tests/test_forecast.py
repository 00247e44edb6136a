"""The forecast's evaluation: predictions from the first 10% of steps, precision and recall per outcome."""

from __future__ import annotations

import pytest

from depthlab_lab.forecast.warnings import forecast_table, format_table, tune


def _run(outcome, bottom_grad=1.0, spike=False, loss=2.0):
    """A 100-step run logged every 5 steps with 4 layers; ``bottom_grad`` the bottom layer's gradient."""
    records = []
    for step in (1, 5, 10, 15, 20):
        layers = [{"index": 0}] + [
            {"index": i, "attn_grad_norm": g, "ffn_grad_norm": g}
            for i, g in enumerate([bottom_grad, 1, 1, 1], 1)
        ]
        records.append({"step": step, "loss": 9.0 if spike and step == 10 else loss, "layers": layers})
    for i, r in enumerate(records[:4]):  # enough history for the spike rule's median
        r["loss"] = r["loss"] if r["step"] == 10 and spike else loss + 0.01 * i
    return {"outcome": outcome, "steps": 100, "unigram_loss": 3.0, "records": records}


def test_watch_sees_starvation_the_loss_does_not():
    runs = [
        _run("trained"),
        _run("stalled", bottom_grad=1e-4),
        _run("stalled", loss=3.2),
        _run("trained", bottom_grad=1e-4),  # a false alarm of the starvation rule
    ]
    t = forecast_table(runs, stall_ratio=1.05)
    assert t["watch"]["stalled"] == {"runs": 2, "predicted": 3, "hits": 2, "precision": 2 / 3, "recall": 1.0}
    assert t["loss"]["stalled"] == {"runs": 2, "predicted": 1, "hits": 1, "precision": 1.0, "recall": 0.5}
    assert t["watch"]["diverged"]["precision"] is None and t["watch"]["diverged"]["recall"] is None
    assert "stalled" in format_table(t) and t["runs"] == 4


def test_only_the_first_share_of_steps_counts():
    late = _run("stalled")
    for r in late["records"]:
        if r["step"] > 10:
            r["layers"][1]["attn_grad_norm"] = r["layers"][1]["ffn_grad_norm"] = 1e-5
    assert forecast_table([late], share=0.1)["watch"]["stalled"]["hits"] == 0
    assert forecast_table([late], share=0.2)["watch"]["stalled"]["hits"] == 0  # 1 starved step of 3 needed
    early = _run("stalled", bottom_grad=1e-4)
    assert forecast_table([early], share=0.1)["watch"]["stalled"]["hits"] == 1


def test_tune_prefers_thresholds_that_separate_the_tuning_runs():
    runs = [_run("trained"), _run("stalled", bottom_grad=1e-4), _run("trained", bottom_grad=0.02)]
    th, ratio, f1 = tune(runs)
    assert th.starved_ratio < 0.02 and f1 == pytest.approx(2 / 3)  # diverged never occurs: its F1 is 0


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--study", "smoke", "--tune", "nope"], "--tune nope"),
        (["--study", "nope", "--tune", "smoke"], "--study nope"),
    ],
)
def test_a_study_the_store_lacks_is_named_by_its_flag(tmp_path, capsys, flags, named):
    """forecast names the missing study by the flag that gave it: --tune for the tuning study, --study for
    the held-out one (both read "no study 'nope' in ...")."""
    from depthlab.cli import main
    from depthlab.study import Store, preset

    db = str(tmp_path / "s.sqlite")
    study = preset("smoke")
    with Store(db) as s:
        s.add_study(study.name, study.to_dict(), study.config_hash(), study.expand())
    assert main(["forecast", "--db", db, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"depthlab forecast: error: {named}: no such study in ") and err.count("\n") == 1
