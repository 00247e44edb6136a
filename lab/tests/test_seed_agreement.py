"""The seed agreement of a held-out grid trained twice: the counts, and the ceiling of any call."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from depthlab_lab.calibrate.seed_agreement import CALLERS, agreement

LOOKUPS = CALLERS[1:]


def _reg(tag: str, calls: list[bool]) -> dict:
    def call(c):
        return "trains" if c else "fails"

    return {"runs": [{"config_hash": f"{tag}{i}", "run": f"wrap=post d_model=96 n_layers={8 + i}", "p_trains": 0.5,
                      "lr_over_limit": 1.0, "advise": call(c), "lookups": {k: call(not c) for k in LOOKUPS}}
                     for i, c in enumerate(calls)]}  # fmt: skip


def _done(tag: str, outcomes: list[str]) -> dict:
    return {f"{tag}{i}": {"outcome": o} for i, o in enumerate(outcomes)}


def test_a_configuration_whose_outcome_changed_is_called_right_once_in_two():
    first, again = _reg("a", [True, True, True]), _reg("b", [True, True, True])
    done = _done("a", ["trained", "trained", "stalled"]) | _done("b", ["trained", "diverged", "stalled"])
    a = agreement(first, again, done)
    assert (a["configs"], a["agree"], a["held_runs"]) == (3, 2, 4)
    assert a["ceiling"] == 5 / 6
    assert a["hits"]["advise"] == 3 and a["held_hits"]["advise"] == 2
    assert a["hits"]["nearest runs"] == 3 and a["held_hits"]["nearest runs"] == 2
    assert [r["run"] for r in a["differ"]] == ["wrap=post d_model=96 n_layers=9"]
    assert a["differ"][0]["outcomes"] == ("trained", "diverged")
    assert a["by_wrap"] == {"post": {"configs": 3, "agree": 2, "advise": 3}}


def test_nothing_is_said_until_every_run_of_both_grids_is_done():
    first, again = _reg("a", [True, False]), _reg("b", [True, False])
    done = _done("a", ["trained", "stalled"]) | _done("b", ["trained"])
    assert agreement(first, again, done) is None


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), min_size=1, max_size=30))
def test_no_call_from_the_configuration_alone_scores_above_the_ceiling_and_the_held_outcome_reaches_it(rows):
    """Whatever the outcomes, a caller that makes the same call at both seeds never beats the ceiling;
    one that calls each configuration's held outcome (either where it changed) scores it exactly."""
    calls, out1, out2 = (list(c) for c in zip(*rows))
    name = {True: "trained", False: "stalled"}
    done = _done("a", [name[o] for o in out1]) | _done("b", [name[o] for o in out2])
    a = agreement(_reg("a", calls), _reg("b", calls), done)
    n = len(rows)
    assert a["seed_dependent"] == 0
    for c in CALLERS:
        assert a["hits"][c] <= round(a["ceiling"] * 2 * n)
    held = [o1 if o1 == o2 else True for o1, o2 in zip(out1, out2)]
    best = agreement(_reg("a", held), _reg("b", held), done)
    assert best["hits"]["advise"] == round(best["ceiling"] * 2 * n)


def test_a_call_that_changes_with_the_seed_can_pass_the_ceiling_and_is_counted():
    """advise probes each seed's own initialisation, so its call may change with the seed: the ceiling
    bounds calls from the configuration alone, and the count says how many of advise's calls were not."""
    done = _done("a", ["stalled"]) | _done("b", ["trained"])
    a = agreement(_reg("a", [False]), _reg("b", [True]), done)
    assert a["seed_dependent"] == 1 and a["hits"]["advise"] == 2 > a["ceiling"] * 2
