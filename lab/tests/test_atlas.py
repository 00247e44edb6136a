"""The atlas the library ships is what the committed run records give; the predictor in the doctor's record
is what its cross-validated fit gives on that atlas; each held-out grid at depth was registered, with every
prediction frozen, in a commit whose record and atlas are the ones the predictions were made under, and the
shipped predictor makes the latest grid's registered predictions until its runs join the atlas."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import subprocess
from pathlib import Path

import pytest

from depthlab.doctor.atlas import Atlas
from depthlab.doctor.record import load_record
from depthlab.study.grid import StudyConfig
from depthlab_lab.calibrate.atlas_build import doctor_runs
from depthlab_lab.calibrate.heldout_depth import (
    FIFTH,
    FIRST,
    FOURTH,
    GRIDS_AT_DEPTH,
    REGISTRATION,
    SECOND,
    SEVENTH,
    SIXTH,
    THIRD,
)
from depthlab_lab.calibrate.predictor_fit import fitted_predictor
from depthlab_lab.restore import read_record
from lab.tests.git_history import commits_of, git

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def atlas():
    return Atlas.load()


def test_the_doctor_runs_of_the_atlas_are_the_records(atlas):
    """Field by field; the probe's quantities to 1% (the doctor's record was written again after the atlas
    was registered, its probes taken again: they moved by up to 0.05%)."""
    rebuilt = doctor_runs()
    shipped = list(atlas.runs[: len(rebuilt)])
    probed = ("update_gain", "relative_update_per_lr")
    for a, b in zip(shipped, rebuilt, strict=True):
        assert {k: v for k, v in vars(a).items() if k not in probed} == {
            k: v for k, v in vars(b).items() if k not in probed
        }
        for k in probed:
            assert getattr(a, k) == pytest.approx(getattr(b, k), rel=1e-2)


def test_advise_s_scored_held_out_runs_are_in_the_atlas(atlas):
    """The seven grids at depth and the Hugging Face set, all scored, are evidence now (each run once, with
    its recorded outcome, probed again)."""
    rows = {
        r["config_hash"]: r
        for r in json.loads((ROOT / "docs" / "advise-heldout-runs.json").read_text())["runs"]
    }
    advise = [r for r in atlas.runs if r.source.startswith("advise-heldout")]
    assert len(advise) == len({r.config_hash for r in advise}) == len(rows) == 56 + 12 + 42 * 5 + 26
    assert {r.source for r in advise} == {
        FIRST.name,
        SECOND.name,
        THIRD.name,
        FOURTH.name,
        FIFTH.name,
        SIXTH.name,
        SEVENTH.name,
        *(f"advise-heldout-hf-{f}" for f in ("llama", "gpt_neox", "gemma2")),
    }
    for r in advise:
        assert (r.outcome, r.escape_step, r.val_loss) == (
            rows[r.config_hash]["outcome"],
            rows[r.config_hash]["escape_step"],
            rows[r.config_hash]["val_loss"],
        )
        assert r.update_gain is not None and r.update_gain > 0


def test_the_ladder_runs_of_the_atlas_carry_the_records_outcomes(atlas):
    rows = {
        (s, r["config_hash"]): r
        for s, rs in read_record("docs/reproductions-ladder-runs.json").items()
        for r in rs
    }
    ladder = [r for r in atlas.runs if r.source.startswith("ladder-")]
    by_hash = {r.config_hash: r for r in atlas.runs}
    assert len(by_hash) == len(atlas.runs), "a run two studies share is in the atlas once"
    assert len(rows) == 528 and len(ladder) == len({h for _, h in rows}) - 3  # 3 are the doctor's runs too
    for (_, h), row in rows.items():  # every recorded run, under the first study that has it
        assert (by_hash[h].outcome, by_hash[h].escape_step) == (row["outcome"], row.get("escape_step"))
    for r in ladder:
        assert r.update_gain is not None and r.update_gain > 0  # probed again at init


def test_each_run_s_recipe_is_what_its_configuration_sets_beyond_the_columns(atlas):
    """The ladder's ablations and recipes, and the Hugging Face wirings, are no plain runs of their
    wrapping: each carries its recipe, and a run at every default carries none."""
    by_source = {}
    for r in atlas.runs:
        by_source.setdefault(r.source, set()).add(r.recipe)
    assert by_source["doctor-tuning"] == {""}
    assert "final_norm=off" in by_source["ladder-final-norm-d32"]
    assert by_source["ladder-lr-sensitivity-d64"] == {"schedule=cosine"}
    assert "beta2=0.999" in by_source["ladder-recipe-d32"]
    llama = by_source["advise-heldout-hf-llama"]
    assert all("activation=swiglu" in x and "position=rope" in x for x in llama) and len(llama) == 2


@pytest.mark.slow
def test_the_records_predictor_is_its_fit_on_the_atlas(atlas):
    record = load_record()
    refit = fitted_predictor(atlas, {k: v for k, v in record.items() if k != "predictor"})
    kept = record["predictor"]
    assert refit["form"] == kept["form"] and refit["examples"] == kept["examples"]
    assert refit["by"] == kept["by"] and set(refit["wraps"]) == set(kept["wraps"])
    for part in ("families", "wraps"):
        for name, model in kept[part].items():
            assert refit[part][name]["coef"] == pytest.approx(model["coef"], rel=1e-9, abs=1e-12)
            assert refit[part][name].get("family") == model.get("family")
    assert all(m["family"] in ("renormalising", "gated", "free") for m in kept["wraps"].values())


def test_the_library_s_probability_is_the_fit_s_on_the_atlas_runs(atlas):
    """depthlab.doctor.predict.p_trains (what advise prints) and the lab's array form used to fit and
    cross-validate give one probability for every run, its own run left out of its neighbours: both
    order equally far runs (to TIE) by seed, then in the atlas's order."""
    from depthlab.doctor.predict import Query, p_trains
    from depthlab_lab.calibrate.predictor_fit import Neighbourhood, examples, predict

    record = load_record()
    fit = record["predictor"]
    rows = examples(atlas, record)
    theirs = predict(fit, rows, Neighbourhood(atlas), tuple(fit["features"]), set())
    apart = [
        e.run.shape()
        for e, p in zip(rows, theirs)
        if p_trains(fit, e.limit, Query.of(e.run), atlas, exclude={e.run.config_hash}).p_trains
        != pytest.approx(p, rel=1e-9, abs=1e-12)
    ]
    assert len(rows) > 1500 and not apart, apart[:5]


