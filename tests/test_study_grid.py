"""Grids: YAML and dict grids expand into validated runs; mistakes are refused before anything runs."""

from __future__ import annotations

import pytest

from depthlab import ConfigError, InputError, ModelConfig, TrainConfig
from depthlab.study import PRESETS, StudyConfig, preset, run_hash


def test_axes_cross_product_in_order_first_axis_slowest():
    s = StudyConfig.from_dict({"name": "g", "axes": {"wrap": ["post", "pre"], "n_layers": [2, 4, 6]}})
    runs = s.expand()
    assert [(r.model.wrap, r.model.n_layers) for r in runs] == [
        ("post", 2),
        ("post", 4),
        ("post", 6),
        ("pre", 2),
        ("pre", 4),
        ("pre", 6),
    ]
    assert runs[0].label == "wrap=post n_layers=2"


def test_base_sections_apply_and_axes_override_them():
    s = StudyConfig.from_dict(
        {
            "name": "g",
            "model": {"d_model": 32, "n_layers": 3},
            "train": {"lr": 0.01},
            "axes": {"seed": [0, 1]},
        }
    )
    a, b = s.expand()
    assert a.model == b.model == ModelConfig(d_model=32, n_layers=3)
    assert (a.train.seed, b.train.seed, a.train.lr) == (0, 1, 0.01)
    assert a.hash != b.hash and a.hash == run_hash(a.model, a.train)


def test_mapping_axis_sets_fields_together():
    s = StudyConfig.from_dict(
        {"name": "g", "axes": {"variant": [{"wrap": "post"}, {"wrap": "pre", "residual": ["ffn", "cross"]}]}}
    )
    post, no_skip = s.expand()
    assert post.model.residual == ("attn", "cross", "ffn")
    assert no_skip.model.wrap == "pre" and no_skip.model.residual == ("ffn", "cross")
    assert no_skip.label == "wrap=pre residual=ffn+cross"


