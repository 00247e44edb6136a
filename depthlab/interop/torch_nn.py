"""Import ``torch.nn`` Transformer layers into depthlab Blocks and Stacks with the same outputs.

| torch module                    | depthlab                                  | call it as                                  |
|---------------------------------|-------------------------------------------|---------------------------------------------|
| ``TransformerEncoderLayer``     | :class:`Block` (self-attention + FFN)     | ``block(x, Context(padding_mask=pad))``     |
| ``TransformerDecoderLayer``     | :class:`Block` (causal self-attn + cross + FFN) | ``block(x, Context(memory=m, ...))``  |
| ``TransformerEncoder`` / ``TransformerDecoder`` | :class:`Stack` of those blocks + its final norm | ``stack(x, ctx)[0]``         |

``norm_first=False`` is our ``post`` wrapping (x = LN(x + F(x))), ``norm_first=True`` our ``pre``
(x = x + F(LN(x))). Inputs are (B, T, d) (torch's ``batch_first=True`` layout); torch's
``*_key_padding_mask`` (True = padding) is our ``padding_mask``/``memory_padding_mask``. depthlab's
decoder self-attention is always causal, so a torch decoder layer agrees with its Block when it is
called with a causal ``tgt_mask``. torch's fused ``in_proj_weight`` is already q | k | v by rows, our
layout. Layers built with ``bias=False`` have LayerNorms without a bias: ours get a zero bias.
An activation of ``nn.GELU(approximate="tanh")`` is our gelu_tanh, as torch computes it in training; torch's
fused inference path (eval mode without gradients) computes the exact GELU for it instead, so the two
differ there by about 1e-4, torch's own inconsistency.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.config import FamilyOptions, ModelConfig
from depthlab.errors import InputError
from depthlab.interop.weights import put_linear
from depthlab.model.layers import Block
from depthlab.model.stack import Stack, build_stack

_LAYERS = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)


def from_torch(module: nn.Module) -> Block | Stack:
    """A depthlab Block for a torch Transformer layer, or a Stack for a torch Transformer{En,De}coder.

    The result is in ``module``'s dtype and train/eval mode, every weight copied exactly.
    """
    if isinstance(module, _LAYERS):
        block = _block(module)
    elif isinstance(module, (nn.TransformerEncoder, nn.TransformerDecoder)):
        block = _stack(module)
    else:
        allowed = "TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder, TransformerDecoder"
        raise InputError(f"cannot import a {type(module).__name__}: depthlab imports {allowed}")
    dtype = next(module.parameters()).dtype
    return block.to(dtype).train(module.training)


def layer_config(layer: nn.Module) -> ModelConfig:
    """The one-layer :class:`ModelConfig` of a torch encoder or decoder layer (decoder -> encdec)."""
    attn = layer.self_attn
    _check_attention(attn)
    return ModelConfig(
        arch="encdec" if isinstance(layer, nn.TransformerDecoderLayer) else "encoder",
        n_layers=1,
        d_model=attn.embed_dim,
        n_heads=attn.num_heads,
        d_ff=layer.linear1.out_features,
        wrap="pre" if layer.norm_first else "post",
        norm="layernorm",
        activation=_activation(layer.activation),
        position="none",
        final_norm="off",
        bias=layer.linear1.bias is not None,
        dropout=float(layer.dropout.p),
        family=FamilyOptions(norm_eps=layer.norm1.eps),
    )


def _block(layer: nn.Module) -> Block:
    cfg = layer_config(layer)
    decoder = isinstance(layer, nn.TransformerDecoderLayer)
    block = build_stack(cfg, "decoder" if decoder else "encoder", 1).layers[0]
    state = _attention_state("attn.f", layer.self_attn, cross=False)
    _norm_state(state, "attn.norm", layer.norm1)
    if decoder:
        _check_attention(layer.multihead_attn)
        state.update(_attention_state("cross.f", layer.multihead_attn, cross=True))
        _norm_state(state, "cross.norm", layer.norm2)
    _norm_state(state, "ffn.norm", layer.norm3 if decoder else layer.norm2)
    put_linear(state, "ffn.f.fc1", layer.linear1.weight, layer.linear1.bias)
    put_linear(state, "ffn.f.fc2", layer.linear2.weight, layer.linear2.bias)
    block.load_state_dict(state, strict=True)  # every tensor filled, every shape checked
    return block


def _stack(module: nn.Module) -> Stack:
    """A Stack of the module's layers, with its final norm (``module.norm``) if it has one."""
    blocks = [_block(layer) for layer in module.layers]
    if module.norm is None:
        return Stack(blocks, None)
    if not isinstance(module.norm, nn.LayerNorm):
        raise InputError(f"cannot import a final norm of type {type(module.norm).__name__}: only LayerNorm")
    final = nn.LayerNorm(module.norm.normalized_shape, eps=module.norm.eps)
    state: dict = {}
    _norm_state(state, "norm", module.norm)
    stack = Stack(blocks, final)
    stack.norm.load_state_dict({k.removeprefix("norm."): v for k, v in state.items()}, strict=True)
    return stack


def _activation(act) -> str:
    """Our activation name for a torch layer's ``activation`` (a function or a module)."""
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    if isinstance(act, nn.GELU) and act.approximate == "tanh":
        return "gelu_tanh"
    raise InputError(f"cannot import activation {act!r}: depthlab has relu, gelu and gelu (tanh)")


def _check_attention(attn: nn.MultiheadAttention) -> None:
    """Reject MultiheadAttention features that depthlab's Attention does not have."""
    if not attn._qkv_same_embed_dim:
        raise InputError("cannot import MultiheadAttention with kdim/vdim != embed_dim")
    if attn.bias_k is not None or attn.add_zero_attn:
        raise InputError("cannot import MultiheadAttention with add_bias_kv or add_zero_attn")


def _attention_state(prefix: str, attn: nn.MultiheadAttention, cross: bool) -> dict:
    """Our fused qkv (self) or q + kv (cross) from torch's in_proj (rows q | k | v), and out."""
    state: dict = {}
    w, b, d = attn.in_proj_weight, attn.in_proj_bias, attn.embed_dim
    if cross:
        put_linear(state, f"{prefix}.q", w[:d], None if b is None else b[:d])
        put_linear(state, f"{prefix}.kv", w[d:], None if b is None else b[d:])
    else:
        put_linear(state, f"{prefix}.qkv", w, b)
    put_linear(state, f"{prefix}.out", attn.out_proj.weight, attn.out_proj.bias)
    return state


def _norm_state(state: dict, name: str, norm: nn.LayerNorm) -> None:
    """A LayerNorm's gain and bias (1 and 0 where torch's norm has none, e.g. ``bias=False``)."""
    d = norm.normalized_shape[-1]
    weight = norm.weight if norm.weight is not None else torch.ones(d)
    bias = norm.bias if norm.bias is not None else torch.zeros(d)
    put_linear(state, name, weight, bias)
