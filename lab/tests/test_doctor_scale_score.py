"""The held-out grids across width, each scored from its store under its own record by ``depthlab reproduce doctor`` (depthlab_lab.docgen.doctor_heldout, doctor_scale)."""

import dataclasses
import datetime
import json

import pytest

from depthlab.cli import main
from depthlab.doctor import lr_limit
from depthlab.doctor.record import RECORD_PATH, load_record
from depthlab.report.doctor_score import score
from depthlab.study import StudyConfig, run_study
from depthlab_lab.calibrate.calibration import runs_range
from depthlab_lab.docgen import doctor_heldout, doctor_scale
from depthlab_lab.docgen.doctor_heldout import HeldOutGrid
from depthlab_lab.docgen.doctor_score import record_path, render

GRID = """
name: {name}
model: {{arch: decoder, n_heads: 2, n_layers: 2, vocab_size: 256, max_len: 16}}
train: {{task: lm, steps: 4, batch_size: 2, seq_len: 8, log_every: 2, seed: 0}}
axes:
  wrap: [post, pre]
  d_model: {widths}
  lr: [1.0e-3]
"""


def _grid(tmp_path, name, widths):
    path = tmp_path / f"{name}.yaml"
    path.write_text(GRID.format(name=name, widths=widths))
    return str(path)


def _limit_record(limit: float) -> dict:
    """A record whose step-size limit (band form) is ``limit``, calibrated over every tiny run here:
    the post-LN runs' learning-rate verdict is an error under a tiny limit, ok under a huge one."""
    support = {"d_model": [8, 64], "n_layers": [1, 8], "lr": [1e-5, 1.0], "warmup": [0, 1000]}
    point = {"warmup": 0, "limit": limit, "band": [limit / 2, limit * 2], "runs": 10, "errors": 1}
    step = {"warmups": [point], "support": support, "error_from": "band_high"}
    return {"range": dict(support), "agreement": {}, "step_limit": step}


@pytest.fixture
def records(tmp_path):
    """{"strict": path, "lenient": path}: records under which the tiny post-LN runs fail or train."""
    out = {}
    for name, limit in (("strict", 1e-6), ("lenient", 1e6)):
        path = tmp_path / f"calibration-{name}.json"
        path.write_text(json.dumps(_limit_record(limit)))
        out[name] = str(path)
    return out


def _current(monkeypatch, path):
    """Make the record at ``path`` the doctor's current one (what a probe taken again reads)."""
    real = load_record.__wrapped__
    rec = real(path)
    read = lambda p=RECORD_PATH: rec if p == RECORD_PATH else real(p)  # noqa: E731
    monkeypatch.setattr(lr_limit, "load_record", read)
    monkeypatch.setattr(doctor_heldout, "load_record", read)


@pytest.fixture
def scale_store(tmp_path, monkeypatch, records):
    """A store holding a tiny 'tuning' grid (width 16) and two tiny 'held-out' grids, the first
    (widths 16, 32) scored under a record of its own, the second (width 24) under the current record;
    with ``runs`` False the second has no run yet."""
    tuning = _grid(tmp_path, "doctor-scale-tuning", "[16]")
    first = _grid(tmp_path, "doctor-scale-heldout", "[16, 32]")
    second = _grid(tmp_path, "doctor-scale-heldout-families", "[24]")
    db = str(tmp_path / "scale.sqlite")
    for g in (tuning, first):
        run_study(StudyConfig.from_yaml(g), db=db, progress=False)
    monkeypatch.setattr(
        doctor_scale, "SCALE_TUNING", (tuning, _grid(tmp_path, "doctor-scale-tuning-wide", "[64]"))
    )
    grids = (
        HeldOutGrid(
            second,
            "The second grid",
            "Scored under the current record.",
            None,
            (("before", records["strict"]),),
        ),
        HeldOutGrid(
            first,
            "The first grid",
            "Scored under its own record.",
            records["strict"],
            (("lenient", records["lenient"]),),
        ),
    )
    monkeypatch.setattr(doctor_heldout, "HELDOUT_GRIDS", grids)
    return {"db": db, "second": second, "grids": grids}


def _run_second(store):
    run_study(StudyConfig.from_yaml(store["second"]), db=store["db"], progress=False)


