"""The named grids of ``depthlab study --preset NAME``.

``default`` is the main job (``make run``): post-LN vs pre-LN and the wrappings built for depth, in a few minutes on two cores. Byte-level
language modelling on the default corpus (the standard library's own source), tiny models (d_model 32,
4 heads, 16 sequences of 32 bytes per step, 200 steps), Adam with beta2 0.98 (the original recipe, Vaswani et
al. 2017), at a learning rate (7e-3) where post-LN without warmup fails from 6 layers on while a
warmup rescues it at 6 (Xiong et al. 2020: post-LN needs warmup, pre-LN does not); at 24 layers only
the wrappings built for depth train (pre-LN, sandwich, DeepNorm: Wang et al. 2022), and pre-LN without
the attention skip stalls beyond 2 layers (its positions collapse to one vector: Dong et al. 2021).

Measured on the 2-core development machine (seed 0; val loss, unigram level 3.15): post 2/6/24 layers
without warmup 2.44 / 3.18 stalled / 3.19 stalled, with 50 warmup steps 2.43 / 2.94 / 3.19 stalled;
pre 2.40 / 2.42 / 2.55; DeepNorm 2.42 / 2.40 / 2.45; pre without the attention skip 2.81 / 3.18 / 3.19.
Post-LN with warmup at 6 layers is near the stall threshold: seeds 0 and 2 train, seed 1 stalls (3.04).
Lower rates do not separate warmup from no warmup here (at 1e-3 and 3e-3 post-LN trains at 6 layers
either way and stalls at 12 and 24 either way, at 24 even with 300 steps).
"""

from __future__ import annotations

import math

from depthlab.errors import ConfigError
from depthlab.study.grid import StudyConfig
from depthlab.study.transfer import heads_text
from depthlab.train.regimes import TINY_LM_MODEL, TINY_LM_TRAIN

# The five wrappings the source texts and papers compare: each value sets its fields together.
WRAPPINGS_5 = [
    {"wrap": "post"},
    {"wrap": "pre"},
    {"wrap": "deepnorm"},
    {"wrap": "sandwich"},
    {"wrap": "pre", "residual": ["ffn", "cross"]},  # the attention skip dropped
]


# The learning-rate sensitivity comparison (Wortsman et al. 2023): the wrappings above, and pre-LN with
# the two mitigations of small-scale instabilities they test, qk-layernorm and z-loss 1e-4.
LR_WRAPPINGS = [
    {"wrap": "post"},
    {"wrap": "pre"},
    {"wrap": "sandwich"},
    {"wrap": "deepnorm"},
    {"wrap": "pre", "qk_norm": True, "z_loss": 1e-4},
]
# 1e-4 .. 1 in half decades: up to 3e-1 was registered first; sandwich still trained at 3e-1 and 24
# layers, so the sweep was extended to 1 (the preset must reach every wrapping's failure).
LR_SWEEP = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0]

# Learning-rate transfer (docs/transfer.md): the parametrizations, each relative to the sweep's
# smallest size (a base for sp is refused: sp scales nothing).
DEPTH_PARAMS = [
    {"param": "sp"},
    {"param": "depth_mup", "base_depth": 2},
    {"param": "completep", "base_depth": 2},
]
WIDTH_PARAMS = [{"param": "sp"}, {"param": "mup", "base_width": 32}]
QUICK_SWEEP = [1e-3, 3e-3, 1e-2, 3e-2, 1e-1]  # half decades around the tiny regime's best


def _transfer(name: str, what: str, axes: dict, steps: int, **model) -> dict:
    return {
        "name": name,
        "description": what,
        "model": {**TINY_LM_MODEL, **model},
        "train": {**TINY_LM_TRAIN, "steps": steps, "schedule": "cosine", "warmup": 10},
        "axes": {**axes, "seed": [0, 1, 2]},
    }


