"""ModelConfig's family options in their own group: what was written before still loads, keys the same.

tests/fixtures/legacy_store/ was written by depthlab before the options were grouped (its README.md says
how): a study store of two grids, the keys and hashes that code computed, the outcome tables it printed,
and a run folder. Each test works on a copy; the committed files are never written.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
import typing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthlab import ConfigError, FamilyOptions, ModelConfig, TrainConfig
from depthlab.cli import main
from depthlab.study.grid import StudyConfig, run_hash

FIXTURE = Path(__file__).parent / "fixtures" / "legacy_store"
GRIDS = ("fixture", "fixture-family")
# the run folder's flags, as its README.md gives them
RUN_FLAGS = "--layers 2 --d-model 16 --heads 2 --wrap pre --steps 6 --batch-size 4 --seq-len 16 --log-every 2"
FAMILY_NAMES = tuple(f.name for f in dataclasses.fields(FamilyOptions))

pytestmark = pytest.mark.usefixtures("one_thread")


def _stored_runs() -> list[tuple[str, dict]]:
    with sqlite3.connect(FIXTURE / "store.sqlite") as conn:
        rows = conn.execute("SELECT config_hash, config_json FROM runs ORDER BY id").fetchall()
    return [(key, json.loads(js)) for key, js in rows]


def _legacy_model() -> dict:
    """The model section of the run folder's config.json: every field flat, as depthlab wrote it then."""
    return json.loads((FIXTURE / "run" / "config.json").read_text())["model"]


# -- the store ---------------------------------------------------------------------------------------


def _as_stored(flat: dict, stored: dict) -> dict:
    """``flat`` without the fields added since ``stored`` was written, each of which must hold its
    default (so the key leaves it out: a field added later changes no stored key)."""
    defaults = ModelConfig().flat_dict()
    added = set(flat) - set(stored)
    assert all(flat[k] == defaults[k] for k in added), {k: flat[k] for k in added}
    return {k: v for k, v in flat.items() if k in stored}


def _as_floats(section: dict, cls) -> dict:
    """``section`` with every int in a float field written as a float (the spelling the code writes)."""
    floaty = {k for k, h in typing.get_type_hints(cls).items() if h is float or float in typing.get_args(h)}
    return {k: float(v) if k in floaty and type(v) is int else v for k, v in section.items()}


def test_every_stored_config_loads_and_keeps_its_hashes():
    """The split changes no key. Canonical keys (0 == 0.0) change only the key of a run whose stored
    config spelled a float as an int (the fixture's four runs written with ``weight_decay: 0``): that
    key is the one of the same config spelled with floats, and the store re-keys such rows once."""
    hashes = json.loads((FIXTURE / "hashes.json").read_text())["runs"]
    runs = _stored_runs()
    assert len(runs) == len(hashes) == 8
    assert any(config["model"]["d_head"] is not None for _, config in runs)  # family options are in there
    rekeyed = 0
    for (key, config), want in zip(runs, hashes):
        model, train = ModelConfig.from_dict(config["model"]), TrainConfig.from_dict(config["train"])
        assert key == want["config_hash"]
        assert model.config_hash() == want["model_hash"]
        assert _as_stored(model.flat_dict(), config["model"]) == config["model"]  # the old flat form
        again = ModelConfig.from_json(model.to_json())  # through the new form and back
        assert again == model and again.config_hash() == want["model_hash"]
        floats = TrainConfig.from_dict(_as_floats(config["train"], TrainConfig))
        assert train.config_hash() == floats.config_hash() and run_hash(model, train) == run_hash(
            model, floats
        )
        if json.dumps(floats.to_dict(), sort_keys=True) == json.dumps(config["train"], sort_keys=True):
            assert (run_hash(model, train), train.config_hash()) == (key, want["train_hash"])
        else:
            rekeyed += 1
            assert run_hash(model, train) != key
    assert rekeyed == 4


def test_every_stored_grid_keeps_its_key():
    with sqlite3.connect(FIXTURE / "store.sqlite") as conn:
        rows = conn.execute("SELECT name, config_hash, config_json FROM studies ORDER BY id").fetchall()
    assert sorted(name for name, _, _ in rows) == sorted(GRIDS)
    for name, key, js in rows:
        study = StudyConfig.from_dict(json.loads(js))
        assert study.config_hash(study.expand()) == key
        from_file = StudyConfig.from_yaml(str(FIXTURE / f"grid-{name}.yaml"))
        assert from_file.config_hash() == key  # the store wrote its axes sorted: the same runs, reordered
        assert sorted(s.hash for s in from_file.expand()) == sorted(s.hash for s in study.expand())


