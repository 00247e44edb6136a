"""Initialisation, in one place: the weight schemes and every depth-dependent constant.

Weight schemes (``ModelConfig.init``):

| scheme | linear weights                                  | embeddings                  | source          |
|--------|-------------------------------------------------|-----------------------------|-----------------|
| xavier | Xavier-uniform; q, k, v initialised separately  | N(0, d^-1/2), x sqrt(d)     | Vaswani 2017 / fairseq |
| gpt2   | N(0, s); residual outputs N(0, s/sqrt(2L))      | N(0, s)                     | GPT-2; nanoGPT model.py |
| normal | N(0, s) everywhere, no depth scaling            | N(0, s)                     | Hugging Face ``_init_weights`` (Llama, Qwen, Mistral, OPT, ...) |

s is ``ModelConfig.family.init_std`` (default 0.02, HF's ``initializer_range``). Whether the token embeddings
are scaled by sqrt(d) (``embed_scale``) and whether the head is tied (``tie_embeddings``) are separate
choices; the probe and ``explain`` name all three, because together they decide the scale of the
stream at init as much as the wrapping does (a Llama shape under xavier, tied and scaled, and under
``normal``, untied and unscaled, gets different verdicts). T5's relative position bias starts
N(0, d^-1/2) under xavier (HF T5's ``_init_weights``), N(0, s) under the other schemes.

Biases start at 0, norm gains at 1 (w = 0 where the gain is 1 + w). Depth-dependent constants of the wrappings:

| wrapping   | constant                                         | value                                    | source |
|------------|--------------------------------------------------|------------------------------------------|--------|
| deepnorm   | alpha (skip scale), beta (v, out, fc1, fc2 init) | see :func:`~depthlab.model.wrappings.deepnorm_constants`| Wang et al. 2022, Table 1 |
| admin      | omega (skip scale), n = residual sublayers       | sqrt((n+1)/ln(n+1) - 1)                  | admin-torch admin.py |
| layerscale | lambda                                           | 0.1 (L<=18), 1e-5 (L<=24), 1e-6 (deeper) | CaiT, deit cait_models.py |
| lns        | scale = 1/sqrt(l), l = 1..L                      |                                          | LayerNorm-Scaling |
| rezero     | a                                                | 0                                        | Bachlechner et al. 2020 |

Each ``*_site_constants(site)`` returns one wrapping's constants, by name, for the layer described by a
:class:`depthlab.model.wrappings.Site`; the wrapping class names that function as its ``CONSTANTS_AT``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from depthlab.model.layers import Attention, FeedForward
from depthlab.model.positions import RelativeBias


def admin_site_constants(site) -> dict[str, float]:
    """Admin's {"omega"}, n = the residual sublayers of ``site``'s side (2 or 3 per layer)."""
    return {"omega": admin_omega(site.sublayers * site.n_layers)}


def rezero_site_constants(site) -> dict[str, float]:
    """ReZero's {"a": 0}: every branch starts switched off, so each layer is the identity at init."""
    return {"a": 0.0}


def layerscale_site_constants(site) -> dict[str, float]:
    """LayerScale's {"lambda"} by the depth of ``site``'s side (:func:`layerscale_init`)."""
    return {"lambda": layerscale_init(site.n_layers)}


def lns_site_constants(site) -> dict[str, float]:
    """LayerNorm Scaling's {"scale": 1/sqrt(l)} for ``site``'s layer l."""
    return {"scale": lns_scale(site.layer)}


def admin_omega(n_residual_sublayers: int) -> float:
    """Admin's closed-form omega = sqrt((n+1)/ln(n+1) - 1) (admin-torch; n=12 -> 2.017, n=48 -> 3.404)."""
    n = n_residual_sublayers
    return math.sqrt((n + 1) / math.log(n + 1) - 1)


def layerscale_init(n_layers: int) -> float:
    """CaiT's lambda by depth: 0.1 up to 18 layers, 1e-5 up to 24, 1e-6 beyond."""
    return 0.1 if n_layers <= 18 else 1e-5 if n_layers <= 24 else 1e-6


def lns_scale(layer_index: int) -> float:
    """LayerNorm Scaling's 1/sqrt(l) for the 1-based layer index l."""
    return 1.0 / math.sqrt(layer_index)


