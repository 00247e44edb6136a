"""docs/advise.md: advise's held-out score against the lookups under the registered rules, re-derived from
the committed run record and the registration file; the scoring itself on made-up runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from depthlab_lab import lab_file
from depthlab_lab.calibrate.heldout_depth import REGISTRATION
from depthlab_lab.docgen.advise_page import RECORD, render, score, verdict

ROOT = Path(__file__).resolve().parents[2]


def _p(h, advise, p, lookups):
    names = ("wrapping x lr", "wrapping x width x lr x warmup", "nearest runs")
    return {"config_hash": h, "run": h, "advise": advise, "p_trains": p, "lr_over_limit": 1.0,
            "lookups": dict(zip(names, lookups))}  # fmt: skip


def test_the_score_counts_hits_intervals_the_paired_difference_and_brier():
    predicted = [
        _p("a", "trains", 0.9, ("trains", "trains", "fails")),
        _p("b", "fails", 0.2, ("trains", "fails", "fails")),
        _p("c", "fails", 0.4, ("trains", "trains", "trains")),
        _p("d", "trains", 0.7, ("fails", "trains", "trains")),
    ]
    done = {"a": {"outcome": "trained"}, "b": {"outcome": "stalled"}, "c": {"outcome": "trained"}}
    s = score(predicted, done)
    assert s["runs"] == 3 and s["planned"] == 4
    assert s["by"]["advise"]["hits"] == 2 and s["by"]["always 'trains'"]["hits"] == 2
    assert s["by"]["advise"]["brier"] == pytest.approx((0.1**2 + 0.2**2 + 0.6**2) / 3)
    assert (
        s["by"]["wrapping x width x lr x warmup"]["hits"] == 3
        and s["best_lookup"] == "wrapping x width x lr x warmup"
    )
    assert s["paired"] == {"both": 2, "advise_only": 0, "lookup_only": 1, "neither": 0}
    assert verdict(s).startswith("not decided: 3 of 4")
    assert [p["config_hash"] for p, _ in s["misses"]] == ["c"]


def test_the_committed_page_is_what_the_record_and_registration_give():
    reg = json.loads(Path(lab_file(REGISTRATION)).read_text())
    record = json.loads((ROOT / RECORD).read_text())
    hashes = {r["config_hash"] for r in reg["runs"] + reg["hf_runs"]}
    assert {r["config_hash"] for r in record["runs"]} <= hashes
    assert render(reg, record) == (ROOT / "docs" / "advise.md").read_text()
