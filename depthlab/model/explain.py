"""``explain``: the effective wiring of every layer of a config, as data and as text.

It answers "what does Add & Norm vs pre-LN mean for *my* config": for each sublayer, where the norms
sit, the constants, whether the skip is on; whether a final norm is applied; parameter counts; and
warnings for wiring that the source texts say will not train well. In a notebook the result displays
itself as the wiring table (:class:`Wiring`).
"""

from __future__ import annotations

import re

from depthlab.config import WRAPPINGS, ModelConfig, TrainConfig
from depthlab.display import LEVEL_COLOURS, badge, block, esc, para, table
from depthlab.errors import option_list
from depthlab.frames import to_frame
from depthlab.model import parametrization
from depthlab.model.layers import Attention, FeedForward
from depthlab.model.memory import available_memory, check_line, check_memory, estimate_memory
from depthlab.model.param_groups import group_table
from depthlab.model.stack import build_model, check_config_type, uses_final_norm
from depthlab.model.topology_base import topology_summary
from depthlab.model.wrappings import Wrapping

# The columns of ``Wiring.to_pandas()``: one row per layer and sublayer, the sublayer's keys of the
# explain JSON; "layer" is the layer's index (1 = the bottom layer) on its side (encoder or decoder).
FRAME = ("side", "layer", "name", "wrap", "formula", "source", "norm_in", "norm_out", "norm_after_add",
         "residual", "constants")  # fmt: skip


class Wiring(dict):
    """The JSON of ``depthlab explain`` (a dict: ``json.dumps`` writes it unchanged) that also shows
    itself: a one-line repr, the wiring table in a notebook, ``format()`` (the text of ``depthlab
    explain``) and ``to_pandas()`` (the columns of ``FRAME``)."""

    def format(self) -> str:
        return format_explain(self)

    def to_pandas(self):
        """A DataFrame with a row per layer and sublayer (columns ``FRAME``)."""
        rows = [
            {**s, "side": lay["side"], "layer": lay["index"]}
            for lay in self["layers"]
            for s in lay["sublayers"]
        ]
        return to_frame(rows, FRAME)

    def __repr__(self) -> str:
        cfg = self["config"]
        return (
            f"<Wiring {cfg['arch']} wrap={cfg['wrap']} norm={cfg['norm']}: {len(self['layers'])} layers, "
            f"{self['params']['total']:,} parameters, final norm {'on' if self['final_norm'] else 'off'}, "
            f"{len(self['warnings'])} warnings>"
        )

    def _repr_html_(self) -> str:
        """The config line, the parameter counts, a row per run of identically wired layers, the final
        norm and the warnings."""
        head, *_ = format_explain(self).splitlines()
        p = self["params"]
        rows = [
            [
                esc(f"{side} {first}" if first == last else f"{side} {first}-{last}"),
                esc(s["name"]),
                esc(s["wrap"]),
                f"<code>{esc(s['formula'])}</code>",
                "on" if s["residual"] else badge("OFF", LEVEL_COLOURS["error"]),
                esc("  ".join(f"{k}={v:.3g}" for k, v in s["constants"].items()) or "-"),
            ]
            for side, first, last, subs in _runs(self["layers"])
            for s in subs
        ]
        warnings_ = [
            f"<p>{badge('warning', LEVEL_COLOURS['warning'])} {esc(w)}</p>" for w in self["warnings"]
        ]
        return block(
            "depthlab explain",
            para(head),
            para(
                f"parameters: {p['total']:,} in all; one FFN {p['ffn_weights']:,} weights, one "
                f"self-attention {p['attn_weights']:,} weights"
            ),  # fmt: skip
            para(f"memory: {check_line(self['memory'], self['memory']['available'])}"),
            table(["layers", "sublayer", "wrap", "formula", "skip", "constants"], rows),
            para(
                f"final norm: {'on' if self['final_norm'] else 'off'} (final_norm={self['config']['final_norm']})"
            ),
            *warnings_,
        )


