"""One configuration, one key: numbers of one value and a default written or omitted give one run key;
a field given under two spellings is refused; a store written before keys were canonical resumes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_study_fakes import fake_task, fill_store

from depthlab import ConfigError
from depthlab.cli import main
from depthlab.config import ModelConfig, TrainConfig
from depthlab.study import Store, StudyConfig, run_study
from depthlab.study.grid import run_hash

FIXTURE = Path(__file__).parent / "fixtures" / "legacy_store"
BASE = {"model": {"d_model": 16, "n_heads": 2, "n_layers": 2}, "train": {"steps": 4, "log_every": 2}}


@pytest.mark.parametrize(
    "cls,field,spellings",
    [
        (TrainConfig, "clip", [0, 0.0, -0.0]),
        (TrainConfig, "lr", [1, 1.0]),
        (TrainConfig, "spike_factor", [3, 3.0]),
        (TrainConfig, "weight_decay", [0, 0.0, -0.0]),
        (ModelConfig, "dropout", [0, 0.0, -0.0]),
        (ModelConfig, "logit_softcap", [30, 30.0]),
    ],
)
def test_numbers_of_one_value_give_one_key(cls, field, spellings):
    keys = {cls.from_dict({field: v}).config_hash() for v in spellings}
    assert len(keys) == 1
    assert cls.from_dict({field: spellings[0]}).key_dict()[field] == float(spellings[0])


def test_int_fields_keep_their_ints_and_defaults_written_or_omitted_hash_alike():
    key = ModelConfig(n_layers=6).key_dict()
    assert key["n_layers"] == 6 and isinstance(key["n_layers"], int)
    assert TrainConfig(weight_decay=0).config_hash() == TrainConfig().config_hash()
    assert (
        ModelConfig.from_dict({"init_std": 0.02, "d_head": None}).config_hash() == ModelConfig().config_hash()
    )


@pytest.mark.parametrize("axis,values", [("clip", [0, 0.0]), ("lr", [1, 1.0]), ("weight_decay", [0.0, -0.0])])
def test_an_axis_of_one_value_spelled_twice_is_one_run(axis, values):
    study = StudyConfig.from_dict({**BASE, "name": "s", "axes": {axis: values}})
    assert len(study.expand()) == 1


def test_a_study_writing_the_default_reruns_nothing_another_ran_without_it(tmp_path):
    db = str(tmp_path / "s.sqlite")
    fill_store(db, StudyConfig.from_dict({**BASE, "name": "a", "axes": {"wrap": ["pre", "post"]}}))
    written = {**BASE, "train": {**BASE["train"], "weight_decay": 0, "clip": 0}}
    study = StudyConfig.from_dict({**written, "name": "b", "axes": {"wrap": ["pre", "post"]}})
    res = run_study(study, db=db, task=fake_task, progress=False, out=open(tmp_path / "log", "w"))
    assert (res.total, res.skipped, res.ran) == (2, 2, 0)


@pytest.mark.parametrize(
    "model",
    [
        {"checkpoint": True, "activation_checkpointing": False},
        {"activation_checkpointing": False, "checkpoint": True},
    ],
)
def test_a_field_under_two_names_is_refused_naming_both(model):
    with pytest.raises(
        ConfigError, match="checkpoint.*activation_checkpointing|activation_checkpointing.*checkpoint"
    ):
        ModelConfig.from_dict(model)
    with pytest.raises(ConfigError, match="both set"):
        StudyConfig.from_dict({"name": "s", "model": model})


@pytest.mark.parametrize(
    "mapping",
    [
        {"wrap": "pre", "model.wrap": "post"},
        {"lr": 1e-3, "train.lr": 1e-2},
        {"checkpoint": True, "model.activation_checkpointing": False},
    ],
)
def test_an_axis_mapping_setting_one_field_twice_is_refused(mapping):
    grid = {**BASE, "name": "s", "axes": {"wrapping": [mapping]}}
    with pytest.raises(ConfigError, match="both set") as e:
        StudyConfig.from_dict(grid)
    first, second = list(mapping)
    assert repr(first) in str(e.value) and repr(second) in str(e.value)


def test_two_spellings_on_the_command_line_exit_2_in_one_line(tmp_path, capsys):
    (tmp_path / "g.yaml").write_text(
        "name: s\nmodel: {d_model: 16, n_heads: 2}\naxes:\n  w:\n    - {wrap: pre, model.wrap: post}\n"
    )
    code = main(
        ["study", "--grid", str(tmp_path / "g.yaml"), "--db", str(tmp_path / "s.sqlite"), "--dry-run"]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "'wrap'" in err and "'model.wrap'" in err
    assert not (tmp_path / "s.sqlite").exists()


def _legacy(tmp_path) -> Path:
    where = tmp_path / "legacy"
    shutil.copytree(FIXTURE, where)
    return where


def _outcome(text: str, db: str) -> str:
    return text[text.index("outcome per cell") :].replace(db, "STORE").strip()


@pytest.mark.parametrize("grid", ["grid-fixture.yaml", "grid-fixture-family.yaml"])
def test_a_store_written_before_canonical_keys_resumes_with_nothing_rerun(tmp_path, capsys, grid):
    where = _legacy(tmp_path)
    db = str(where / "store.sqlite")
    code = main(["study", "--grid", str(where / grid), "--db", db, "--workers", "1", "--no-report"])
    out = capsys.readouterr().out
    assert code == 0 and "ran 0 of 4 runs" in out
    expected = (where / grid.replace("grid-", "outcome-").replace(".yaml", ".txt")).read_text()
    assert _outcome(out, db) == expected.strip()
    with Store(db) as s:
        rows = s.conn.execute("SELECT config_hash, config_json, status FROM runs").fetchall()
    assert len(rows) == 8 and {r["status"] for r in rows} == {"done"}
    for r in rows:  # every key is now the canonical key of the config it stored
        cfg = json.loads(r["config_json"])
        m, t = ModelConfig.from_dict(cfg["model"]), TrainConfig.from_dict(cfg["train"])
        assert r["config_hash"] == run_hash(m, t)


def test_a_legacy_store_shares_its_runs_with_a_study_that_omits_the_default(tmp_path):
    where = _legacy(tmp_path)
    grid = (where / "grid-fixture.yaml").read_text().replace(", weight_decay: 0}", "}")
    (where / "omitted.yaml").write_text(grid.replace("name: fixture", "name: omitted"))
    study = StudyConfig.from_yaml(str(where / "omitted.yaml"))
    res = run_study(
        study, db=str(where / "store.sqlite"), task=fake_task, progress=False, out=open(tmp_path / "log", "w")
    )
    assert (res.total, res.skipped, res.ran) == (4, 4, 0)


def test_rekeying_two_stored_runs_of_one_configuration_keeps_both(tmp_path):
    """A pre-canonical store that ran ``clip: [0, 0.0]`` holds two rows of one configuration: the
    finished one takes the canonical key, the other keeps its own, and both stay in their study."""
    from depthlab.study import schema
    from depthlab.study.rekey import rekey_runs

    where = _legacy(tmp_path)
    db = str(where / "store.sqlite")
    with Store(db) as s:
        row = s.conn.execute("SELECT * FROM runs WHERE id = 1").fetchone()
        cfg = json.loads(row["config_json"])
        cfg["train"]["weight_decay"] = 0.0
        s.conn.execute(
            "INSERT INTO runs (config_hash, config_json, queued_at, status) VALUES ('legacyfloat', ?, 0, 'queued')",
            (json.dumps(cfg),),
        )
        before = s.conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        s.conn.execute("BEGIN")
        rekey_runs(s.conn)
        s.conn.execute("COMMIT")
        keys = dict(s.conn.execute("SELECT id, config_hash FROM runs").fetchall())
        assert s.conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == before
        assert keys[1] == row["config_hash"]  # the finished run holds the canonical key
        assert len(set(keys.values())) == len(keys)
        assert s.version == schema.SCHEMA_VERSION
