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
from depthlab.advise.advice import LIKELY, advise, likely_range, rewired
from depthlab.doctor.atlas import COLUMNS, Atlas
from depthlab.doctor.predict import Query, distance, nearest, p_trains
from depthlab.doctor.recipe import HELD, UNREADABLE, recipe, recipe_of
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


# Every field the recipe reads, with a stack that reads it and a value away from its default. A field added
# to a config must be named here or in HELD: a new knob is never silently left out of the evidence.
READ = {
    "activation": ({}, "swiglu"), "attn_softcap": ({}, 50.0), "dropout": ({}, 0.1), "embed_norm": ({}, True),
    "embed_scale": ({}, False), "gain_offset": ({"norm": "rmsnorm"}, True), "head_scale": ({}, True),
    "init": ({}, "normal"), "logit_softcap": ({}, 30.0), "position": ({}, "rope"), "qk_norm": ({}, True),
    "sliding_window": ({}, 8), "tie_embeddings": ({}, False), "dyt_alpha": ({"norm": "dyt"}, 1.0),
    "mix_ratio": ({"wrap": "mix"}, 0.5), "base_width": ({"param": "mup"}, 32),
    "base_depth": ({"param": "completep"}, 3), "streams": ({"wrap": "hc"}, 2),
    "sinkhorn_iters": ({"wrap": "mhc"}, 5), "sinkhorn_tol": ({"wrap": "mhc"}, 0.01),
    "attnres_blocks": ({"wrap": "attnres_block"}, 2), "dwa_dilation": ({"wrap": "denseformer"}, 2),
    "dwa_period": ({"wrap": "denseformer"}, 2),
}  # fmt: skip
READ_TRAIN = {"beta1": 0.8, "beta2": 0.999, "clip": 1.0, "schedule": "cosine", "task": "copy", "z_loss": 1e-4}


def test_every_field_is_held_or_part_of_the_recipe():
    """A field away from its default, on a stack that reads it, is named in the recipe; and the table above
    names every field HELD does not (``optimizer``, ``weight_decay`` and ``independent_wd`` read together)."""
    together = {"optimizer", "weight_decay", "independent_wd"}
    assert set(ModelConfig().flat_dict()) - HELD == set(READ)
    assert set(TrainConfig().flat_dict()) - HELD == set(READ_TRAIN) | together
    for name, (stack, value) in READ.items():
        base = ModelConfig.from_dict(dict(n_layers=6, d_model=64, n_heads=4, **stack))
        model = ModelConfig.from_dict({**base.flat_dict(), name: value})
        assert name in recipe(model, TrainConfig(seq_len=16)) and name not in recipe(
            base, TrainConfig(seq_len=16)
        )
    for name, value in READ_TRAIN.items():
        assert recipe(PLAIN, TrainConfig(**{name: value})).startswith(f"{name}=")
    adamw = TrainConfig(optimizer="adamw", weight_decay=0.1, independent_wd=True)
    assert recipe(PLAIN, adamw) == "independent_wd=true, optimizer=adamw, weight_decay=0.1"


def test_a_setting_that_changes_nothing_is_no_recipe():
    assert recipe(PLAIN, TrainConfig(schedule="constant")) == ""  # the linear schedule without warmup
    assert recipe(PLAIN, TrainConfig(optimizer="adamw")) == ""  # AdamW without weight decay is Adam
    every = ModelConfig.from_dict({**PLAIN.flat_dict(), "biases": ["qkv", "out", "ffn"]})
    assert recipe(every, TrainConfig()) == ""  # the biases bias=true gives
    assert (
        recipe(ModelConfig.from_dict({**PLAIN.flat_dict(), "biases": ["qkv"]}), TrainConfig()) == "biases=qkv"
    )
    assert recipe(dataclasses.replace(PLAIN, bias=False), TrainConfig()) == "bias=false"
    mup = dataclasses.replace(PLAIN, param="mup", base_width=PLAIN.d_model)
    assert recipe(mup, TrainConfig()) == ""
    window = ModelConfig.from_dict({**PLAIN.flat_dict(), "sliding_window": 4096})
    assert recipe(window, TrainConfig(seq_len=64)) == ""  # no shorter than the sequence: no window
    assert recipe(PLAIN, TrainConfig(beta2=0.9999999)) == "beta2=0.9999999"  # no digit lost


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
    written = tmp_path / "again.csv.gz"  # written again, unknown stays unknown (not "", every default)
    with gzip.open(written, "wt", encoding="utf-8") as f:
        f.write(Atlas((old, atlas.runs[0])).to_csv())
    assert [r.recipe for r in Atlas.load(written).runs] == [None, ""]


def test_a_stored_config_this_version_cannot_read_is_evidence_for_no_question(atlas):
    run = next(r for r in atlas.runs if r.recipe == "")
    stored = RunSpec(PLAIN, TrainConfig()).config_dict()
    stored["model"]["no_such_field"] = 1
    assert recipe_of(stored) == UNREADABLE
    assert distance(Query.of(run), dataclasses.replace(run, recipe=UNREADABLE)) == math.inf