@pytest.mark.parametrize("name", GRIDS)
def test_resuming_a_stored_study_runs_nothing_and_prints_the_same_table(name, tmp_path, capsys):
    shutil.copy(FIXTURE / "store.sqlite", tmp_path / "store.sqlite")
    db = str(tmp_path / "store.sqlite")
    argv = [
        "study",
        "--grid",
        str(FIXTURE / f"grid-{name}.yaml"),
        "--db",
        db,
        "--no-report",
        "--workers",
        "1",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out.replace(db, "STORE")
    assert "0 to run" in out and "(nothing new)" in out
    table = (FIXTURE / f"outcome-{name}.txt").read_text()
    assert table.strip() and table.strip() in out


# -- the run folder ------------------------------------------------------------------------------------


def test_the_run_folders_config_loads_as_the_flags_build_it():
    stored = json.loads((FIXTURE / "run" / "config.json").read_text())
    model = ModelConfig.from_dict(stored["model"])
    assert model == ModelConfig(n_layers=2, d_model=16, n_heads=2, wrap="pre")
    assert TrainConfig.from_dict(stored["train"]).steps == 6


def test_train_resume_accepts_the_old_run_folder(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE / "run", run)
    (run / "result.json").unlink()  # unfinished: resume reads the old config, loads the checkpoint, ends
    assert main(["train", *RUN_FLAGS.split(), "--out", str(run), "--resume", "--quiet"]) == 0
    assert "wrote" in capsys.readouterr().out
    written = json.loads((run / "config.json").read_text())["model"]
    assert written["family"] == FamilyOptions().to_dict() and "d_head" not in written  # the new form
    assert ModelConfig.from_dict(written) == ModelConfig.from_dict(_legacy_model())


def test_train_resume_names_a_changed_family_option_flat(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE / "run", run)
    argv = [
        "train",
        *RUN_FLAGS.split(),
        "--init",
        "normal",
        "--init-std",
        "0.05",
        "--out",
        str(run),
        "--resume",
    ]
    assert main([*argv, "--quiet"]) == 2
    assert "model.init_std 0.02 -> 0.05" in capsys.readouterr().err
    assert (run / "config.json").read_bytes() == (FIXTURE / "run" / "config.json").read_bytes()


# -- the two forms ------------------------------------------------------------------------------------


def test_the_top_level_stays_small():
    top = [f.name for f in dataclasses.fields(ModelConfig)]
    assert len(top) <= 31 and "family" in top and "topology" in top  # two groups hold the rest
    assert not set(top) & set(FAMILY_NAMES)
    added = {"param", "base_width", "base_depth"}  # the parametrization, added since the fixture was written
    groups = {"family", "topology"}  # the residual topologies' options: one nested group, added since too
    assert set(top) - groups - added | set(FAMILY_NAMES) == set(_legacy_model())  # nothing lost


def test_the_new_form_round_trips_exactly():
    cfg = ModelConfig(
        n_layers=2,
        d_model=16,
        n_heads=2,
        position="rope",
        norm="rmsnorm",
        family=FamilyOptions(d_head=8, rope_dims=4, sliding_window=8, gain_offset=True, biases=("qkv",)),
    )
    d = json.loads(cfg.to_json())
    assert d["family"]["biases"] == ["qkv"] and "d_head" not in d
    back = ModelConfig.from_json(cfg.to_json())
    assert back == cfg and back.to_dict() == d and back.config_hash() == cfg.config_hash()
    assert back.family.biases == ("qkv",)  # a tuple again, as constructed


def test_a_field_given_flat_and_nested_is_refused_naming_both():
    with pytest.raises(ConfigError) as e:
        ModelConfig.from_dict({"d_head": 8, "family": {"d_head": 4}})
    assert "d_head" in str(e.value) and "family.d_head" in str(e.value)
    mixed = ModelConfig.from_dict({"d_head": 8, "family": {"rope_dims": 4}, "position": "rope"})
    assert (mixed.family.d_head, mixed.family.rope_dims) == (8, 4)  # different fields merge


def test_family_options_are_named_flat_in_replace_and_checked_with_the_model():
    base = ModelConfig(n_layers=2, d_model=16, n_heads=2)
    assert base.replace(d_head=8) == ModelConfig(
        n_layers=2, d_model=16, n_heads=2, family=FamilyOptions(d_head=8)
    )
    assert base.replace(d_head=8).value_of("d_head") == 8 and base.value_of("n_layers") == 2
    with pytest.raises(ConfigError, match="rope_dims"):
        base.replace(rope_dims=4)  # needs position=rope: the model's check, on the combination
    with pytest.raises(ConfigError, match="init_std"):
        FamilyOptions(init_std=0.0)  # the group's own check, alone
    with pytest.raises(ConfigError, match="family"):
        ModelConfig(family={"d_head": 8})


def test_an_unknown_field_lists_the_flat_names():
    with pytest.raises(ConfigError) as e:
        ModelConfig.from_dict({"d_heads": 8})
    assert "d_head" in e.value.allowed and "n_layers" in e.value.allowed
    with pytest.raises(ConfigError, match="a field of FamilyOptions"):
        ModelConfig.from_dict({"family": {"n_layers": 2}})


@st.composite
def family_models(draw) -> tuple[dict, dict]:
    """(core fields, family options): a valid model with random family options, each drawn only where
    the model gives it a meaning."""
    core = {
        "arch": draw(st.sampled_from(["decoder", "encoder", "encdec"])),
        "position": draw(st.sampled_from(["rope", "learned", "relative"])),
        "norm": draw(st.sampled_from(["layernorm", "rmsnorm"])),
        "n_heads": 2,
        "d_model": 16,
        "bias": draw(st.booleans()),
    }
    maybe = lambda s: draw(st.one_of(st.none(), s))  # noqa: E731
    fam = {"d_head": maybe(st.sampled_from([4, 8, 12]))}
    head = fam["d_head"] or 8
    if core["position"] == "rope":
        fam["rope_dims"] = maybe(st.integers(1, head // 2).map(lambda n: 2 * n))
    if core["arch"] == "decoder":
        fam["sliding_window"] = maybe(st.integers(1, 64))
        if fam["sliding_window"] is not None:
            fam["global_every"] = maybe(st.integers(1, 6))
            if core["position"] == "rope":
                fam["rope_local_base"] = maybe(st.floats(2.0, 1e6))
    if core["arch"] == "encdec":
        fam["side_embeddings"] = draw(st.booleans())
    if core["norm"] == "rmsnorm":
        fam["gain_offset"] = draw(st.booleans())
    if core["bias"]:
        fam["biases"] = maybe(st.sets(st.sampled_from(["qkv", "out", "ffn", "head"])).map(sorted))
    buckets = draw(st.integers(4, 64))
    fam.update(
        rel_buckets=buckets,
        rel_max_distance=draw(st.integers(buckets // 2 + 1, 512)),
        attn_scale=maybe(st.floats(0.01, 4.0)),
        attn_softcap=maybe(st.floats(1.0, 100.0)),
        logit_softcap=maybe(st.floats(1.0, 100.0)),
        qk_norm_scope=draw(st.sampled_from(["head", "projection"])),
        norm_eps=draw(st.floats(1e-12, 1e-3)),
        embed_norm=draw(st.booleans()),
        d_embed=maybe(st.integers(1, 32)),
        head_scale=draw(st.booleans()),
        init_std=draw(st.floats(1e-4, 0.5)),
    )
    return core, fam


@settings(max_examples=150, deadline=None)
@given(family_models())
def test_old_flat_json_and_new_nested_json_load_to_the_same_config(drawn):
    core, fam = drawn
    old = {**_legacy_model(), **core, **fam}  # every field flat, as JSON was written before the split
    top = {k: v for k, v in old.items() if k not in FAMILY_NAMES}
    new = {**top, "family": fam}  # the new form (family options left out take their defaults)
    a, b = ModelConfig.from_json(json.dumps(old)), ModelConfig.from_json(json.dumps(new))
    assert a == b and a.config_hash() == b.config_hash()
    assert _as_stored(a.flat_dict(), old) == old  # the old form back, field for field
    # the key as the code before the split took it: the flat fields, a renamed one under its first name,
    # a field added since the first release left out at its default (the run folder holds defaults there)
    defaults = _legacy_model()
    first, renamed = ModelConfig.FIRST_FIELDS, ModelConfig.RENAMED
    want = {renamed.get(k, k): v for k, v in old.items() if k in first or k in renamed or v != defaults[k]}
    assert a.key_dict() == want
    assert ModelConfig.from_json(a.to_json()) == a
