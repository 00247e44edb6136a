"""docs/doctor.md's text from measured scores (depthlab_lab.docgen.doctor_score.render), on scores built by hand."""

import json

from depthlab.doctor.plateau import FEATURES
from depthlab.report.doctor_score import score
from depthlab_lab.docgen.doctor_score import render


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
    assert "its score is optimistic" in text and "- a miss" in text
    assert (
        "lab/depthlab_lab/grids/doctor-scale-heldout.yaml" in text
        and "`depthlab calibrate` refuses it" in text
    )
    for grid in ("doctor-scale-tuning-families", "doctor-scale-heldout-families"):
        assert f"- `lab/depthlab_lab/grids/{grid}.yaml`: " in text
        assert (
            f"depthlab study --grid lab/depthlab_lab/grids/{grid}.yaml --db runs/doctor-scale.sqlite" in text
        )
    # the scale store not read: both held-out grids registered, none scored
    assert text.count("registered, not scored yet") == 2


def test_the_document_shows_the_fitted_limit_and_plateau_model_from_the_record(tmp_path):
    s = score([("trains", "trained")] * 3)
    scores = {"heldout": s, "heldout_before": s, "tuning": s, "misses": [], "seconds": 1.0}
    fit = {
        "coef": {k: 0.5 for k in FEATURES},
        "sigma": 0.62,
        "runs": 75,
        "censored": 36,
        "support": {
            "lr": [1e-4, 0.05],
            "d_model": [32, 32],
            "n_layers": [2, 24],
            "warmup": [0, 300],
            "steps": [150, 600],
        },
        "left_out": ["ln_d_model"],
        "in_sample": {"runs": 75, "agreed": 61, "median_factor": 1.3},
    }
    record = {
        "range": {},
        "agreement": {},
        "step_limit": {
            "warmups": [{"warmup": 0, "limit": 1.11, "band": [1.05, 1.18], "runs": 38, "errors": 3}],
            "support": {"d_model": [32, 32], "n_layers": [2, 24], "lr": [1e-4, 0.05], "warmup": [0, 30]},
        },
        "escape": {"model": "the model", "z_interval": 1.28, "families": {"renormalising": fit}},
        "fitted_from": {
            "studies": [
                {"study": "doctor-tuning", "store": "a.sqlite", "runs": 180, "done": 180, "escaped": 148}
            ],
            "commit": "abcdef0123456789",
            "when": "2026-12-01 12:00 UTC",
        },
    }
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))
    text = render(scores, "runs/doctor.sqlite", str(path))
    assert "reaches more than 1.11 output norms without warmup" in text
    assert "| 0 | 1.11 | 1.05-1.18 | 38 | 3 |" in text
    assert (
        "`doctor-tuning` (180 of 180 runs done, 148 escaped the plateau); code at commit abcdef0123" in text
    )
    assert "| stacks whose blocks renormalise the stream | 75 | 36 | 0.62 | 61 of 75 | 1.3 |" in text
    assert "widths 32, depths 2-24, warmups 0-300, budgets 150-600" in text


def test_the_document_shows_the_limits_on_rho_and_every_limit_per_width(tmp_path):
    s = score([("trains", "trained")] * 3)
    scores = {"heldout": s, "heldout_before": s, "tuning": s, "misses": [], "seconds": 1.0}
    support = {"d_model": [32, 128], "n_layers": [6, 24], "lr": [1e-4, 1.0], "warmup": [0, 300]}
    free = {
        "limit": 5.23,
        "band": [3.29, 8.3],
        "runs": 144,
        "errors": 16,
        "above": {"runs": 38, "failed": 32},
        "support": support,
        "by_width": [
            {"d_model": 32, "limit": 4.79, "band": [2.77, 8.3], "runs": 90, "errors": 12},
            {"d_model": 128, "limit": 0.4, "band": [0.4, None], "runs": 54, "errors": 0},
        ],
    }
    step = {"warmup": 30, "limit": 4.7, "band": [4.3, 5.1], "runs": 60, "errors": 9}
    step_by = [{"d_model": 32, "limit": 4.7, "band": [4.3, 5.1], "runs": 60, "errors": 9}]
    record = {
        "range": {},
        "agreement": {},
        "step_limit": {
            "warmups": [
                step | {"pooled_with": [30, 300], "by_width": step_by},
                step | {"warmup": 300, "pooled_with": [30, 300], "by_width": step_by},
            ],
            "support": support,
        },
        "update_limit": {"families": {"free": free}},
    }
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))
    text = render(scores, "runs/doctor.sqlite", str(path))
    assert "### Ceilings on the relative update" in text and "### The limits across width" in text
    assert (
        "| stacks that never renormalise the stream (pre-LN, sandwich, LayerScale, ...) | 5.23 | 3.29-8.3 | 144 "
        "| 16 | 32 of 38 | widths 32-128, depths 6-24, lrs 0.0001-1, warmups 0-300 |" in text
    )
    assert "zero-gated stacks (ReZero) of 6 layers or more: no limit fitted" in text
    assert "an error above rho 0.63" in text
    assert "| rho, free | 5.23 | 32 | 2.77-8.3 | 4.79 | 90 | 12 |" in text
    assert "| rho, free | 5.23 | 128 | above 0.4 | 0.4 | 54 | 0 |" in text
    assert text.count("| s, warmup 30, 300 | 4.7 | 32 | 4.3-5.1 | 4.7 | 60 | 9 |") == 1  # pooled: shown once
    assert "any other stack's relative update reaches 8.3" in text