def test_the_held_out_grid_is_scored_with_baselines_and_per_width(scale_store):
    db = scale_store["db"]
    grids, runs, counts = doctor_scale.scale_tuning(db)
    assert [c[1:3] for c in counts] == [(2, 2), (0, 2)]  # the wide grid is not in the store: 0 finished
    assert len(runs) == 2 and all(r["probe"] for r in runs)  # probed again
    out = doctor_heldout.score_heldout(db, runs, scale_store["grids"][1])
    assert out["grid"][1:3] == (4, 4) and out["grid"][3] > 0  # hours of the runs' own times
    assert out["heldout"]["runs"] == 4
    assert set(out["baselines"]) == {"always 'trains'", "wrapping x lr lookup"}
    assert [row["d_model"] for row in out["by_width"]] == [16, 32]
    assert sum(row["doctor"]["runs"] for row in out["by_width"]) == 4
    assert len(out["misses"]) == 4 - out["heldout"]["hits"]


def _predictions(result):
    return {
        (r["config"]["model"]["wrap"], r["config"]["model"]["d_model"]): r["predicted_under"]
        for r in result["runs"]
    }


def test_each_held_out_grid_is_scored_under_its_own_record(scale_store, records, monkeypatch):
    _run_second(scale_store)
    said = {}
    for current in ("strict", "lenient"):
        _current(monkeypatch, records[current])
        second, first = doctor_heldout.score_heldout_grids(scale_store["db"], [])
        said[current] = (second, first)
        # the first grid: under its own (strict) record whatever the current one says
        assert {
            doctor_scale.run_row(r)["predicted"]
            for r in first["runs"]
            if r["config"]["model"]["wrap"] == "post"
        } == {"fails"}
        assert {r["scored_under"] for r in first["runs"]} == {"calibration-strict.json"}
        post = [r for r in second["runs"] if r["config"]["model"]["wrap"] == "post"]
        assert [doctor_scale.run_row(r)["predicted"] for r in post] == [
            "fails" if current == "strict" else "trains"
        ]
        assert {r["scored_under"] for r in second["runs"]} == {"calibration.json"}
    (s1, f1), (s2, f2) = said["strict"], said["lenient"]
    assert s1["heldout"] != s2["heldout"]  # the second grid follows the current record
    assert f1["heldout"] == f2["heldout"] and f1["misses"] == f2["misses"]  # grid 1 unchanged
    assert f1["registrations"] == f2["registrations"]
    assert [r["record"] for r in f1["registrations"]] == ["calibration-lenient.json"]
    assert [r["record"] for r in s1["registrations"]] == ["calibration-strict.json"]
    # the second grid's earlier registration is the strict record: under a strict current record the same
    assert s1["heldout"] == s1["registrations"][0]["score"]
    assert all(
        p["calibration-lenient.json"] == "trains" for (w, _), p in _predictions(f1).items() if w == "post"
    )


def test_the_baselines_are_chosen_on_the_studies_the_record_was_fitted_on():
    pool = [{"study": "a"}, {"study": "b"}, {"study": "c"}]
    record = {"fitted_from": {"studies": [{"study": "a"}, {"study": "c"}]}}
    assert doctor_heldout.tuning_for(record, pool) == [{"study": "a"}, {"study": "c"}]
    assert doctor_heldout.tuning_for({}, pool) == pool


def test_an_unrun_grid_is_registered_not_scored_and_the_newest_scored_grid_is_the_headline(
    scale_store, records, monkeypatch
):
    _current(monkeypatch, records["lenient"])
    db = scale_store["db"]
    grids = doctor_heldout.score_heldout_grids(db, [])
    assert grids[0]["heldout"] is None and grids[0]["grid"][1] == 0 and grids[1]["heldout"]["runs"] == 4
    text = "\n".join(doctor_heldout.heldout_lines({"tuning_grids": [], "grids": grids}, db))
    assert "### The first grid: the headline" in text and "Scored under its own record." in text
    assert "### The second grid: registered, not scored yet" in text
    assert f"depthlab study --grid {scale_store['second']} --db {db}" in text
    assert text.index("### The first grid: the headline") < text.index("### The second grid")
    assert "`calibration-strict.json` (kept as registered), which does not name what it was fitted on" in text
    assert "| lenient | `calibration-lenient.json` | " in text
    _run_second(scale_store)
    grids = doctor_heldout.score_heldout_grids(db, [])
    text = "\n".join(doctor_heldout.heldout_lines({"tuning_grids": [], "grids": grids}, db))
    assert "### The second grid: the headline" in text and "### The first grid\n" in text
    assert "not scored yet" not in text
    assert text.index("### The second grid: the headline") < text.index("### The first grid")
    assert "`calibration.json` (the doctor's current record)" in text


