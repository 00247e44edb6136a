"""Attention entropy and the largest attention logit of each layer, observed on logged steps.

Neither depthlab's attention (``F.scaled_dot_product_attention``, which returns no weights) nor Hugging
Face's sdpa attention hands out its scores, and model code must not change to give them. So on a logged
step a :class:`torch.overrides.TorchFunctionMode` is active inside each layer's attention module only;
it sees every torch call made there and, at the layer's first

- ``scaled_dot_product_attention(q, k, v, attn_mask, is_causal, scale, enable_gqa)``: recomputes the
  logits s = q k^T * scale (scale 1/sqrt(head_dim) unless given; grouped-query heads repeated) and the
  mask sdpa applies (causal: query i sees keys j <= i; a boolean mask keeps True; a float mask is added);
- ``softmax`` of a 4-D tensor over its last axis (Hugging Face's eager attention: the softmax input *is*
  the masked logits),

takes, per (batch, head, query) row, the entropy H = -sum_j p_j log p_j of the softmax over the keys
the query may see (Zhai et al. 2023: "entropy collapse" toward 0 comes with instability) and the largest
raw logit q.k * scale among them (Dehghani et al. 2023: attention-logit growth; Wortsman et al. 2023).
The model's own call then runs unchanged. Between logged steps no mode is active.

The scores are recomputed for the first ``ROWS`` sequences of the batch only (all of them when the
batch is smaller): the entropy is a mean over queries and the largest logit a maximum, both well
estimated from a few sequences, and the recomputation, as large as eager attention's own per sequence,
is most of what a logged step costs beyond a plain one (benchmarks/telemetry_overhead.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from depthlab.model.layers import Attention, Block
from depthlab.model.precision import without_autocast
from depthlab.watch.dist import all_reduce

_SOFTMAXES = (F.softmax, torch.softmax, torch.Tensor.softmax)
ROWS = 4  # sequences of the batch whose attention scores are recomputed on a logged step


def attention_module(block: nn.Module) -> nn.Module:
    """The self-attention module of a block: depthlab's ``block.attn.f``; elsewhere the first submodule
    whose class name says attention (GPT2Attention, LlamaAttention, BertAttention, ...); else the block."""
    if isinstance(block, Block) and isinstance(block.attn.f, Attention):
        return block.attn.f
    for module in block.modules():
        if module is not block and "attention" in type(module).__name__.lower():
            return module
    if isinstance(block, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
        return block.self_attn
    return block


@torch.no_grad()
def row_stats(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """[sum over rows of the entropy (nats), number of rows, largest allowed logit] as a (3,) float64
    tensor, for ``logits`` (..., S) whose row positions ``allowed`` (broadcastable bool) may be attended;
    rows that may attend nothing are left out."""
    s = logits.float().masked_fill(~allowed, -math.inf)
    live = allowed.expand_as(s).any(-1)
    p = torch.softmax(s, dim=-1)
    entropy = torch.special.entr(p).sum(-1)[live]
    largest = s.amax(-1)[live]
    peak = largest.max() if largest.numel() else torch.tensor(-math.inf, device=s.device)
    return torch.stack(
        [
            entropy.sum().double(),
            torch.tensor(float(entropy.numel()), dtype=torch.float64, device=s.device),
            peak.double(),
        ]
    )


def sdpa_logits(q, k, v=None, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """(raw logits q k^T * scale (B, h, T, S), the allowed positions) of one sdpa call, as sdpa defines
    them (causal = the upper-left triangle; a bool mask keeps True; a float mask adds, -inf or the dtype's
    minimum excluding)."""
    if k.shape[-3] != q.shape[-3]:  # grouped-query attention: each key head serves several query heads
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # float32 even inside a bf16-autocast forward (the tap runs there), where the product would be bf16
    with without_autocast(q.device.type):
        logits = (q.float() @ k.float().transpose(-2, -1)) * scale
    T, S = logits.shape[-2:]
    allowed = torch.ones(T, S, dtype=torch.bool, device=logits.device)
    if is_causal:
        allowed = allowed.tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            allowed = allowed & attn_mask
        else:
            allowed = allowed & (attn_mask > torch.finfo(attn_mask.dtype).min / 2)
            # the added mask shifts what the softmax sees; the raw logit is what the max reports
            return logits, allowed, logits + attn_mask.float()
    return logits, allowed, logits


class AttentionTap(TorchFunctionMode):
    """Active inside one layer's attention module at a time (:meth:`enter` / :meth:`leave`); ``stats[j]``
    is layer j's :func:`row_stats` (of its first attention call in the forward)."""

    def __init__(self):
        super().__init__()
        self.layer: int | None = None
        self.stats: dict[int, torch.Tensor] = {}
        self.handles: list = []

    def attach(self, blocks) -> None:
        """Hooks on each block's attention module (:func:`attention_module`) for one forward."""
        self.stats = {}
        for j, block in enumerate(blocks):
            m = attention_module(block)
            self.handles += [
                m.register_forward_pre_hook(lambda *_, j=j: self.enter(j)),
                m.register_forward_hook(lambda *_: self.leave(), always_call=True),
            ]

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
        self.leave()

    def enter(self, layer: int) -> None:
        self.layer = layer
        self.__enter__()

    def leave(self) -> None:
        if self.layer is not None:
            self.layer = None
            self.__exit__(None, None, None)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        j = self.layer
        if j is not None and j not in self.stats:
            # nothing here may enter autograd: under activation checkpointing a saved tensor more in the
            # first forward than in the recomputation is an error
            with torch.no_grad():
                self._observe(j, func, args, kwargs)
        return func(*args, **kwargs)

    def _observe(self, j: int, func, args, kwargs) -> None:
        if func is F.scaled_dot_product_attention:
            logits, allowed, shifted = sdpa_logits(*_first_rows(args, kwargs))
            self.stats[j] = _stats(logits, shifted, allowed)
        elif func in _SOFTMAXES and _last_axis(args, kwargs) and args[0].ndim == 4:
            x = args[0][:ROWS]
            allowed = x > torch.finfo(x.dtype).min / 2  # HF's masked positions hold the dtype's minimum
            self.stats[j] = row_stats(x, allowed)