@torch.no_grad()
def init_weights(
    model: nn.Module, scheme: str, n_layers_total: int, scale_residual: bool = True, std: float = 0.02
) -> None:
    """Initialise every linear and embedding of ``model`` by ``scheme`` (the stack then lets each
    wrapping adjust its own branch: DeepNorm's beta, :func:`scale_deepnorm_branch`).

    ``n_layers_total`` is the L of GPT-2's s/sqrt(2L) residual-projection scaling, applied under gpt2
    when ``scale_residual`` (LayerNorm-Scaling turns it off); ``std`` is s. An untied output head
    (``model.head``) is drawn like the embeddings: N(0, s) under gpt2 and normal (nanoGPT's lm_head),
    N(0, d^-1/2) under xavier (fairseq's unshared output projection); any other linear (a factorised
    embedding's projections) like a hidden layer.
    """
    done: set[int] = set()  # modules initialised with their parent (an Attention's linears, ...)
    for module in model.modules():
        if id(module) in done:
            continue
        if isinstance(module, Attention):
            _init_attention(module, scheme, n_layers_total, scale_residual, std)
        elif isinstance(module, FeedForward):
            _init_linear(module.fc1, scheme, std=std)
            _init_linear(module.fc2, scheme, residual_out=scale_residual, n_layers=n_layers_total, std=std)
        elif isinstance(module, RelativeBias):
            nn.init.normal_(module.bias.weight, std=module.d_model**-0.5 if scheme == "xavier" else std)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std if scheme != "xavier" else module.embedding_dim**-0.5)
        elif isinstance(module, nn.Linear) and module is not getattr(model, "head", None):
            _init_linear(module, scheme, std=std)
        else:
            continue
        done.update(id(m) for m in module.modules())
    head = getattr(model, "head", None)
    tied = any(
        head is not None and head.weight is m.weight for m in model.modules() if isinstance(m, nn.Embedding)
    )
    if isinstance(head, nn.Linear) and not tied:
        nn.init.normal_(head.weight, std=std if scheme != "xavier" else head.in_features**-0.5)
    if isinstance(head, nn.Linear) and head.bias is not None:
        nn.init.zeros_(head.bias)


def _init_linear(
    lin: nn.Linear, scheme: str, residual_out: bool = False, n_layers: int = 1, std: float = 0.02
) -> None:
    if scheme == "xavier":
        nn.init.xavier_uniform_(lin.weight)
    else:
        scaled = residual_out and scheme == "gpt2"
        nn.init.normal_(lin.weight, std=std / math.sqrt(2 * n_layers) if scaled else std)
    if lin.bias is not None:
        nn.init.zeros_(lin.bias)


def _init_attention(
    attn: Attention, scheme: str, n_layers: int, scale_residual: bool = True, std: float = 0.02
) -> None:
    """q, k and v are separate maps, fused for speed: initialise each block on its own fan."""
    fused = attn.kv if attn.cross else attn.qkv
    if attn.cross:
        _init_linear(attn.q, scheme, std=std)
    for block in _row_blocks(fused, attn):
        if scheme == "xavier":
            nn.init.xavier_uniform_(block)
        else:
            nn.init.normal_(block, std=std)
    if fused.bias is not None:
        nn.init.zeros_(fused.bias)
    _init_linear(attn.out, scheme, residual_out=scale_residual, n_layers=n_layers, std=std)


def _row_blocks(fused: nn.Linear, attn: Attention) -> list[torch.Tensor]:
    """Views of the q|k|v (or k|v) row blocks of a fused projection weight."""
    kv = attn.n_kv_heads * attn.head_dim
    sizes = [kv, kv] if attn.cross else [fused.weight.shape[0] - 2 * kv, kv, kv]
    return list(fused.weight.split(sizes, dim=0))


@torch.no_grad()
def scale_deepnorm_branch(f: nn.Module, beta: float) -> None:
    """DeepNorm: multiply the FFN's fc1/fc2 and attention's v and out projections by beta; q, k untouched."""
    if isinstance(f, FeedForward):
        f.fc1.weight.mul_(beta)
        f.fc2.weight.mul_(beta)
    elif isinstance(f, Attention):
        _row_blocks(f.kv if f.cross else f.qkv, f)[-1].mul_(beta)  # v is the last row block
        f.out.weight.mul_(beta)