def test_the_lab_s_neighbourhood_matches_recipes_as_the_library_does(atlas):
    """In an atlas that mixes known recipes, another recipe and unknown ones (an old file's runs, None),
    the lab's array form and depthlab.doctor.predict.nearest give one share for every run."""
    from depthlab.doctor.predict import Query, atlas_share, nearest
    from depthlab_lab.calibrate.predictor_fit import Neighbourhood

    runs = [r for r in atlas.runs if r.wrap == "post" and r.d_model == 32][:200]
    mixed = Atlas(tuple(
        dataclasses.replace(r, recipe=(None, "schedule=cosine", r.recipe)[i % 3],
                            escape_step=None if i % 7 == 0 else r.escape_step)  # trained, no escape recorded
        for i, r in enumerate(runs)
    ))  # fmt: skip
    steps = {r.steps for r in mixed.runs}
    assert len(steps) > 1 and any(
        r.trained and r.escape_step is None for r in mixed.runs
    )  # budgets to read at
    hood = Neighbourhood(mixed)
    for r in mixed.runs:
        lib = atlas_share(nearest(mixed, Query.of(r), exclude={r.config_hash}), r.steps)
        lab = hood.share(r, set())
        assert (lib is None and lab is None) or lib == pytest.approx(lab, rel=1e-12), r


