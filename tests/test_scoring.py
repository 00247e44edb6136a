"""The doctor's score (depthlab.study.scoring) on pairs built by hand."""

from depthlab.study.scoring import format_score, score


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
    assert "9 of 12 outcomes predicted (75%)" in text and "always answering 'trains' gets 7 (58%)" in text


def test_an_empty_score_has_no_ratios():
    s = score([])
    assert s["accuracy"] is None and s["recall"]["trained"] is None and s["precision"]["fails"] is None
