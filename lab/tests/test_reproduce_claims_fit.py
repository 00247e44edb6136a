"""Checks that fit their claims: the code outside a claim's module that decides its checks is pinned,
and the rules revised with results known are shown beside the first registration's."""

from __future__ import annotations

import ast
import inspect

import pytest

from depthlab.intervals import AGREE, INCONCLUSIVE, MISMATCH
from depthlab.study import sensitivity
from depthlab_lab.reproduce import REGISTRATIONS, REPRODUCTIONS
from depthlab_lab.reproduce.check_code import claim_pins, digest, qualified_node
from depthlab_lab.reproduce.claims import post_diverge
from depthlab_lab.reproduce.claims.post_depth import in_range_check
from depthlab_lab.reproduce.lm_runs import Run
from depthlab_lab.reproduce.reproduction import Reproduction, counts
from depthlab_lab.reproduce.run_record import build, regenerate
from depthlab_lab.reproduce.shares import share_check, share_interval, share_p_value


def test_code_decided_elsewhere_is_pinned_and_a_change_to_it_shows():
    pins = claim_pins(REPRODUCTIONS["lr-sensitivity"])
    key = "depthlab.study.sensitivity.Point.capped"
    assert key in pins
    source = inspect.getsource(sensitivity)
    old = "return l0 if self.diverged(seed) or v is None else min(v, l0)"
    assert source.count(old) == 1
    before = digest(qualified_node(ast.parse(source), "Point.capped"))
    after = digest(qualified_node(ast.parse(source.replace(old, "return min(v, l0)")), "Point.capped"))
    assert before == pins[key] and after != before


def test_the_review_of_lr_sensitivity_is_a_revision_with_results_known():
    revs = [r for r in REGISTRATIONS["lr-sensitivity"].revisions if r.key.startswith("code.")]
    capped = [r for r in revs if r.key.endswith("Point.capped")]
    assert len(capped) == 1 and capped[0].results_known.startswith("yes")
    assert {r.key for r in revs if r.date == capped[0].date} >= {"code._attention", "code._paired"}


def test_lr_sensitivity_is_decided_by_its_first_formula_and_shows_the_reviewed_one():
    """A run stopped as diverged at a finite loss counts at min(l, l0) under the first registration's
    formula and as l0 under the review's (201a65e); the first decides, the review's is the revised column."""
    from depthlab.study.sensitivity import Curve, Point
    from depthlab_lab.reproduce.sensitivity_first import first_attention, first_rule_curves

    l0 = 5.5
    points = [
        Point(1e-3, {0: 3.0, 1: 3.1}, {0: "trained", 1: "trained"}),
        Point(1e-2, {0: 4.0, 1: 3.2}, {0: "diverged", 1: "trained"}),  # seed 0 diverged, finite loss
    ]
    curve = Curve({"wrap": "post"}, 6, points, l0)
    assert curve.per_seed_sensitivity()[0] == pytest.approx((l0 - 3.0) / 2)  # the review's: l0
    first = first_rule_curves([curve])[0]
    assert first.per_seed_sensitivity()[0] == pytest.approx((4.0 - 3.0) / 2)  # first: min(l, l0)
    assert first.per_seed_sensitivity()[1] == curve.per_seed_sensitivity()[1]
    assert [p.outcome for p in curve.points][1][0] == "diverged"  # the input is left as it was
    rows = [{"step": 10, "layer": 0, "attn_logit_max": 9.0, "attn_entropy": 1.0}]
    rows += [{"step": 20, "layer": 1, "attn_logit_max": None, "attn_entropy": None}]
    assert first_attention({"layers": rows}) == (9.0, 1.0, None)  # any stream, the last finite step


def _run(outcome: str, step: int | None = None, val: float = 3.0, unigram: float = 3.4) -> Run:
    return Run(
        "r",
        {"n_layers": 24, "vocab_size": 256},
        {"steps": 300, "seed": 0},
        outcome,
        None,
        val,
        val,
        unigram,
        0.0,
        step=step,
    )


def test_the_exact_share_interval_and_its_p_value_agree():
    assert share_interval([True] * 3).low == pytest.approx(0.2924, abs=1e-4)
    assert share_interval([True] * 6).low == pytest.approx(0.5407, abs=1e-4)
    iv = share_interval([True, False, False, False])
    assert (
        iv.mean == 0.25
        and iv.low == pytest.approx(0.0063, abs=1e-4)
        and iv.high == pytest.approx(0.8059, abs=1e-4)
    )
    for n in range(1, 12):
        for k in range(n + 1):
            hits = [True] * k + [False] * (n - k)
            for bounds in ({"at_least": 0.5}, {"at_most": 0.5}, {"at_least": 0.2}):
                decided = share_check("c", "", hits, **bounds).result != INCONCLUSIVE
                assert decided == (share_p_value(hits, **bounds) < 0.05), (k, n, bounds)


def test_a_share_check_can_agree_mismatch_or_stay_inconclusive():
    assert share_check("c", "", [True] * 6, at_least=0.5).result == AGREE
    assert share_check("c", "", [False] * 6, at_least=0.5).result == MISMATCH
    assert share_check("c", "", [True] * 3, at_least=0.5).result == INCONCLUSIVE
    assert share_check("c", "", [], at_least=0.5).result == INCONCLUSIVE


def test_post_depth_first_rule_decides_and_the_discrete_rule_is_shown():
    # every seed's depth inside [16, 24]: the t-interval over the two depths reaches outside (15.4, 24.6)
    inside = in_range_check([16, 24, 16, 24, 16, 24], 16, 24, 0.5, "ctx")
    assert inside.result == INCONCLUSIVE and inside.revised == AGREE and inside.revised_values == (1.0,) * 6
    # three seeds all at 8 layers: the t-interval is zero-width (MISMATCH), the share rule cannot decide
    low = in_range_check([8, 8, 8], 16, 24, 0.5, "ctx")
    assert low.result == MISMATCH and low.revised == INCONCLUSIVE and "0 of 3 seeds" in low.measured
    below = in_range_check([8, 4, 8, 12, 8, 4], 16, 24, 0.5, "ctx")
    assert below.revised == MISMATCH and counts([below], "revised")[MISMATCH] == 1


def test_post_diverge_unanimity_decides_and_the_share_is_shown():
    e = post_diverge.REGISTRATION.expectation
    all_div = post_diverge.lr_check(24, 1e-2, [_run("diverged", 40)] * 3, e)
    assert all_div.result == AGREE and all_div.revised == INCONCLUSIVE and "3 of 3 seeds" in all_div.measured
    none = post_diverge.lr_check(24, 1e-3, [_run("stalled", 120)] * 6, e)
    assert none.result == MISMATCH and none.revised == MISMATCH
    late = post_diverge.lr_check(24, 1e-2, [_run("diverged", 400)] * 6, e)  # after the registered steps
    assert late.result == MISMATCH


def test_a_share_rule_regenerates_from_the_record():
    check = in_range_check([16, 24, 16, 24, 16, 24], 16, 24, 0.5, "ctx")
    record = build([Reproduction("post-depth", {}, [check])], REGISTRATIONS)
    kept = record["claims"]["post-depth"]["checks"][0]
    assert kept["revised_values"] == [1.0] * 6 and kept["revised_bounds"]["scale"] == "share"
    assert regenerate(record)[2] == []
    kept["revised_values"] = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert regenerate(record)[2]
