"""The reproductions' scale ladder: every training claim's decisive runs at widths 32, 64 and 128,
registered here before any of its runs.

The first rung (d_model 32) is the small regime of :mod:`depthlab_lab.reproduce.lm_runs`; the two rungs
above it change only the width (4 heads at every width: heads of 8, 16 and 32 dimensions) and the
number of updates, by one rule (:func:`steps_at`): steps (and warmup steps, so that a warmup stays the
same share of the run) grow with the square root of the width, x1.41 at 64 and x2 at 128. Why that rule:
every rung sees more data than the one below it, and the whole ladder fits in about four hours of two
cores (the cost model's estimate, printed by ``depthlab reproduce ladder --plan``; its 528 runs took
6.1 h of one core, 3.3 h on two, as measured on the ladder page); a rule that kept
tokens per parameter fixed (steps x 16 at width 128) would cost about a week there. The price, said
where the effects are shown: parameters grow as width squared, so an upper rung is trained less, for its
size, than the first. The learning rate stays the registered one at every width (no width scaling).

Each claim runs its cheapest decisive subset (:attr:`LadderClaim.subset` says what was left out and
why), three seeds, and its effect sizes are the quantities its counted checks decide on, with their
registered thresholds (:class:`Effect`). Where a claim says a setting *fails*, "fails" means fails at
every learning rate tried (Wortsman et al. 2023): its first rung also runs that setting at the
registered learning rate x 1/3 and x 3 (settings marked ``first_rung_only``).

Each claim's ladder is a :class:`depthlab_lab.reproduce.registration.Registration` whose ``commit`` is the
commit that first recorded its values in lab/tests/registered_ladder.json (lab/tests/test_reproduce_ladder.py
checks it against the history, and that no stored ladder run started before it); a change to a value
afterwards is a revision, as for the claims.
"""

from __future__ import annotations

import math

from depthlab_lab.reproduce.ladder_spec import (
    FAILS,
    FIRST,
    SEEDS,
    STEP_RULE,
    TRAINS,
    WIDTHS,
    Effect,
    LadderClaim,
    fails_effect,
    setting,
    steps_at,
    trains_effect,
    with_lr_sweep,
)
from depthlab_lab.reproduce.lm_runs import NO_ATTN_SKIP
from depthlab_lab.reproduce.registration import Registration

__all__ = [
    "COMMITS", "FIRST", "LADDER", "LEFT_OUT", "REGISTRATIONS", "SEEDS", "STEP_RULE", "WIDTHS", "Effect",
    "LadderClaim", "steps_at",
]  # fmt: skip


def _depth() -> LadderClaim:
    wraps = ("post", "pre", "deepnorm", "admin", "rezero")
    settings = {f"{w} 24L": setting(w, 24, 150) for w in wraps}
    sweep, labels = with_lr_sweep(settings, "post 24L", 1e-3)
    effects = [fails_effect("post 24L")] + [trains_effect(f"{w} 24L") for w in wraps[1:]]
    effects += [fails_effect(label, sweep=True) for label in labels]
    return LadderClaim(
        "depth",
        {**settings, **sweep},
        tuple(effects),
        "24 layers only (48 dropped: it doubles the cost and 24 already separates the wrappings)",
        labels,
    )


def _warmup() -> LadderClaim:
    settings, effects = {}, []
    for lr in (1e-3, 1e-2):
        for w in ("post", "pre"):
            settings[f"{w} 6L lr {lr:g}, no warmup"] = setting(w, 6, 400, lr, 0)
            settings[f"{w} 6L lr {lr:g}, warmup"] = setting(w, 6, 400, lr, 133)
        a, b = f"post 6L lr {lr:g}, no warmup", f"post 6L lr {lr:g}, warmup"
        effects.append(Effect(f"post 6L lr {lr:g}: no warmup - warmup (clearly worse)", "gap", a, b, 0.10))
        a, b = f"pre 6L lr {lr:g}, no warmup", f"pre 6L lr {lr:g}, warmup"
        effects.append(Effect(f"pre 6L lr {lr:g}: no warmup - warmup (close)", "gap", a, b, at_most=0.05))
    return LadderClaim(
        "warmup", settings, tuple(effects), "6 layers at lr 1e-3 and 1e-2 (12 layers dropped: the cost)"
    )


