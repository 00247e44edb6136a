"""When the nearest measured runs left the unigram plateau (depthlab.doctor.predict.NearestEscape), and the
plateau verdict that leads with it where those runs are close."""

import dataclasses

import torch
from hypothesis import given
from hypothesis import strategies as st

from depthlab import ModelConfig, build_model
from depthlab.doctor.atlas import Atlas
from depthlab.doctor.plateau import p_within, plateau_verdict
from depthlab.doctor.plateau import predict as escape_at
from depthlab.doctor.predict import FAR, NearestEscape, Prediction, call_words, nearest_escape
from depthlab.doctor.record import load_record
from depthlab.probe import probe

BASE = Atlas.load().runs[0]  # a measured run whose escape and outcome each test sets


def _run(escape_step, outcome="trained"):
    return dataclasses.replace(BASE, escape_step=escape_step, outcome=outcome)


def _near(*steps, at=1.0):
    return tuple((at, _run(s, "trained" if s is not None else "stalled")) for s in steps)


def test_the_median_counts_a_run_that_never_left_after_every_run_that_did():
    assert nearest_escape(_near(80, 40, 120, 60, 50)) == NearestEscape((40, 50, 60, 80, 120), 0)
    assert nearest_escape(_near(80, 40, 120, 60, 50)).median == 60
    assert nearest_escape(_near(None, 40, None, 60, 50)).median == 60  # 40, 50, 60, never, never
    assert nearest_escape(_near(None, 40, None, 60, None)).median is None  # the middle run never left
    assert nearest_escape(_near(70, 30, 50, 90)).median == 50  # the lower middle of an even count
    assert nearest_escape(()).median is None and nearest_escape(()).runs == 0


@given(st.lists(st.one_of(st.none(), st.integers(1, 10_000)), min_size=1, max_size=9))
def test_the_median_is_a_measured_step_or_none_when_at_least_half_never_left(steps):
    e = nearest_escape(_near(*steps))
    assert e.runs == len(steps) and e.never == steps.count(None)
    escaped = sorted(s for s in steps if s is not None)
    if e.median is None:
        assert e.never >= len(steps) - (len(steps) - 1) // 2  # the middle run is one that never left
    else:
        assert e.median in escaped
        below = sum(s < e.median for s in escaped)
        assert below <= (len(steps) - 1) // 2 <= below + escaped.count(e.median) - 1


def test_its_text_says_the_median_the_range_and_how_many_never_left():
    assert nearest_escape(_near(80, 40, 120, 60, 50)).text() == (
        "the 5 nearest measured runs left the unigram plateau around step 60 (all 5 left it, at steps 40-120)"
    )
    assert nearest_escape(_near(None, 40, 60, 50, 50)).text() == (
        "the 5 nearest measured runs left the unigram plateau around step 50 (4 of 5 left it, at steps 40-60)"
    )
    assert nearest_escape(_near(None, None, None, 1500, 1500)).text() == (
        "3 of the 5 nearest measured runs never left the unigram plateau within their budgets (the others "
        "at step 1,500)"
    )
    assert nearest_escape(_near(None, None)).text() == (
        "none of the 2 nearest measured runs left the unigram plateau within their budgets"
    )


def _probe_of_post(steps):
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_heads=4, d_model=64, n_layers=6, wrap="post", max_len=32))
    return probe(model, torch.randint(0, 256, (4, 32)), lr=1e-3, warmup=0, steps=steps)


def test_the_plateau_verdict_leads_with_the_nearest_runs_steps_where_they_are_close():
    record = load_record()
    r = _probe_of_post(steps=200)
    fit = record["escape"]["families"]["renormalising"]
    pred = escape_at(
        fit, dict(lr=1e-3, d_model=64, n_layers=6, warmup=0, step_size=r.config["probe"]["step_size"])
    )
    close = Prediction(0.95, "renormalising", _near(80, 40, 120, 60, 50), confident=True)
    v = plateau_verdict(r, record, 64, close)
    assert v.message.startswith("the 5 nearest measured runs left the unigram plateau around step 60")
    assert "at a 200-step budget P(trains) = 0.95: trains" in v.message and v.level == "ok"
    assert f"the escape fit alone puts its escape around step {pred['median']:,.0f}" in v.detail
    assert f"; it gives {p_within(pred, 200):.2f} of leaving the plateau by then" in v.detail
    for p, level in (
        (0.95, "ok"),
        (0.8, "ok"),
        (0.79, "warning"),
        (0.3, "warning"),
    ):  # the call's words decide
        stalled = Prediction(p, "renormalising", _near(None, None, None, 50, 60), confident=True)
        v = plateau_verdict(r, record, 64, stalled)
        assert v.level == level and v.message.startswith("3 of the 5 nearest measured runs never left")
        assert v.message.endswith(f"P(trains) = {p:.2f}: {call_words(p).lower()}")
    far = Prediction(0.95, "renormalising", _near(80, 40, 120, 60, 50, at=FAR + 0.1), confident=True)
    v = plateau_verdict(r, record, 64, far)
    assert v.message.startswith(f"the escape fit puts its escape around step {pred['median']:,.0f}")
    assert "nearest measured runs left" not in v.message + v.detail
    assert f"the escape fit alone gives {p_within(pred, 200):.2f} of leaving" in v.detail
