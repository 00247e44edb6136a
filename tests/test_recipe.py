"""A run's recipe (depthlab.doctor.recipe): what its configuration sets beyond the atlas's columns, and
that a measured run is evidence only for a question of the same recipe."""

import csv
import dataclasses
import gzip
import io
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthlab import ModelConfig, TrainConfig
from depthlab.advise.advice import LIKELY, advise, likely_range
from depthlab.doctor.atlas import COLUMNS, Atlas
from depthlab.doctor.predict import Query, distance, nearest, p_trains
from depthlab.doctor.recipe import HELD, recipe, recipe_of
from depthlab.doctor.record import load_record
from depthlab.interop.hf import imported_config
from depthlab.study.grid import RunSpec

ROOT = Path(__file__).resolve().parents[1]
PLAIN = ModelConfig(n_layers=6, d_model=64, n_heads=4, wrap="pre")


@pytest.fixture(scope="module")
def atlas():
    return Atlas.load()


def test_a_run_at_every_default_has_no_recipe_and_what_it_sets_is_named_sorted():
    assert recipe(PLAIN, TrainConfig()) == ""
    assert recipe(dataclasses.replace(PLAIN, final_norm="on"), TrainConfig()) == ""  # pre-LN's own final norm
    assert (
        recipe(dataclasses.replace(PLAIN, wrap="post", final_norm="off"), TrainConfig()) == ""
    )  # post's own
    off = dataclasses.replace(PLAIN, final_norm="off", activation="swiglu")
    assert (
        recipe(off, TrainConfig(schedule="cosine", beta2=0.999, clip=1.0))
        == "activation=swiglu, beta2=0.999, clip=1, final_norm=off, schedule=cosine"
    )
    assert recipe(dataclasses.replace(PLAIN, wrap="post", final_norm="on"), TrainConfig()) == "final_norm=on"


@settings(max_examples=40, deadline=None)
@given(
    vocab=st.sampled_from([256, 1000, 32000]),
    max_len=st.sampled_from([64, 128, 512]),
    d_ff=st.sampled_from([None, 128, 300]),
    eps=st.sampled_from([1e-5, 1e-6]),
    steps=st.integers(10, 10_000),
    lr=st.floats(1e-5, 1.0),
    warmup=st.integers(0, 9),
    seed=st.integers(0, 99),
    log_every=st.integers(1, 50),
)
def test_sizes_budgets_numerical_details_and_bookkeeping_are_no_recipe(
    vocab, max_len, d_ff, eps, steps, lr, warmup, seed, log_every
):
    model = ModelConfig.from_dict(dict(n_layers=3, d_model=32, n_heads=4, vocab_size=vocab, max_len=max_len,
                                       d_ff=d_ff, norm_eps=eps))  # fmt: skip
    train = TrainConfig(steps=steps, lr=lr, warmup=warmup, seed=seed, log_every=log_every, batch_size=8)
    assert recipe(model, train) == ""
    assert recipe(model, dataclasses.replace(train, weight_decay=0.1)) == "weight_decay=0.1"


def test_every_field_is_held_or_part_of_the_recipe():
    """A field added to a config is part of the recipe unless named as held: a new knob is never silently
    ignored by the evidence."""
    names = set(ModelConfig().flat_dict()) | set(TrainConfig().flat_dict())
    assert HELD <= names
    assert {"schedule", "beta2", "clip", "weight_decay", "activation", "position", "init", "dropout"} <= (
        names - HELD
    )


def test_a_stored_config_has_the_recipe_of_its_configs():
    model = dataclasses.replace(PLAIN, position="rope", tie_embeddings=False)
    train = TrainConfig(schedule="noam", warmup=100)
    stored = RunSpec(model, train).config_dict()
    assert recipe_of(stored) == recipe(model, train) == "position=rope, schedule=noam, tie_embeddings=false"


def test_a_hugging_face_wiring_is_its_own_recipe():
    model, _ = imported_config(str(ROOT / "lab/depthlab_lab/grids/hf/llama/config.json"))
    said = recipe(model, TrainConfig())
    assert {"activation=swiglu", "position=rope", "init=normal", "tie_embeddings=false"} <= set(
        said.split(", ")
    )