def test_without_fitted_limits_the_document_says_the_constants_hold(tmp_path):
    s = score([("trains", "trained")] * 3)
    scores = {"heldout": s, "heldout_before": s, "tuning": s, "misses": [], "seconds": 1.0}
    path = tmp_path / "record.json"
    path.write_text(json.dumps({"range": {}, "agreement": {}}))
    text = render(scores, "runs/doctor.sqlite", str(path))
    assert "No limit on rho was fitted." in text and "a warning above rho 1.42" in text
    assert "No fitted limit holds a fit per width yet." in text
    assert "size) above 0.63;" in text and "any other stack's relative update" not in text


def test_the_document_opens_with_the_score_table_and_the_misses():
    """The held-out scores against the baselines open the page, then every run the doctor got wrong,
    one row each from the run record's rows; method and provenance follow."""
    s = score([("trains", "trained")] * 8 + [("fails", "stalled"), ("trains", "diverged")])
    base = {"wrapping x lr lookup": score([("trains", "trained")] * 8 + [("trains", "stalled")] * 2)}
    row = {"wrap": "post", "n_layers": 6, "d_model": 48, "lr": 0.01, "warmup": 0, "step_size": 2.5}
    runs = {
        "doctor-heldout": [
            dict(row, predicted="trains", outcome="diverged"),
            dict(row, predicted="trains", outcome="trained"),
            dict(row, predicted=None, outcome="stalled"),  # no verdict: not a miss
        ]
    }
    scores = {
        "heldout": s,
        "heldout_before": s,
        "tuning": s,
        "baselines": base,
        "misses": ["x"],
        "runs": runs,
    }
    text = render({**scores, "seconds": 1.0}, "runs/doctor.sqlite")
    lines = text.splitlines()
    table = lines.index(next(ln for ln in lines if ln.startswith("| held-out grid | runs | doctor |")))
    assert table < 10, "the page opens with its score table"
    assert "| d_model 48-64, 150 steps | 10 | 9 (90% [" in text and "| 8 (80% [" in text
    misses = [ln for ln in lines if ln.startswith("| d_model 48-64, 150 steps | post |")]
    assert misses == ["| d_model 48-64, 150 steps | post | 6 | 48 | 0.01 | 0 | trains | diverged | 2.5 |"]
    assert text.index("## The runs it got wrong") < text.index("## Method and provenance")


def test_the_committed_page_lists_every_held_out_miss_of_its_record():
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    studies = json.loads((docs / "doctor-runs.json").read_text())["studies"]
    page = (docs / "doctor.md").read_text()
    head = page.split("## Method and provenance", 1)[0]
    first = next(ln for ln in head.splitlines() if ln.startswith("| "))
    assert first.startswith("| held-out grid | runs | doctor |") and head.index(first) < 600
    missed = [
        r
        for name in ("doctor-heldout", "doctor-scale-heldout", "doctor-scale-heldout-families")
        for r in studies[name]
        if r.get("predicted") and (r["predicted"] == "trains") != (r["outcome"] == "trained")
    ]
    rows = [ln for ln in head.split("## The runs it got wrong", 1)[1].splitlines() if ln.startswith("| ")][1:]
    assert missed and len(rows) == len(missed)
    for r in missed:
        cells = f"| {r['wrap']} | {r['n_layers']} | {r['d_model']} | {r['lr']:g} | {r['warmup']} | {r['predicted']} | {r['outcome']} |"
        assert any(cells in ln for ln in rows), cells


