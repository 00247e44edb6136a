"""ModelConfig / TrainConfig: validation names the field, JSON round-trips exactly (property-based)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthlab import ConfigError, ModelConfig, TrainConfig
from depthlab.config import (
    ACTIVATIONS,
    ARCHS,
    FINAL_NORMS,
    NORMS,
    POSITIONS,
    SUBLAYERS,
    WRAPPINGS,
    flat_field_names,
    wrap_names,
)

WRAPS = wrap_names()
NEEDS_NORM = [name for name, cls in WRAPPINGS.items() if cls.NEEDS_NORM]


def _flat(**fields) -> ModelConfig:
    """A ModelConfig from flat field names (the family options beside the core fields)."""
    return ModelConfig.from_dict(fields)


model_configs = st.builds(
    _flat,
    arch=st.sampled_from(ARCHS),
    n_layers=st.integers(1, 64),
    d_model=st.sampled_from([8, 16, 24, 32, 64]),
    n_heads=st.sampled_from([1, 2, 4, 8]),
    wrap=st.sampled_from(WRAPS),
    norm=st.sampled_from(NORMS),
    activation=st.sampled_from(ACTIVATIONS),
    position=st.sampled_from(POSITIONS),
    final_norm=st.sampled_from(FINAL_NORMS),
    residual=st.lists(st.sampled_from(SUBLAYERS), unique=True).map(tuple),
    norm_eps=st.floats(1e-9, 1e-3),
    d_head=st.one_of(st.none(), st.integers(-1, 12)),
    attn_softcap=st.one_of(st.none(), st.floats(-10, 100)),
    rope_dims=st.one_of(st.none(), st.integers(0, 16)),
    sliding_window=st.one_of(st.none(), st.integers(0, 8)),
    global_every=st.one_of(st.none(), st.integers(0, 4)),
    rel_buckets=st.integers(2, 40),
    rel_max_distance=st.integers(1, 64),
    qk_norm_scope=st.sampled_from(["head", "projection", "layer"]),
    gain_offset=st.booleans(),
    biases=st.one_of(st.none(), st.lists(st.sampled_from(["qkv", "out", "ffn", "head", "x"])).map(tuple)),
    side_embeddings=st.booleans(),
    d_embed=st.one_of(st.none(), st.integers(0, 32)),
    init=st.sampled_from(["xavier", "gpt2", "normal"]),
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_config_is_valid_or_a_config_error_and_round_trips(data):
    try:
        cfg = data.draw(model_configs)
    except ConfigError as e:
        assert e.field in flat_field_names(ModelConfig) and str(e)
        return
    back = ModelConfig.from_json(cfg.to_json())
    assert back == cfg and back.config_hash() == cfg.config_hash()
    assert json.loads(cfg.to_json()) == json.loads(back.to_json())


@settings(max_examples=200, deadline=None)
@given(d=st.integers(1, 256), h=st.integers(1, 16))
def test_heads_must_divide_width(d, h):
    if d % h:
        with pytest.raises(ConfigError, match="d_model"):
            ModelConfig(d_model=d, n_heads=h)
    else:
        assert ModelConfig(d_model=d, n_heads=h).head_dim * h == d


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"wrap": "prenorm"}, "wrap"),
        ({"norm": "groupnorm"}, "norm"),
        ({"arch": "seq2seq"}, "arch"),
        ({"n_layers": 0}, "n_layers"),
        ({"n_layers": -3}, "n_layers"),
        ({"n_layers": True}, "n_layers"),
        ({"d_model": 30, "n_heads": 4}, "d_model"),
        ({"n_heads": 4, "n_kv_heads": 3}, "n_kv_heads"),
        ({"d_model": 12, "n_heads": 4, "position": "rope"}, "position"),
        ({"wrap": "deepnorm", "norm": "none"}, "norm"),
        ({"wrap": "sandwich", "norm": "none"}, "norm"),
        ({"residual": ("attn", "mlp")}, "residual"),
        ({"residual": ("attn", "attn")}, "residual"),
        ({"norm_eps": 0.0}, "norm_eps"),
        ({"dropout": float("nan")}, "dropout"),
        ({"enc_layers": 3}, "enc_layers"),
        ({"qk_norm": True, "norm": "none"}, "qk_norm"),
        # the family options: each refused where it means nothing, or out of its range
        ({"wrap": "parallel", "residual": ("ffn",)}, "residual"),
        ({"wrap": "parallel_shared", "arch": "encdec", "residual": ("attn", "ffn")}, "residual"),
        ({"d_head": 0}, "d_head"),
        ({"attn_scale": 0.0}, "attn_scale"),
        ({"attn_softcap": -50.0}, "attn_softcap"),
        ({"logit_softcap": float("inf")}, "logit_softcap"),
        ({"rope_dims": 4}, "rope_dims"),  # position is learned
        ({"position": "rope", "rope_dims": 3}, "rope_dims"),
        ({"position": "rope", "d_model": 32, "n_heads": 4, "rope_dims": 10}, "rope_dims"),
        ({"sliding_window": 4, "arch": "encoder"}, "sliding_window"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"global_every": 2}, "global_every"),
        ({"position": "rope", "rope_local_base": 1e4}, "rope_local_base"),  # no sliding window
        ({"position": "relative", "rel_buckets": 32, "rel_max_distance": 16}, "rel_max_distance"),
        ({"rel_buckets": 2}, "rel_buckets"),
        ({"qk_norm_scope": "layer"}, "qk_norm_scope"),
        ({"gain_offset": True, "norm": "layernorm"}, "gain_offset"),
        ({"biases": ("qkv", "bias")}, "biases"),
        ({"biases": ("qkv", "qkv")}, "biases"),
        ({"biases": ("qkv",), "bias": False}, "biases"),
        ({"side_embeddings": True}, "side_embeddings"),
        ({"d_embed": 0}, "d_embed"),
        ({"init": "kaiming"}, "init"),
        ({"init_std": 0.0}, "init_std"),
        ({"activation": "reglu"}, "activation"),
        ({"position": "alibi"}, "position"),
        ({"vocab_size": 1}, "vocab_size"),  # one token: nothing to predict, every loss and gradient 0
    ],
)
def test_bad_model_configs_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig.from_dict(kwargs)
    assert e.value.field == field
    assert repr(e.value.value) in str(e.value)


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(ConfigError, match="n_layer"):
        ModelConfig.from_dict({"n_layer": 4})


def test_needs_norm_wrappings_build_with_every_real_norm():
    for wrap in NEEDS_NORM:
        for norm in ("layernorm", "rmsnorm", "dyt"):
            ModelConfig(wrap=wrap, norm=norm)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"schedule": "step"}, "schedule"),
        ({"lr": 0}, "lr"),
        ({"beta2": 1.0}, "beta2"),
        ({"steps": 0}, "steps"),
        ({"warmup": -1}, "warmup"),
        ({"schedule": "noam", "warmup": 0}, "warmup"),
        ({"task": "translate"}, "task"),
    ],
)
def test_bad_train_configs_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as e:
        TrainConfig(**kwargs)
    assert e.value.field == field


def test_train_config_round_trip():
    cfg = TrainConfig(lr=3e-3, warmup=75, schedule="cosine", data="x.txt")
    assert TrainConfig.from_json(cfg.to_json()) == cfg


def test_a_list_of_skips_is_the_tuple():
    """residual=["attn", "ffn"] (as JSON or a hand gives it) is the same config as the tuple."""
    listed, tupled = ModelConfig(residual=["attn", "ffn"]), ModelConfig(residual=("attn", "ffn"))
    assert listed == tupled and listed.residual == ("attn", "ffn") and listed.to_json() == tupled.to_json()
