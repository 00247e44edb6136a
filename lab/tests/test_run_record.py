"""The run record: every run and check behind the document, and every result over seeds decided again
from the record alone."""

from __future__ import annotations

import json

from depthlab.intervals import INCONCLUSIVE
from depthlab_lab.docgen import reproductions as all_mod
from depthlab_lab.reproduce import REPRODUCTIONS
from depthlab_lab.reproduce.reproduction import (
    Check,
    Reproduction,
    revised_unless_control,
    seeded_check,
    with_revision,
)
from depthlab_lab.reproduce.run_record import build, regenerate

RUNS = [
    {
        "label": f"pre 6L (seed {s})",
        "outcome": "trained",
        "val_loss": 2.5 + s / 100,
        "final_train_loss": 2.4,
        "unigram_loss": 3.1,
        "config": {"model": {"n_layers": 6}, "train": {"seed": s, "lr": 1e-3}},
        "curve": [[1, 5.0]],
    }
    for s in range(3)
]


def _part(name: str = "fake") -> Reproduction:
    msv = [0.725, 7.75, 3.0, 1.0, 2.0]
    checks = [
        seeded_check("gap", ">= 0", [0.1, 0.2, 0.15], at_least=0.0),
        with_revision(
            seeded_check("msv", "< 0.01", msv, at_most=0.01),
            seeded_check("msv", "< 0.01", msv, at_most=0.01, scale="log"),
            "log scale",
        ),
        Check("ordering", "a < b", "deterministic", True),
    ]
    return Reproduction(name, {"runs": RUNS}, checks)


def test_every_result_over_seeds_regenerates_from_the_record():
    record = json.loads(json.dumps(build([_part()], {})))
    claim = record["claims"]["fake"]
    assert [r["seed"] for r in claim["runs"]] == [0, 1, 2] and len(
        {r["config_hash"] for r in claim["runs"]}
    ) == 3
    assert claim["runs"][0]["val_loss"] == 2.5 and "curve" not in claim["runs"][0]
    assert regenerate(record) == (2, 1, [])
    assert claim["checks"][1]["result"] == INCONCLUSIVE and claim["checks"][1]["revised"] == "MISMATCH"


def test_a_tampered_value_or_rule_is_caught():
    record = build([_part()], {})
    record["claims"]["fake"]["checks"][0]["values"] = [-0.1, -0.2, -0.15]
    record["claims"]["fake"]["checks"][1]["revised_bounds"]["scale"] = "linear"
    _, _, problems = regenerate(record)
    assert len(problems) == 2 and "gap: recorded agree" in problems[0] and "revised MISMATCH" in problems[1]


def test_reproduce_all_writes_the_record_beside_the_document(tmp_path, monkeypatch):
    monkeypatch.setitem(REPRODUCTIONS, "fake", lambda quick=False, out_dir=None, scale="small": _part())
    doc = tmp_path / "reproductions.md"
    result = all_mod.run_all(quick=True, doc=str(doc), names=["fake"])
    path = tmp_path / "reproductions-record.json"
    assert result.data["record"] == str(path)
    record = json.loads(path.read_text())
    assert set(record["claims"]) == {"fake"} and regenerate(record) == (2, 1, [])


def test_a_revised_result_set_by_a_failed_control_regenerates():
    check = seeded_check("gap", "> 0, both trained", [0.15, 0.16, 0.155], at_least=0.0)
    check = with_revision(check, seeded_check("gap", "> 0", [0.15, 0.16, 0.155], at_least=0.01), "min effect")
    check = revised_unless_control(
        check, False, "post (stalled) not clearly trained", "untrained: -> inconclusive"
    )
    record = json.loads(json.dumps(build([Reproduction("fake", {"runs": RUNS}, [check])], {})))
    recorded = record["claims"]["fake"]["checks"][0]
    assert (
        recorded["revised"] == INCONCLUSIVE
        and recorded["revised_control"] == "post (stalled) not clearly trained"
    )
    assert regenerate(record) == (1, 0, [])
    del recorded["revised_control"]  # without it the interval alone would say agree: caught
    assert "revised inconclusive, the record gives agree" in regenerate(record)[2][0]
