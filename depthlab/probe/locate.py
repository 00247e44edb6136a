"""Find the stack of blocks inside a model, and group each block's parameters by sublayer.

The probe works on any model whose layers form one ``nn.ModuleList`` of identical blocks:

| model                                   | stack probed                     | how it is found                 |
|-----------------------------------------|----------------------------------|---------------------------------|
| depthlab ``LanguageModel``              | ``model.stack.layers``           | attribute                       |
| depthlab ``EncoderDecoder``             | the decoder (``model.decoder``)  | attribute (noted in the result) |
| ``torch.nn.TransformerEncoder/Decoder`` | ``.layers``                      | attribute                       |
| ``torch.nn.Transformer``                | ``.decoder.layers``              | attribute (noted in the result) |
| anything else (HF GPT-2, BERT, Llama..) | the largest ModuleList of blocks | search; a ``decoder`` list wins |
|                                         | of one type                      | over an ``encoder`` list        |

Nothing here changes the model: the result only names modules and parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from torch import nn

from depthlab.errors import ConfigError, InputError
from depthlab.model.layers import Block
from depthlab.model.norms import DyT
from depthlab.model.stack import Stack

# Parameter-name patterns of each sublayer kind in foreign blocks (lower-cased names, tried in this
# order: a norm inside BERT's "attention.output.LayerNorm" is a norm, not attention).
_GROUP_PATTERNS = (
    ("norm", re.compile(r"norm|(^|\.)ln_")),
    ("cross", re.compile(r"cross|multihead_attn|encoder_attn|encdec|inter_attn")),
    ("attn", re.compile(r"attn|attention")),
    ("ffn", re.compile(r"mlp|ffn|feed_?forward|intermediate|linear[12]|fc[12]|dense|experts|w[123]\.")),
)


# The sublayer kinds of a block, in order: self-attention, cross-attention, feed-forward.
SUBLAYER_KINDS = ("attn", "cross", "ffn")


@dataclass
class StackInfo:
    """The probed stack: its blocks, where it sits, and each block's parameters by sublayer kind.

    ``groups[j]`` maps a kind ("attn", "cross", "ffn") to the parameters of block j's sublayer of that
    kind; ``layer_params[j]`` are all parameters of block j.
    """

    blocks: nn.ModuleList
    path: str
    kind: str  # "depthlab" | "torch" | "generic" | "given" (named by the caller)
    note: str = ""
    groups: list[dict[str, list[nn.Parameter]]] = field(default_factory=list)
    layer_params: list[list[nn.Parameter]] = field(default_factory=list)
    named: list[dict[str, nn.Module]] = field(default_factory=list)  # per block, the sublayers= modules

    @property
    def group_names(self) -> list[str]:
        """The sublayer kinds present in the blocks, in the order of SUBLAYER_KINDS."""
        present = {k for g in self.groups for k, ps in g.items() if ps}
        return [k for k in SUBLAYER_KINDS if k in present]


def locate_stack(model: nn.Module) -> StackInfo:
    """The stack to probe in ``model`` (see the module table). Raises InputError if there is none."""
    if isinstance(getattr(model, "stack", None), Stack):
        encdec = model.cfg.arch == "encdec"
        path = "decoder.layers" if encdec else f"{model.cfg.arch}.layers"
        note = "encoder-decoder model: probing the decoder stack" if encdec else ""
        return _with_groups(StackInfo(model.stack.layers, path, "depthlab", note))
    if isinstance(model, nn.Transformer):
        note = "nn.Transformer: probing the decoder stack"
        return _with_groups(StackInfo(model.decoder.layers, "decoder.layers", "torch", note))
    if isinstance(model, (nn.TransformerEncoder, nn.TransformerDecoder)):
        return _with_groups(StackInfo(model.layers, "layers", "torch"))
    return _with_groups(_search(model))


def missing_sublayers(info: StackInfo) -> dict[str, str]:
    """Per sublayer kind ("attn", "ffn") the blocks lack, one line saying what was tried and how to name
    it (an empty dict when every kind was found, and for depthlab blocks, whose sublayers are their
    own). Blocks are alike, so the first one speaks for all."""
    if isinstance(info.blocks[0], Block):
        return {}
    block, found = info.blocks[0], info.group_names
    claimed = {id(p) for ps in info.groups[0].values() for p in ps}
    free = {
        n: sum(p.numel() for p in m.parameters())
        for n, m in block.named_children()
        if not is_norm(m) and all(id(p) not in claimed for p in m.parameters())
    }
    free = {n: size for n, size in free.items() if size}
    out = {}
    for kind, what in (("attn", "attention"), ("ffn", "feed-forward")):
        if kind in found:
            continue
        # the example: attention usually comes first in a block, the FFN is usually its largest part
        pick = next(iter(free), "NAME") if kind == "attn" else max(free, key=free.get, default="NAME")
        example = pick
        out[kind] = (
            f"no {what} sublayer found in the blocks of {info.path} ({type(block).__name__}): no parameter "
            f"name matched {_pattern(kind)!r} (submodules no sublayer claims: {', '.join(free) or 'none'}); "
            f"its {kind}_grad_norm stays None. Name it: sublayers={{{kind!r}: {example!r}}} (a submodule "
            f"of each block, or a list of them), or sublayers=lambda block: {{{kind!r}: block.{example}}}"
        )
    return out


def _pattern(kind: str) -> str:
    return next(p.pattern for k, p in _GROUP_PATTERNS if k == kind)


def with_sublayers(info: StackInfo, sublayers) -> StackInfo:
    """``info`` with the sublayer groups a user names: ``sublayers`` maps a kind of SUBLAYER_KINDS to a
    submodule's dotted name inside each block (or a list of names: the sublayer is all of them), or is a
    callable ``block -> {kind: module}``. Kinds not
    named keep their groups. Raises ConfigError / InputError (one line) for a bad kind or name."""
    if sublayers is None:
        return info
    if not (callable(sublayers) or isinstance(sublayers, dict)):
        raise ConfigError("sublayers", sublayers, "a dict {'attn': NAME, 'ffn': NAME} or a callable")
    info.named = []
    for j, block in enumerate(info.blocks):
        given = sublayers(block) if callable(sublayers) else sublayers
        modules = {}
        for kind, spec in dict(given).items():
            if kind not in SUBLAYER_KINDS:
                raise ConfigError("sublayers", kind, f"a sublayer kind: one of {', '.join(SUBLAYER_KINDS)}")
            specs = spec if isinstance(spec, (list, tuple)) else [spec]
            found = [m if isinstance(m, nn.Module) else _submodule(block, m, info.path, j) for m in specs]
            modules[kind] = found[0] if len(found) == 1 else nn.ModuleList(found)
        # a parameter belongs to the sublayer named for it, never also to another kind
        claimed = {id(p) for m in modules.values() for p in m.parameters()}
        group = {k: [p for p in ps if id(p) not in claimed] for k, ps in info.groups[j].items()}
        group.update({k: list(m.parameters()) for k, m in modules.items()})
        info.groups[j] = {k: v for k, v in group.items() if v}
        info.named.append(modules)
    return info


def _submodule(block: nn.Module, name, path: str, j: int) -> nn.Module:
    try:
        return block.get_submodule(str(name))
    except AttributeError:
        children = ", ".join(n for n, _ in block.named_children()) or "none"
        raise InputError(
            f"sublayers: block {j} of {path} has no submodule {name!r} (its submodules: {children})"
        ) from None


def stack_of(blocks, path: str = "blocks") -> StackInfo:
    """The StackInfo of blocks a user names (``blocks=model.layers``): any sequence of modules."""
    blocks = blocks if isinstance(blocks, nn.ModuleList) else nn.ModuleList(list(blocks))
    if not len(blocks):
        raise InputError("blocks: the list of blocks is empty")
    return _with_groups(StackInfo(blocks, path, "given"))


def _search(model: nn.Module) -> StackInfo:
    """The ModuleList of identical blocks with the most parameters; a decoder list wins over an encoder's."""
    lists = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, nn.ModuleList) and len(m) and len({type(c) for c in m}) == 1 and _n_params(m)
    ]
    # drop lists nested inside another candidate (a block's own list of heads or experts)
    top = [(n, m) for n, m in lists if not any(n.startswith(o + ".") for o, _ in lists if o != n)]
    if not top:
        raise InputError(
            f"{type(model).__name__}: found no stack of blocks (tried: a depthlab model's stack, "
            "torch.nn.Transformer*, and any nn.ModuleList of identical blocks with parameters); name "
            "them: blocks=model.layers"
        )
    decoders = [(n, m) for n, m in top if "decoder" in n.lower()]
    note = ""
    if decoders and any("encoder" in n.lower() for n, _ in top):
        top, note = decoders, "encoder-decoder model: probing the decoder stack"
    name, blocks = max(top, key=lambda nm: _n_params(nm[1]))
    return StackInfo(blocks, name, "generic", note)


