"""Weights of the reference implementations of the residual topologies, mapped into depthlab.

| reference                                         | into                               | function                 |
|---------------------------------------------------|------------------------------------|--------------------------|
| hyper-connections ``HyperConnections`` (n streams)| a ``hc``/``dhc`` wrapping's ``mix``| :func:`load_hyper_mix`   |
| hyper-connections ``ManifoldConstrainedHyperConnections`` | an ``mhc`` wrapping's ``mix`` (static part) | :func:`load_hyper_mix` |
| x-transformers ``TransformerWrapper(Decoder(...))`` (pre-LN, value residual) | a depthlab decoder | :func:`from_x_transformers` |

Layouts: hyper-connections keeps the n streams in the batch dimension, ``(b s) t d``; its
``static_alpha`` is the n x (1 + n) matrix [H_pre^T | H_res^T] (row s: what stream s gives the branch
and each new stream), ``static_beta`` H_post. x-transformers keeps q, k, v apart (depthlab fuses them
q | k | v), scales its position table by d^-1/2 and has bias-less LayerNorms (depthlab's get a zero
bias) and a tied head that reads the stream x d^-1/2 (depthlab's ``head_scale``). Where a reference departs from its paper, depthlab follows the paper: docs/topologies.md.
"""

from __future__ import annotations

import torch
from torch import nn

from depthlab.config import ModelConfig
from depthlab.errors import InputError
from depthlab.model.stack import build_model


@torch.no_grad()
def load_hyper_mix(mix: nn.Module, ref: nn.Module) -> None:
    """Copy a hyper-connections module's maps into a depthlab :class:`~depthlab.model.hyper.StreamMix`
    (one stream of fractions is refused: its fractions follow another formula, docs/topologies.md).
    mHC's dynamic maps are computed per stream there and from all streams here: only its static
    part maps, and this refuses a reference whose dynamic maps are not 0."""
    if getattr(ref, "num_fracs", 1) != 1:
        raise InputError(
            "hyper-connections with num_fracs > 1 computes another formula than Frac-Connections"
        )
    alpha = ref.static_alpha.detach()  # (n, 1 + n): [H_pre^T | H_res^T]
    mix.pre.copy_(alpha[:, 0])
    mix.res.copy_(alpha[:, 1:].T.reshape(-1))
    mix.post.copy_(ref.static_beta.detach())
    if mix.form == "dynamic":
        mix.w_pre.copy_(ref.dynamic_alpha_fn[:, :1])
        mix.w_res.copy_(ref.dynamic_alpha_fn[:, 1:])
        mix.w_post.copy_(ref.dynamic_beta_fn[:, None])
        mix.scale.copy_(torch.stack([ref.dynamic_alpha_scale, ref.dynamic_beta_scale]).flatten())
        mix.norm.weight.copy_(ref.norm.gamma + 1)  # its RMSNorm applies (gamma + 1)
    elif mix.form == "mhc" and (ref.dynamic_alpha_fn.any() or ref.dynamic_beta_fn.any()):
        raise InputError("mHC's dynamic maps differ between hyper-connections and the paper: set them to 0")


def x_transformers_config(ref: nn.Module, wrap: str = "pre") -> ModelConfig:
    """The depthlab decoder of an x-transformers ``TransformerWrapper(Decoder(...))``'s shape, under
    ``wrap`` (pre, or vres / vres_learned for its value residual)."""
    layers = ref.attn_layers
    attn, ffn = layers.layers[0][1], layers.layers[1][1]
    d, heads = ref.token_emb.emb.weight.shape[1], attn.heads
    d_head = attn.to_q.out_features // heads
    cfg = ModelConfig(
        n_layers=len(layers.layers) // 2, d_model=d, n_heads=heads, d_ff=ffn.ff[2].in_features,
        vocab_size=ref.num_tokens, max_len=ref.max_seq_len, wrap=wrap, embed_scale=False,
    )  # fmt: skip
    scaled = getattr(ref, "tie_embedding_scale", None)  # a tied head reads the stream x d^-1/2 there
    if scaled is None or abs(scaled - d**-0.5) > 1e-12:
        raise InputError(
            "x-transformers: only a tied head read at d^-1/2 (its default) maps to depthlab's head_scale"
        )
    return cfg.replace(biases=("ffn",), d_head=None if d_head * heads == d else d_head, head_scale=True)


@torch.no_grad()
def from_x_transformers(ref: nn.Module, wrap: str = "pre") -> nn.Module:
    """A depthlab decoder with the weights of ``ref``, a pre-LN x-transformers decoder with an absolute
    position table (``add_value_residual``: wrap vres; with ``learned_value_residual_mix``: vres_learned,
    each mix's projection 0, its bias b giving l1 = 1 - sigmoid(b), l2 = sigmoid(b))."""
    model = build_model(x_transformers_config(ref, wrap))
    model.embed.tok.weight.copy_(ref.token_emb.emb.weight)
    model.embed.pos.weight.copy_(ref.pos_emb.emb.weight * ref.pos_emb.scale)
    pairs = list(zip(ref.attn_layers.layers[0::2], ref.attn_layers.layers[1::2]))
    for block, (a, f) in zip(model.stack.layers, pairs, strict=True):
        _norm(block.attn.norm, a[0][0])
        _norm(block.ffn.norm, f[0][0])
        q, k, v = a[1].to_q.weight, a[1].to_k.weight, a[1].to_v.weight
        block.attn.f.qkv.weight.copy_(torch.cat([q, k, v]))
        block.attn.f.out.weight.copy_(a[1].to_out.weight)
        block.ffn.f.fc1.weight.copy_(f[1].ff[0][0].weight)
        block.ffn.f.fc1.bias.copy_(f[1].ff[0][0].bias)
        block.ffn.f.fc2.weight.copy_(f[1].ff[2].weight)
        block.ffn.f.fc2.bias.copy_(f[1].ff[2].bias)
        if wrap == "vres_learned" and hasattr(block.attn, "value_mix"):
            b = _constant_mix(a[1])
            block.attn.value_mix.copy_(torch.stack([1 - torch.sigmoid(b), torch.sigmoid(b)]))
    _norm(model.stack.norm, ref.attn_layers.final_norm)
    return model


def _norm(ours: nn.Module, theirs: nn.Module) -> None:
    ours.weight.copy_(theirs.gamma + float(getattr(theirs, "unit_offset", 0.0)))
    if getattr(ours, "bias", None) is not None:
        ours.bias.zero_()  # their LayerNorm has no bias


def _constant_mix(attn: nn.Module) -> torch.Tensor:
    """The bias of x-transformers' learned value mix, whose projection must be 0 (a per-token mix is
    another formula than ResFormer's learned scalars); one value for every head."""
    lin = attn.to_value_residual_mix[0]
    if lin.weight.any() or not torch.all(lin.bias == lin.bias[0]):
        raise InputError(
            "x-transformers' value mix depends on the token: only a constant mix maps to ResFormer's"
        )
    return lin.bias[0]