def test_the_shipped_predictor_still_makes_the_latest_grid_s_registered_predictions(atlas):
    """A change to the shipped predictor (a refit, a guard) after the latest grid at depth was registered
    must leave its frozen predictions as they were, until its runs join the atlas: a run of each wrapping
    at its widest shape in the grid, probed again."""
    from depthlab.study.worker import probe_run
    from depthlab_lab.calibrate.heldout_depth import prediction

    sources = {r.source for r in atlas.runs}
    latest = next((g for g in reversed(GRIDS_AT_DEPTH) if g.name not in sources), None)
    if latest is None:
        pytest.skip("every grid's runs are evidence now: a refit on them may call them otherwise")
    reg = {p["config_hash"]: p for p in json.loads((ROOT / latest.registration).read_text())["runs"]}
    record = load_record()
    specs = StudyConfig.from_yaml(str(ROOT / latest.grid)).expand()
    widest = {
        w: max(s.model.d_model for s in specs if s.model.wrap == w) for w in {s.model.wrap for s in specs}
    }
    seen = set()
    for spec in specs:
        if spec.model.d_model != widest[spec.model.wrap] or spec.model.wrap in seen:
            continue
        seen.add(spec.model.wrap)
        now = prediction(probe_run(spec), spec, atlas, record)
        then = reg[spec.hash]
        # the probe sums in float32 (another thread count orders the sums apart): equal to 1e-4
        assert now["p_trains"] == pytest.approx(then["p_trains"], rel=1e-4), spec.label
        assert now["advise"] == then["advise"] and now["lookups"] == then["lookups"]
    assert (
        seen == set(widest) and len(seen) >= 6
    )  # every wrapping the grid trains (a differing grid: no sandwich)


def _digest_at(commit: str, path: str) -> str:
    raw = subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return hashlib.sha256(raw).hexdigest()[:16]


def _frozen(grid) -> tuple[dict, Atlas]:
    """``grid``'s registration, checked unchanged since its first commit and made with that commit's record
    and atlas (every prediction called from its own probability); and that atlas, before the grid's runs."""
    reg = json.loads((ROOT / grid.registration).read_text())
    first = commits_of(grid.registration)[0]
    assert json.loads(git("show", f"{first}:{grid.registration}")) == reg, (
        "a frozen prediction or rule changed"
    )
    assert _digest_at(first, reg["record"]["path"]) == reg["record"]["sha256"]
    assert _digest_at(first, reg["atlas"]["path"]) == reg["atlas"]["sha256"]
    for r in reg["runs"]:
        assert r["advise"] == ("trains" if r["p_trains"] >= 0.5 else "fails")
    raw = subprocess.run(["git", "show", f"{first}:{reg['atlas']['path']}"], cwd=ROOT, capture_output=True,
                         check=True).stdout  # fmt: skip
    then_atlas = Atlas.load(io.BytesIO(raw))
    assert grid.name not in {r.source for r in then_atlas.runs}
    return reg, then_atlas


def test_the_held_out_grid_at_depth_was_registered_with_its_predictions_record_and_atlas():
    reg = json.loads((ROOT / REGISTRATION).read_text())
    first = commits_of(REGISTRATION)[0]  # the registration commit: the file's first
    then = json.loads(git("show", f"{first}:{REGISTRATION}"))
    assert then["runs"] == reg["runs"] and then["hf_runs"] == reg["hf_runs"], "a frozen prediction changed"
    assert _digest_at(first, reg["record"]["path"]) == reg["record"]["sha256"]
    assert _digest_at(first, reg["atlas"]["path"]) == reg["atlas"]["sha256"]
    assert len(reg["runs"]) == 56 and len(reg["hf_runs"]) == 12
    assert reg["within_2x_of_limit"] == sum(0.5 <= r["lr_over_limit"] <= 2 for r in reg["runs"]) == 56
    for r in reg["runs"]:
        assert r["advise"] == ("trains" if r["p_trains"] >= 0.5 else "fails")
        assert set(r["lookups"]) == {"wrapping x lr", "wrapping x width x lr x warmup", "nearest runs"}


