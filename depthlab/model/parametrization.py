"""Parametrizations: how multipliers, init and per-group Adam settings scale with width and depth.

``ModelConfig.param`` names the rule set, ``base_width``/``base_depth`` the shape it is relative to
(None: the model's own, so that axis is not scaled). With m_w = d_model / base_width and
m_L = L / base_depth (L the depth of the stack a layer is in):

| quantity                     | sp  | mup                 | depth_mup (alpha = 1/2)    | completep (alpha = 1)     |
|------------------------------|-----|---------------------|----------------------------|---------------------------|
| residual branch multiplier   | 1   | 1                   | m_L^-1/2                   | m_L^-1                    |
| output logits (head input)   | 1   | x 1/m_w (tied: c/m_w) | x 1/m_w (tied: c/m_w)    | x 1/m_w (tied: c/m_w)     |
| attention score scale        | s   | s x m_w^-1/2        | s x m_w^-1/2               | s x m_w^-1/2              |
| hidden weight init std       | as configured | x m_w^-1/2 (normal, gpt2) | the same, no 1/sqrt(2L) | the same, no 1/sqrt(2L) |
| Adam lr, hidden matrices     | lr  | lr / m_w            | lr / m_w x m_L^-1/2        | lr / m_w                  |
| Adam lr, hidden vectors      | lr  | lr                  | lr x m_L^-1/2              | lr                        |
| Adam lr, token table         | lr  | lr / c              | lr / c                     | lr / c                    |
| Adam lr, other tables, outside| lr | lr                  | lr                         | lr                        |
| table init std (xavier)      | d^-1/2 | x m_w^1/2 (token: / c) | the same             | the same                  |
| Adam eps, hidden             | eps | eps / m_w           | eps / m_w x m_L^-1/2       | eps / m_w x m_L^-1        |
| Adam eps, embeddings, outside| eps | eps / m_w           | eps / m_w                  | eps / m_w                 |
| weight decay, hidden matrices| wd  | wd x m_w            | wd x m_w                   | wd x m_w                  |
| Adam lr, residual mixing maps| lr  | as their group      | their group's x m_L^-1     | their group's x m_L^-1    |

c = m_w^1/2 under ``embed_scale`` (the sqrt(d) in front of the token table grows by it), else 1: under
Adam a multiplier c on a table is a c times larger table with a c times larger lr, and muP's input
layer has none (:func:`embed_growth`). The tables (token, position, an untied head) are muP's
"vector-like" weights: constant std and lr, as microsoft/mup's ``MuAdam`` and ``mup.init`` treat a
weight with one width dimension; tests/test_mup_reference.py checks every parameter against them.
s is the configured score scale (head_dim^-1/2 unless ``attn_scale``), so the muP scale is
s x (d_head,base / d_head)^1/2 = d_head,base^1/2 / d_head: the 1/d_head of muP, equal to SP's at the base
width (the model at its base shape is the SP model). The width grows with ``n_heads`` fixed, so the
head width grows with it; a set ``d_head`` does not grow, and its scale is left alone. Hidden matrices are the 2-D weights inside the
blocks (q, k, v, out, fc1, fc2); hidden vectors their biases, norm gains and gates; "outside" the final
norm, the embedding norm and biases outside the blocks. Xavier's init already has variance ~ 1/fan, the
muP scaling of a hidden matrix, so ``init="xavier"`` is left as it is; the tables keep the base
width's std (xavier's d^-1/2 at the base: x m_w^1/2; normal's s already), and c E the base's.

Sources: muP, Yang et al. 2021 (Tensor Programs V), Table 3 and microsoft/mup (``MuAdam``: a matrix's
lr / width_mult and weight decay x width_mult; ``MuReadout``: the output x 1/width_mult; attention
1/d). depth-muP: Yang et al. 2023 (Tensor Programs VI) and Bordelon et al. 2023: branches x L^-1/2,
Adam's lr x L^-1/2. CompleteP: Dey et al. 2025 ("Don't be lazy: CompleteP enables compute-efficient deep
transformers"), with its code (EleutherAI/nanoGPT-mup, ``depth_alpha_exp``): branches x m_L^-alpha,
hidden lr x m_L^(alpha - 1), hidden eps x m_w^-1 m_L^-alpha, embedding eps x m_w^-1 (their eq. 40), and
GPT-2's 1/sqrt(2L) residual init replaced by the multiplier. depth_mup is that rule at alpha = 1/2.

The residual topologies (:mod:`depthlab.model.hyper`, :mod:`depthlab.model.aggregate`): their static maps
and gates are hidden vectors (no width dimension), their dynamic maps hidden matrices (a readout of width
d to a few coefficients: muP's 1/m_w, as ``MuReadout``'s multiplier gives it under Adam), AttnRes's
pseudo-queries (d x 1) too. H_res's maps and DenseFormer's alphas compose across the 2L sublayers, so under
a depth rule their lr takes m_L^-1 on top (``mixing_lr``): a change delta of each moves the composite map
by ~2L delta, and CompleteP keeps each layer's effect on the top O(1/L). The branch multiplier enters at F
(``BRANCH_END``) as in pre-LN; Attention Residuals, which replace the residual sum, refuse a depth rule.

Where the multiplier enters is declared by each wrapping class (:mod:`depthlab.model.wrappings`): its
forward applies m where its FORMULA shows it (x + m F(LN x), LN(x + m F(x)), x + m LN(F(LN x)), ...), and
``BRANCH_END`` names the module whose output m multiplies. The wrappings whose own constants already set
the skip-to-branch ratio by depth declare why in ``DEPTH_RULE_REFUSED``, and refuse a depth rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from depthlab.config import PARAM_CHECKS, WRAPPINGS, ModelConfig
from depthlab.errors import ConfigError
from depthlab.model.layers import Block
from depthlab.model.positions import RelativeBias
from depthlab.model.wrapping_base import Wrapping

ALPHA = {"sp": None, "mup": None, "depth_mup": 0.5, "completep": 1.0}  # the depth exponent
SCALES_WIDTH = {"sp": False, "mup": True, "depth_mup": True, "completep": True}


@dataclass(frozen=True)
class Multipliers:
    """The scalings of one stack under a config's parametrization (all 1 under sp or at the base shape).

    ``width``/``depth``: m_w and m_L; ``branch``: the residual branch multiplier; ``output``: the
    head input's; ``attention``: the factor on the score scale; ``hidden_init``: on the hidden weights'
    std (normal and gpt2 schemes); ``hidden_lr``/``vector_lr``: on the hidden matrices' and hidden
    vectors' lr; ``hidden_eps``/``outer_eps``: on eps inside and outside the blocks; ``hidden_wd``: on
    the hidden matrices' weight decay; ``embed``: the growth of the token embedding's own multiplier
    (sqrt(d) under ``embed_scale``) relative to the base, c = m_w^1/2, which ``embed_lr`` = 1/c undoes
    on the token table's lr; ``table_init``: on the std of the tables xavier draws N(0, d^-1/2).
    """

    param: str
    width: float
    depth: float
    alpha: float | None
    branch: float
    output: float
    attention: float
    hidden_init: float
    hidden_lr: float
    vector_lr: float
    hidden_eps: float
    outer_eps: float
    hidden_wd: float
    embed: float = 1.0
    embed_lr: float = 1.0
    table_init: float = 1.0
    mixing_lr: float = 1.0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def width_mult(cfg: ModelConfig) -> float:
    """m_w = d_model / base_width (1 without a width rule or a base width)."""
    if not SCALES_WIDTH[cfg.param] or cfg.base_width is None:
        return 1.0
    return cfg.d_model / cfg.base_width


def depth_mult(cfg: ModelConfig, depth: int) -> float:
    """m_L = depth / base_depth for a stack of ``depth`` layers (1 without a depth rule or base)."""
    if ALPHA[cfg.param] is None or cfg.base_depth is None:
        return 1.0
    return depth / cfg.base_depth


def multipliers(cfg: ModelConfig, depth: int | None = None) -> Multipliers:
    """The :class:`Multipliers` of the stack of ``depth`` layers (default ``cfg.n_layers``)."""
    mw = width_mult(cfg)
    mL = depth_mult(cfg, cfg.n_layers if depth is None else depth)
    alpha = ALPHA[cfg.param]
    a = 0.0 if alpha is None else alpha
    normal = cfg.init in ("normal", "gpt2")
    c = embed_growth(cfg)
    return Multipliers(
        param=cfg.param,
        width=mw,
        depth=mL,
        alpha=alpha,
        branch=mL**-a,
        output=(c if cfg.tie_embeddings else 1.0) / mw,  # a tied readout reads E = W / c: c / m_w on W
        attention=mw**-0.5 if cfg.family.d_head is None else 1.0,  # a set d_head does not grow with d_model
        hidden_init=mw**-0.5 if normal else 1.0,
        hidden_lr=mL ** (a - 1) / mw if alpha is not None else 1.0 / mw,
        vector_lr=mL ** (a - 1) if alpha is not None else 1.0,
        hidden_eps=mL**-a / mw,
        outer_eps=1.0 / mw,
        hidden_wd=mw,
        embed=c,
        embed_lr=1.0 / c,
        table_init=mw**0.5 if cfg.init == "xavier" else 1.0,
        mixing_lr=1.0 / mL if alpha is not None else 1.0,
    )


def mixing_parameters(stack: nn.Module) -> set[int]:
    """ids of a residual topology's mixing parameters in ``stack`` (each module's ``mixing_parameters()``:
    H_res's maps, DenseFormer's alphas), which take ``mixing_lr`` (:mod:`depthlab.model.param_groups`)."""
    return {id(p) for m in stack.modules() if hasattr(m, "mixing_parameters") for p in m.mixing_parameters()}


def embed_growth(cfg: ModelConfig) -> float:
    """c = m_w^1/2 when the token embedding is multiplied by sqrt(d_model) (``embed_scale``) under a width
    rule, else 1: how much the multiplier in front of the token table grows from the base width. muP's
    input layer has none (microsoft/mup's nn.Embedding, N(0, 1), Adam lr unscaled), and under Adam a
    multiplier c on a table is the same as a c times larger table with a c times larger lr, so the table's
    lr and init are divided by c (and a tied readout, which reads the table without it, multiplied).
    A factorised embedding (``d_embed``) keeps its table at a fixed width: left as it is (1)."""
    if not cfg.embed_scale or cfg.family.d_embed is not None:
        return 1.0
    return width_mult(cfg) ** 0.5


def scales_depth(cfg: ModelConfig) -> bool:
    """Whether the parametrization has a depth rule (depth_mup, completep)."""
    return ALPHA[cfg.param] is not None


def depth_refused() -> dict[str, str]:
    """wrapping name -> why a depth rule has no meaning for it (its class's ``DEPTH_RULE_REFUSED``)."""
    return {name: cls.DEPTH_RULE_REFUSED for name, cls in WRAPPINGS.items() if cls.DEPTH_RULE_REFUSED}


def check_param(cfg: ModelConfig) -> None:
    """ConfigError when ``cfg.wrap``'s class refuses ``cfg.param`` (``DEPTH_RULE_REFUSED``), naming why,
    or declares no place for the branch multiplier (no ``BRANCH_END``)."""
    cls = WRAPPINGS.get(cfg.wrap)
    if cls is None or not scales_depth(cfg):
        return
    why = cls.DEPTH_RULE_REFUSED
    if not why and not declares_branch(cls):
        why = "the wrapping declares no BRANCH_END, where a depth rule's branch multiplier would enter"
    if why:
        raise ConfigError("param", cfg.param, f"sp or mup with wrap={cfg.wrap}: {why}")


PARAM_CHECKS.append(check_param)


def attention_scale(cfg: ModelConfig) -> float | None:
    """The score scale the attention layers get: ``cfg.attn_scale`` (None = head_dim^-1/2) unless the
    parametrization changes it (then a number). Untouched at factor 1, so sp stays bit-identical."""
    factor = multipliers(cfg).attention
    if factor == 1.0:
        return cfg.family.attn_scale
    base = cfg.family.attn_scale if cfg.family.attn_scale is not None else cfg.head_dim**-0.5
    return base * factor


@torch.no_grad()
def rescale_table_init(model: nn.Module, cfg: ModelConfig) -> None:
    """muP's constant std for the vector-like weights, the tables (token and position embeddings, an
    untied head, T5's relative bias): x m_w^1/2 on those xavier drew N(0, d_model^-1/2), so that their
    std stays the base width's; the token table also / c (:func:`embed_growth`), so that c times it
    keeps the base's std. Nothing at the base width or under sp."""
    m = multipliers(cfg)
    token = model.embed.tok
    rel = [r.bias.weight for r in model.modules() if isinstance(r, RelativeBias)]
    tables: dict[int, tuple[torch.Tensor, float]] = {id(w): (w, m.table_init) for w in rel}
    for mod in model.modules():
        if isinstance(mod, nn.Embedding) and id(mod.weight) not in tables:
            f = m.table_init if mod.embedding_dim == cfg.d_model else 1.0
            tables[id(mod.weight)] = (mod.weight, f / m.embed if mod is token else f)
    head = getattr(model, "head", None)
    if isinstance(head, nn.Linear) and id(head.weight) not in tables and head.in_features == cfg.d_model:
        tables[id(head.weight)] = (head.weight, m.table_init)
    for weight, factor in tables.values():
        if factor != 1.0:
            weight.mul_(factor)


@torch.no_grad()
def rescale_hidden_init(model: nn.Module, cfg: ModelConfig) -> None:
    """Multiply every linear weight inside the blocks by the hidden init factor (muP's std x m_w^-1/2
    under normal and gpt2); nothing when it is 1."""
    c = multipliers(cfg).hidden_init
    if c == 1.0:
        return
    for block in (m for m in model.modules() if isinstance(m, Block)):
        for lin in (m for m in block.modules() if isinstance(m, nn.Linear)):
            lin.weight.mul_(c)


def scaled_residual_init(cfg: ModelConfig, wrapping_default: bool) -> bool:
    """Whether GPT-2's 1/sqrt(2L) residual init applies: the wrapping's default, except under a depth
    rule, whose branch multiplier takes its place (CompleteP's code drops it)."""
    return wrapping_default and not scales_depth(cfg)


def describe(cfg: ModelConfig) -> dict:
    """For explain: the parametrization, its base shape and the multipliers of each stack's depth."""
    depths = sorted(set(cfg.side_depths))
    return {
        "param": cfg.param,
        "base_width": cfg.base_width if cfg.base_width is not None else cfg.d_model,
        "base_depth": cfg.base_depth if cfg.base_depth is not None else cfg.n_layers,
        "attention_scale": attention_scale(cfg),
        "stacks": {str(d): multipliers(cfg, d).to_dict() for d in depths},
    }


def format_multipliers(m: Multipliers) -> str:
    """One line: 'branch x0.25  output x0.5  scores x0.707  hidden lr x0.5  ...' (1s left out)."""
    parts = [
        ("branch", m.branch),
        ("logits", m.output),
        ("scores", m.attention),
        ("hidden init", m.hidden_init),
        ("hidden lr", m.hidden_lr),
        ("vector lr", m.vector_lr),
        ("token lr", m.embed_lr),
        ("table init", m.table_init),
        ("hidden eps", m.hidden_eps),
        ("outer eps", m.outer_eps),
        ("hidden wd", m.hidden_wd),
    ]
    shown = [f"{k} x{v:.4g}" for k, v in parts if not math.isclose(v, 1.0)]
    return "  ".join(shown) or "every multiplier 1 (the standard parametrization)"


def declares_branch(cls) -> bool:
    """Whether a wrapping class says where m enters or why it refuses it: a module (:class:`Wrapping`)
    needs a ``BRANCH_END`` or a ``DEPTH_RULE_REFUSED``; a per-layer choice (Mix-LN, no module of its
    own) leaves it to the classes its layers get."""
    if not issubclass(cls, Wrapping):
        return True
    return cls.BRANCH_END is not None or bool(cls.DEPTH_RULE_REFUSED)


def undeclared() -> set[str]:
    """The registered wrappings that declare neither where m enters nor a refusal."""
    return {name for name, cls in WRAPPINGS.items() if not declares_branch(cls)}
