"""Log-scale intervals, p-values and Holm's rule, and a revised rule shown beside the first registration."""

from __future__ import annotations

import math
import random

from depthlab.intervals import (
    AGREE,
    INCONCLUSIVE,
    MISMATCH,
    decide,
    holm,
    log_interval,
    mean_interval,
    p_value,
)
from depthlab_lab.docgen.reproductions_text import check_rows, result_line, totals_text
from depthlab_lab.reproduce.claims import model_update
from depthlab_lab.reproduce.reproduction import (
    Reproduction,
    counts,
    effect_revised,
    family_results,
    format_counts,
    log_revised,
    revised_unless_control,
    seeded_check,
    with_revision,
)

# the Jacobian's post-LN MSVs as the audit describes them: every seed far above the 0.01 threshold
POST_MSV = [0.725, 7.75, 3.0, 1.0, 2.0]


def test_log_interval_is_the_t_interval_of_log10_shown_on_the_original_scale():
    iv = log_interval([1.0, 10.0, 100.0])
    on_log = mean_interval([0.0, 1.0, 2.0])
    assert math.isclose(iv.mean, 10.0)
    assert math.isclose(iv.low, 10**on_log.low) and math.isclose(iv.high, 10**on_log.high)
    assert iv.low > 0 and iv.scale == "log" and iv.values == (1.0, 10.0, 100.0)


def test_a_positive_quantity_far_above_its_threshold_is_a_mismatch_on_log_scale():
    raw = seeded_check("post vanishes", "< 0.01", POST_MSV, at_most=0.01)
    log = seeded_check("post vanishes", "< 0.01", POST_MSV, at_most=0.01, scale="log")
    assert raw.result == INCONCLUSIVE and raw.interval.low < 0
    assert log.result == MISMATCH and log.interval.low > 0.01 and "geometric mean" in log.measured
    assert seeded_check("x", "", [1.0, 0.0], at_most=0.01, scale="log").result == INCONCLUSIVE


def test_p_value_agrees_with_the_interval_decision():
    rng = random.Random(0)
    for _ in range(300):
        values = [rng.gauss(1.0, 0.5) for _ in range(rng.choice((2, 3, 5)))]
        for bounds in ({"at_least": 0.8}, {"at_most": 1.2}, {"at_least": 0.5, "at_most": 1.5}):
            decided = decide(mean_interval(values), **bounds) != INCONCLUSIVE
            p = p_value(values, **bounds)
            if not math.isclose(p, 0.05, abs_tol=1e-6):
                assert decided == (p < 0.05), (values, bounds, p)


def test_holm_steps_down_and_stops_at_the_first_failure():
    assert holm([0.01, 0.04, 0.03]) == [True, False, False]
    assert holm([0.001, 0.02, 0.04]) == [True, True, True]
    assert holm([0.2, math.nan, 0.001]) == [False, False, True]


def test_holm_column_turns_a_result_it_does_not_keep_inconclusive():
    strong = seeded_check("a", "", [5.0, 5.1, 4.9], at_least=1.0)
    weak = seeded_check("b", "", [1.1, 1.5, 1.3, 1.05, 1.35], at_least=1.0)
    assert strong.result == weak.result == AGREE and 0.01 < weak.p < 0.05
    others = [seeded_check(c, "", [1.1, 1.5, 1.3, 1.05, 1.35], at_least=1.0) for c in "cd"]
    assert family_results([weak]) == [AGREE]
    family = family_results([strong, weak, *others])
    assert family[0] == AGREE and INCONCLUSIVE in family[1:]


def test_a_revision_with_results_known_is_shown_and_never_decides():
    first = seeded_check("post vanishes", "< 0.01", POST_MSV, at_most=0.01)
    revised = seeded_check("post vanishes", "< 0.01", POST_MSV, at_most=0.01, scale="log")
    check = with_revision(first, revised, "log scale")
    assert check.result == INCONCLUSIVE and check.revised == MISMATCH
    assert counts([check])[INCONCLUSIVE] == 1 and counts([check], "revised")[MISMATCH] == 1
    assert "under rules revised with results known" in format_counts([check])
    failed = seeded_check("no warmup fails", "", [0.2, 0.25, 0.22], at_most=0.0)
    assert failed.result == MISMATCH
    ruled = revised_unless_control(failed, False, "the control did not train", "control rule")
    assert ruled.result == MISMATCH and ruled.revised == INCONCLUSIVE
    kept = revised_unless_control(seeded_check("x", "", [0.2, 0.25, 0.22], at_most=0.0), True, "n", "r")
    assert kept.revised == "" and kept.under("revised") == MISMATCH


