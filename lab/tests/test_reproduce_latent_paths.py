"""Paths to a false agree, each hit by runs built for it (no training): a diverged run that still
reported a finite loss, two stalled runs that are "close", and the steps where the bottom gradient is 0."""

from __future__ import annotations

import math

import pytest

from depthlab.intervals import AGREE, INCONCLUSIVE, MISMATCH
from depthlab_lab.reproduce.claims import no_residual, shallow_post, skip_ablation, warmup
from depthlab_lab.reproduce.lm_runs import CAP_REVISION, Run, capped_loss, final_loss, loss_gap_check

UNIGRAM = 3.1


def run(val: float, outcome: str = "trained", label: str = "r") -> Run:
    return Run(label, {"n_layers": 2, "vocab_size": 256}, {}, outcome, None, val, val, UNIGRAM, 0.0)


def test_a_diverged_run_counts_as_ln_v_whatever_loss_it_reported():
    # a run with a NaN gradient at step 21 that was evaluated finite later
    assert final_loss(run(3.267, "diverged")) == pytest.approx(math.log(256))
    assert final_loss(run(2.5)) == 2.5


def stalled(n: int = 3) -> list[Run]:
    return [run(UNIGRAM - 0.01 * i, "stalled") for i in range(n)]


def test_two_stalled_sides_are_not_close_under_the_revised_rule():
    check = warmup.close_check(6, 1e-3, (stalled(), stalled()))
    assert check.result == AGREE  # the first registration's result, shown
    assert check.revised == INCONCLUSIVE and "not both sides trained" in check.measured
    trained = [run(2.50), run(2.52), run(2.51)], [run(2.49), run(2.50), run(2.52)]
    assert warmup.close_check(6, 1e-3, trained).revised == ""


def test_two_stalled_sides_are_not_no_worse_under_the_revised_rule():
    check = shallow_post.no_worse_check(6, stalled(), stalled(), 0.02, {"post": 0, "pre": 0})
    assert check.result == AGREE and check.revised == INCONCLUSIVE


def test_with_skips_two_stalled_depths_are_not_no_worse(monkeypatch):
    def fake_seeds(label, model, train, seeds, scale="small"):
        if model["residual"]:  # with skips: both depths stalled at the unigram level
            return [run(UNIGRAM - 0.001 * s, "stalled", label) for s in seeds]
        return [run(UNIGRAM + 0.02 * model["n_layers"] + 0.01 * s, "stalled", label) for s in seeds]

    monkeypatch.setattr(no_residual, "train_seeds", fake_seeds)
    monkeypatch.setattr(no_residual, "announce", lambda *a, **k: 0.0)
    monkeypatch.setattr(no_residual, "profiles", lambda *a, **k: None)
    checks = no_residual.reproduce_no_residual().checks
    with_skips = next(c for c in checks if c.claim.startswith("with skips"))
    assert with_skips.result == AGREE and with_skips.revised == INCONCLUSIVE


def test_a_zero_bottom_gradient_is_kept_as_the_strongest_starvation():
    grads = [(1, [0.0, 0.0, 1.0]), (2, [0.0, 0.0, 1.0]), (3, [1e-3, 2e-3, 1.0])]
    r = skip_ablation.bottom_to_top(grads, bottom=2)
    assert r["max"] == 0.0 and r["min"] == 0.0 and r["orders"] == skip_ablation.ZERO_ORDERS
    unmeasured = [(1, [None, 0.5, 1.0]), (2, [0.5, 0.5, 1.0])]
    assert skip_ablation.bottom_to_top(unmeasured, bottom=2)["max"] == 0.5


def test_a_loss_above_ln_v_counts_as_ln_v_only_under_the_revised_rule():
    # a pre-LN stack without its final norm at width 32 can end near 190 nats, still falling from its init
    huge, ln_v = run(190.0, "undertrained"), math.log(256)
    assert final_loss(huge) == 190.0 and capped_loss(huge) == pytest.approx(ln_v)
    pairs = [(huge, run(2.5)), (run(188.0, "undertrained"), run(2.6)), (run(191.0, "undertrained"), run(2.4))]
    check = loss_gap_check("gap", "<= 0.05", pairs, at_most=0.05)
    assert check.result == MISMATCH  # as first registered: 185.5 nats worse
    assert check.revised == MISMATCH and check.revision == CAP_REVISION
    assert check.revised_values[0] == pytest.approx(ln_v - 2.5)


def test_the_ladder_shows_the_capped_effect_beside_the_first():
    from depthlab_lab.reproduce.ladder import LADDER
    from depthlab_lab.reproduce.ladder_effects import capped_runs, measure, measure_capped

    effect = next(e for e in LADDER["final-norm"].effects if e.kind == "gap")
    cfg = {"config": {"model": {"vocab_size": 256}}}
    runs = {
        effect.a: {s: {**cfg, "val_loss": 190.0 + s, "outcome": "undertrained"} for s in range(3)},
        effect.b: {s: {**cfg, "val_loss": 2.5 + 0.01 * s, "outcome": "trained"} for s in range(3)},
    }
    assert capped_runs(runs)[effect.a][0]["val_loss"] == pytest.approx(math.log(256))
    assert runs[effect.a][0]["val_loss"] == 190.0  # the stored runs are left as they are
    first, capped = measure(effect, 32, runs, range(3)), measure_capped(effect, 32, runs, range(3))
    assert first.interval.mean > 180 and capped.interval.mean == pytest.approx(math.log(256) - 2.51)


def test_the_document_says_a_side_did_not_train_under_the_revised_rule():
    from depthlab_lab.docgen.reproductions_text import check_rows

    rows = "\n".join(check_rows([warmup.close_check(6, 1e-3, (stalled(), stalled()))]))
    assert (
        "| agree | *inconclusive*: a side did not train (close and no worse need both sides trained" in rows
    )
    assert "not both sides trained (inconclusive under the revised rule)" in rows
