"""The held-out score under each registration of the doctor's rules, and the paired comparison with the
lookup: the learning-rate verdict taken again from a stored probe under an earlier record, Newcombe's
interval for a paired difference."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from depthlab import ModelConfig, build_model
from depthlab.doctor.checks import prediction
from depthlab.intervals import paired_difference_interval, wilson_interval
from depthlab.probe import probe
from depthlab_lab.docgen import doctor_heldout
from depthlab_lab.docgen import doctor_registrations as regs
from lab.tests.git_history import git, show_followed


def test_the_paired_interval_is_newcombes_method_10_by_hand():
    # 12 both right, 9 only the first, 2 only the second, 21 neither (n 44)
    d, lo, hi = paired_difference_interval(12, 9, 2, 21)
    l1, u1 = wilson_interval(21, 44)
    l2, u2 = wilson_interval(14, 44)
    p1, p2 = 21 / 44, 14 / 44
    phi = (12 * 21 - 9 * 2 - 44 / 2) / math.sqrt(21 * 23 * 14 * 30)  # Newcombe's corrected phi
    assert d == pytest.approx(7 / 44)
    assert lo == pytest.approx(
        d - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    )
    assert hi == pytest.approx(
        d + math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    )
    assert 0 < lo < d < hi < 0.3


def test_the_corrected_phi_widens_the_interval_where_the_hits_go_together():
    # regression values of method 10 with Newcombe's correction of phi (ad - bc - n / 2)
    assert paired_difference_interval(18, 12, 2, 18) == pytest.approx((0.2, 0.05617, 0.32898), abs=1e-5)
    assert paired_difference_interval(36, 12, 2, 0) == pytest.approx((0.2, 0.05693, 0.34043), abs=1e-5)
    # a cross product below n / 2 counts as no correlation at all
    d, lo, hi = paired_difference_interval(5, 5, 5, 6)  # ad - bc = 5 < 10.5
    l1, u1 = wilson_interval(10, 21)
    assert lo == pytest.approx(d - math.sqrt((10 / 21 - l1) ** 2 + (u1 - 10 / 21) ** 2))


def test_pairing_narrows_the_interval_when_the_hits_go_together():
    # the same margins (30 of 40 against 26 of 40), hits together or apart
    together = paired_difference_interval(26, 4, 0, 10)
    apart = paired_difference_interval(18, 12, 8, 2)
    assert together[0] == apart[0] == pytest.approx(0.1)
    assert together[2] - together[1] < apart[2] - apart[1]
    assert together[1] > apart[1]  # four discordant runs, all one way, against twenty split 12 to 8


@given(st.lists(st.integers(0, 30), min_size=4, max_size=4).filter(lambda c: sum(c) > 0))
def test_the_paired_interval_holds_its_estimate_and_flips_with_the_order(counts):
    a, b, c, d = counts
    est, lo, hi = paired_difference_interval(a, b, c, d)
    assert -1.0 <= lo <= est <= hi <= 1.0
    flipped = paired_difference_interval(a, c, b, d)
    assert flipped[0] == pytest.approx(-est, abs=1e-12)
    assert flipped[1] == pytest.approx(-hi, abs=1e-9) and flipped[2] == pytest.approx(-lo, abs=1e-9)


def test_bad_counts_are_refused():
    with pytest.raises(ValueError):
        paired_difference_interval(0, 0, 0, 0)
    with pytest.raises(ValueError):
        paired_difference_interval(1, -1, 0, 0)


def _record(with_band_form: bool) -> dict:
    point = {"warmup": 0, "limit": math.sqrt(2.0 * 6.0), "band": [2.0, 6.0], "runs": 10, "errors": 1}
    support = {"d_model": [32, 32], "n_layers": [2, 24], "lr": [1e-5, 1.0], "warmup": [0, 300]}
    section = {"warmups": [point], "support": support}
    if with_band_form:
        section["error_from"] = "band_high"
    return {"range": dict(support), "agreement": {}, "step_limit": section}


def _post_probe(step: float) -> dict:
    """A 6-layer post-LN probe at width 32 whose step size is ``step`` output norms (no warmup)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_heads=4, d_model=32, n_layers=6, wrap="post"))
    x = torch.randint(0, 256, (4, 32))
    gain = probe(model, x, lr=1e-3).config["probe"]["update_gain"]
    return probe(model, x, lr=step / gain).to_dict()


def test_an_earlier_records_verdict_replaces_the_learning_rate_verdict_only():
    stored = _post_probe(4.0)  # inside the band: a warning in the band form, an error from the limit
    now = regs.probe_under(stored, _record(True))
    first = regs.probe_under(stored, _record(False))
    codes = lambda p: sorted(v["code"] for v in p["verdicts"])  # noqa: E731
    assert codes(now) == codes(first) == codes(stored)
    assert prediction(now) == "trains" and prediction(first) == "fails"
    kept = [v for v in stored["verdicts"] if v["code"] != "learning-rate"]
    assert [v for v in first["verdicts"] if v["code"] != "learning-rate"] == kept


def _run(probe_dict, outcome, wrap="post", lr=1e-3):
    return {
        "status": "done",
        "outcome": outcome,
        "probe": probe_dict,
        "config": {"model": {"wrap": wrap, "d_model": 32, "n_layers": 6}, "train": {"lr": lr, "warmup": 0}},
    }