def test_the_committed_page_quotes_advise_s_held_out_score_as_its_own_page_does():
    from pathlib import Path

    from depthlab_lab.docgen.advise_page import committed_lines, committed_reliability

    docs = Path(__file__).resolve().parents[2] / "docs"
    table = "\n".join(committed_lines())
    assert table in (docs / "doctor.md").read_text() and table in (docs / "advise.md").read_text()
    # and what its probabilities meant there: the reliability table advise.md has, with the Brier scores
    reliability = committed_reliability()
    assert "\n".join(reliability) in (docs / "doctor.md").read_text()
    assert "\n".join(reliability[2:]) in (docs / "advise.md").read_text()


def _run(source, config_hash, d_model, lr, outcome):
    from depthlab.doctor.atlas import MeasuredRun

    return MeasuredRun(
        source=source, wrap="post", norm="layernorm", residual="attn,ffn", param="sp", n_layers=3,
        d_model=d_model, n_heads=4, lr=lr, warmup=0, steps=200, batch_size=16, seq_len=32, seed=0,
        outcome=outcome, escape_step=None, val_loss=None, unigram_loss=None, update_gain=None,
        relative_update_per_lr=None, renormalised_share=None, config_hash=config_hash,
    )  # fmt: skip


def test_the_lookups_read_only_the_tuning_runs_committed_before_each_grid_and_see_width():
    from depthlab.doctor.atlas import Atlas
    from depthlab_lab.docgen.doctor_lookups import lines, scores

    # width 32 trains at lr 1e-2, width 256 fails there: pooled over width, the majority is 'trains'
    tuning = [_run("doctor-tuning", f"t{i}", 32, 1e-2, "trained") for i in range(3)]
    tuning += [_run("doctor-scale-tuning", f"s{i}", 256, 1e-2, "diverged") for i in range(2)]
    # a run of a tuning study committed after the first grid: the first grid's lookups must not see it
    tuning += [_run("doctor-scale-tuning-families", f"f{i}", 256, 1e-2, "diverged") for i in range(9)]
    held = [_run("doctor-scale-heldout", f"h{i}", 256, 1e-2, "diverged") for i in range(4)]
    held += [_run("doctor-heldout", "g0", 256, 1e-2, "diverged")]

    def row(r):
        return {"config_hash": r.config_hash, "d_model": r.d_model, "n_layers": r.n_layers,
                "outcome": r.outcome, "predicted": "trains"}  # fmt: skip

    record = {
        "studies": {
            src: [row(r) for r in held if r.source == src]
            for src in ("doctor-scale-heldout", "doctor-heldout")
        }
    }
    rows = {r["grid"]: r for r in scores(Atlas(tuple(tuning + held)), record)}
    width_grid = rows["doctor-scale-heldout"]
    assert width_grid["tuning_runs"] == 5 and width_grid["runs"] == 4
    assert width_grid["hits"] == {
        "doctor": 0, "wrapping x lr": 0, "wrapping x width x lr x warmup": 4, "nearest runs": 4
    }  # fmt: skip
    assert width_grid["best"] == "wrapping x width x lr x warmup" and width_grid["difference"][2] < 0
    # the first grid's pool is doctor-tuning alone: width 32 only, so every lookup says 'trains'
    assert rows["doctor-heldout"]["tuning_runs"] == 3 and rows["doctor-heldout"]["hits"]["wrapping x lr"] == 0
    text = "\n".join(lines(list(rows.values())))
    assert "| d_model 256; 3 layers | 4 | 5 | 0 (0% [" in text
    assert "hits fewer runs than the best lookup on `d_model 256; 3 layers`" in text


def test_the_committed_page_quotes_the_stronger_lookups_on_the_doctor_s_grids():
    from pathlib import Path

    from depthlab_lab.docgen.doctor_lookups import committed_lines, scores

    docs = Path(__file__).resolve().parents[2] / "docs"
    page = (docs / "doctor.md").read_text()
    assert "\n".join(committed_lines()) in page
    # the doctor's hits here are the score table's: the same runs, the same record
    from depthlab.doctor.atlas import Atlas

    record = json.loads((docs / "doctor-runs.json").read_text())
    for r in scores(Atlas.load(), record):
        n, hits = r["runs"], r["hits"]["doctor"]
        assert f"| {n} | {hits} ({hits / n:.0%} [" in page
