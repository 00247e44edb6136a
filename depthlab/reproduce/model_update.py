"""DeepNet's "model update" (Wang et al. 2022, Figs. 2 and 5; Liu et al. 2020, Admin).

DeepNet trained 64-128-2 tiny Transformers (d_model 64, d_ff 128, 2 heads) from 6 to 100 layers and
measured ||F(x, theta_t) - F(x, theta_0)||, how much the model's output moves in the first updates: for
post-LN it grows with depth (a large early update drives the model into a bad region, the paper's
explanation of post-LN's instability), for DeepNorm it stays small and about flat; Admin argues the
same amplification. Pre-LN's update is also bounded (each layer's change is diluted by the growing
stream).

Measured here on decoder-only 64-128-2 models (DeepNet used encoder-decoders) trained by Adam
(betas 0.9/0.98, no warmup: the early stage is the point) on byte batches of the default corpus: the
relative change of the final hidden state (the input of the output head, after any final norm) on a
fixed held-out batch, ||f(x) after - f(x) before|| / ||f(x) before||, after ``STEPS`` updates.

The learning rate is 1e-4, not the 1e-3 of the training claims: at 1e-3 one Adam step already
changes a 6-layer post-LN model's output by 65% of its norm and deeper ones saturate near 1.2-1.4
(two unrelated unit vectors differ by sqrt(2)), so no depth trend can show; at 1e-4 the 6-layer
change is 8% and the curve has room to rise.
"""

from __future__ import annotations

import time

import torch

from depthlab.config import ModelConfig
from depthlab.model import build_model
from depthlab.reproduce.claim import Check, Reproduction, register
from depthlab.reproduce.figures import profiles
from depthlab.reproduce.lm_runs import lm_batches

WRAPS = ("post", "pre", "deepnorm")
DEPTHS = (6, 12, 24, 48, 96)
DEPTHS_QUICK = (6, 12, 24, 48)
SEEDS, SEEDS_QUICK = (0, 1, 2), (0,)
STEPS = 4
LR = 1e-4  # see the module docstring
BATCH, SEQ = 8, 32

# Expected outcomes, stated before the run. "Grows": the update at the deepest model is at least twice
# the 6-layer one (the paper's post-LN curve rises several-fold from 6L to 100L). "About flat": the
# same ratio stays within [2/3, 3/2].
GROWS = 2.0
FLAT = (2 / 3, 3 / 2)
EXPECTED = {"post": "grows", "deepnorm": "flat", "pre": "flat"}
# DeepNet (Wang et al. 2022, Fig. 1) plots post-LN and DeepNorm only; pre-LN's "flat" is depthlab's own
# expectation (its stream is not renormalised, so a layer's update is diluted in a growing sum).
SOURCED = {"post": "DeepNet", "deepnorm": "DeepNet", "pre": "depthlab's expectation, not in the paper"}


def tiny_config(wrap: str, n_layers: int) -> ModelConfig:
    """DeepNet's 64-128-2 tiny model as a decoder: d_model 64, d_ff 128, 2 heads."""
    return ModelConfig(
        arch="decoder",
        n_layers=n_layers,
        d_model=64,
        d_ff=128,
        n_heads=2,
        vocab_size=256,
        max_len=64,
        wrap=wrap,
    )


def _head_input(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """The final hidden state f(x), (B, T, d): what the output head reads (observed by a hook)."""
    seen = []
    handle = model.head.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        handle.remove()
    return seen[-1]


def output_change(cfg: ModelConfig, seed: int, steps: int = STEPS, lr: float = LR) -> list[float]:
    """Relative change of f(x) on a held-out batch after each of ``steps`` Adam updates (a list of floats)."""
    torch.manual_seed(seed)
    model = build_model(cfg)
    batches = lm_batches(steps, BATCH, SEQ, seed=1000 + seed, split="train")
    probe_tokens = lm_batches(1, BATCH, SEQ, seed=seed, split="val")[0][:, :-1]
    model.eval()  # no dropout here anyway; eval keeps any batch statistics fixed
    before = _head_input(model, probe_tokens)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    changes = []
    for tokens in batches:
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        after = _head_input(model, probe_tokens)
        changes.append(float((after - before).norm() / before.norm()))
    return changes


def measure(depths: tuple[int, ...], seeds: tuple[int, ...], steps: int = STEPS) -> dict:
    """{wrap: {depth: mean relative output change after ``steps`` updates over seeds}} plus per-step curves."""
    table, curves = {}, {}
    for wrap in WRAPS:
        table[wrap], curves[wrap] = {}, {}
        for depth in depths:
            per_seed = [output_change(tiny_config(wrap, depth), s, steps) for s in seeds]
            mean_curve = [sum(c[i] for c in per_seed) / len(per_seed) for i in range(steps)]
            table[wrap][depth], curves[wrap][depth] = mean_curve[-1], mean_curve
    return {"update": table, "update_by_step": curves}


@register("model-update")
def reproduce_model_update(quick: bool = False, out_dir: str | None = None) -> Reproduction:
    """Output change after the first updates vs depth: grows for post-LN, flat for DeepNorm and pre-LN."""
    start = time.perf_counter()
    depths, seeds = (DEPTHS_QUICK, SEEDS_QUICK) if quick else (DEPTHS, SEEDS)
    data = measure(depths, seeds)
    data.update(
        depths=list(depths),
        seeds=list(seeds),
        steps=STEPS,
        lr=LR,
        model="decoder 64-128-2",
        seconds=round(time.perf_counter() - start, 1),
    )
    plot = profiles(
        {w: [data["update"][w][d] for d in depths] for w in WRAPS},
        out_dir,
        "model_update",
        f"Output change after {STEPS} Adam updates (lr {LR:g}), 64-128-2 models",
        "layers",
        "||f(x) after - f(x) before|| / ||f(x) before||",
        log=True,
        x=list(depths),
    )
    return Reproduction(
        "model-update",
        {**data, "update": {w: {str(d): v for d, v in t.items()} for w, t in data["update"].items()}},
        _checks(data["update"], depths),
        plots=[p for p in [plot] if p],
        source="Wang et al. 2022 (DeepNet), Figs. 2 and 5; Liu et al. 2020 (Admin)",
    )


def _checks(update: dict, depths: tuple[int, ...]) -> list[Check]:
    lo, hi = depths[0], depths[-1]
    checks = []
    for wrap, expected in EXPECTED.items():
        ratio = update[wrap][hi] / update[wrap][lo]
        if expected == "grows":
            stated, ok = f"grows with depth: {hi}L / {lo}L >= {GROWS:g}", ratio >= GROWS
        else:
            stated, ok = (
                f"about flat: {hi}L / {lo}L in [{FLAT[0]:.2f}, {FLAT[1]:.2f}]",
                FLAT[0] <= ratio <= FLAT[1],
            )
        measured = f"{update[wrap][lo]:.3g} at {lo}L, {update[wrap][hi]:.3g} at {hi}L (x{ratio:.2f})"
        claim = f"{wrap}: output change after {STEPS} updates ({SOURCED[wrap]})"
        checks.append(Check(claim, stated, measured, ok))
    deep_post, deep_dn = update["post"][hi], update["deepnorm"][hi]
    checks.append(
        Check(
            f"at {hi} layers DeepNorm moves less than post-LN",
            "DeepNorm < post-LN",
            f"DeepNorm {deep_dn:.3g}, post-LN {deep_post:.3g}",
            deep_dn < deep_post,
        )
    )
    return checks
