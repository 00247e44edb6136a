"""What an imported Hugging Face family declares (:class:`Family`), the registry, and the helpers the
family modules share to read configs and move weights.

A family says, once: its name, the HF ``model_type`` values it covers, the HF classes whose weights it
imports (and which output of ours equals which of theirs), how a config maps to a
:class:`~depthlab.ModelConfig`, how a state dict maps to ours, what is exact and what is approximated or
refused. Only ``model_type`` and class names are read, so nothing here imports ``transformers``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from depthlab.config import ModelConfig
from depthlab.errors import ConfigError
from depthlab.interop.weights import put_linear

# HF activation name -> ours. "gelu_new" and "gelu_pytorch_tanh" are the tanh approximation of GELU.
ACTIVATIONS = {
    "gelu": "gelu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",
}
GATED = {"silu": "swiglu", "gelu": "geglu", "gelu_new": "geglu_tanh", "gelu_pytorch_tanh": "geglu_tanh"}


@dataclass(frozen=True)
class Family:
    """One imported family. ``classes`` maps an HF class name to the output that equals ours:
    "logits" (``model(...)``) or "states" (``model(..., return_states=True)[1][-1]`` = last_hidden_state).
    ``config`` maps an HF config to ours; ``state(hf_state, cfg, hf_config)`` an HF state dict to ours.
    ``exact`` and ``approximated`` are the closing note of the import and the columns of docs/families.md's
    table (``python -m depthlab_lab.docgen.tables``)."""

    name: str
    model_types: tuple[str, ...]
    classes: dict[str, str]
    config: Callable[[object], ModelConfig]
    state: Callable[[dict, ModelConfig, object], dict]
    exact: str
    approximated: str = ""


FAMILIES: list[Family] = []


def register(family: Family) -> Family:
    """Add ``family`` to the registry (every family module calls this once at import)."""
    FAMILIES.append(family)
    return family


def model_types() -> tuple[str, ...]:
    """The HF model_type values depthlab imports, family by family."""
    return tuple(t for f in FAMILIES for t in f.model_types)


def family_for(model_type) -> Family | None:
    """The family that imports ``model_type``, or None."""
    return next((f for f in FAMILIES if model_type in f.model_types), None)


def config_from_hf(hf_config) -> ModelConfig:
    """The :class:`ModelConfig` of an HF config of an imported family (ConfigError for anything else)."""
    model_type = getattr(hf_config, "model_type", None)
    family = family_for(model_type)
    if family is None:
        raise ConfigError("model_type", model_type, f"one of {', '.join(model_types())}")
    return family.config(hf_config)


# -- reading configs -------------------------------------------------------------------------------


def activation(field: str, name, gated: bool = False) -> str:
    """Our activation for the HF config's ``field``; ``gated``: the gated unit of that activation."""
    table = GATED if gated else ACTIVATIONS
    if name not in table:
        raise ConfigError(field, name, f"one of {', '.join(table)}")
    return table[name]


def require(hf_config, field: str, wanted, why: str) -> None:
    """Raise ConfigError unless ``hf_config.field`` (default: ``wanted``) equals ``wanted``."""
    value = getattr(hf_config, field, wanted)
    if value != wanted:
        raise ConfigError(field, value, f"{wanted!r} ({why})")


def rope_params(c, layer_type: str | None = None) -> dict:
    """The RoPE parameters (transformers 5's ``rope_parameters``, per layer type where a family has
    several, or the older ``rope_theta``/``rope_scaling``), refusing any scaling variant."""
    params = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    if layer_type is not None and layer_type in params:
        params = params[layer_type] or {}
    params = dict(params)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ConfigError("rope_type", rope_type, "'default' (depthlab's RoPE has no scaling variants)")
    params.setdefault("rope_theta", getattr(c, "rope_theta", 10000.0))
    return params


def head_dim(c) -> int:
    """HF's head width: an explicit ``head_dim`` or hidden_size / num_attention_heads."""
    return getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads


def own_head_dim(c) -> int | None:
    """``ModelConfig.family.d_head``: None when the head width is the default d_model / n_heads."""
    hd = head_dim(c)
    return None if hd * c.num_attention_heads == c.hidden_size else hd


def window_pattern(c, n_layers: int) -> tuple[int | None, int | None]:
    """(sliding_window, global_every) from HF's ``layer_types`` (or a window on every layer): every
    layer local, or layers k, 2k, ... global (Gemma 2: k = 2, Gemma 3: k = 6). Any other pattern
    (Qwen's sliding window above max_window_layers) is refused."""
    window = getattr(c, "sliding_window", None)
    types = list(getattr(c, "layer_types", None) or [])
    local = [t == "sliding_attention" for t in types] if types else [window is not None] * n_layers
    if window is None or not any(local):
        return None, None
    if all(local):
        return int(window), None
    k = next(i + 1 for i, is_local in enumerate(local) if not is_local)
    if local != [(i + 1) % k != 0 for i in range(n_layers)]:
        raise ConfigError("layer_types", types, "sliding layers everywhere or all but every k-th layer")
    return int(window), k


# -- moving weights ------------------------------------------------------------------------------


def take(out: dict, name: str, hf: dict, prefix: str) -> None:
    """``out[name.weight]`` (and ``.bias`` when HF has one) from ``hf[prefix.weight]``."""
    put_linear(out, name, hf[f"{prefix}.weight"], hf.get(f"{prefix}.bias"))


def fused(out: dict, name: str, hf: dict, prefixes: list[str]) -> None:
    """Stack separate projections as row blocks of one fused linear (biases too, where present)."""
    weight = torch.cat([hf[f"{p}.weight"] for p in prefixes])
    has_bias = f"{prefixes[0]}.bias" in hf
    put_linear(out, name, weight, torch.cat([hf[f"{p}.bias"] for p in prefixes]) if has_bias else None)


def per_head_qkv(t: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:
    """A fused projection laid out per head as [q_h; k_h; v_h] (GPT-NeoX, Falcon without multi-query)
    reordered into our q | k | v row blocks (rows, or the entries of a bias)."""
    blocks = t.reshape(n_heads, 3, head_dim, *t.shape[1:])
    return torch.cat([blocks[:, j].reshape(n_heads * head_dim, *t.shape[1:]) for j in range(3)])


def interleaved_to_half(t: torch.Tensor, n_heads: int, head_dim: int, rotary: int) -> torch.Tensor:
    """Rows of a q or k projection permuted so that GPT-J's interleaved rotary pairs (2i, 2i+1) become
    our half-split pairs (i, i + rotary/2); q . k is unchanged because q and k move together."""
    order = list(range(0, rotary, 2)) + list(range(1, rotary, 2)) + list(range(rotary, head_dim))
    rows = t.reshape(n_heads, head_dim, *t.shape[1:])[:, order]
    return rows.reshape(n_heads * head_dim, *t.shape[1:])


def head_weight(out: dict, hf: dict, cfg: ModelConfig, head: str, tok: str, bias: str | None = None) -> None:
    """Our head from HF's output layer (``head``), or from the token table (``tok``) when tied."""
    out["head.weight"] = hf[f"{tok}.weight"] if cfg.tie_embeddings else hf[f"{head}.weight"]
    if cfg.has_bias("head"):
        out["head.bias"] = hf[bias or f"{head}.bias"].reshape(-1)