def test_an_absent_store_or_grid_is_not_scored(tmp_path):
    out = doctor_heldout.score_heldout(str(tmp_path / "none.sqlite"), [], doctor_heldout.FIRST)
    assert out["heldout"] is None and out["grid"][1] == 0
    grids = [out, doctor_heldout.score_heldout(str(tmp_path / "none.sqlite"), [], doctor_heldout.FAMILIES)]
    lines = "\n".join(doctor_heldout.heldout_lines({"tuning_grids": [], "grids": grids}, "x.sqlite"))
    for grid in (
        "lab/depthlab_lab/grids/doctor-scale-heldout.yaml",
        "lab/depthlab_lab/grids/doctor-scale-heldout-families.yaml",
    ):
        assert f"Not scored yet: no finished run of `{grid}`" in lines
        assert f"depthlab study --grid {grid} --db x.sqlite" in lines
    assert lines.count("registered, not scored yet") == 2
    assert "\n".join(doctor_heldout.heldout_lines(None, "x.sqlite")).count("registered, not scored yet") == 2


def _scored(grid, name, done, s, k, misses):
    return {
        "held_out": grid,
        "grid": (name, done, 36, 1.0),
        "record": load_record(grid.record_path()),
        "heldout": s,
        "baselines": {"wrapping x lr lookup": k},
        "by_width": [{"d_model": 128, "doctor": s, "lookup": k}],
        "misses": misses,
    }


def test_the_document_opens_with_the_held_out_score_across_width():
    s = score([("trains", "trained")] * 9 + [("trains", "stalled")])
    k = score([("trains", "trained")] * 8 + [("fails", "trained"), ("trains", "stalled")])
    miss = "post 5 layers d_model 512 lr 0.006 warmup 100: predicted trains, stalled (step size 9)"
    scale = {
        "tuning_grids": [
            ("doctor-scale-tuning", 540, 540, 4.25),
            ("doctor-scale-tuning-families", 0, 24, 0.0),
        ],
        "grids": [
            {
                "held_out": doctor_heldout.FAMILIES,
                "grid": ("doctor-scale-heldout-families", 0, 48, 0.0),
                "record": None,  # its kept copy is not written yet
                "heldout": None,
            },
            _scored(doctor_heldout.FIRST, "doctor-scale-heldout", 10, s, k, [miss]),
        ],
    }
    held = score([("trains", "trained")])
    text = render(
        {
            "heldout": held,
            "heldout_before": held,
            "tuning": held,
            "misses": [],
            "seconds": 1.0,
            "scale": scale,
        },
        "runs/doctor.sqlite",
    )
    head = text.index("## Held-out across width (the headline)")
    assert head < text.index("## Held-out score (widths 48-64)")
    assert "- `doctor-scale-heldout`: 10 of 36 runs finished, 1.0 h of one core" in text
    assert "- `doctor-scale-tuning`: 540 of 540 runs finished, 4.2 h of one core" in text
    assert "- `doctor-scale-tuning-families`: 0 of 24 runs finished\n" in text
    assert "- `doctor-scale-heldout-families`: 0 of 48 runs finished\n" in text
    first = text.index(
        "### The first held-out grid across width (widths 128, 256 and 512, 36 runs): the headline"
    )
    second = text.index(
        "### The second held-out grid across width (widths 192 and 384, 48 runs): registered, not scored yet"
    )
    assert head < first < second
    assert "9 of 10 outcomes predicted: 90% (95% interval" in text[first:second]
    assert "| 128 | 10 | 9 (90% (95% interval" in text
    assert "predicted trains, stalled (step size 9)" in text
    assert "To be scored under `calibration-five-studies.json`, not written yet" in text
    assert (
        "Scored under `calibration-four-studies-band.json` (kept as registered), fitted on `doctor-tuning`"
        in text
    )
    # the refit command names the tuning grids with finished runs only
    assert (
        "`depthlab calibrate --from runs/doctor.sqlite doctor-tuning --from runs/doctor-scale.sqlite doctor-scale-tuning`"
        in text
    )
    assert (
        "depthlab study --grid lab/depthlab_lab/grids/doctor-scale-heldout-families.yaml --db runs/doctor-scale.sqlite"
        in text
    )


def test_the_refit_command_names_the_tuning_grids_with_runs_or_those_of_the_record():
    record = {"fitted_from": {"studies": [{"study": "doctor-tuning"}, {"study": "doctor-scale-tuning"}]}}
    counts = [
        ("doctor-scale-tuning", 3, 3, 0.1),
        ("doctor-scale-tuning-families", 2, 24, 0.1),
        ("x", 0, 2, 0.0),
    ]
    assert doctor_scale.refit_command(("a.sqlite", "doctor-tuning"), "b.sqlite", counts, record) == (
        "depthlab calibrate --from a.sqlite doctor-tuning --from b.sqlite doctor-scale-tuning "
        "--from b.sqlite doctor-scale-tuning-families"
    )
    assert doctor_scale.refit_command(("a.sqlite", "doctor-tuning"), "b.sqlite", None, record) == (
        "depthlab calibrate --from a.sqlite doctor-tuning --from b.sqlite doctor-scale-tuning"
    )
    assert "lab/depthlab_lab/grids/doctor-scale-tuning-families.yaml" in doctor_scale.SCALE_TUNING