def test_the_document_shows_first_revised_and_holm():
    check = with_revision(
        seeded_check("post vanishes", "< 0.01", POST_MSV, at_most=0.01),
        seeded_check("post vanishes", "< 0.01", POST_MSV, at_most=0.01, scale="log"),
        "log scale",
    )
    rows = "\n".join(check_rows([check]))
    assert "| result | revised | Holm |" in rows and "*inconclusive* | **MISMATCH** (log scale) |" in rows
    assert "under rules revised with results known 0 agree, 1 MISMATCH" in result_line([check])
    first, rev = counts([check]), counts([check], "revised")
    text = " ".join(totals_text(first, rev, {AGREE: 0, MISMATCH: 0, INCONCLUSIVE: 1}, 1))
    assert "Under the first registrations: 0 of 1" in text and "revised with results known" in text
    assert "about 0.0 of the 1 would read agree" in text


def test_the_printed_table_shows_the_revised_result_beside_the_first_in_short_lines():
    """`depthlab reproduce NAME` prints each check's result under the revised rules beside the first, and
    a measured cell of every seed at five depths (stream-growth's ran to 1,200 characters on one line)
    wraps under its column, the result ending the row's first line."""
    per_depth = "; ".join(
        log_revised(f"L={n}", "> 1", [1.03, 0.946, 0.994, 0.861, 0.995], at_least=1.0).measured
        for n in (6, 12, 24, 48, 96)
    )
    long = seeded_check("faster than independence, per depth", "> 1 at every L", [1.1, 1.0], at_least=1.0)
    long.measured = per_depth
    revised = with_revision(
        seeded_check("post vanishes", "< 0.01", POST_MSV, at_most=0.01),
        seeded_check("post vanishes", "< 0.01", POST_MSV, at_most=0.01, scale="log"),
        "log scale",
    )
    lines = Reproduction("claim", {}, [long, revised]).format().splitlines()
    assert len(per_depth) > 1000 and max(len(ln) for ln in lines) < 200
    firsts = [ln for ln in lines if ln.startswith(("  faster", "  post vanishes"))]
    assert firsts[0].endswith("  inconclusive") and firsts[1].endswith(
        "inconclusive (revised rules: MISMATCH)"
    )
    assert per_depth.split()[-1] in lines[lines.index(firsts[1]) - 1]  # wrapped, not cut


def test_a_ratio_is_decided_as_first_registered_and_shown_on_a_log_scale():
    # a ratio whose linear interval reaches below 0 (the far seed): linear straddles 1, log is above it
    values = [3.0, 4.0, 5.0, 4.0, 80.0]
    check = log_revised("ratio", ">= 1", values, at_least=1.0)
    assert check.result == seeded_check("ratio", ">= 1", values, at_least=1.0).result == INCONCLUSIVE
    assert check.revised == AGREE and check.revised_bounds["scale"] == "log"


def test_a_difference_against_zero_needs_the_minimum_effect_under_the_revised_rule():
    values = [0.004, 0.005, 0.006]  # above 0, below a 0.02 minimum effect
    check = effect_revised("diff", "> 0", values, 0.02, at_least=0.0)
    assert check.result == AGREE and check.revised == MISMATCH
    assert check.revised_bounds["at_least"] == 0.02 and "minimum effect" in check.revision
    assert effect_revised("d", "< 0", [-0.05, -0.06, -0.07], 0.02, at_most=0.0).revised == AGREE


def test_deepnorm_moves_less_by_more_than_the_flat_band_under_the_revised_rule():
    update = {"post": {48: [1.1, 1.12, 1.15]}, "deepnorm": {48: [1.0, 1.0, 1.01]}}
    check = model_update._moves_less(update, 48)
    assert check.result == AGREE  # post moves more, as first registered
    assert check.revised == MISMATCH  # but by less than x1.5, the claim's band for "about flat"


def test_two_revisions_of_one_check_are_both_named():
    check = effect_revised("d", "> 0", [0.1, 0.2, 0.3], 0.02, at_least=0.0)
    revised_unless_control(check, False, "not both trained", "control rule")
    assert (
        check.revised == INCONCLUSIVE
        and "minimum effect" in check.revision
        and "control rule" in check.revision
    )
