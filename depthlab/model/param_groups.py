"""The optimizer side of a parametrization: torch param groups with per-group lr, eps and weight decay.

``param_groups(model, lr, weight_decay=..., eps=...)`` is what ``depthlab train``, the studies and a
user's own loop pass to ``torch.optim.Adam``/``AdamW``. Under ``sp`` it is today's two groups: the
matrices (and embeddings) with the weight decay, the vectors without (nanoGPT's ``configure_optimizers``:
decaying a norm gain toward 0 would shrink the stream). Under the other parametrizations the groups
are those of :mod:`depthlab.model.parametrization`'s table, per stack (an encoder and a decoder of
different depths have different depth multipliers):

| group          | parameters                                           | lr               | eps               | weight decay |
|----------------|------------------------------------------------------|------------------|-------------------|--------------|
| token embedding| the token table (the tied head with it)              | lr x embed_lr    | eps x outer_eps   | wd           |
| embeddings     | position tables, an untied head, T5's bias           | lr               | eps x outer_eps   | wd           |
| hidden         | 2-D weights inside the blocks                        | lr x hidden_lr   | eps x hidden_eps  | wd x hidden_wd |
| hidden vectors | biases, norm gains, gates inside the blocks          | lr x vector_lr   | eps x hidden_eps  | 0            |
| outer matrices | the factorised embedding's projections (d_embed)     | lr               | eps x outer_eps   | wd           |
| outer vectors  | final norm, embedding norm, biases outside the blocks| lr               | eps x outer_eps   | 0            |
| residual mixing (vectors) | a residual topology's H_res maps, DenseFormer's alphas (their ``mixing_parameters``) | their group's lr x mixing_lr | eps x hidden_eps | as their group |

A residual topology's H_res (static map, dynamic weights) and DenseFormer's averages compose over the 2L
sublayers: a change of each by delta moves the composite map by ~2L delta, so under a depth rule their lr
takes ``mixing_lr`` = m_L^-1 on top of their group's, as CompleteP makes each layer's update O(1/L); under
sp and mup it is 1 (:mod:`depthlab.model.parametrization`).

microsoft/mup's ``MuAdam`` divides the lr (and multiplies the weight decay) only of a "matrix-like"
weight, both of whose dimensions grow with width: the tables and the factorised embedding's projections
(one side the fixed d_embed or vocabulary) are "vector-like" and keep the lr. ``embed_lr`` = m_w^-1/2
undoes the sqrt(d) in front of the token table under ``embed_scale``
(:func:`depthlab.model.parametrization.embed_growth`). tests/test_mup_reference.py checks each
parameter against ``mup.set_base_shapes`` and ``MuAdam``'s rule.
"""

from __future__ import annotations

from torch import nn

from depthlab.config import TrainConfig
from depthlab.model import parametrization
from depthlab.model.stack import Stack


def param_groups(model: nn.Module, lr: float, weight_decay: float = 0.0, eps: float = 1e-8) -> list[dict]:
    """Param groups for ``torch.optim.Adam``/``AdamW`` under ``model.cfg.param`` (a model built by
    :func:`depthlab.build_model`): each a dict with "params", "lr", "eps", "weight_decay" (and, beyond
    sp, a "name"). Only parameters that require grad; empty groups are left out. A module with no
    depthlab config (``model.cfg``) gets the standard parametrization's two groups. ``lr``, ``eps`` and
    ``weight_decay`` are checked as :class:`TrainConfig` checks them (ConfigError naming the argument)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch module, not {type(model).__name__}")
    TrainConfig(lr=lr, eps=eps, weight_decay=weight_decay)  # a NaN or negative lr is no optimiser's
    cfg = getattr(model, "cfg", None)
    params = [p for p in model.parameters() if p.requires_grad]
    if getattr(cfg, "param", "sp") == "sp":
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        return [{**g, "lr": lr, "eps": eps} for g in groups if g["params"]]
    return [g for g in _scaled_groups(model, cfg, params, lr, weight_decay, eps) if g["params"]]


def _scaled_groups(model, cfg, params, lr, wd, eps) -> list[dict]:
    """The table's groups (see the module docstring), in a fixed order."""
    wanted = {id(p) for p in params}
    inside: dict[int, str] = {}  # id(param) -> the stack it sits in
    stacks = [(name, m) for name, m in model.named_children() if isinstance(m, Stack)]
    groups = []
    for name, stack in stacks:
        m = parametrization.multipliers(cfg, len(stack.layers))
        state = list(stack.state.parameters()) if stack.state is not None else []  # a topology's own
        block_params = [p for p in [*stack.layers.parameters(), *state] if id(p) in wanted]
        inside.update((id(p), name) for p in block_params)
        mix = parametrization.mixing_parameters(stack)  # a residual topology's: lr x mixing_lr
        for what, lr_m, wd_m, is_mixing, matrix in (
            ("hidden", m.hidden_lr, m.hidden_wd, False, True),
            ("hidden vectors", m.vector_lr, 0.0, False, False),
            ("residual mixing", m.hidden_lr * m.mixing_lr, m.hidden_wd, True, True),
            ("residual mixing vectors", m.vector_lr * m.mixing_lr, 0.0, True, False),
        ):
            chosen = [p for p in block_params if (p.dim() >= 2) == matrix and (id(p) in mix) == is_mixing]
            groups.append(
                {
                    "name": f"{name} {what}",
                    "params": chosen,
                    "lr": lr * lr_m,
                    "eps": eps * m.hidden_eps,
                    "weight_decay": wd * wd_m,
                }
            )
    m = parametrization.multipliers(cfg)
    outer = [p for p in params if id(p) not in inside]
    token = id(model.embed.tok.weight)
    tables = {id(mod.weight) for mod in model.modules() if isinstance(mod, nn.Embedding)}
    head = getattr(model, "head", None)
    if isinstance(head, nn.Linear):
        tables.add(id(head.weight))
    rest = [p for p in outer if id(p) not in tables]
    groups += [
        {"name": "token embedding", "params": [p for p in outer if id(p) == token], "lr": lr * m.embed_lr},
        {"name": "embeddings", "params": [p for p in outer if id(p) in tables - {token}], "lr": lr},
        {"name": "outer matrices", "params": [p for p in rest if p.dim() >= 2], "lr": lr},
        {"name": "outer vectors", "params": [p for p in rest if p.dim() < 2], "lr": lr},
    ]
    for g, decay in zip(groups[-4:], (wd, wd, wd, 0.0), strict=True):
        g.update(eps=eps * m.outer_eps, weight_decay=decay)
    return groups


def group_table(model: nn.Module, lr: float, weight_decay: float = 0.0, eps: float = 1e-8) -> list[dict]:
    """For explain: each group's name, parameter tensors and count, lr, eps and weight decay."""
    out = []
    for g in param_groups(model, lr, weight_decay, eps):
        name = g.get("name") or ("matrices" if g["params"][0].dim() >= 2 else "vectors")
        out.append(
            {
                "name": name,
                "tensors": len(g["params"]),
                "numel": sum(p.numel() for p in g["params"]),
                "lr": g["lr"],
                "eps": g["eps"],
                "weight_decay": g["weight_decay"],
            }
        )
    return out