def explain(cfg: ModelConfig, *, force_memory: bool = False) -> Wiring:
    """The JSON of ``depthlab explain`` (as a :class:`Wiring`): config, final_norm, params, memory,
    layers, warnings.

    The model is built to read its wiring; a config whose weights would not fit in free memory is
    refused first (InputError with the estimate; ``force_memory`` builds it anyway). ``memory`` is that
    estimate (:meth:`depthlab.model.memory.MemoryEstimate.to_dict`) with the free memory it was checked
    against ("available", bytes; None when unknown).

    ``layers[j]`` is {"index", "side", "sublayers"}; each sublayer is {"name", "wrap", "formula",
    "source", "norm_in", "norm_out", "norm_after_add", "residual", "constants"}, read off the
    wrapping's own declaration (:mod:`depthlab.model.wrappings`); ``constants`` maps each of the
    wrapping's depth-dependent constants, by its own name, to its value in this layer, and "m" to the
    branch multiplier where a parametrization makes it other than 1 (the formula then shows m).
    """
    check_config_type(cfg)
    hint = f"a smaller {option_list('layers', 'd_model')}"
    estimate, free = estimate_memory(cfg, "build"), available_memory()
    check_memory(estimate, free, force_memory, hint)
    model = build_model(cfg)
    layers = []
    for side, stack in _stacks(model):
        for i, layer in enumerate(stack.layers):
            subs = [_describe(name, w, cfg.norm != "none") for name, w in layer.sublayers().items()]
            layers.append({"index": i + 1, "side": side, "sublayers": subs})
    topology = topology_summary(model)  # a residual topology's state and parameters; absent for one stream
    return Wiring(
        **({"topology": topology} if topology else {}),
        config=cfg.to_dict(),
        wiring=wiring_summary(cfg),
        init=init_summary(cfg),
        parametrization={
            **parametrization.describe(cfg),
            "summary": param_summary(cfg),
            "groups": group_table(model, TrainConfig().lr, weight_decay=1.0, eps=TrainConfig().eps),
        },
        final_norm=uses_final_norm(cfg),
        params=_params(model),
        memory={**estimate.to_dict(), "available": free},
        layers=layers,
        warnings=warnings(cfg),
    )


def wiring_summary(cfg: ModelConfig) -> str:
    """The wiring in one line of depthlab's words: wrapping, norm, FFN, positions and every family option
    that is set ("sandwich, rmsnorm (1 + w), geglu_tanh FFN, rope, attention soft-cap 50, ...")."""
    norm = cfg.norm + (" (1 + w)" if cfg.family.gain_offset else "")
    parts = [cfg.wrap, norm, f"{cfg.activation} FFN", _position_words(cfg)]
    if cfg.qk_norm:
        parts.append(f"QK-norm per {'head' if cfg.family.qk_norm_scope == 'head' else 'whole projection'}")
    if cfg.family.d_head is not None:
        parts.append(f"head width {cfg.family.d_head}")
    if cfg.kv_heads != cfg.n_heads:
        parts.append(f"{cfg.kv_heads} kv heads")
    if cfg.family.attn_scale is not None:
        parts.append(f"scores x {cfg.family.attn_scale:.4g}")
    for name, what in (("attn_softcap", "attention soft-cap"), ("logit_softcap", "logit soft-cap")):
        if getattr(cfg.family, name) is not None:
            parts.append(f"{what} {getattr(cfg.family, name):g}")
    if cfg.family.sliding_window is not None:
        k = cfg.family.global_every
        every = f"every {k}{_ordinal(k)} layer global" if k else "on every layer"
        parts.append(f"sliding window {cfg.family.sliding_window} ({every})")
    parts += [words for flag, words in _FLAG_WORDS if getattr(cfg.family, flag)]
    if cfg.family.d_embed:
        parts.append(f"{cfg.family.d_embed}-wide embedding projected in and out")
    if cfg.family.biases is not None:
        parts.append(f"biases on {', '.join(cfg.family.biases) or 'nothing'}")
    elif not cfg.bias:
        parts.append("no biases")
    return ", ".join(parts)


