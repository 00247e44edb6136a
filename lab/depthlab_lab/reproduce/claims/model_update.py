"""DeepNet's "model update" (Wang et al. 2022, Figs. 2 and 5; Liu et al. 2020, Admin).

DeepNet trained 64-128-2 tiny Transformers (d_model 64, d_ff 128, 2 heads) from 6 to 100 layers and
measured ||F(x, theta_t) - F(x, theta_0)||, how much the model's output moves in the first updates: for
post-LN it grows with depth (a large early update drives the model into a bad region, the paper's
explanation of post-LN's instability), for DeepNorm it stays small and about flat; Admin argues the
same amplification. Pre-LN's update is also bounded (each layer's change is diluted by the growing
stream).

Measured here on decoder-only 64-128-2 models (DeepNet used encoder-decoders) trained by depthlab's
training loop (Adam, betas 0.9/0.98, no warmup: the early stage is the point) on byte batches of the
default corpus: the relative change of the final hidden state (the input of the output head, after any
final norm) on a fixed held-out batch, ||f(x) after - f(x) before|| / ||f(x) before||, after a few
updates. theta_0 is rebuilt from the run's seed exactly as the loop builds it. Each seed gives one ratio
of the deepest model's change to the shallowest's.

The learning rate is 1e-4, not the 1e-3 of the training claims: it was chosen with pilot results known
(at 1e-3 a single update already moved the shallowest post-LN model's output by a large fraction of its
norm and the deeper ones saturated near the distance between unrelated vectors, leaving no room for a
depth trend).
"""

from __future__ import annotations

import math

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.model import build_model
from depthlab_lab.reproduce import cost
from depthlab_lab.reproduce.claim_plots import profiles
from depthlab_lab.reproduce.lm_runs import lm_batches
from depthlab_lab.reproduce.registration import (
    DECISION,
    EFFECT_REASON,
    LOG_REASON,
    PUBLISHED_KNOWN,
    Registration,
    Revision,
    to_seeds,
)
from depthlab_lab.reproduce.reproduction import (
    Check,
    Reproduction,
    log_revised,
    register,
    resolve,
    seeded_check,
    with_revision,
)
from depthlab_lab.reproduce.run_cache import train

WRAPS = ("post", "pre", "deepnorm")
BATCH, SEQ = 8, 32
SMALL = {"depths": [6, 12, 24, 48, 96], "steps": 4, "lr": 1e-4, "seeds": [0, 1, 2, 3, 4]}
LARGE = {"depths": [6, 12, 24, 48, 96], "steps": 4, "lr": 1e-4, "seeds": list(range(10))}
REGISTRATION = Registration(
    commit="9fcf9413329ed4ec7efa19b6764a1e0122a1169b",
    typed_date="2026-11-30 05:23 UTC",
    expectation={
        # "grows": the deepest model's change at least this many times the 6-layer one's (DeepNet's post-LN
        # curve rises several-fold from 6L to 100L); "about flat": the same ratio within FLAT
        "grows": 2.0,
        "flat": [2 / 3, 3 / 2],
        "post": "grows",
        "deepnorm": "flat",
        # DeepNet (Wang et al. 2022, Fig. 1) plots post-LN and DeepNorm only; pre-LN's "flat" is depthlab's
        # own expectation (its stream is not renormalised, so a layer's update is diluted in a growing sum)
        "pre": "flat",
        "decision": DECISION,
        # the interval's scale of its ratios and rms under the revision of 2026-12-01 (shown beside, never deciding)
        "revised_interval_scale": "log",
        # the revised column (revision of 2026-12-01): post-LN's change at least this many times DeepNorm's,
        # the upper edge of the claim's own flat band (a change within x1.5 is no change under it)
        "revised_post_over_deepnorm_at_least": 1.5,
    },
    regimes={"small": SMALL, "large": LARGE},
    notes="lr 1e-4 was chosen with pilot results known (seed 0 at lr 1e-3, see the description). The "
    "models are already DeepNet's own 64-128-2 size, so the large scale keeps them and runs ten seeds.",
    revisions=(
        *to_seeds(
            "2026-11-30",
            "the mean over seeds 0, 1, 2 of each depth's change, then the ratio",
            {"regime.small.seeds": ([0, 1, 2], SMALL["seeds"])},
            LARGE,
            known="yes for seeds 0, 1, 2 (the run of 2026-11-30 08:25 UTC, with the earlier own optimiser "
            "loop); no for seeds 3, 4 and for the training loop's batches",
        ),
        Revision(
            "2026-12-01", "code._checks", "79b9b75620e76c83", "f6788393957a4bd9", LOG_REASON, PUBLISHED_KNOWN
        ),
        Revision(
            "2026-12-01", "expectation.revised_interval_scale", None, "log", LOG_REASON, PUBLISHED_KNOWN
        ),
        Revision(
            "2026-12-01",
            "code._checks",
            "f6788393957a4bd9",
            "558093c4bd720ac7",
            EFFECT_REASON,
            PUBLISHED_KNOWN,
        ),
        Revision("2026-12-01", "code._moves_less", None, "eadc2cc98a8cbaa2", EFFECT_REASON, PUBLISHED_KNOWN),
        Revision(
            "2026-12-01",
            "expectation.revised_post_over_deepnorm_at_least",
            None,
            1.5,
            EFFECT_REASON,
            PUBLISHED_KNOWN,
        ),
    ),
)

