"""What a residual topology does to depth, read off one forward pass through its named points.

For a depthlab model whose wrapping carries a state (:mod:`depthlab.model.state`), per layer boundary i:

| key                 | meaning                                                                         |
|---------------------|---------------------------------------------------------------------------------|
| composite_gain      | max |row sum| of C_i = H_res(i) ... H_res(1), the product of every sublayer's    |
|                     | H_res up to layer i: how much the skip paths can amplify the stream (forward;   |
|                     | mHC's "Amax gain", Xie et al. 2025); the largest over tokens                    |
| composite_gain_back | max |column sum| of C_i: the same for the gradient flowing back                  |
| h_res_distance      | ||H_res - I||_F of layer i's sublayers (mean over them and the tokens): has     |
|                     | H_res left the identity it starts at?                                           |
| contribution        | ||what layer i wrote, carried to the top by the linear skip paths|| / ||top||: |
|                     | how diluted its write is in the final state (pre-LN: ||x_i - x_{i-1}|| / ||x_L||) |
| aggregation_entropy | the entropy of the weights layer i reads earlier layers with (DenseFormer's     |
|                     | |alpha| normalised, AttnRes's softmax, per token), nats                          |
| effective_depth     | exp(aggregation_entropy): how many earlier layers it effectively averages       |

Nothing here changes the model: hooks on the blocks, the ``mix`` modules (H_pre, H_post, H_res), the
``read`` modules (the weights over depth) and each sublayer F record one pass, under ``torch.no_grad``.
"""

from __future__ import annotations

import math
from contextlib import ExitStack

import torch
from torch import nn

from depthlab.model.precision import without_autocast
from depthlab.model.sinkhorn import stochastic_error
from depthlab.model.stack import Stack
from depthlab.model.state import Dense, Depth, DepthAttention, Fractions, Streams
from depthlab.model.wrapping_base import Wrapping

KEYS = (
    "composite_gain",
    "composite_gain_back",
    "h_res_distance",
    "contribution",
    "aggregation_entropy",
    "effective_depth",
)
REPORTED = {
    "Streams": "the sum of the {n} streams (the state's own reduction); grad_norm over all {n}",
    "Fractions": "the {n} fractions concatenated",
    "DenseHistory": "Y_i, the stream the next block reads (after block i's weighted average)",
    "DepthHistory": "h, the last aggregate over depth a sublayer of the layer read",
    "FirstValue": "the stream (the first layer's values are carried beside it)",
}


def stack_state(model: nn.Module) -> nn.Module | None:
    """The residual state module of a depthlab model's probed stack, or None (one stream, or not ours)."""
    stack = getattr(model, "stack", None)
    return stack.state if isinstance(stack, Stack) else None


def view_of(model: nn.Module):
    """The function that turns a captured block output (a tuple state's first element is captured
    already) into the reported (B, T, d) stream: the n streams' reduction; else the tensor itself."""
    state = stack_state(model)
    return state.view if isinstance(state, Streams) else (lambda x: x)


def describe(model: nn.Module) -> dict | None:
    """config["stack"]["state"] of the probe JSON: the design, the state in words, how one stream per
    boundary is reported. None for a single stream."""
    state = stack_state(model)
    if state is None:
        return None
    n = getattr(state, "n", None)
    name = type(state).__name__
    return {
        "design": model.cfg.wrap,
        "state": state.WORDS.format(n=n),
        "reported": REPORTED[name].format(n=n),
    }


@torch.no_grad()
def measure_topology(model: nn.Module, call) -> tuple[list[dict], dict]:
    """(one dict of :data:`KEYS` per layer boundary, extra config) of one forward ``call()`` of ``model``
    (a depthlab model); single-stream models get only ``contribution`` where their skip is the identity."""
    tap = TopologyTap(model.stack)
    tap.start()
    try:
        call()
    finally:
        rec = tap.stop()
    return summarise(model.stack, rec)


@torch.no_grad()
def summarise(stack: Stack, rec: dict) -> tuple[list[dict], dict]:
    """The rows and extra config of one recorded pass (:class:`TopologyTap`), in float32 even under
    autocast: the watcher takes a logged step's record inside the training forward, where bf16 autocast
    would round the product of the H_res maps at every sublayer (2.8% off after 24 of them)."""
    with without_autocast(next(stack.parameters()).device.type):
        return _summarise(stack, rec)