@pytest.mark.parametrize("lr", [7e-4, 7.3e-4])
def test_the_likely_range_holds_the_lr_of_a_run_called_trains(atlas, lr):
    """The acceptance run (post-LN 6 x 512, warmup 50, 200 steps of 16 x 32) is called TRAINS at lr 7e-4
    and at 7.3e-4, just inside where P(trains) crosses 0.8: its lr lies inside the range said for
    P >= 0.8, every lr inside is likely, and past an end by more than the bisection's 0.5% it is not."""
    model = ModelConfig(n_layers=6, d_model=512, n_heads=8, wrap="post")
    train = TrainConfig(lr=lr, warmup=50, steps=200, batch_size=16, seq_len=32)
    a = advise(model, train, atlas, alternatives=())
    record = load_record()

    def p(at: float) -> float:
        return p_trains(record["predictor"], a.limit, Query.for_run(model, train, at), atlas).p_trains

    lo, hi = a.likely
    assert a.prediction.p_trains >= LIKELY and lo <= lr <= hi
    assert a.likely == likely_range(a.limit, model, train, atlas, record)
    assert all(p(x) >= LIKELY for x in (lo, hi, math.sqrt(lo * hi), lr))
    assert p(hi * 1.02) < LIKELY and p(lo / 1.02) < LIKELY
    assert float(f"{lo:.2g}") == lo  # an end the run's lr did not move is given to two digits


def test_an_explicit_final_norm_that_restates_the_wrapping_s_own_leaves_the_alternatives_plain(atlas):
    model = ModelConfig(n_layers=6, d_model=128, n_heads=4, wrap="pre")
    train = TrainConfig(lr=3e-3, warmup=50, steps=200)
    plain = {o.wrap: o.p_trains for o in advise(model, train, atlas, alternatives=("post",)).options}
    said = advise(dataclasses.replace(model, final_norm="on"), train, atlas, alternatives=("post",))
    assert {o.wrap: o.p_trains for o in said.options} == plain
    assert rewired(dataclasses.replace(model, final_norm="off"), "post").final_norm == "off"  # a choice: kept


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
    assert main([*base, "--schedule", "cosine"]) == 0
    screen = capsys.readouterr().out.splitlines()
    assert screen[0].endswith(
        "; schedule=cosine"
    ) and "evidence: the 5 nearest measured runs of pre that set the same" in "\n".join(screen)
    rows = [line for line in screen if line.startswith("  pre 24L")]
    assert rows and not any("schedule" in line for line in rows)  # the first line names it once


def test_the_probe_s_call_without_measured_runs_of_its_recipe_says_so(capsys):
    from depthlab.cli import main

    assert main(["probe", "--layers", "3", "--d-model", "32", "--heads", "4", "--activation", "swiglu",
                 "--lr", "1e-3"]) == 0  # fmt: skip
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("expected at"))
    assert "from the limit above alone: no measured run of this stack sets the same" in line
    assert "not confident: no measured run of this stack sets what this run sets (activation=swiglu)" in line


def test_the_probe_makes_advise_s_call_on_a_run_of_a_recipe(capsys):
    """probe --lr with --schedule cosine names the recipe and gives advise's probability (and its JSON
    carries the recipe); a recipe flag set away from its default is refused, before any probe, without
    --lr, where the probe makes no call (an encoder-decoder), for a value no run has, and for noam, whose
    --lr is no peak rate."""
    from depthlab.cli import main

    shape = ["--layers", "24", "--d-model", "32", "--heads", "4", "--lr", "1e-3", "--steps", "150"]
    assert main(["probe", *shape, "--schedule", "cosine"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("expected at"))
    assert main(["advise", *shape, "--schedule", "cosine", "--alternatives", "", "--json", "-"]) == 0
    p = json.loads(capsys.readouterr().out)["p_trains"]
    assert line.startswith("expected at 150 steps (schedule=cosine): ") and f"(P(trains) = {p:.2f}," in line
    assert main(["probe", "--layers", "2", "--d-model", "32", "--heads", "4", "--schedule", "cosine"]) == 2
    assert capsys.readouterr().err.strip().endswith("--schedule needs --lr: the run's optimiser and schedule weigh "
                                                    "only in the call on a run at a learning rate")  # fmt: skip
    encdec = ["probe", "--arch", "encdec", "--layers", "2", "--d-model", "32", "--heads", "4", "--lr", "1e-3"]
    for argv in ([*encdec, "--schedule", "cosine"], ["probe", *shape, "--beta2", "2"],
                 ["probe", *shape, "--schedule", "noam", "--warmup", "100"]):  # fmt: skip
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1  # one line, and no probe ran
    assert "(here 0.018 x lr); ask about that peak with --schedule linear" in err  # (32 x 100)^-0.5
    assert main(["probe", *shape, "--schedule", "cosine", "--json", "-"]) == 0
    expected = json.loads(capsys.readouterr().out)["config"]["probe"]["expected"]
    assert expected["recipe"] == "schedule=cosine" and expected["p_trains"] == pytest.approx(p, abs=5e-3)


def test_a_stack_with_no_likely_lr_says_so_on_the_safe_lr_line(atlas):
    """48 post-LN layers at warmup 2000: no lr is likely (P >= 0.8), said on the safe-lr line in few words;
    the calibrated-range line names each quantity with its range."""
    from depthlab.advise.screen import render

    model = ModelConfig(n_layers=48, d_model=64, n_heads=4, wrap="post")
    a = advise(model, TrainConfig(lr=1e-3, warmup=2000, steps=20_000), atlas, alternatives=())
    screen = render(a, LIKELY).splitlines()
    assert a.likely is None and a.evidence
    assert any(
        line.startswith("safe lr (post, warmup 2000)") and line.endswith("; P >= 0.8 at no lr")
        for line in screen
    )
    line = next(line for line in screen if line.startswith("outside the limit's calibrated range:"))
    assert "depth 48 (calibrated 2-24)" in line and "warmup 2000 (calibrated 0-300)" in line