_FLAG_WORDS = (
    ("embed_norm", "embedding norm"),
    ("side_embeddings", "decoder positions and embedding norm of its own"),
    ("head_scale", "head reads x d^-1/2"),
)


def _ordinal(k: int) -> str:
    return "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")


def _position_words(cfg: ModelConfig) -> str:
    if cfg.position == "rope":
        part = f" on {cfg.family.rope_dims} of {cfg.head_dim} features" if cfg.family.rope_dims else ""
        local = f", {cfg.family.rope_local_base:g} on local layers" if cfg.family.rope_local_base else ""
        return f"rope{part} (base {cfg.rope_base:g}{local})"
    if cfg.position == "relative":
        return f"relative position buckets ({cfg.family.rel_buckets}, max distance {cfg.family.rel_max_distance})"
    return f"{cfg.position} positions"


def init_summary(cfg: ModelConfig) -> str:
    """The init conventions, which decide the stream's scale at init as much as the wrapping:
    "xavier, tied head, embeddings x sqrt(d)" or "normal(0.02), untied head, embeddings x 1"."""
    scheme = cfg.init if cfg.init == "xavier" else f"{cfg.init}({cfg.family.init_std:g})"
    head = "tied head" if cfg.tie_embeddings else "untied head"
    return f"{scheme}, {head}, embeddings x {'sqrt(d)' if cfg.embed_scale else '1'}"


def param_summary(cfg: ModelConfig) -> str:
    """The parametrization in one line: "sp" or "completep relative to width 64, depth 2: branch x0.25 ..."
    (the multipliers of the deepest stack)."""
    if cfg.param == "sp":
        return "sp (the standard parametrization: no width or depth scaling)"
    d = parametrization.describe(cfg)
    m = parametrization.multipliers(cfg, max(cfg.side_depths))
    base = f"width {d['base_width']}" + (
        f", depth {d['base_depth']}" if parametrization.scales_depth(cfg) else ""
    )
    return f"{cfg.param} relative to {base}: {parametrization.format_multipliers(m)}"


def _stacks(model):
    if hasattr(model, "encoder") and model.cfg.arch != "decoder":
        yield "encoder", model.encoder
    if hasattr(model, "decoder") and model.cfg.arch != "encoder":
        yield "decoder", model.decoder


def _describe(name: str, w: Wrapping, norm_on: bool) -> dict:
    norm_on = norm_on and w.USES_NORM
    formula = w.formula()
    return {
        "name": name,
        "wrap": w.name,
        "formula": formula if norm_on else without_norm(formula),
        "source": w.SOURCE,
        "norm_in": w.NORM_IN and norm_on,
        "norm_out": w.NORM_OUT and norm_on,
        "norm_after_add": w.NORM_AFTER_ADD and norm_on,
        "residual": w.residual,
        # the branch multiplier beside the constants where it is not 1 (its formula then shows m)
        "constants": w.constant_values() | ({"m": w.branch_multiplier} if w.branch_multiplier != 1.0 else {}),
    }


def without_norm(formula: str) -> str:
    """The formula of a stack whose norm is none (an identity): every ``LN(...)`` and ``LN_i(...)``
    replaced by its argument, "x = LN(x + F(x))" -> "x = x + F(x)"."""
    out, i = "", 0
    while (m := _NORM_CALL.search(formula, i)) is not None:
        depth, j = 1, m.end()
        while depth:  # the call's closing parenthesis
            depth += {"(": 1, ")": -1}.get(formula[j], 0)
            j += 1
        out += formula[i : m.start()] + without_norm(formula[m.end() : j - 1])
        i = j
    return out + formula[i:]