def _summarise(stack: Stack, rec: dict) -> tuple[list[dict], dict]:
    rows = [dict.fromkeys(KEYS) for _ in range(len(stack.layers) + 1)]
    extra: dict = {}
    if not rec["outs"]:
        return rows, extra
    if isinstance(stack.state, (Streams, Fractions)):
        extra = _hyper(stack, rec, rows)
    elif stack.state is None:
        _single(stack, rec, rows)
    elif isinstance(rec["outs"][0], Dense):
        _dense(stack, rec, rows)
    elif isinstance(rec["outs"][0], Depth):
        extra = _depth(stack, rec, rows)
    else:  # the value residual: a stream like pre-LN's
        _single(stack, rec, rows, view=stack.state.view)
    for row in rows:
        if row["aggregation_entropy"] is not None:
            row["effective_depth"] = math.exp(row["aggregation_entropy"])
    return rows, extra


class TopologyTap:
    """Hooks that record one pass: each block's input and output state, each sublayer's write m F(.),
    each mix's maps (H_pre, H_post, H_res) and each read's weights over depth, in call order.
    ``start()`` before a forward, ``stop()`` after it (returns the record and removes the hooks)."""

    def __init__(self, stack: Stack):
        self.stack, self.hooks, self.rec = stack, ExitStack(), None

    def start(self) -> None:
        rec = self.rec = {"ins": [], "outs": [], "writes": [], "maps": [], "reads": []}
        hook = self.hooks.callback
        for block in self.stack.layers:
            hook(block.register_forward_pre_hook(lambda m, a: rec["ins"].append(a[0])).remove)
            hook(block.register_forward_hook(lambda m, a, o: rec["outs"].append(o)).remove)
        for w in (m for m in self.stack.layers.modules() if isinstance(m, Wrapping)):
            note = lambda m, a, o, w=w: rec["writes"].append(o.detach() * w.branch_multiplier)  # noqa: E731
            hook(w.f.register_forward_hook(note).remove)
            if isinstance(getattr(w, "mix", None), nn.Module):
                hook(
                    w.mix.register_forward_hook(
                        lambda m, a, o: rec["maps"].append([t.detach() for t in o])
                    ).remove
                )
        for r in (m for m in self.stack.modules() if isinstance(m, DepthAttention)):
            hook(r.register_forward_hook(lambda m, a, o: rec["reads"].append(o[1].detach())).remove)

    def stop(self) -> dict:
        self.hooks.close()
        rec, self.rec = self.rec, None
        return rec


def watch_summary(stack: Stack, rec: dict) -> dict:
    """A logged step's ``topology`` record (depthlab.watch): per layer boundary the composite gains,
    H_res's distance from the identity and the effective depth of the reads; mHC's Sinkhorn error."""
    rows, extra = summarise(stack, rec)
    keys = ("composite_gain", "composite_gain_back", "h_res_distance", "effective_depth")
    out = {k: [r[k] for r in rows] for k in keys if any(r[k] is not None for r in rows)}
    return {**out, **{k: v for k, v in extra.items() if k == "sinkhorn_error"}}


def _per_layer(items: list, L: int) -> list[list]:
    """``items`` (one per sublayer, in order) grouped by layer."""
    k = len(items) // L
    return [items[i * k : (i + 1) * k] for i in range(L)]


def _hyper(stack: Stack, rec: dict, rows: list[dict]) -> dict:
    L, n = len(stack.layers), stack.state.n
    res = [m[2].float().expand(*rec["ins"][0].shape[:2], n, n) for m in rec["maps"]]  # (B, T, n, n) each
    eye = torch.eye(n, device=res[0].device)  # on the maps' device (a GPU model's too)
    composite = eye.expand_as(res[0])
    for i, layer_res in enumerate(_per_layer(res, L), 1):
        for r in layer_res:
            composite = r @ composite  # C = H_res(s) C
        rows[i]["composite_gain"] = float(composite.abs().sum(-1).amax())  # rows: forward
        rows[i]["composite_gain_back"] = float(composite.abs().sum(-2).amax())  # columns: backward
        rows[i]["h_res_distance"] = sum(float((r - eye).norm(dim=(-2, -1)).mean()) for r in layer_res) / len(
            layer_res
        )
    # contributions: carry each write to the top through the later H_res (suffix products, top down)
    top = stack.state(rec["outs"][-1]).float()
    carried, after = [], eye.expand_as(res[0])
    for y, (_, post, r) in zip(reversed(rec["writes"]), reversed(rec["maps"]), strict=True):
        written = post.float().unsqueeze(-1) * y.float().unflatten(-1, (-1, rec["ins"][0].shape[-1]))
        carried.append(stack.state(after @ written))
        after = after @ r.float()
    carried.reverse()
    for i, parts in enumerate(_per_layer(carried, L), 1):
        rows[i]["contribution"] = float(sum(parts).norm() / top.norm())
    return (
        {"sinkhorn_error": max(max(stochastic_error(m[2])) for m in rec["maps"])}
        if _constrained(stack)
        else {}
    )


