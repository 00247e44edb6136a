"""A run's recipe: what its configuration sets, away from depthlab's defaults, that the atlas's columns do
not hold (a cosine schedule, no final norm, SwiGLU and RoPE, Adam's beta2 0.999, clipping ...).

A measured run is evidence about a question only where the two share their recipe as well as their
kind of stack: a pre-LN run without its final norm, or one trained on a cosine schedule, is no plain
pre-LN run (:func:`depthlab.doctor.predict.distance`). The recipe is the text
``"final_norm=off, schedule=cosine"`` (sorted; "" for a run at every default). Left out, as the atlas's
own columns or as what does not change how a run trains in kind: the shape and budget the columns hold,
sizes (vocabulary, context, FFN and head width, kv heads), numerical details (norm and Adam epsilons,
RoPE's base and share, the score scale, the normal init's std, the cosine floor, bf16), how the outcome
is labelled (the spike and stall thresholds) and bookkeeping (data file, logging, evaluation,
checkpoints, seed, device). A setting that changes nothing is said as its default: a final norm where
the wrapping has one anyway, AdamW without weight decay, a constant schedule without warmup (the linear
schedule's), bias sites that are every bias ``bias`` gives, a base width or depth equal to the model's, a
sliding window no shorter than the sequence, DyT's alpha without DyT, Mix-LN's ratio without Mix-LN.
"""

from __future__ import annotations

import dataclasses

from depthlab.config import ModelConfig, TrainConfig
from depthlab.config_family import BIAS_SITES
from depthlab.errors import ConfigError
from depthlab.model.stack import uses_final_norm

HELD = frozenset({
    # the atlas's columns
    "arch", "n_layers", "d_model", "n_heads", "wrap", "norm", "residual", "param", "steps", "batch_size",
    "seq_len", "lr", "warmup", "seed",
    # sizes
    "enc_layers", "dec_layers", "vocab_size", "max_len", "n_kv_heads", "d_ff", "d_head", "d_embed",
    "rel_buckets", "rel_max_distance", "symbols",
    # numerical details
    "norm_eps", "eps", "rope_base", "rope_dims", "rope_local_base", "attn_scale", "init_std",
    "min_lr_ratio", "qk_norm_scope", "global_every", "bf16",
    # how the outcome is labelled
    "spike_factor", "stall_share",
    # bookkeeping
    "data", "log_every", "eval_batches", "eval_every", "checkpoint_every", "compile", "telemetry",
    "device", "activation_checkpointing", "side_embeddings",
    # said in their canonical form (_canonical): the same stack or run can be set in more than one way
    "final_norm", "bias", "biases",
})  # fmt: skip
UNREADABLE = "(a config this version cannot read)"  # the recipe of such a stored run: no question shares it


def recipe(model: ModelConfig, train: TrainConfig) -> str:
    """The recipe of a run of ``model`` under ``train`` (see the module docstring)."""
    said = []
    for cfg, flat in zip((model, train), _canonical(model.flat_dict(), train.flat_dict()), strict=True):
        base = type(cfg)().flat_dict()
        said += [f"{k}={_text(v)}" for k, v in flat.items() if k not in HELD and v != base[k]]
    final = uses_final_norm(model)
    if final != uses_final_norm(dataclasses.replace(model, final_norm="auto")):
        said.append(f"final_norm={'on' if final else 'off'}")
    sites = [s for s in BIAS_SITES if model.has_bias(s)]
    if sites != [s for s in BIAS_SITES if ModelConfig().has_bias(s)]:
        said.append("bias=false" if not sites else f"biases={'+'.join(sites)}")
    return ", ".join(sorted(said))


def same_recipe(a: str | None, b: str | None) -> bool:
    """Whether runs of recipes ``a`` and ``b`` can be one another's evidence: the same recipe, or one not
    known (None: an atlas written before recipes were recorded)."""
    return a is None or b is None or a == b


def recipe_of(config: dict) -> str:
    """The recipe of a stored run's config (``{"model": {...}, "train": {...}}``, as a study stores it);
    :data:`UNREADABLE` where this version cannot read it (a run no question shares a recipe with)."""
    try:
        model = ModelConfig.from_dict(dict(config["model"]))
        train = TrainConfig.from_dict(dict(config["train"]))
    except (ConfigError, KeyError, TypeError, ValueError):
        return UNREADABLE
    return recipe(model, train)


def _canonical(m: dict, t: dict) -> tuple[dict, dict]:
    """The flat fields of a model (``m``) and its training (``t``), each setting that changes nothing put
    back to its default."""
    if m["base_width"] == m["d_model"]:
        m["base_width"] = None
    if m["base_depth"] == m["n_layers"]:
        m["base_depth"] = None
    if m["norm"] != "dyt":
        m["dyt_alpha"] = ModelConfig.dyt_alpha
    if m["wrap"] != "mix":
        m["mix_ratio"] = ModelConfig.mix_ratio
    if m["sliding_window"] is not None and m["sliding_window"] >= t["seq_len"]:
        m["sliding_window"] = None
    if t["schedule"] == "constant" and t["warmup"] == 0:
        t["schedule"] = "linear"
    if t["optimizer"] == "adamw" and t["weight_decay"] == 0:
        t["optimizer"], t["independent_wd"] = "adam", False
    return m, t


def _text(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "+".join(str(x) for x in v) or "none"
    return f"{v:.10g}" if isinstance(v, float) else str(v)