# What a larger scale is expected to change, shown in docs/reproductions.md under a MISMATCH or an
# inconclusive result (no measured numbers: only the registered regimes and the sources' own).
AT_SCALE = (
    "Not expected to change with training length: the claim is about the first updates of DeepNet's own "
    "64-128-2 models, which the small scale already uses; the large scale adds seeds only. A MISMATCH here "
    "is about the claim's form in this decoder-only, byte-level setting (DeepNet used encoder-decoders on "
    "translation)."
)

QUICK = {"depths": [6, 12, 24, 48], "seeds": [0]}
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


def train_config(seed: int, steps: int, lr: float) -> TrainConfig:
    """The training loop's config of one model-update run: Adam at ``lr``, no warmup, no telemetry."""
    return TrainConfig(
        task="lm", steps=steps, batch_size=BATCH, seq_len=SEQ, lr=lr, warmup=0, beta2=0.98, seed=seed,
        eval_batches=1, telemetry=False, log_every=steps, eval_every=steps, checkpoint_every=steps,
    )  # fmt: skip


def output_change(cfg: ModelConfig, seed: int, steps: int, lr: float) -> float:
    """Relative change of f(x) on a held-out batch after ``steps`` updates of depthlab's training loop.

    theta_0 is built as the loop builds it (``torch.manual_seed(seed)`` then ``build_model``).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        initial = build_model(cfg)
    probe_tokens = lm_batches(1, BATCH, SEQ, seed=seed, split="val")[0][:, :-1]
    before = _head_input(initial, probe_tokens)
    trained = train(cfg, train_config(seed, steps, lr)).model
    after = _head_input(trained, probe_tokens)
    return float((after - before).norm() / before.norm())


def measure(depths, seeds, steps: int, lr: float) -> dict:
    """{wrap: {depth: [relative output change after ``steps`` updates, per seed]}}."""
    return {
        w: {d: [output_change(tiny_config(w, d), s, steps, lr) for s in seeds] for d in depths} for w in WRAPS
    }


@register("model-update", REGISTRATION)
def reproduce_model_update(
    quick: bool = False, out_dir: str | None = None, scale: str = "small"
) -> Reproduction:
    """Output change after the first updates vs depth: grows for post-LN, flat for DeepNorm and pre-LN."""
    r = resolve(REGISTRATION, scale, quick, QUICK)
    planned = [
        (tiny_config(w, d), train_config(s, r["steps"], r["lr"]))
        for w in WRAPS
        for d in r["depths"]
        for s in r["seeds"]
    ]
    cost.announce("model-update", planned, lambda m, t: False)
    update = measure(r["depths"], r["seeds"], r["steps"], r["lr"])
    plot = profiles(
        {w: [sum(update[w][d]) / len(update[w][d]) for d in r["depths"]] for w in WRAPS},
        out_dir,
        "model_update",
        f"Output change after {r['steps']} Adam updates (lr {r['lr']:g}), 64-128-2 models, mean over seeds",
        "layers",
        "||f(x) after - f(x) before|| / ||f(x) before||",
        log=True,
        x=list(r["depths"]),
    )
    data = {
        "scale": scale,
        "regime": r,
        "model": "decoder 64-128-2",
        "update": {w: {str(d): v for d, v in t.items()} for w, t in update.items()},
    }
    return Reproduction(
        "model-update",
        data,
        _checks(update, r),
        plots=[p for p in [plot] if p],
        source="Wang et al. 2022 (DeepNet), Figs. 2 and 5; Liu et al. 2020 (Admin)",
    )


def _checks(update: dict, r: dict) -> list[Check]:
    e, lo, hi, steps = REGISTRATION.expectation, r["depths"][0], r["depths"][-1], r["steps"]
    checks = []
    for wrap in WRAPS:
        ratios = [b / a for a, b in zip(update[wrap][lo], update[wrap][hi], strict=True)]
        claim = f"{wrap}: output change after {steps} updates, {hi}L / {lo}L ({SOURCED[wrap]})"
        context = (
            f"{lo}L "
            + "/".join(f"{v:.3g}" for v in update[wrap][lo])
            + f", {hi}L "
            + "/".join(f"{v:.3g}" for v in update[wrap][hi])
        )
        if e[wrap] == "grows":
            checks.append(
                log_revised(
                    claim,
                    f"grows with depth: >= {e['grows']:g}",
                    ratios,
                    at_least=e["grows"],
                    context=context,
                )
            )
        else:
            flat = e["flat"]
            stated = f"about flat: in [{flat[0]:.2f}, {flat[1]:.2f}]"
            checks.append(
                log_revised(claim, stated, ratios, at_least=flat[0], at_most=flat[1], context=context)
            )
    checks.append(_moves_less(update, hi))
    return checks


def _moves_less(update: dict, hi: int) -> Check:
    """DeepNorm moves less than post-LN: the difference against 0 as first registered; as revised, the
    ratio post / DeepNorm (log scale) beyond the claim's own band for "about flat" (a change within x1.5
    is no change under this registration, so "moves less" needs more than that factor)."""
    post, deepnorm = update["post"][hi], update["deepnorm"][hi]
    claim, stated = f"at {hi} layers: post-LN's output change - DeepNorm's", "> 0 (DeepNorm moves less)"
    first = seeded_check(claim, stated, [p - d for p, d in zip(post, deepnorm, strict=True)], at_least=0.0)
    at_least = REGISTRATION.expectation["revised_post_over_deepnorm_at_least"]
    ratios = [p / d if d > 0 else math.nan for p, d in zip(post, deepnorm, strict=True)]
    revised = seeded_check(claim, f"post / DeepNorm >= {at_least:g}", ratios, at_least=at_least, scale="log")
    return with_revision(first, revised, f"post / DeepNorm beyond the flat band (>= {at_least:g})")