def _constrained(stack: Stack) -> bool:
    return any(getattr(m, "form", "") == "mhc" for m in stack.modules())


def _single(stack: Stack, rec: dict, rows: list[dict], view=lambda x: x) -> None:
    """x + F(...): layer i wrote x_i - x_{i-1}, which reaches x_L unchanged (no norm on the stream)."""
    wrapping = stack.layers[0].attn
    if wrapping.NORM_AFTER_ADD or not rec["outs"]:
        return
    xs = [view(rec["ins"][0])] + [view(o) for o in rec["outs"]]
    top = xs[-1].float().norm()
    for i in range(1, len(xs)):
        rows[i]["contribution"] = float((xs[i] - xs[i - 1]).float().norm() / top)


def _dense(stack: Stack, rec: dict, rows: list[dict]) -> None:
    """b_i = X_i - Y_{i-1} reaches Y_L with coefficient d_L(i), the sum over skip paths of alpha products."""
    L = len(stack.layers)
    alphas = [
        (layer.ffn.alpha.tolist(), layer.ffn.sources) if layer.ffn.sources else None for layer in stack.layers
    ]
    top = rec["outs"][-1].stream.float().norm()
    for i in range(1, L + 1):
        c = {i: 1.0}  # coefficient of b_i in X_j
        d = 1.0
        for j in range(i, L + 1):
            d = sum(a * c.get(k, 0.0) for a, k in zip(*alphas[j - 1])) if alphas[j - 1] else c[j]
            c[j + 1] = d  # X_{j+1} = Y_j + b_{j+1}
        b = rec["outs"][i - 1].outputs[-1] - rec["ins"][i - 1].stream
        rows[i]["contribution"] = float(abs(d) * b.float().norm() / top)
        if alphas[i - 1]:
            p = torch.tensor(alphas[i - 1][0]).abs()
            rows[i]["aggregation_entropy"] = _entropy(p / p.sum())


def _depth(stack: Stack, rec: dict, rows: list[dict]) -> dict:
    """Entropy of each sublayer's softmax over depth; the direct path of each output to the final read
    (a sublayer's output sits in its block's summary, value 1 + s // block size)."""
    L = len(stack.layers)
    reads, final = rec["reads"][:-1], rec["reads"][-1]  # the stack's own read comes last
    for i, layer_reads in enumerate(_per_layer(reads, L), 1):
        rows[i]["aggregation_entropy"] = sum(_entropy(w, dim=0) for w in layer_reads) / len(layer_reads)
    state, size = rec["outs"][-1], stack.layers[0].attn.block
    top = stack.state(state).float().norm()
    owned = [(1 + s // size, y) for s, y in enumerate(rec["writes"])]
    for i, parts in enumerate(_per_layer(owned, L), 1):
        carried = sum(final[b].unsqueeze(-1) * y for b, y in parts)
        rows[i]["contribution"] = float(carried.float().norm() / top)
    return {"final_entropy": _entropy(final, dim=0), "values": len(state.values)}


def attach(model: nn.Module, call, rows: list[dict], stack_config: dict) -> None:
    """Add the topology's keys to the probe's ``rows`` and its description to ``stack_config`` (the
    probe JSON's config["stack"]["state"]); nothing for a single stream, whose JSON stays as it was."""
    described = describe(model)
    if described is None:
        return
    topo, extra = measure_topology(model, call)
    for row, t in zip(rows, topo, strict=True):
        row.update(t)
    stack_config["state"] = {**described, **extra}


def _entropy(p: torch.Tensor, dim: int = -1) -> float:
    """Mean entropy (nats) of the distributions along ``dim``."""
    p = p.float().clamp_min(1e-30)
    return float(-(p * p.log()).sum(dim).mean())