_NORM_CALL = re.compile(r"\bLN(_i)?\(")  # a norm applied in a wrapping's formula: LN(...), LN_i(...)


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
    lines = _family_lines(info.get("family")) + [
        f"{cfg['arch']}  wrap={cfg['wrap']}  norm={cfg['norm']}  d_model={cfg['d_model']}  heads={cfg['n_heads']}  "
        f"d_ff={cfg['d_ff'] or 4 * cfg['d_model']}",
        f"wiring: {info['wiring']}",
        f"init: {info['init']}",
        f"parametrization: {info['parametrization']['summary']}",
        *_group_lines(info["parametrization"]["groups"]),
        f"params: total {p['total']:,}   one FFN {p['ffn_weights']:,} weights   one self-attention "
        f"{p['attn_weights']:,} weights",
        f"memory: {check_line(info['memory'], info['memory']['available'])}",
        "",
    ]
    rows = [
        (f"{side[:3]} {first}" + (f"-{last}" if last != first else ""), s)
        for side, first, last, subs in _runs(info["layers"])
        for s in subs
    ]
    # each column as wide as its longest entry (dec 100-128, parallel_shared, a topology's formula), at
    # least as wide as its usual entries
    at = max(9, *(len(span) for span, _ in rows))
    wrap = max(10, *(len(s["wrap"]) for _, s in rows))
    formula = max(28, *(len(s["formula"]) for _, s in rows))
    lines.append(
        f"{'layer':>{at}}  {'sublayer':8} {'wrap':{wrap}} {'formula':{formula}} {'skip':5} constants"
    )
    for span, s in rows:
        consts = "  ".join(f"{k}={v:.3g}" for k, v in s["constants"].items()) or "-"
        lines.append(
            f"{span:>{at}}  {s['name']:8} {s['wrap']:{wrap}} {s['formula']:{formula}} "
            f"{'on' if s['residual'] else 'OFF':5} {consts}"
        )
    lines.append(f"final norm: {'on' if info['final_norm'] else 'off'} (final_norm={cfg['final_norm']})")
    lines += _topology_lines(info.get("topology"))
    for w in info["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def _topology_lines(t: dict | None) -> list[str]:
    """A residual topology's state, read and write, and its parameters beyond pre-LN's."""
    if not t:
        return []
    opts = "  ".join(f"{k}={v}" for k, v in t["options"].items())
    extra = ", ".join(f"{name} {n:,}" for name, n in t["extra_parameters"].items()) or "none"
    return [
        f"residual state ({t['design']}, {t['source']}): {t['state']}" + (f"  [{opts}]" if opts else ""),
        f"  each sublayer reads {t['reads']}; writes {t['writes']}",
        f"  parameters beyond pre-LN's: {t['extra_total']:,} ({extra})",
        f"  reference: {t['references']}",
    ]


def _group_lines(groups: list[dict]) -> list[str]:
    """One line per optimizer group: its lr and eps at the default lr and eps, its weight decay as a
    multiple of --weight-decay."""
    t = TrainConfig()
    lines = [f"optimizer groups at training's default lr {t.lr:g} and eps {t.eps:g} (each scales with them):"]
    for g in groups:
        lines.append(
            f"  {g['name']:22} {g['tensors']:>4} tensors  lr {g['lr']:.4g}  eps {g['eps']:.3g}  "
            f"weight decay x{g['weight_decay']:.3g}"
        )
    return lines


def _family_lines(family: dict | None) -> list[str]:
    """The lines of an imported family (``explain --hf``): name, source, changes, what is exact."""
    if not family:
        return []
    changed = f"; re-wired: {', '.join(family['changed'])}" if family["changed"] else ""
    lines = [f"{family['name']} (model_type {family['model_type']}, from {family['path']}){changed}"]
    lines.append(f"imported exactly: {family['exact']}")
    if family["approximated"]:
        lines.append(f"limits: {family['approximated']}")
    return lines


def _runs(layers: list[dict]):
    """Group consecutive layers with identical wiring: (side, first index, last index, sublayers)."""
    runs = []
    for layer in layers:
        if runs and runs[-1][0] == layer["side"] and runs[-1][3] == layer["sublayers"]:
            runs[-1][2] = layer["index"]
        else:
            runs.append([layer["side"], layer["index"], layer["index"], layer["sublayers"]])
    return runs