def _shallow_post() -> LadderClaim:
    settings = {f"{w} 6L, warmup 100": setting(w, 6, 300, 1e-3, 100) for w in ("post", "pre")}
    gap = Effect(
        "post - pre at 6L, warmup 100 (no worse)", "gap", "post 6L, warmup 100", "pre 6L, warmup 100"
    )
    return LadderClaim(
        "shallow-post",
        settings,
        (Effect(gap.name, gap.kind, gap.a, gap.b, at_most=0.02),),
        "the registered longest warmup (100) for both wrappings, not the best of three (the cost)",
    )


def _dyt() -> LadderClaim:
    settings = {
        "pre 6L, layernorm": setting("pre", 6, 150),
        "pre 6L, dyt": setting("pre", 6, 150, norm="dyt"),
    }
    gap = ("pre 6L, dyt", "pre 6L, layernorm")
    effects = (
        Effect("DyT - LayerNorm at 6L (close)", "gap", *gap, at_least=-0.1, at_most=0.1),
        trains_effect("pre 6L, dyt", "level", -TRAINS),
    )
    return LadderClaim("dyt", settings, effects, "6 layers only (12 dropped)")


def _final_norm() -> LadderClaim:
    settings = {
        "pre 24L, final norm on": setting("pre", 24, 150),
        "pre 24L, final norm off": setting("pre", 24, 150, final_norm="off"),
    }
    gap = Effect(
        "24L: without the final norm - with it",
        "gap",
        "pre 24L, final norm off",
        "pre 24L, final norm on",
        0.02,
    )
    return LadderClaim(
        "final-norm", settings, (gap,), "24 layers only (48 dropped); the trained loss gap, its counted check"
    )


def _no_norm() -> LadderClaim:
    settings = {
        "pre 12L, layernorm": setting("pre", 12, 150),
        "pre 12L, no norm": setting("pre", 12, 150, norm="none"),
    }
    gap = Effect("12L: no norm - LayerNorm (worse)", "gap", "pre 12L, no norm", "pre 12L, layernorm", 0.1)
    return LadderClaim(
        "no-norm", settings, (gap,), "the trained comparison only (the explosion at init is a sanity check)"
    )


def _no_residual() -> LadderClaim:
    skips = {"without skips": [], "with skips": ["attn", "cross", "ffn"]}
    settings = {
        f"pre {d}L, {k}": setting("pre", d, 150, residual=v) for k, v in skips.items() for d in (2, 16)
    }
    effects = (
        Effect(
            "without skips: 16L - 2L (worse)", "gap", "pre 16L, without skips", "pre 2L, without skips", 0.1
        ),
        Effect(
            "with skips: 16L - 2L (contrast)",
            "gap",
            "pre 16L, with skips",
            "pre 2L, with skips",
            at_most=0.05,
        ),
    )
    return LadderClaim("no-residual", settings, effects, "the shallowest and deepest depths (2, 16) only")


def _post_depth() -> LadderClaim:
    settings = {f"post {d}L": setting("post", d, 150, 1e-3, 50) for d in (16, 24)}
    settings["pre 32L"] = setting("pre", 32, 150, 1e-3, 50)
    effects = [
        trains_effect("post 16L", "level", -TRAINS),
        fails_effect("post 24L", "level", -FAILS),
        trains_effect("pre 32L", "level", -TRAINS),
    ]
    return LadderClaim(
        "post-depth",
        settings,
        tuple(effects),
        "post-LN at 16 and 24 layers (the registered stop lies between them) at lr 1e-3, and pre-LN at 32; "
        "the registered lrs 3e-4 and 3e-3 are already swept at the small scale",
    )


