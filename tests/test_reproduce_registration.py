"""Registered expectations: no change without a revision entry, and the document shows them.

tests/registered_expectations.json holds every claim's values as first registered. Replaying the
claim's revisions on them must give today's values: an expectation or regime changed in the code without
a revision (old value, new value, reason, results known) fails here.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from depthlab.reproduce import REGISTRATIONS, REPRODUCTIONS
from depthlab.reproduce.registration import Registration, Revision, replay, unrevised_changes

PINS = json.loads((Path(__file__).parent / "registered_expectations.json").read_text())


def test_every_reproduction_is_registered_and_pinned():
    assert set(REGISTRATIONS) == set(REPRODUCTIONS)
    assert set(PINS) == set(REGISTRATIONS), (
        "a new claim needs its first values in registered_expectations.json"
    )


@pytest.mark.parametrize("name", sorted(REGISTRATIONS))
def test_registered_values_change_only_through_revisions(name):
    reg = REGISTRATIONS[name]
    assert reg.date == PINS[name]["date"], "the registration date is history: it does not change"
    assert unrevised_changes(PINS[name]["values"], reg) == []
    for r in reg.revisions:
        assert r.reason.strip() and r.results_known.strip(), r


def test_a_silent_change_fails_and_a_revision_makes_it_visible():
    reg = REGISTRATIONS["warmup"]
    first = PINS["warmup"]["values"]
    changed = Registration(
        reg.date, {**reg.expectation, "clear": 0.05}, reg.regimes, reg.notes, reg.revisions
    )
    problems = unrevised_changes(first, changed)
    assert len(problems) == 1 and "expectation.clear" in problems[0]
    fix = Revision("2026-12-01", "expectation.clear", 0.10, 0.05, "a reason", "yes")
    revised = Registration(reg.date, changed.expectation, reg.regimes, reg.notes, (*reg.revisions, fix))
    assert unrevised_changes(first, revised) == []
    regimes = copy.deepcopy(reg.regimes)
    regimes["small"]["steps"] = 401
    assert unrevised_changes(first, Registration(reg.date, reg.expectation, regimes, "", reg.revisions))


def test_a_revision_whose_old_value_is_wrong_breaks_the_chain():
    first = {"expectation.x": 1.0, "regime.small.seeds": [0]}
    values, problems = replay(first, [Revision("d", "expectation.x", 2.0, 3.0, "r", "no")])
    assert values["expectation.x"] == 3.0 and problems and "old 2.0" in problems[0]
    added = Revision("d", "regime.large", None, {"steps": 2000, "seeds": [0, 1, 2]}, "r", "no")
    values, problems = replay(first, [added])
    assert not problems and values["regime.large.steps"] == 2000
    values, problems = replay(first, [Revision("d", "regime.small", {"seeds": [1]}, None, "r", "no")])
    assert problems and "regime.small.seeds" not in values


def test_restored_expectations_are_the_first_registered():
    """The warmup rule revised with the results known, and the batchnorm training check replaced after it
    failed, are back to their first registration; both stories stay visible as revisions."""
    warmup, bn = REGISTRATIONS["warmup"], REGISTRATIONS["batchnorm"]
    assert warmup.expectation["failed_run_counts_as_worse"] is False
    assert PINS["warmup"]["values"]["expectation.failed_run_counts_as_worse"] is False
    assert [r.new for r in warmup.revisions if r.key == "expectation.failed_run_counts_as_worse"] == [
        True,
        False,
    ]
    assert bn.expectation["bn_gap_exceeds_ln_by"] == 0.0 and "training_check" not in bn.expectation
    assert [r.key for r in bn.revisions][:2] == ["expectation.training_check"] * 2
