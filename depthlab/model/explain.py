"""``explain``: the effective wiring of every layer of a config, as data and as text.

It answers "what does Add & Norm vs pre-LN mean for *my* config": for each sublayer, where the norms
sit, the constants, whether the skip is on; whether a final norm is applied; parameter counts; and
warnings for wiring that the source texts say will not train well.
"""

from __future__ import annotations

from depthlab.config import ModelConfig
from depthlab.model.layers import Attention, FeedForward
from depthlab.model.stack import STREAM_NORMALISED, build_model, uses_final_norm

FORMULAS = {
    "post": "x = LN(x + F(x))",
    "pre": "x = x + F(LN(x))",
    "sandwich": "x = x + LN(F(LN(x)))",
    "reorder": "x = x + LN(F(x))",
    "deepnorm": "x = LN(alpha*x + F(x))",
    "admin": "x = LN(omega*x + F(x))",
    "rezero": "x = x + a*F(x)",
    "layerscale": "x = x + lambda*F(LN(x))",
    "lns": "x = x + F(LN(x)/sqrt(l))",
}


def explain(cfg: ModelConfig) -> dict:
    """The JSON of ``depthlab explain`` (issue 2): config, final_norm, params, layers, warnings."""
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


def _describe(name: str, w, norm_on: bool) -> dict:
    return {
        "name": name,
        "wrap": w.name,
        "norm_in": w.NORM_IN and norm_on,
        "norm_out": w.NORM_OUT and norm_on,
        "norm_after_add": w.NORM_AFTER_ADD and norm_on,
        "residual": w.residual,
        **w.constants(),
        "formula": FORMULAS[w.name]
        if w.residual
        else FORMULAS[w.name].replace("alpha*x + ", "").replace("omega*x + ", "").replace("x + ", ""),
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
    """Wiring that the source texts and the literature say trains badly, each with the reason."""
    out = []
    depth = max(cfg.enc_depth, cfg.dec_depth)
    if not uses_final_norm(cfg) and cfg.wrap not in STREAM_NORMALISED and cfg.norm != "none":
        out.append(
            f"final norm off with wrap={cfg.wrap}: the stream is never normalised and its scale grows "
            "with depth; the output head reads it raw (seed 002: every pre-LN model ends with ln_f)"
        )
    off = [
        s
        for s in ("attn", "cross", "ffn")
        if s not in cfg.residual and (s != "cross" or cfg.arch == "encdec")
    ]
    if off:
        out.append(
            f"residual off for {', '.join(off)}: the gradient must pass through every such sublayer's "
            "Jacobian, and shrinks geometrically with depth (seeds 003, 004)"
        )
    if cfg.wrap == "post" and depth >= 12:
        out.append(
            f"post-LN at {depth} layers: needs a learning-rate warmup and may still diverge "
            "(Xiong et al. 2020; Liu et al. 2020); consider pre, deepnorm or admin"
        )
    if cfg.norm == "none" and cfg.wrap in ("post", "pre", "layerscale"):
        out.append("norm none: nothing resets the scale each sublayer reads (seed 002, Q5)")
    if cfg.norm == "batchnorm":
        out.append(
            "batchnorm: statistics depend on the batch and differ between training and inference "
            "(seed 000); for comparison only"
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
        f"{'layer':>9}  {'sublayer':8} {'wrap':10} {'formula':28} {'skip':5} {'alpha':>7} {'beta':>8}",
    ]
    for side, first, last, subs in _runs(info["layers"]):
        span = f"{first}" if first == last else f"{first}-{last}"
        for s in subs:
            lines.append(
                f"{side[:3] + ' ' + span:>9}  {s['name']:8} {s['wrap']:10} {s['formula']:28} "
                f"{'on' if s['residual'] else 'OFF':5} {_num(s['alpha']):>7} {_num(s['beta']):>8}"
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


def _num(v) -> str:
    return "-" if v is None else f"{v:.3g}"
