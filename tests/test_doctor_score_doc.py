"""docs/doctor.md's text from measured scores (depthlab.docgen.doctor_score.render), on scores built by hand."""

from depthlab.docgen.doctor_score import render
from depthlab.study.scoring import score


def test_the_document_shows_intervals_baselines_the_caveat_and_the_registered_grids():
    s = score([("trains", "trained")] * 8 + [("fails", "stalled"), ("trains", "diverged")])
    base = {"wrapping x lr lookup": score([("trains", "trained")] * 8 + [("trains", "stalled")] * 2)}
    text = render(
        {
            "heldout": s,
            "heldout_before": s,
            "tuning": s,
            "baselines": base,
            "misses": ["a miss"],
            "seconds": 3.0,
        },
        "runs/doctor.sqlite",
    )
    assert "9 of 10 outcomes predicted: 90% (95% interval" in text
    assert "baseline wrapping x lr lookup: 8 of 10, 80% (95% interval" in text
    assert "score below is optimistic" in text and "- a miss" in text
    assert "grids/doctor-scale-heldout.yaml" in text and "none of them has run yet" in text