def _first_rows(args, kwargs) -> list:
    """sdpa's arguments (q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa) with q, k, v and a
    per-sequence mask cut to the first ROWS sequences."""
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    values = list(args) + [kwargs.get(n) for n in names[len(args) :]]
    values += [None] * (len(names) - len(values))
    n = values[0].shape[0] if values[0].ndim == 4 else None
    for i in range(3):
        if values[i] is not None and values[i].ndim == 4:
            values[i] = values[i][:ROWS]
    mask = values[3]
    if mask is not None and mask.ndim == 4 and mask.shape[0] == n and n is not None and n > 1:
        values[3] = mask[:ROWS]
    values[4] = values[4] or 0.0
    values[5] = bool(values[5])
    values[7] = bool(values[7])
    return values


def _stats(logits: torch.Tensor, shifted: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """row_stats' entropy of the softmax sdpa takes (of ``shifted``) with the max of the raw ``logits``."""
    out = row_stats(shifted, allowed)
    if shifted is not logits:
        out[2] = row_stats(logits, allowed)[2]
    return out


def _last_axis(args, kwargs) -> bool:
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    return dim in (-1, 3)


def layer_values(stats: dict[int, torch.Tensor], n_layers: int) -> list[tuple[float | None, float | None]]:
    """Per layer (entropy mean, max logit), None for a layer whose scores were not seen; ``stats`` are
    already combined over processes (entropy sums and counts summed, maxima maxed)."""
    out = []
    for j in range(n_layers):
        if j not in stats:
            out.append((None, None))
            continue
        total, count, peak = stats[j].tolist()
        out.append((total / count if count else None, peak if math.isfinite(peak) else None))
    return out


def combined_values(stats: dict[int, torch.Tensor], n: int, world: int) -> list[tuple]:
    """:func:`layer_values` of the ``stats`` of each process combined (entropy sums and counts summed,
    maxima maxed over the ``world`` processes)."""
    packed = torch.tensor([[0.0, 0.0, -math.inf]] * n, dtype=torch.float64)
    for j, s in stats.items():
        packed[j] = s.cpu()
    if world > 1:
        packed[:, :2] = all_reduce(packed[:, :2].contiguous())
        packed[:, 2] = all_reduce(packed[:, 2].contiguous(), op="max")
    seen = {j: packed[j] for j in range(n) if packed[j, 1] > 0 or j in stats}
    return layer_values(seen, n)