TRANSFER_PRESETS = {
    "depth-transfer": _transfer(
        "depth-transfer",
        "Final loss against learning rate (1e-4 to 1, half decades) at 2 to 32 layers for pre-LN, sandwich "
        "and post-LN under sp, depth_mup and completep (base depth 2), 3 seeds: does the best lr move with "
        "depth (depthlab transfer --to-depth L)?",
        {"wrapping": [{"wrap": "pre"}, {"wrap": "sandwich"}, {"wrap": "post"}], "parametrization": DEPTH_PARAMS,
         "n_layers": [2, 4, 8, 16, 32], "lr": LR_SWEEP},
        150,
    ),
    "depth-transfer-quick": _transfer(
        "depth-transfer-quick",
        "depth-transfer's quick variant: pre-LN under sp and completep at 2, 4 and 8 layers, lr 1e-3 to 1e-1, "
        "3 seeds, 100 steps.",
        {"wrapping": [{"wrap": "pre"}], "parametrization": [DEPTH_PARAMS[0], DEPTH_PARAMS[2]],
         "n_layers": [2, 4, 8], "lr": QUICK_SWEEP},
        100,
    ),
    "width-transfer": _transfer(
        "width-transfer",
        "Final loss against learning rate (1e-4 to 1, half decades) at d_model 32 to 256 (4 layers) for "
        "pre-LN and sandwich under sp and mup (base width 32), 3 seeds (depthlab transfer --to-width W).",
        {"wrapping": [{"wrap": "pre"}, {"wrap": "sandwich"}], "parametrization": WIDTH_PARAMS,
         "d_model": [32, 64, 128, 256], "lr": LR_SWEEP},
        150,
        n_layers=4,
    ),
    "width-transfer-quick": _transfer(
        "width-transfer-quick",
        "width-transfer's quick variant: pre-LN under sp and mup at d_model 32, 64 and 128 (4 layers), lr "
        "1e-3 to 1e-1, 3 seeds, 100 steps.",
        {"wrapping": [{"wrap": "pre"}], "parametrization": WIDTH_PARAMS, "d_model": [32, 64, 128],
         "lr": QUICK_SWEEP},
        100,
        n_layers=4,
    ),
}  # fmt: skip

PRESETS: dict[str, dict] = {
    "default": {
        "name": "default",
        "description": "post-LN vs pre-LN, DeepNorm, sandwich and pre-LN without the attention skip, "
        "shallow and deep, with and without warmup, at a learning rate where deep post-LN needs warmup.",
        "model": TINY_LM_MODEL,
        "train": {**TINY_LM_TRAIN, "steps": 200, "lr": 7e-3, "schedule": "linear"},
        "axes": {"wrapping": WRAPPINGS_5, "n_layers": [2, 6, 24], "warmup": [0, 50]},
    },
    "lr-sensitivity": {
        "name": "lr-sensitivity",
        "description": "Final loss against learning rate (1e-4 to 1, half-decade steps) for post-LN, "
        "pre-LN, sandwich, DeepNorm and pre-LN with qk-layernorm and z-loss, at 2, 6 and 24 layers, 3 seeds: "
        "LR sensitivity as Wortsman et al. 2023 define it, the best learning rate by depth.",
        "model": TINY_LM_MODEL,
        "train": {**TINY_LM_TRAIN, "steps": 150, "schedule": "cosine", "warmup": 15},
        "axes": {
            "wrapping": LR_WRAPPINGS,
            "n_layers": [2, 6, 24],
            "lr": LR_SWEEP,
            "seed": [0, 1, 2],
        },
    },
    "smoke": {
        "name": "smoke",
        "description": "A handful of tiny runs that exercise the whole pipeline (tests).",
        "model": {"arch": "decoder", "d_model": 16, "n_heads": 2, "vocab_size": 256, "max_len": 16},
        "train": {
            "task": "lm",
            "steps": 12,
            "batch_size": 4,
            "seq_len": 16,
            "log_every": 4,
            "eval_batches": 2,
        },
        "axes": {"wrap": ["post", "pre"], "n_layers": [2, 4]},
    },
    "full": {
        "name": "full",
        "description": "The long run: more wrappings, depths up to 96, three learning rates, with and "
        "without warmup, three seeds.",
        "model": TINY_LM_MODEL,
        "train": {**TINY_LM_TRAIN, "steps": 300, "schedule": "linear"},
        "axes": {
            "wrapping": WRAPPINGS_5 + [{"wrap": "admin"}, {"wrap": "rezero"}, {"wrap": "layerscale"}],
            "n_layers": [2, 6, 12, 24, 48, 96],
            "lr": [1e-3, 3e-3, 1e-2],
            "warmup": [0, 50, 150],
            "seed": [0, 1, 2],
        },
    },
}


