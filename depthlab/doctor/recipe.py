"""A run's recipe: what its configuration sets, away from depthlab's defaults, that the atlas's columns do
not hold (a cosine schedule, no final norm, SwiGLU and RoPE, Adam's beta2 0.999, clipping ...).

A measured run is evidence about a question only where the two share their recipe as well as their
kind of stack: a pre-LN run without its final norm, or one trained on a cosine schedule, is no plain
pre-LN run (:func:`depthlab.doctor.predict.distance`). The recipe is the text
``"final_norm=off, schedule=cosine"`` (sorted; "" for a run at every default). Left out, as the atlas's
own columns or as what does not change how a run trains in kind: the shape and budget the columns hold,
sizes (vocabulary, context, FFN and head width, kv heads), numerical details (norm and Adam epsilons,
RoPE's base and share, the score scale, the normal init's std, the cosine floor), and bookkeeping
(data file, logging, evaluation, checkpoints, seed, device).
"""

from __future__ import annotations

import dataclasses

from depthlab.config import ModelConfig, TrainConfig
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
    "min_lr_ratio", "qk_norm_scope", "global_every",
    # bookkeeping
    "data", "log_every", "eval_batches", "eval_every", "checkpoint_every", "compile", "telemetry",
    "device", "activation_checkpointing", "side_embeddings",
    # resolved below: "auto" and an explicit "on" or "off" can be the same stack
    "final_norm",
})  # fmt: skip


def recipe(model: ModelConfig, train: TrainConfig) -> str:
    """The recipe of a run of ``model`` under ``train`` (see the module docstring)."""
    said = []
    for cfg in (model, train):
        base = type(cfg)().flat_dict()
        said += [f"{k}={_text(v)}" for k, v in cfg.flat_dict().items() if k not in HELD and v != base[k]]
    final = uses_final_norm(model)
    if final != uses_final_norm(dataclasses.replace(model, final_norm="auto")):
        said.append(f"final_norm={'on' if final else 'off'}")
    return ", ".join(sorted(said))


def recipe_of(config: dict) -> str:
    """The recipe of a stored run's config (``{"model": {...}, "train": {...}}``, as a study stores it)."""
    return recipe(ModelConfig.from_dict(dict(config["model"])), TrainConfig.from_dict(dict(config["train"])))


def _text(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "+".join(str(x) for x in v) or "none"
    return f"{v:g}" if isinstance(v, float) else str(v)