def _n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def _with_groups(info: StackInfo) -> StackInfo:
    """Fill ``groups`` and ``layer_params``: depthlab blocks by their sublayers, others by parameter name."""
    for block in info.blocks:
        if isinstance(block, Block):
            # the sublayer F's own weights (Xiong et al. 2020, Fig. 3), not the wrapping's norms or scalars
            groups = {k: list(w.f.parameters()) for k, w in block.sublayers().items()}
        else:
            groups = {kind: [] for kind in SUBLAYER_KINDS}
            for name, p in block.named_parameters():
                kind = param_kind(name)
                if kind in groups:
                    groups[kind].append(p)
        info.groups.append({k: v for k, v in groups.items() if v})
        info.layer_params.append(list(block.parameters()))
    return info


def param_kind(name: str) -> str:
    """ "norm", "cross", "attn", "ffn" or "other" for a parameter name inside a block (lower-cased match)."""
    lowered = name.lower()
    for kind, pattern in _GROUP_PATTERNS:
        if pattern.search(lowered):
            return kind
    return "other"


def is_norm(module: nn.Module) -> bool:
    """True for normalisation modules: DyT, and any class whose name says Norm (LayerNorm, RMSNorm, ...)
    whose parameters are all gains or biases (at most 1-D), so that a block or wrapping named after a
    norm (``LayerNormScaling``) is not taken for one."""
    if isinstance(module, DyT):
        return True
    return "norm" in type(module).__name__.lower() and all(p.ndim <= 1 for p in module.parameters())
