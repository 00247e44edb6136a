"""Checks that fit their claims: the code outside a claim's module that decides its checks is pinned,
and the rules revised with results known are shown beside the first registration's."""

from __future__ import annotations

import ast
import inspect

from depthlab.reproduce import REGISTRATIONS, REPRODUCTIONS
from depthlab.reproduce.check_code import claim_pins, digest, qualified_node
from depthlab.study import sensitivity


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