def test_yaml_grid_with_yaml11_floats_and_prefixed_fields(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("model:\n  d_model: 32\naxes:\n  train.lr: [1e-3, 3e-3]\n  model.n_layers: [2]\n")
    s = StudyConfig.from_yaml(str(path))
    assert s.name == "mine"  # the file's stem
    assert [r.train.lr for r in s.expand()] == [1e-3, 3e-3]  # "1e-3" is a string to PyYAML


def test_round_trip_and_hash_are_stable():
    s = preset("default")
    again = StudyConfig.from_dict(s.to_dict())
    assert again == s and again.config_hash() == s.config_hash()
    assert [r.hash for r in again.expand()] == [r.hash for r in s.expand()]


def test_duplicate_combinations_are_dropped():
    s = StudyConfig.from_dict({"name": "g", "axes": {"wrap": ["pre", "pre"], "seed": [0]}})
    assert len(s.expand()) == 1


@pytest.mark.parametrize(
    "grid, field",
    [
        ({"axes": {"wrapp": ["post"]}}, "axes.wrapp"),  # unknown axis field
        ({"axes": {"wrap": ["post", "prenorm"]}}, "axes.wrap"),  # unknown value
        ({"axes": {"n_layers": [2, "six"]}}, "axes.n_layers"),  # wrong type
        ({"axes": {"lr": ["fast"]}}, "axes.lr"),
        ({"axes": {"n_layers": 4}}, "axes.n_layers"),  # not a list
        ({"axes": {"n_layers": []}}, "axes.n_layers"),
        ({"model": {"d_modle": 32}}, "model.d_modle"),  # typo in a base section
        ({"train": {"lr": -1.0}}, "train.lr"),
        ({"axes": {"variant": [{"wrap": "pre", "residul": []}]}}, "axes.variant.residul"),
        ({"axes": {"variant": [{"wrap": "prenorm"}]}}, "axes.variant.wrap"),  # in one of an axis's mappings
        ({"axis": {"wrap": ["pre"]}}, "axis"),  # unknown top-level key
        ({"train": {"seq_len": 512}, "model": {"max_len": 64}}, "train.seq_len"),
        ({"axes": {"d_model": [30]}}, "axes.d_model"),  # not a multiple of n_heads
        ({"model": {"d_head": 0}}, "model.d_head"),  # a family option, named flat as in the grid
        ({"axes": {"sliding_window": [4]}, "model": {"arch": "encoder"}}, "axes.sliding_window"),
        ({"model": {"n_heads": 3}}, "d_model"),  # no key set d_model: its default is named as the field
    ],
)
def test_bad_grids_name_the_key(grid, field):
    """The error names the grid key that set the bad value (what the user typed), else the field."""
    with pytest.raises(ConfigError) as e:
        StudyConfig.from_dict({"name": "bad", **grid})
    assert e.value.field == field
    assert field in str(e.value)


@pytest.mark.parametrize(
    "grid, message",
    [
        # a misspelt field in one of an axis's mappings: the key as typed, with the value it was given
        ({"axes": {"variant": [{"wrap": "pre"}, {"wrp": "post"}]}}, "axes.variant.wrp='post'"),
        ({"axis": {"wrap": ["pre"]}}, "did you mean 'axes'?"),  # the nearest name is suggested
        ({"model": {"d_modle": 32}}, "did you mean 'd_model'?"),
        ({"axes": {"n_layer": [2, 4]}}, "did you mean 'n_layers'?"),
        ({"axes": {"variant": [{"wrp": "post"}]}}, "did you mean 'wrap'?"),
        ({"model": {"lr": 0.01}}, "lr is a train field"),  # a field under the other section
        ({"train": {"n_layers": 4}}, "n_layers is a model field"),
    ],
)
def test_a_misspelt_key_is_named_as_typed_with_the_nearest_name(grid, message):
    with pytest.raises(ConfigError) as e:
        StudyConfig.from_dict({"name": "bad", **grid})
    assert message in str(e.value)


def test_an_unknown_key_with_no_near_name_suggests_none():
    with pytest.raises(ConfigError) as e:
        StudyConfig.from_dict({"name": "bad", "axes": {"zzzzzz": [1]}})
    assert "did you mean" not in str(e.value)


@pytest.mark.parametrize(
    "grid, field, combination",
    [
        ({"axes": {"dyt_alpha": [0.5, 1.0]}}, "axes.dyt_alpha", "dyt_alpha=1.0"),  # only norm=dyt reads it
        ({"axes": {"mix_ratio": [0.5]}}, "axes.mix_ratio", "mix_ratio=0.5"),  # only wrap=mix reads it
        ({"axes": {"rope_base": [500.0]}}, "axes.rope_base", "rope_base=500.0"),  # learned positions
        ({"axes": {"init_std": [0.02, 0.05]}}, "axes.init_std", "init_std=0.05"),  # xavier has no std
        ({"model": {"mix_ratio": 0.5}, "axes": {"wrap": ["mix", "pre"]}}, "model.mix_ratio", "wrap=pre"),
    ],
)
def test_a_setting_the_model_does_not_read_is_refused_not_run_twice(grid, field, combination):
    """Two runs that differ only in a setting the model ignores would train one model twice, and the
    sweep would read as 'no effect'."""
    with pytest.raises(ConfigError) as e:
        StudyConfig.from_dict({"name": "bad", **grid})
    assert e.value.field == field and "does not read it" in str(e.value) and combination in str(e.value)


def test_a_setting_is_kept_where_the_model_reads_it():
    axes = {
        "v": [
            {"norm": "dyt", "dyt_alpha": 1.0},
            {"wrap": "mix", "mix_ratio": 0.5},
            {"init": "normal", "init_std": 0.05},
            {"init": "gpt2", "init_std": 0.05},
        ]
    }
    runs = StudyConfig.from_dict(
        {"name": "ok", "model": {"position": "rope", "rope_base": 500.0}, "axes": axes}
    )
    assert [r.model.rope_base for r in runs.expand()] == [500.0] * 4


def test_bad_combination_is_named():
    with pytest.raises(ConfigError, match="grid combination: wrap=deepnorm norm=none"):
        StudyConfig.from_dict(
            {"name": "g", "axes": {"wrap": ["pre", "deepnorm"], "norm": ["layernorm", "none"]}}
        )


def test_bad_yaml_files(tmp_path):
    with pytest.raises(InputError, match="grid file .*missing.yaml does not exist"):
        StudyConfig.from_yaml(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("axes: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        StudyConfig.from_yaml(str(bad))
    bad.write_text("- a list\n")
    with pytest.raises(InputError, match="mapping"):
        StudyConfig.from_yaml(str(bad))


def test_presets_expand_and_describe_the_issue_regime():
    sizes = {name: len(preset(name).expand()) for name in PRESETS}
    assert sizes["smoke"] <= 6 and sizes["default"] <= 30 and sizes["full"] > sizes["default"]
    runs = preset("default").expand()
    wraps = {(r.model.wrap, r.model.residual) for r in runs}
    assert ("pre", ("ffn", "cross")) in wraps and {w for w, _ in wraps} == {
        "post",
        "pre",
        "deepnorm",
        "sandwich",
    }
    assert {r.model.n_layers for r in runs} >= {6, 24}
    assert {r.train.warmup for r in runs} >= {0} and max(r.train.warmup for r in runs) > 0
    r = runs[0]
    assert (r.model.d_model, r.model.n_heads, r.train.seq_len, r.train.batch_size, r.train.beta2) == (
        32,
        4,
        32,
        16,
        0.98,
    )
    assert r.train.task == "lm" and r.train.data is None and r.train == TrainConfig(**r.train.to_dict())
    full = preset("full").expand()
    assert max(x.model.n_layers for x in full) >= 96 and {x.train.seed for x in full} == {0, 1, 2}


def test_unknown_preset():
    with pytest.raises(ConfigError, match="preset"):
        preset("huge")


@pytest.mark.parametrize(
    "axes",
    [
        {"wrap": ["post", "pre"], "v": [{"wrap": "sandwich"}]},  # a mapping axis sets wrap too
        {"steps": [5, 10], "train.steps": [20]},  # the same field, prefixed and not
    ],
)
def test_two_axes_setting_one_field_are_refused(axes):
    with pytest.raises(ConfigError, match="no other axis sets"):
        StudyConfig.from_dict({"name": "clash", "axes": axes})


def test_a_data_file_of_one_byte_value_is_refused_by_the_grid(tmp_path):
    data = tmp_path / "a.txt"
    data.write_text("a" * 1000)
    with pytest.raises(InputError, match="train.data: data file .* holds one byte value only"):
        StudyConfig.from_dict({"name": "d", "train": {"data": str(data)}, "axes": {"seed": [0]}})


def test_a_data_file_too_short_for_the_longest_run_is_refused_before_any_run(tmp_path):
    data = tmp_path / "short.txt"
    data.write_text("xy" * 200)
    grid = {"name": "d", "train": {"data": str(data)}, "axes": {"seq_len": [8, 64]}}
    with pytest.raises(InputError, match="train.data: data .* is too short"):
        StudyConfig.from_dict(grid)
    grid["axes"] = {"seq_len": [8, 16]}
    assert len(StudyConfig.from_dict(grid).expand()) == 2


def test_fields_lists_each_group_of_options_under_its_own_heading():
    from depthlab.study.grid_fields import field_help

    lines = field_help().splitlines()
    heads = [i for i, line in enumerate(lines) if not line.startswith("  ")]
    group = {lines[i]: lines[i + 1 : j] for i, j in zip(heads, heads[1:] + [len(lines)])}
    (family,) = [h for h in group if "family options" in h]
    (topology,) = [h for h in group if "topology options" in h]
    assert any(line.split()[0] == "d_head" for line in group[family])
    assert [line.split()[0] for line in group[topology]][:1] == ["streams"]  # not among the family's
