"""``explain``: the effective wiring of every layer of a config, as data and as text.

It answers "what does Add & Norm vs pre-LN mean for *my* config": for each sublayer, where the norms
sit, the constants, whether the skip is on; whether a final norm is applied; parameter counts; and
warnings for wiring that the source texts say will not train well.
"""

from __future__ import annotations

from depthlab.config import WRAPPINGS, ModelConfig
from depthlab.model.layers import Attention, FeedForward
from depthlab.model.memory import available_memory, check_memory, estimate_memory
from depthlab.model.stack import build_model, check_config, uses_final_norm
from depthlab.model.wrappings import Wrapping


def explain(cfg: ModelConfig, *, force_memory: bool = False) -> dict:
    """The JSON of ``depthlab explain``: config, final_norm, params, layers, warnings.

    The model is built to read its wiring; a config whose weights would not fit in free memory is
    refused first (InputError with the estimate; ``force_memory`` builds it anyway).

    ``layers[j]`` is {"index", "side", "sublayers"}; each sublayer is {"name", "wrap", "formula",
    "source", "norm_in", "norm_out", "norm_after_add", "residual", "constants"}, read off the
    wrapping's own declaration (:mod:`depthlab.model.wrappings`); ``constants`` maps each of the
    wrapping's depth-dependent constants, by its own name, to its value in this layer.
    """
    check_config(cfg)
    hint = "a smaller --layers or --d-model"
    check_memory(estimate_memory(cfg, "build"), available_memory(), force_memory, hint)
    model = build_model(cfg)
    layers = []
    for side, stack in _stacks(model):
        for i, block in enumerate(stack.layers):
            subs = [_describe(name, w, cfg.norm != "none") for name, w in block.sublayers().items()]
            layers.append({"index": i + 1, "side": side, "sublayers": subs})
    return {
        "config": cfg.to_dict(),
        "final_norm": uses_final_norm(cfg),
        "params": _params(model),
        "layers": layers,
        "warnings": warnings(cfg),
    }


def _stacks(model):
    if hasattr(model, "encoder") and model.cfg.arch != "decoder":
        yield "encoder", model.encoder
    if hasattr(model, "decoder") and model.cfg.arch != "encoder":
        yield "decoder", model.decoder


def _describe(name: str, w: Wrapping, norm_on: bool) -> dict:
    norm_on = norm_on and w.USES_NORM
    return {
        "name": name,
        "wrap": w.name,
        "formula": w.formula_for(w.residual),
        "source": w.SOURCE,
        "norm_in": w.NORM_IN and norm_on,
        "norm_out": w.NORM_OUT and norm_on,
        "norm_after_add": w.NORM_AFTER_ADD and norm_on,
        "residual": w.residual,
        "constants": w.constant_values(),
    }


def _params(model) -> dict:
    """Total parameters, and the weights (no biases) of one layer's FFN and self-attention."""
    ffn = next(m for m in model.modules() if isinstance(m, FeedForward))
    attn = next(m for m in model.modules() if isinstance(m, Attention) and not m.cross)
    total = sum(p.numel() for p in model.parameters())  # tied weights are counted once by parameters()
    return {
        "total": total,
        "ffn_weights": ffn.fc1.weight.numel() + ffn.fc2.weight.numel(),
        "attn_weights": attn.qkv.weight.numel() + attn.out.weight.numel(),
    }


def warnings(cfg: ModelConfig) -> list[str]:
    """Wiring that the literature says trains badly, each with the reason."""
    wrapping = WRAPPINGS[cfg.wrap]
    out = []
    depth = max(cfg.enc_depth, cfg.dec_depth)
    if not uses_final_norm(cfg) and wrapping.final_norm_under_auto(cfg) and cfg.norm != "none":
        out.append(
            f"final norm off with wrap={cfg.wrap}: the stream is never normalised and its scale grows "
            "with depth; the output head reads it raw (every pre-LN model, GPT-2 and LLaMA among them, "
            "ends with a final norm)"
        )
    off = [
        s
        for s in ("attn", "cross", "ffn")
        if s not in cfg.residual and (s != "cross" or cfg.arch == "encdec")
    ]
    if off:
        out.append(
            f"residual off for {', '.join(off)}: the gradient must pass through every such sublayer's "
            "Jacobian, and shrinks geometrically with depth (He et al. 2016; without the attention skip, "
            "positions also collapse to one vector: Dong et al. 2021)"
        )
    if wrapping.DEPTH_WARNING is not None and depth >= wrapping.DEPTH_WARNING[0]:
        out.append(f"{cfg.wrap} at {depth} layers: {wrapping.DEPTH_WARNING[1]}")
    if cfg.norm == "none" and wrapping.USES_NORM and not wrapping.NEEDS_NORM:
        out.append(
            "norm none: nothing resets the scale each sublayer reads, so the stream grows with depth "
            "until float32 overflows"
        )
    if cfg.norm == "batchnorm":
        out.append(
            "batchnorm: statistics depend on the batch and differ between training and inference "
            "(Transformers use LayerNorm or RMSNorm, whose statistics are one token's own); for comparison only"
        )
    return out


def format_explain(info: dict) -> str:
    """A readable per-layer wiring table of :func:`explain`'s result."""
    cfg, p = info["config"], info["params"]
    lines = [
        f"{cfg['arch']}  wrap={cfg['wrap']}  norm={cfg['norm']}  d_model={cfg['d_model']}  heads={cfg['n_heads']}  "
        f"d_ff={cfg['d_ff'] or 4 * cfg['d_model']}",
        f"params: total {p['total']:,}   one FFN {p['ffn_weights']:,} weights   one self-attention "
        f"{p['attn_weights']:,} weights",
        "",
        f"{'layer':>9}  {'sublayer':8} {'wrap':10} {'formula':28} {'skip':5} constants",
    ]
    for side, first, last, subs in _runs(info["layers"]):
        span = f"{first}" if first == last else f"{first}-{last}"
        for s in subs:
            consts = "  ".join(f"{k}={v:.3g}" for k, v in s["constants"].items()) or "-"
            lines.append(
                f"{side[:3] + ' ' + span:>9}  {s['name']:8} {s['wrap']:10} {s['formula']:28} "
                f"{'on' if s['residual'] else 'OFF':5} {consts}"
            )
    lines.append(f"final norm: {'on' if info['final_norm'] else 'off'} (final_norm={cfg['final_norm']})")
    for w in info["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def _runs(layers: list[dict]):
    """Group consecutive layers with identical wiring: (side, first index, last index, sublayers)."""
    runs = []
    for layer in layers:
        if runs and runs[-1][0] == layer["side"] and runs[-1][3] == layer["sublayers"]:
            runs[-1][2] = layer["index"]
        else:
            runs.append([layer["side"], layer["index"], layer["index"], layer["sublayers"]])
    return runs