def _post_diverge() -> LadderClaim:
    settings = {f"post 24L lr {lr:g}": setting("post", 24, 300, lr) for lr in (1e-3, 1e-2)}
    effects = tuple(fails_effect(label, "level", -FAILS) for label in settings)
    return LadderClaim(
        "post-diverge",
        settings,
        effects,
        "lr 1e-3 and 1e-2 of the four (the registered sweep spans 1e-3 to 3e-2 at the small scale); the "
        "effect is the failure level (final loss / unigram - 1 > -0.05, a diverged run at ln V), not the "
        "unanimous divergence the small scale counts",
    )


def _recipe() -> LadderClaim:
    grid = (
        ("post, no warmup, beta2 0.98", "post", 0, 0.98, "fails"),
        ("post, warmup, beta2 0.98", "post", 50, 0.98, "trains"),
        ("post, warmup, beta2 0.999", "post", 50, 0.999, "fails"),
        ("post, no warmup, beta2 0.999", "post", 0, 0.999, "fails"),
        ("pre, no warmup, beta2 0.98", "pre", 0, 0.98, "trains"),
    )
    settings = {k: setting(w, 8, 150, 3e-3, warm, t_beta2=b2) for k, w, warm, b2, _ in grid}
    settings["post, Noam"] = setting("post", 8, 150, 3e-3, 50, t_schedule="noam", t_noam_lr=3e-3)
    effects = [
        (trains_effect if want == "trains" else fails_effect)(k, "level", -TRAINS)
        for k, _, _, _, want in grid
    ]
    effects.append(trains_effect("post, Noam", "level", -TRAINS))
    sweeps, labels = {}, ()
    for k, _, _, _, want in grid:
        if want == "fails":
            extra, names = with_lr_sweep(settings, k, 3e-3)
            sweeps.update(extra)
            labels += names
    effects += [fails_effect(label, "level", -FAILS, sweep=True) for label in labels]
    return LadderClaim(
        "recipe",
        {**settings, **sweeps},
        tuple(effects),
        "six of the seven settings (pre-LN with beta2 0.999 dropped: pre-LN trains with beta2 0.98 already)",
        labels,
    )


def _skip_ablation() -> LadderClaim:
    settings = {
        "pre 48L, no attention skip": setting("pre", 48, 300, residual=list(NO_ATTN_SKIP)),
        "pre 48L, all skips": setting("pre", 48, 300),
    }
    sweep, labels = with_lr_sweep(settings, "pre 48L, no attention skip", 1e-3)
    effects = (
        Effect(
            "48L without the attention skip: stalls near unigram",
            "nats",
            "pre 48L, no attention skip",
            at_least=-0.1,
        ),
        trains_effect("pre 48L, all skips"),
        *(Effect(f"{label}: stalls", "nats", label, at_least=-0.1, first_rung_only=True) for label in labels),
    )
    return LadderClaim(
        "skip-ablation",
        {**settings, **sweep},
        effects,
        "the two loss levels (the bottom-to-top gradient ratio reads per-step telemetry of every layer, "
        "kept out of the ladder's effects)",
        labels,
    )


def _batchnorm() -> LadderClaim:
    settings = {f"pre 2L, {n}": setting("pre", 2, 150, 3e-3, 10, norm=n) for n in ("layernorm", "batchnorm")}
    gap = Effect(
        "(val - train) of BatchNorm - of LayerNorm",
        "train_gap",
        "pre 2L, batchnorm",
        "pre 2L, layernorm",
        0.0,
    )
    return LadderClaim(
        "batchnorm", settings, (gap,), "the training check only (the norms' rows hold by definition)"
    )


def _collapse() -> LadderClaim:
    settings = {f"{w} 48L": setting(w, 48, 40, 1e-3, 5, t_batch_size=8) for w in ("pre", "deepnorm")}
    effects = (
        Effect("pre-LN 48L trained update-ratio slope in l (decays)", "slope", "pre 48L", at_most=-0.25),
        Effect(
            "DeepNorm 48L trained update-ratio slope in l (flat)",
            "slope",
            "deepnorm 48L",
            at_least=-0.25,
            at_most=0.25,
        ),
    )
    return LadderClaim(
        "collapse",
        settings,
        effects,
        "48 layers only (192 and 384 cost hours at width 128); the update-ratio slopes read from the "
        "training telemetry's last logged step (the small scale measures them on a fixed validation batch), "
        "not the shares of x_L, which need the trained model",
    )


