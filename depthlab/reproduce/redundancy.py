"""Pre-LN's deep layers become redundant (Li et al. 2024, Mix-LN; Sun et al. 2025, "The Curse of Depth").

Mix-LN and the Curse of Depth measured, in trained pre-LN LLMs, that the deep layers barely change the
stream: the angular distance arccos(cos(x_l, x_{l+1})) / pi between consecutive layers is small in the
deep half, and removing one of those layers costs little loss. Post-LN, Mix-LN (post-LN in the bottom
quarter, pre-LN above) and LayerNorm Scaling (LNS: LN(x) / sqrt(l)) keep the deep layers working.

Reproduced after training 12- and 24-layer models in the tiny byte-level regime
(:mod:`depthlab.reproduce.lm_runs`), 400 steps, lr 1e-3 with a 133-step warmup for every wrapping
(the warmup claim's setting): on held-out batches, the angular distance across each layer and the
validation loss with that one layer removed (replaced by the identity). The quick version trains 12
layers only: in this regime 24-layer post-LN did not leave the unigram plateau in any setting tried
(3.18-3.59 nats with warmups of 50-133 steps, lr 3e-4 to 1e-3, 200-400 steps), and a model that did
not train says nothing about redundancy.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch
from torch import nn

from depthlab.probe.stats import angular_distance, cos_prev
from depthlab.reproduce.claim import Check, Reproduction, register
from depthlab.reproduce.figures import profiles
from depthlab.reproduce.lm_runs import eval_loss, lm_batches, train_run

WRAPS = ("pre", "post", "mix", "lns")
DEPTHS, DEPTHS_QUICK = (12, 24), (12,)
LR, WARMUP, STEPS = 1e-3, 133, 400  # the warmup claim's setting (its 12-layer runs are shared)
EVAL_BATCHES, EVAL_BATCHES_QUICK = 8, 4

# Expected outcome, stated before the run: over the deep half of the stack (e.g. layers 13-24), pre-LN's
# mean angular distance and mean loss increase on removal are both smaller than each other wrapping's.
# The claim is about trained models: a comparison with a run that stalled or diverged does not count.


class _Skip(nn.Module):
    """A removed layer: returns the stream unchanged (the stack calls layer(x, ctx))."""

    def forward(self, x, ctx):
        return x


@contextlib.contextmanager
def removed(model: nn.Module, index: int):
    """Temporarily replace ``model.stack.layers[index]`` (0-based) with the identity."""
    layers = model.stack.layers
    kept = layers[index]
    layers[index] = _Skip()
    try:
        yield model
    finally:
        layers[index] = kept


@torch.no_grad()
def layer_angles(model: nn.Module, batches: list[torch.Tensor]) -> list[float]:
    """Mean angular distance across each layer l = 1..L, between x_{l-1} and x_l (a list of L floats)."""
    model.eval()
    sums = None
    for tokens in batches:
        _, states = model(tokens[:, :-1], return_states=True)
        angles = [angular_distance(cos_prev(states[i], states[i - 1])) for i in range(1, len(states))]
        sums = angles if sums is None else [a + b for a, b in zip(sums, angles)]
    return [s / len(batches) for s in sums]


def removal_costs(model: nn.Module, batches: list[torch.Tensor]) -> tuple[float, list[float]]:
    """(full loss, [loss with layer l removed - full loss for l = 1..L]), nats, on ``batches``."""
    full = eval_loss(model, batches)
    costs = []
    for i in range(len(model.stack.layers)):
        with removed(model, i):
            costs.append(eval_loss(model, batches) - full)
    return full, costs


def measure(depth: int, n_batches: int) -> dict:
    """Train each wrapping at ``depth``; {wrap: {"run", "angles", "removal", "full_loss"}}."""
    batches = lm_batches(n_batches, 16, 32, seed=7)
    out = {}
    for wrap in WRAPS:
        run = train_run(
            f"{wrap} {depth}L, warmup {WARMUP}",
            {"wrap": wrap, "n_layers": depth},
            {"lr": LR, "warmup": WARMUP, "steps": STEPS},
        )
        if run.model is None:
            raise RuntimeError("depthlab.train returned no model (RunResult.model); redundancy needs it")
        full, costs = removal_costs(run.model, batches)
        out[wrap] = {
            "run": run,
            "angles": layer_angles(run.model, batches),
            "removal": costs,
            "full_loss": full,
        }
    return out


def _check(depth: int, m: dict, deep: dict, other: str, key: str) -> Check:
    """pre-LN's deep-half mean of ``key`` below ``other``'s; only meaningful when both models trained."""
    what = {"angle": "angular distance", "removal": "loss increase when removed"}[key]
    pre, oth = deep["pre"][key], deep[other][key]
    runs = {w: m[w]["run"] for w in ("pre", other)}
    untrained = [w for w, r in runs.items() if r.outcome != "trained"]
    measured = f"pre {pre:.4f}, {other} {oth:.4f} ({other} {runs[other].short()})"
    if untrained:
        measured += f"; {' and '.join(untrained)} did not train, so no comparison of trained models"
    return Check(
        f"{depth}L deep half: pre-LN's {what} < {other}'s",
        f"pre < {other}, both trained",
        measured,
        not untrained and pre < oth,
    )


def _deep(values: list[float]) -> float:
    return statistics.fmean(values[len(values) // 2 :])


@register("redundancy")
def reproduce_redundancy(quick: bool = False, out_dir: str | None = None) -> Reproduction:
    """After training, pre-LN's deep layers change the stream least and cost least when removed (12, 24 layers)."""
    start = time.perf_counter()
    checks, plots, data = [], [], {"deep_half": {}, "layers": {}, "runs": []}
    for depth in DEPTHS_QUICK if quick else DEPTHS:
        m = measure(depth, EVAL_BATCHES_QUICK if quick else EVAL_BATCHES)
        deep = {w: {"angle": _deep(m[w]["angles"]), "removal": _deep(m[w]["removal"])} for w in WRAPS}
        checks += [_check(depth, m, deep, other, key) for other in WRAPS[1:] for key in ("angle", "removal")]
        plots += _plots(m, depth, out_dir)
        data["deep_half"][str(depth)] = deep
        data["layers"][str(depth)] = {
            w: {k: m[w][k] for k in ("angles", "removal", "full_loss")} for w in WRAPS
        }
        data["runs"] += [m[w]["run"].to_dict() for w in WRAPS]
    data["seconds"] = round(time.perf_counter() - start, 1)
    source = "Li et al. 2024 (Mix-LN); Sun et al. 2025 (The Curse of Depth); Men et al. 2024 (ShortGPT)"
    return Reproduction("redundancy", data, checks, plots, source=source)


def _plots(m: dict, depth: int, out_dir: str | None) -> list[str]:
    layers = list(range(1, depth + 1))
    plots = [
        profiles(
            {w: m[w]["angles"] for w in WRAPS}, out_dir, f"redundancy_angle_{depth}",
            f"Angular distance across each layer after training ({depth} layers)",
            "layer", "arccos(cos(x_l-1, x_l)) / pi", x=layers,
        ),
        profiles(
            {w: [max(c, 1e-5) for c in m[w]["removal"]] for w in WRAPS}, out_dir, f"redundancy_removal_{depth}",
            f"Validation loss increase when one layer is removed ({depth} layers)", "layer removed",
            "nats (floored at 1e-5)", log=True, x=layers,
        ),
    ]  # fmt: skip
    return [p for p in plots if p]
