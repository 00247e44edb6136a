"""The doctor's score (depthlab.report.doctor_score) on pairs built by hand."""

from depthlab.report.doctor_score import format_score, score


def test_score_by_hand():
    pairs = (
        [("trains", "trained")] * 6
        + [("fails", "stalled")] * 2
        + [("trains", "stalled"), ("fails", "trained")]
    )
    pairs += [("fails", "diverged"), ("trains", "undertrained")]
    s = score(pairs)
    assert (s["runs"], s["hits"]) == (12, 9)
    assert s["confusion"]["trains"] == {"trained": 6, "undertrained": 1, "stalled": 1, "diverged": 0}
    assert (
        s["recall"]["trained"] == 6 / 7
        and s["recall"]["stalled"] == 2 / 3
        and s["recall"]["undertrained"] == 0
    )
    assert s["precision"]["trains"] == 6 / 8 and s["precision"]["fails"] == 3 / 4
    assert s["baseline"] == {"predicts": "trains", "hits": 7, "accuracy": 7 / 12}
    text = format_score(s)
    assert "9 of 12 outcomes predicted: 75% (95% interval 47%-91%)" in text
    assert "always answering 'trains' gets 7 (58%)" in text
    lo, hi = s["interval"]
    assert lo < 0.75 < hi and s["recall_interval"]["undertrained"][0] == 0.0
    assert s["recall_interval"]["trained"][1] < 1.0 and "recall by outcome: trained 86%" in text


def test_an_empty_score_has_no_ratios():
    s = score([])
    assert s["accuracy"] is None and s["recall"]["trained"] is None and s["precision"]["fails"] is None


def _row(wrap, lr, outcome, status="done"):
    """A store run dict (as depthlab.report.load gives them) with what the baselines read."""
    return {"status": status, "outcome": outcome, "config": {"model": {"wrap": wrap}, "train": {"lr": lr}}}


def test_the_baselines_are_chosen_on_the_tuning_runs_and_scored_on_the_held_out_ones():
    from depthlab_lab.calibrate.baselines import baseline_pairs, lookup, lookup_table

    tuning = [_row("post", 1e-3, "trained"), _row("post", 5e-2, "stalled"), _row("post", 5e-2, "diverged")]
    tuning += [_row("post", 5e-2, "trained"), _row("pre", 5e-2, "trained"), _row("pre", 1e-3, "stalled")]
    tuning += [_row("pre", 1e-3, "trained"), _row("rezero", 1e-2, "trained", status="failed")]
    table = lookup_table(tuning)
    assert table == {
        ("post", 1e-3): "trains",
        ("post", 5e-2): "fails",
        ("pre", 5e-2): "trains",
        ("pre", 1e-3): "trains",
    }
    assert lookup(table, "post", 2e-2) == "fails" and lookup(table, "post", 3e-3) == "trains"
    assert lookup(table, "rezero", 2e-2) == "trains"  # no finished tuning run of it
    heldout = [_row("post", 2e-2, "stalled"), _row("post", 3e-3, "trained"), _row("rezero", 2e-2, "diverged")]
    pairs = baseline_pairs(tuning, heldout)
    assert pairs["always 'trains'"] == [("trains", "stalled"), ("trains", "trained"), ("trains", "diverged")]
    assert pairs["wrapping x lr lookup"] == [
        ("fails", "stalled"),
        ("trains", "trained"),
        ("trains", "diverged"),
    ]
    s = score(pairs["wrapping x lr lookup"])
    assert s["hits"] == 2 and "baseline lookup: 2 of 3" in format_score(score([]), {"lookup": s})