def test_the_second_grid_at_depth_was_registered_before_its_runs_with_the_refit_predictor():
    """Frozen in its first commit with the record and atlas of that commit (the atlas holding the first
    grid's runs, the predictor refit on them); no shape of it is one that atlas measured."""
    reg, then_atlas = _frozen(SECOND)  # the atlas it was registered with, before its runs joined
    assert reg["atlas"]["runs"] == 1617 and reg["record"]["predictor_form"].endswith("by wrapping")
    assert len(reg["runs"]) == 42 and reg["hf_runs"] == []
    assert all(0.5 <= r["lr_over_limit"] <= 2 for r in reg["runs"])
    assert len(then_atlas) == 1617
    assert not set(SECOND.shapes) & {(r.d_model, r.n_layers) for r in then_atlas.runs}


def test_the_third_grid_at_depth_was_registered_before_its_runs_with_the_predictor_refit_on_the_second():
    """Frozen in its first commit with the record and atlas of that commit (the atlas holding the second
    grid's runs too, the predictor chosen again on them); no shape of it is one that atlas measured; it
    states its cost; most of its runs are hard calls (within 2x of the stack's limit: all of them)."""
    reg, then_atlas = _frozen(THIRD)
    assert reg["atlas"]["runs"] == 1659 and reg["record"]["predictor_form"].endswith("by wrapping")
    assert len(reg["runs"]) == 42 and reg["hf_runs"] == [] and "h of one core" in reg["cost"]
    assert all(0.5 <= r["lr_over_limit"] <= 2 for r in reg["runs"])
    assert {r.source for r in then_atlas.runs} >= {FIRST.name, SECOND.name}
    assert not set(THIRD.shapes) & {(r.d_model, r.n_layers) for r in then_atlas.runs}


def test_the_fourth_grid_at_depth_repeats_the_third_s_configurations_at_another_seed_registered_first():
    """Frozen in its first commit with that commit's record and atlas, the same the third grid was scored
    under (its runs not in the atlas); every configuration the third's, learning rate included, only the
    seed differs; it names the grid it repeats and how the seed agreement is scored."""
    reg, then_atlas = _frozen(FOURTH)
    third = json.loads((ROOT / THIRD.registration).read_text())
    assert (
        reg["record"]["sha256"] == third["record"]["sha256"]
        and reg["atlas"]["sha256"] == third["atlas"]["sha256"]
    )
    assert THIRD.name not in {r.source for r in then_atlas.runs}
    assert (
        reg["repeats"] == THIRD.name and "ceiling" in reg["seed agreement"] and "h of one core" in reg["cost"]
    )
    assert [r["run"] for r in reg["runs"]] == [r["run"] for r in third["runs"]]
    assert not {r["config_hash"] for r in reg["runs"]} & {r["config_hash"] for r in third["runs"]}
    specs = StudyConfig.from_yaml(ROOT / FOURTH.grid).expand()
    assert {s.train.seed for s in specs} == {FOURTH.seed} != {THIRD.seed}
    assert [s.hash for s in specs] == [r["config_hash"] for r in reg["runs"]]