def test_each_registration_scores_the_same_runs_under_its_own_record(tmp_path):
    paths = []
    for name, form in (("first.json", False), ("now.json", True)):
        path = tmp_path / name
        path.write_text(json.dumps(_record(form)))
        paths.append((name, str(path)))
    inside = _post_probe(4.0)
    held = [_run(inside, "trained"), _run(inside, "trained"), _run(_post_probe(8.0), "stalled")]
    got = {r["label"]: r["score"] for r in regs.scores_under_registrations(held, tuple(paths))}
    assert got["first.json"]["hits"] == 1 and got["now.json"]["hits"] == 3
    assert got["now.json"]["runs"] == 3
    assert [r["predicted_under"] for r in held][0] == {"first.json": "fails", "now.json": "trains"}


def test_the_doctor_against_the_lookup_counts_each_run_once():
    ok, bad = _post_probe(1.0), _post_probe(8.0)
    tuning = [_run(None, "trained", lr=1e-3), _run(None, "stalled", lr=1e-2)]
    held = [
        _run(ok, "trained", lr=1e-3),  # both right
        _run(bad, "stalled", lr=1e-3),  # only the doctor (the lookup says trains at 1e-3)
        _run(ok, "stalled", lr=1e-2),  # only the lookup
        _run(ok, "trained", lr=1e-2),  # the doctor right, the lookup wrong
        _run(None, "trained"),  # no probe: not counted
    ]
    v = regs.versus_lookup(held, tuning)
    assert (v["runs"], v["both"], v["doctor_only"], v["lookup_only"], v["neither"]) == (4, 1, 2, 1, 0)
    assert v["difference"] == pytest.approx(0.25) and v["interval"][0] < 0.25 < v["interval"][1]
    assert regs.versus_lookup([], tuning) is None


def test_the_earlier_registrations_records_are_kept_and_fitted_before_the_held_out_grid():
    for _, path in regs.REGISTRATIONS:
        rec = json.loads(open(path, encoding="utf-8").read())
        studies = [s["study"] for s in rec["fitted_from"]["studies"]]
        assert "doctor-scale-heldout" not in studies and "error_from" not in rec["step_limit"]
    counts = [len(json.loads(open(p).read())["fitted_from"]["studies"]) for _, p in regs.REGISTRATIONS]
    assert counts == [3, 4]


ROOT = Path(__file__).resolve().parents[2]
FITTED = ("step_limit", "update_limit", "escape", "fitted_from")
BAND_COMMIT = (
    "c7f1570"  # the commit whose calibration.json the first held-out grid across width was scored under
)


def _record_at(commit: str) -> dict:
    """The doctor's calibration.json as committed at ``commit`` (the test skips without git history)."""
    return json.loads(show_followed(commit, "depthlab/doctor/calibration.json") or git("show", f"{commit}:x"))


def _read(path: str) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def test_the_first_held_out_grid_keeps_the_rules_registered_before_its_runs():
    band = _read(doctor_heldout.BAND_RECORD)
    then = _record_at(BAND_COMMIT)
    assert {k: band.get(k) for k in FITTED} == {k: then.get(k) for k in FITTED}


REGISTERED_COMMIT = "3d3216b"  # the commit before the first held-out grid's first run (18:39 UTC)


def _numbers(section):
    """A record section without its descriptions: what decides a verdict."""
    if isinstance(section, dict):
        return {k: _numbers(v) for k, v in section.items() if k != "rule"}
    if isinstance(section, list):
        return [_numbers(v) for v in section]
    return section


def test_the_first_grids_record_rewritten_after_its_first_run_changed_no_fitted_number():
    """The kept record was fitted at 18:48 UTC, after the first run started; the grid's note says the
    rewrite changed only the rule's description. Checked against the record committed before the runs."""
    band = _read(doctor_heldout.BAND_RECORD)
    then = _record_at(REGISTERED_COMMIT)
    assert (
        then["fitted_from"]["when"] == "2026-12-01 18:38 UTC"
        and "18:38 UTC" in doctor_heldout.FIRST.late_note
    )
    for key in ("step_limit", "update_limit", "escape"):
        assert _numbers(band[key]) == _numbers(then[key]), key
    assert band["step_limit"]["rule"] != then["step_limit"]["rule"]  # the description did change


def test_the_kept_record_is_the_four_studies_fit_in_the_band_form():
    band = _read(doctor_heldout.BAND_RECORD)
    fitted = band["fitted_from"]
    assert fitted["commit"].startswith("e41569653f") and fitted["when"] == "2026-12-01 18:48 UTC"
    studies = [s["study"] for s in fitted["studies"]]
    assert studies == [
        "doctor-tuning",
        "doctor-scale-tuning",
        "doctor-scale-tuning-wide",
        "doctor-scale-tuning-wide-deep",
    ]
    assert band["step_limit"]["error_from"] == "band_high" and "by_wrap" not in band["step_limit"]
    assert doctor_heldout.FIRST.record == doctor_heldout.BAND_RECORD
    assert doctor_heldout.FIRST.registrations == regs.REGISTRATIONS
    assert doctor_heldout.FAMILIES.record == doctor_heldout.FIVE_RECORD  # kept by the refit before its runs
    assert [p for _, p in doctor_heldout.FAMILIES.registrations] == [doctor_heldout.BAND_RECORD]
    assert doctor_heldout.HELDOUT_GRIDS == (doctor_heldout.FAMILIES, doctor_heldout.FIRST)  # newest first
    for grid in doctor_heldout.HELDOUT_GRIDS:
        assert Path(ROOT / grid.grid).is_file()