def test_a_run_of_another_recipe_is_no_evidence_and_an_unknown_recipe_no_bar(atlas):
    run = next(r for r in atlas.runs if r.recipe == "" and r.wrap == "pre")
    q = Query.of(run)
    assert distance(q, run) == 0
    assert distance(q, dataclasses.replace(run, recipe="schedule=cosine")) == math.inf
    assert distance(q, dataclasses.replace(run, recipe=None)) == 0  # an atlas written before recipes
    assert distance(dataclasses.replace(q, recipe="schedule=cosine"), run) == math.inf


def test_a_plain_question_never_rests_on_an_ablation_and_a_cosine_one_on_cosine_runs(atlas):
    """The ladder trained pre-LN at 24 layers without its final norm, and pre- and post-LN on a cosine
    schedule: none of them is evidence about a plain run, and a cosine run's evidence is cosine runs."""
    model = dataclasses.replace(PLAIN, n_layers=24, d_model=32)
    plain = nearest(atlas, Query.for_run(model, TrainConfig(lr=1e-3, steps=150)), k=20)
    assert plain and all(r.recipe == "" for _, r in plain)
    cosine = nearest(atlas, Query.for_run(model, TrainConfig(lr=1e-3, steps=150, schedule="cosine")), k=20)
    assert cosine and all(r.recipe == "schedule=cosine" for _, r in cosine)
    assert all("schedule=cosine" in r.shape() for _, r in cosine)
    off = nearest(atlas, Query.for_run(dataclasses.replace(model, final_norm="off"), TrainConfig(steps=150)))
    assert off and all(
        r.recipe == "final_norm=off" and r.source.startswith("ladder-final-norm") for _, r in off
    )


def test_an_atlas_file_without_the_recipe_column_reads_as_not_known(tmp_path, atlas):
    out = io.StringIO()
    w = csv.DictWriter(out, [c for c in COLUMNS if c != "recipe"], lineterminator="\n")
    w.writeheader()
    w.writerow({k: v for k, v in next(csv.DictReader(io.StringIO(atlas.to_csv()))).items() if k != "recipe"})
    path = tmp_path / "old.csv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(out.getvalue())
    (old,) = Atlas.load(path).runs
    assert old.recipe is None and dataclasses.replace(old, recipe=atlas.runs[0].recipe) == atlas.runs[0]


def test_the_likely_range_holds_the_lr_of_a_run_called_trains(atlas):
    """The acceptance run (post-LN 6 x 512, warmup 50, 200 steps of 16 x 32) at lr 7e-4 is called TRAINS;
    its lr lies inside the range said for P >= 0.8, and each end, given to two digits, is inward of where
    the probability crosses."""
    model = ModelConfig(n_layers=6, d_model=512, n_heads=8, wrap="post")
    train = TrainConfig(lr=7e-4, warmup=50, steps=200, batch_size=16, seq_len=32)
    a = advise(model, train, atlas, alternatives=())
    record = load_record()
    lo, hi = likely_range(a.limit, model, train, atlas, record)
    assert float(f"{lo:.2g}") == lo and float(f"{hi:.2g}") == hi
    for lr in (lo, hi, math.sqrt(lo * hi)):
        assert (
            p_trains(record["predictor"], a.limit, Query.for_run(model, train, lr), atlas).p_trains >= LIKELY
        )
    for lr in (hi * 1.02, lo / 1.02):  # past an end by more than its rounding and the bisection's 0.5%
        assert (
            p_trains(record["predictor"], a.limit, Query.for_run(model, train, lr), atlas).p_trains < LIKELY
        )
    if a.prediction.p_trains >= LIKELY:
        assert lo <= train.lr <= hi and a.likely == (lo, hi)


def test_advise_takes_the_recipe_as_depthlab_train_does_and_its_evidence_sets_the_same(capsys):
    from depthlab.cli import main

    base = ["advise", "--layers", "24", "--d-model", "32", "--heads", "4", "--lr", "1e-3", "--steps", "150",
            "--alternatives", ""]  # fmt: skip
    assert main([*base, "--schedule", "cosine", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recipe"] == "schedule=cosine" and data["evidence"]
    assert all(r["recipe"] == "schedule=cosine" for r in data["evidence"])
    assert main([*base, "--clip", "1", "--weight-decay", "0.1", "--optimizer", "adamw"]) == 0
    screen = capsys.readouterr().out.splitlines()
    assert any("clip=1, optimizer=adamw, weight_decay=0.1" in line for line in screen[:2])
    assert (
        "evidence: no measured run of pre that set the same (the call rests on the probe's limit alone)"
        in screen
    )
    assert main([*base, "--json", "-"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["recipe"] == "" and all(r["recipe"] == "" for r in plain["evidence"])