def test_scale_db_for_another_reproduction_or_a_missing_store_is_refused(tmp_path, capsys):
    assert main(["reproduce", "seeds", "--scale-db", str(tmp_path / "x.sqlite")]) == 2
    assert main(["reproduce", "doctor", "--scale-db", str(tmp_path / "none.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "--scale-db applies to 'doctor' only" in err and "no such store" in err


def test_each_held_out_grids_runs_are_kept_in_the_record_under_its_study(scale_store):
    _run_second(scale_store)
    grids = doctor_heldout.score_heldout_grids(scale_store["db"], [])
    rows = doctor_heldout.pop_runs(grids)
    assert all("runs" not in g for g in grids)  # the scores keep no runs
    assert set(rows) == {"doctor-scale-heldout", "doctor-scale-heldout-families"}
    first, second = rows["doctor-scale-heldout"], rows["doctor-scale-heldout-families"]
    assert {r["d_model"] for r in first} == {16, 32} and {r["d_model"] for r in second} == {24}
    assert all(r["predicted"] in ("trains", "fails") for r in first + second)
    assert all(r["outcome"] and r["step_size"] is not None and r["config_hash"] for r in first + second)
    assert {r["scored_under"] for r in first} == {"calibration-strict.json"}
    assert all(set(r["predicted_under"]) == {"calibration-lenient.json"} for r in first)
    assert all(set(r["predicted_under"]) == {"calibration-strict.json"} for r in second)
    assert record_path("docs/doctor.md") == "docs/doctor-runs.json"


def test_the_calibrated_range_is_where_the_tuning_runs_ran_not_where_the_grid_is_to_run():
    def run(d, status="done"):
        return {"status": status, "config": {"model": {"d_model": d, "n_layers": 2}, "train": {"lr": 1e-3}}}

    assert runs_range([run(32), run(128), run(512, "queued")])["d_model"] == [32, 128]


def test_a_grid_whose_record_is_not_written_keeps_its_runs_unscored(scale_store, records, monkeypatch):
    """A grid is scored only under its own kept record: where that is not written, its finished runs are
    listed and not scored (never under the current record instead)."""
    _current(monkeypatch, records["lenient"])
    _run_second(scale_store)
    missing = dataclasses.replace(
        doctor_heldout.HELDOUT_GRIDS[0], record=str(scale_store["db"]) + ".absent.json"
    )
    out = doctor_heldout.score_heldout(scale_store["db"], [], missing)
    assert out["heldout"] is None and out["record"] is None and out["grid"][1] == len(out["runs"]) > 0
    text = "\n".join(doctor_heldout._unscored_lines(out, "x.sqlite"))
    assert "finished, but the record they are to be scored under is not written" in text


def test_a_record_fitted_after_the_grids_first_run_is_flagged():
    record = {"fitted_from": {"when": "2026-12-02 10:00 UTC"}}
    before = datetime.datetime(2026, 12, 2, 11, 0, tzinfo=datetime.UTC).timestamp()
    after = datetime.datetime(2026, 12, 2, 9, 30, tzinfo=datetime.UTC).timestamp()
    assert doctor_heldout.fitted_after_start(record, [{"started_at": before}]) is None
    late = doctor_heldout.fitted_after_start(record, [{"started_at": before}, {"started_at": after}])
    assert late == "fitted 2026-12-02 10:00 UTC, after the grid's first run started (2026-12-02 09:30 UTC)"
    assert doctor_heldout.fitted_after_start({}, [{"started_at": after}]) is None


def test_a_late_record_with_a_note_says_what_the_rewrite_changed_and_without_one_is_not_registered():
    late = "fitted 2026-12-02 10:00 UTC, after the grid's first run started (2026-12-02 09:30 UTC)"
    bare = HeldOutGrid("g.yaml", "G", "rules")
    noted = dataclasses.replace(bare, late_note="only the description changed")
    assert "**Not a registered score:**" in doctor_heldout._late_lines({"held_out": bare, "late": late})[0]
    said = doctor_heldout._late_lines({"held_out": noted, "late": late})[0]
    assert said == f"The record was {late}: only the description changed." and "Not a registered" not in said
    assert doctor_heldout._late_lines({"held_out": bare, "late": None}) == []
