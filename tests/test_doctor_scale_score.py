"""The held-out grid across width, scored from its store by ``depthlab reproduce doctor`` (depthlab.docgen.doctor_scale)."""

import pytest

from depthlab.cli import main
from depthlab.docgen import doctor_scale
from depthlab.docgen.doctor_score import record_path, render
from depthlab.study import StudyConfig, run_study
from depthlab.study.calibration import runs_range
from depthlab.study.scoring import score

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


@pytest.fixture
def scale_store(tmp_path, monkeypatch):
    """A store holding a tiny 'tuning' grid (width 16) and a tiny 'held-out' grid (widths 16, 32)."""
    tuning = _grid(tmp_path, "doctor-scale-tuning", "[16]")
    held = _grid(tmp_path, "doctor-scale-heldout", "[16, 32]")
    db = str(tmp_path / "scale.sqlite")
    for g in (tuning, held):
        run_study(StudyConfig.from_yaml(g), db=db, progress=False)
    monkeypatch.setattr(
        doctor_scale, "SCALE_TUNING", (tuning, _grid(tmp_path, "doctor-scale-tuning-wide", "[64]"))
    )
    monkeypatch.setattr(doctor_scale, "SCALE_HELDOUT", held)
    return db


def test_the_held_out_grid_is_scored_with_baselines_and_per_width(scale_store):
    grids, runs, counts = doctor_scale.scale_tuning(scale_store)
    assert [c[1:3] for c in counts] == [(2, 2), (0, 2)]  # the wide grid is not in the store: 0 finished
    assert len(runs) == 2 and all(r["probe"] for r in runs)  # probed again
    out = doctor_scale.score_heldout(scale_store, runs)
    assert out["grid"][1:3] == (4, 4) and out["grid"][3] > 0  # hours of the runs' own times
    assert out["heldout"]["runs"] == 4
    assert set(out["baselines"]) == {"always 'trains'", "wrapping x lr lookup"}
    assert [row["d_model"] for row in out["by_width"]] == [16, 32]
    assert sum(row["doctor"]["runs"] for row in out["by_width"]) == 4
    assert len(out["misses"]) == 4 - out["heldout"]["hits"]


def test_an_absent_store_or_grid_is_not_scored(tmp_path, monkeypatch):
    out = doctor_scale.score_heldout(str(tmp_path / "none.sqlite"), [])
    assert out["heldout"] is None and out["grid"][1] == 0
    lines = "\n".join(doctor_scale.heldout_lines(out | {"tuning_grids": []}, "x.sqlite"))
    assert (
        "Not scored yet" in lines
        and "depthlab study --grid grids/doctor-scale-heldout.yaml --db x.sqlite" in lines
    )


def test_the_document_opens_with_the_held_out_score_across_width():
    s = score([("trains", "trained")] * 9 + [("trains", "stalled")])
    k = score([("trains", "trained")] * 8 + [("fails", "trained"), ("trains", "stalled")])
    scale = {
        "tuning_grids": [("doctor-scale-tuning", 540, 540, 4.25)],
        "grid": ("doctor-scale-heldout", 10, 36, 1.0),
        "heldout": s,
        "baselines": {"wrapping x lr lookup": k},
        "by_width": [{"d_model": 128, "doctor": s, "lookup": k}],
        "misses": ["post 5 layers d_model 512 lr 0.006 warmup 100: predicted trains, stalled (step size 9)"],
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
    assert "9 of 10 outcomes predicted: 90% (95% interval" in text[head:]
    assert "| 128 | 10 | 9 (90% (95% interval" in text
    assert "predicted trains, stalled (step size 9)" in text


def test_scale_db_for_another_reproduction_or_a_missing_store_is_refused(tmp_path, capsys):
    assert main(["reproduce", "seeds", "--scale-db", str(tmp_path / "x.sqlite")]) == 2
    assert main(["reproduce", "doctor", "--scale-db", str(tmp_path / "none.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "--scale-db applies to 'doctor' only" in err and "no such store" in err


def test_each_scored_run_is_kept_in_the_record_with_what_the_doctor_predicted(scale_store):
    out = doctor_scale.score_heldout(scale_store, [])
    rows = [doctor_scale.run_row(r) for r in out["runs"]]
    assert {r["d_model"] for r in rows} == {16, 32} and all(
        r["predicted"] in ("trains", "fails") for r in rows
    )
    assert all(r["outcome"] and r["step_size"] is not None and r["config_hash"] for r in rows)
    assert {r["study"] for r in out["runs"]} == {"doctor-scale-heldout"}
    assert record_path("docs/doctor.md") == "docs/doctor-runs.json"


def test_the_calibrated_range_is_where_the_tuning_runs_ran_not_where_the_grid_is_to_run():
    def run(d, status="done"):
        return {"status": status, "config": {"model": {"d_model": d, "n_layers": 2}, "train": {"lr": 1e-3}}}

    assert runs_range([run(32), run(128), run(512, "queued")])["d_model"] == [32, 128]