PRESETS.update(TRANSFER_PRESETS)

# One line per preset for ``study --help`` (each preset's full "description" is stored with its study).
SUMMARIES: dict[str, str] = {
    "default": "the main job: 5 wrappings, 2, 6 and 24 layers, warmup 0 and 50",
    "lr-sensitivity": "final loss against lr, 1e-4 to 1, five wrappings, 3 seeds",
    "smoke": "a handful of tiny runs through the whole pipeline (tests)",
    "full": "long run: 8 wrappings, 2-96 layers, 3 lrs, 3 warmups, 3 seeds",
    "depth-transfer": "best lr against depth, 2-32, under sp, depth_mup, completep",
    "depth-transfer-quick": "a quick depth-transfer: fewer depths and lrs",
    "width-transfer": "best lr against width under sp and mup, 3 seeds",
    "width-transfer-quick": "a quick width-transfer: fewer widths and lrs",
}


def run_count(name: str) -> int:
    """How many runs preset ``name`` expands to (the product of its axes' lengths; no run is built)."""
    return math.prod(len(values) for values in PRESETS[name]["axes"].values())


def preset_lines() -> list[str]:
    """``name  N runs  summary`` for every preset, in the order of PRESETS."""
    width = max(map(len, PRESETS))
    return [f"{name:<{width}}  {run_count(name):>5,} runs  {SUMMARIES[name]}" for name in PRESETS]


def preset(name: str, width: int | None = None, depth: int | None = None) -> StudyConfig:
    """The preset grid called ``name``, validated. Raises ConfigError for an unknown name.

    ``width`` (d_model) and ``depth`` (n_layers) re-shape a transfer preset at the user's own size: a
    depth transfer at their width, a width transfer at their depth (the study's name says so, so that
    its runs are not mixed with the preset's own). A width or depth the preset sweeps is refused."""
    if name not in PRESETS:
        raise ConfigError("preset", name, f"one of {', '.join(PRESETS)}")
    d = PRESETS[name]
    if width is None and depth is None:
        return StudyConfig.from_dict(d)
    if name not in TRANSFER_PRESETS:
        raise ConfigError(
            "preset", name, f"a transfer preset for --width/--depth: {', '.join(TRANSFER_PRESETS)}"
        )
    model, suffix = dict(d["model"]), ""
    for field, value, tag in (("d_model", width, "w"), ("n_layers", depth, "L")):
        if value is None:
            continue
        flag = "width" if field == "d_model" else "depth"
        if field in d["axes"]:
            raise ConfigError(flag, value, f"unset: {name} sweeps {field} (the axis it transfers across)")
        if (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):  # named as given, not as a field
            raise ConfigError(flag, value, "an integer >= 1")
        heads = heads_text(value, model["n_heads"], "the preset's") if field == "d_model" else None
        if heads:
            raise ConfigError(flag, value, heads)
        model[field], suffix = value, suffix + f"-{tag}{value}"
    return StudyConfig.from_dict({**d, "name": d["name"] + suffix, "model": model})