def _lr_sensitivity() -> LadderClaim:
    settings = {
        f"{w} {d}L lr {lr:g}": setting(w, d, 150, lr, 15, t_schedule="cosine")
        for w in ("post", "pre")
        for d in (2, 24)
        for lr in (1e-3, 1e-2, 1e-1)
    }
    growth = Effect("LR sensitivity growth 2L -> 24L, post - pre", "sensitivity_growth", "post", "pre", 0.0)
    return LadderClaim(
        "lr-sensitivity",
        settings,
        (growth,),
        "post-LN and pre-LN at 2 and 24 layers, lr 1e-3, 1e-2 and 1e-1 (36 runs a rung instead of the "
        "preset's 405): the depth-growth check only",
    )


def _original_shape() -> LadderClaim:
    """The base model's shape at a quarter width (its registered small regime, width 128): the original
    schedule, time-compressed, with its warmup and without (warmup 1), and the lr sweep without it."""
    model = {"wrap": "post", "n_layers": 6, "d_ff": 512, "max_len": 128}
    multiplier = math.sqrt(100 / 4000)  # the claim's time-compressed Noam multiplier
    train = {"schedule": "noam", "lr": multiplier, "steps": 300, "beta2": 0.98}
    settings = {
        "post 6L, warmup 100": (model, {**train, "warmup": 100}),
        "post 6L, no warmup": (model, {**train, "warmup": 1}),
    }
    sweep, labels = with_lr_sweep(settings, "post 6L, no warmup", multiplier)
    effects = (
        trains_effect("post 6L, warmup 100", "level", -TRAINS),
        fails_effect("post 6L, no warmup", "level", -FAILS),
        *(fails_effect(label, "level", -FAILS, sweep=True) for label in labels),
    )
    return LadderClaim(
        "original-shape",
        {**settings, **sweep},
        effects,
        "its registered small regime only (width 128, a quarter of the paper's 512; wider rungs are the "
        "large scale), with the Noam multiplier x 1/3 and x 3 without warmup",
        labels,
        widths=(128,),
    )


LADDER: dict[str, LadderClaim] = {
    c.name: c
    for c in (
        _depth(), _warmup(), _shallow_post(), _dyt(), _final_norm(), _no_norm(), _no_residual(),
        _post_depth(), _post_diverge(), _recipe(), _skip_ablation(), _batchnorm(), _collapse(),
        _lr_sensitivity(), _original_shape(),
    )
}  # fmt: skip

# Training claims the ladder does not run, and why.
LEFT_OUT = {
    "model-update": "its quantity is the model's output change after 4 updates, read from the model "
    "itself, which a study store does not keep",
    "redundancy": "its quantity is the loss with layers dropped from the trained model, which a study "
    "store does not keep",
    # registered after the ladder: a ladder of theirs would be a new registration, made before its runs
    **{
        name: "registered after the ladder, so it is not on it; its ladder would be a new registration"
        for name in (
            "post-fails",
            "lr-reference",
            "stream-trained",
            "model-update-stream",
            "batchnorm-same",
            "original-peak",
        )
    },
}

# The commit that first recorded each claim's ladder in lab/tests/registered_ladder.json (checked against the
# history by lab/tests/test_reproduce_ladder.py).
COMMIT = "af97c5f092df15ee08fd9f39db157a55c898471d"
# A claim added to the ladder later names the commit that first recorded it.
COMMITS = {name: COMMIT for name in LADDER} | {"original-shape": "3435a85e46725ba0e833f4cc3f059a14be3d73dc"}
REGISTRATIONS: dict[str, Registration] = {n: c.registration(COMMITS[n]) for n, c in LADDER.items()}