def test_a_shape_fold_leaves_out_every_run_at_the_shape_its_twin_grid_s_too(atlas, monkeypatch):
    """Fitted without the fourth grid's shape, the fold must not keep the third grid's runs at that shape
    (the same configurations at another seed): every atlas run of the shape is left out."""
    from depthlab_lab.calibrate import predictor_fit

    if FOURTH.name not in {r.source for r in atlas.runs}:
        pytest.skip("the fourth grid's runs are not in the atlas")
    folds = []

    def fit(rows, hood, names, left, by):
        folds.append((set(left), {e.run.config_hash for e in rows}))

    monkeypatch.setattr(predictor_fit, "fit", fit)
    monkeypatch.setattr(predictor_fit, "predict", lambda model, test, *a: [0.5] * len(test))
    monkeypatch.setattr(predictor_fit, "LOOKUPS", {})
    s = predictor_fit.shape_folds(atlas, load_record(), FOURTH.name, load_record()["predictor"]["form"])
    assert s["runs"] == 42 and len(folds) == len(FOURTH.shapes)
    for (left, kept), shape in zip(folds, sorted(FOURTH.shapes)):
        at_shape = {r.config_hash for r in atlas.runs if (r.d_model, r.n_layers) == shape}
        twins = {
            r.config_hash for r in atlas.runs if r.source == THIRD.name and (r.d_model, r.n_layers) == shape
        }
        assert len(twins) == 14 and left == at_shape >= twins and not kept & at_shape


@pytest.mark.parametrize(
    "grid, atlas_runs, expected",
    [(FIFTH, 1743, "163 of 182"), (SIXTH, 1785, "197 of 224")],
    ids=["fifth", "sixth"],
)
def test_a_later_grid_at_depth_was_registered_before_its_runs_with_the_predictor_refit_on_the_one_before(
    grid, atlas_runs, expected
):
    """Frozen in its first commit with the record and atlas of that commit (the atlas holding every earlier
    grid's runs, the predictor chosen again on them); no shape or seed of it is one that atlas measured; it
    states its cost and why it was drawn, with what its shape folds expect; every run is a hard call
    (within 2x of the stack's limit)."""
    reg, then_atlas = _frozen(grid)
    assert reg["atlas"]["runs"] == atlas_runs and reg["record"]["predictor_form"].endswith("by wrapping")
    assert len(reg["runs"]) == 42 and reg["hf_runs"] == [] and "h of one core" in reg["cost"]
    assert "repeats" not in reg and expected in reg["after"]
    assert all(0.5 <= r["lr_over_limit"] <= 2 for r in reg["runs"])
    earlier = GRIDS_AT_DEPTH[: GRIDS_AT_DEPTH.index(grid)]
    before = json.loads((ROOT / earlier[-1].registration).read_text())
    assert reg["record"]["sha256"] != before["record"]["sha256"], "the predictor was refit before this grid"
    assert {r.source for r in then_atlas.runs} >= {g.name for g in earlier}
    assert not set(grid.shapes) & {(r.d_model, r.n_layers) for r in then_atlas.runs}
    assert grid.seed not in {r.seed for r in then_atlas.runs}
    specs = StudyConfig.from_yaml(ROOT / grid.grid).expand()
    assert {s.train.seed for s in specs} == {grid.seed}
    assert [s.hash for s in specs] == [r["config_hash"] for r in reg["runs"]]


@pytest.mark.parametrize("argv", [["register"], ["register", "nope"], ["design", FIRST.name],
                                  ["register", FIRST.name], ["register", SECOND.name],
                                  ["design", THIRD.name], ["register", THIRD.name],
                                  ["design", FOURTH.name], ["register", FOURTH.name],
                                  ["design", FIFTH.name], ["register", FIFTH.name],
                                  ["design", SIXTH.name], ["register", SIXTH.name], []])  # fmt: skip
def test_a_registered_grid_is_never_designed_or_registered_again(argv, capsys):
    from depthlab_lab.calibrate.heldout_depth import main

    grids_at_depth = GRIDS_AT_DEPTH
    before = {g.name: (ROOT / g.registration).read_bytes() for g in grids_at_depth}
    grids = {g.name: (ROOT / g.grid).read_bytes() for g in grids_at_depth}
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("usage" in err or "is registered" in err)
    assert before == {g.name: (ROOT / g.registration).read_bytes() for g in grids_at_depth}
    assert grids == {g.name: (ROOT / g.grid).read_bytes() for g in grids_at_depth}
