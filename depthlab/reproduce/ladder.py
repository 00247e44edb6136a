"""The reproductions' scale ladder: every training claim's decisive runs at widths 32, 64 and 128,
registered here before any of its runs.

The first rung (d_model 32) is the small regime of :mod:`depthlab.reproduce.lm_runs`; the two rungs
above it change only the width (4 heads at every width: heads of 8, 16 and 32 dimensions) and the
number of updates, by one rule (:func:`steps_at`): steps (and warmup steps, so that a warmup stays the
same share of the run) grow with the square root of the width, x1.41 at 64 and x2 at 128. Why that rule:
every rung sees more data than the one below it, and the whole ladder fits in about four hours of two
cores (the cost model's estimate, printed by ``depthlab reproduce ladder --plan``); a rule that kept
tokens per parameter fixed (steps x 16 at width 128) would cost about a week there. The price, said
where the effects are shown: parameters grow as width squared, so an upper rung is trained less, for its
size, than the first. The learning rate stays the registered one at every width (no width scaling).

Each claim runs its cheapest decisive subset (:attr:`LadderClaim.subset` says what was left out and
why), three seeds, and its effect sizes are the quantities its counted checks decide on, with their
registered thresholds (:class:`Effect`). Where a claim says a setting *fails*, "fails" means fails at
every learning rate tried (Wortsman et al. 2023): its first rung also runs that setting at the
registered learning rate x 1/3 and x 3 (settings marked ``first_rung_only``).

Each claim's ladder is a :class:`depthlab.reproduce.registration.Registration` whose ``commit`` is the
commit that first recorded its values in tests/registered_ladder.json (tests/test_reproduce_ladder.py
checks it against the history, and that no stored ladder run started before it); a change to a value
afterwards is a revision, as for the claims.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from depthlab.reproduce.lm_runs import NO_ATTN_SKIP
from depthlab.reproduce.registration import Registration

WIDTHS = (32, 64, 128)
SEEDS = [0, 1, 2]
FIRST = WIDTHS[0]
STEP_RULE = "steps x sqrt(width / 32), rounded (warmup steps likewise): x1.41 at 64, x2 at 128"
TRAINS, FAILS = 0.05, 0.05  # the train package's stall level as a share of the unigram loss


def steps_at(steps: int, width: int) -> int:
    """The registered rule: ``steps`` of the first rung scaled to ``width`` (sqrt of the width ratio)."""
    return round(steps * math.sqrt(width / FIRST))


@dataclass(frozen=True)
class Effect:
    """One effect size of a claim: what a counted check decides on, with its registered bounds.

    ``kind``: "nats" (final loss - unigram loss of setting ``a``), "level" (final loss / unigram - 1 of
    ``a``), "gap" (final loss of ``a`` - of ``b``, paired by seed), "train_gap" ((val - final train
    loss) of ``a`` - of ``b``), "slope" (log-log slope of the trained update ratio against the layer
    index of ``a``, from the last logged step's telemetry), "sensitivity_growth" (Wortsman et al.'s LR
    sensitivity growth from the shallow to the deep curve, ``a`` minus ``b``; ``a`` and ``b`` name the
    wrappings, the curves are the settings "WRAP DL lr X"). The claim holds when the interval is at least
    ``at_least`` and at most ``at_most``. ``first_rung_only``: measured at width 32 only (the lr sweep).
    """

    name: str
    kind: str
    a: str
    b: str = ""
    at_least: float | None = None
    at_most: float | None = None
    first_rung_only: bool = False

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class LadderClaim:
    """A claim's ladder: its settings (label -> model and train overrides of the small regime, steps
    and warmup as at the first rung), its effects, the subset it runs and the registration fixing them.

    ``lr_sweep``: labels of the settings that run only at the first rung (the lr x 1/3 and x 3 runs).
    ``widths``: the claim's rungs (its first is its registered small regime's width; steps scale from it).
    """

    name: str
    settings: dict
    effects: tuple[Effect, ...]
    subset: str
    lr_sweep: tuple[str, ...] = ()
    widths: tuple[int, ...] = WIDTHS

    def settings_at(self, width: int) -> dict:
        """{label: {"model", "train"}} at ``width``: d_model set, steps and warmup scaled by the rule."""
        out, first = {}, self.widths[0]
        for label, (model, train) in self.settings.items():
            if width != first and label in self.lr_sweep:
                continue
            t = dict(train)
            for k in ("steps", "warmup"):
                if k in t:
                    t[k] = steps_at(t[k], FIRST * width // first)
            if t.get("schedule") == "noam" and "noam_lr" in t:  # Noam's peak equals the registered lr
                t["lr"] = t.pop("noam_lr") * math.sqrt(width * t["warmup"])
            out[label] = {"model": {**model, "d_model": width}, "train": t}
        return out

    def registration(self, commit: str) -> Registration:
        """The ladder's registration of this claim: its effects and its regime at every width."""
        regimes = {f"d{w}": {"settings": self.settings_at(w), "seeds": SEEDS} for w in self.widths}
        return Registration(
            commit=commit,
            expectation={"effects": [e.to_dict() for e in self.effects], "step_rule": STEP_RULE},
            regimes=regimes,
            notes=self.subset,
        )


def _s(wrap: str, layers: int, steps: int, lr: float = 1e-3, warmup: int = 0, **more) -> tuple:
    """One setting: (model overrides, train overrides); ``more`` goes to the model, ``t_*`` to train."""
    train = {"lr": lr, "warmup": warmup, "steps": steps}
    train.update({k[2:]: v for k, v in more.items() if k.startswith("t_")})
    model = {"wrap": wrap, "n_layers": layers, **{k: v for k, v in more.items() if not k.startswith("t_")}}
    return model, train


def _trains(label: str, kind: str = "nats", bound: float = -0.15) -> Effect:
    return Effect(f"{label}: trains", kind, label, at_most=bound)


def _fails(label: str, kind: str = "nats", bound: float = -0.05, sweep: bool = False) -> Effect:
    return Effect(f"{label}: fails", kind, label, at_least=bound, first_rung_only=sweep)


def _lr_sweep(settings: dict, label: str, lr: float) -> tuple[dict, tuple[str, ...]]:
    """``label`` again at lr / 3 and lr x 3 (first rung only): a setting "fails" at every lr tried."""
    model, train = settings[label]
    extra = {}
    for factor, name in ((1 / 3, "lr/3"), (3.0, "lr x3")):
        extra[f"{label}, {name}"] = (model, {**train, "lr": lr * factor})
    return extra, tuple(extra)


def _depth() -> LadderClaim:
    wraps = ("post", "pre", "deepnorm", "admin", "rezero")
    settings = {f"{w} 24L": _s(w, 24, 150) for w in wraps}
    sweep, labels = _lr_sweep(settings, "post 24L", 1e-3)
    effects = [_fails("post 24L")] + [_trains(f"{w} 24L") for w in wraps[1:]]
    effects += [_fails(label, sweep=True) for label in labels]
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
            settings[f"{w} 6L lr {lr:g}, no warmup"] = _s(w, 6, 400, lr, 0)
            settings[f"{w} 6L lr {lr:g}, warmup"] = _s(w, 6, 400, lr, 133)
        a, b = f"post 6L lr {lr:g}, no warmup", f"post 6L lr {lr:g}, warmup"
        effects.append(Effect(f"post 6L lr {lr:g}: no warmup - warmup (clearly worse)", "gap", a, b, 0.10))
        a, b = f"pre 6L lr {lr:g}, no warmup", f"pre 6L lr {lr:g}, warmup"
        effects.append(Effect(f"pre 6L lr {lr:g}: no warmup - warmup (close)", "gap", a, b, at_most=0.05))
    return LadderClaim(
        "warmup", settings, tuple(effects), "6 layers at lr 1e-3 and 1e-2 (12 layers dropped: the cost)"
    )


def _shallow_post() -> LadderClaim:
    settings = {f"{w} 6L, warmup 100": _s(w, 6, 300, 1e-3, 100) for w in ("post", "pre")}
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
    settings = {"pre 6L, layernorm": _s("pre", 6, 150), "pre 6L, dyt": _s("pre", 6, 150, norm="dyt")}
    gap = ("pre 6L, dyt", "pre 6L, layernorm")
    effects = (
        Effect("DyT - LayerNorm at 6L (close)", "gap", *gap, at_least=-0.1, at_most=0.1),
        _trains("pre 6L, dyt", "level", -TRAINS),
    )
    return LadderClaim("dyt", settings, effects, "6 layers only (12 dropped)")


def _final_norm() -> LadderClaim:
    settings = {
        "pre 24L, final norm on": _s("pre", 24, 150),
        "pre 24L, final norm off": _s("pre", 24, 150, final_norm="off"),
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
    settings = {"pre 12L, layernorm": _s("pre", 12, 150), "pre 12L, no norm": _s("pre", 12, 150, norm="none")}
    gap = Effect("12L: no norm - LayerNorm (worse)", "gap", "pre 12L, no norm", "pre 12L, layernorm", 0.1)
    return LadderClaim(
        "no-norm", settings, (gap,), "the trained comparison only (the explosion at init is a sanity check)"
    )


def _no_residual() -> LadderClaim:
    skips = {"without skips": [], "with skips": ["attn", "cross", "ffn"]}
    settings = {f"pre {d}L, {k}": _s("pre", d, 150, residual=v) for k, v in skips.items() for d in (2, 16)}
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
    settings = {f"post {d}L": _s("post", d, 150, 1e-3, 50) for d in (16, 24)}
    settings["pre 32L"] = _s("pre", 32, 150, 1e-3, 50)
    effects = [
        _trains("post 16L", "level", -TRAINS),
        _fails("post 24L", "level", -FAILS),
        _trains("pre 32L", "level", -TRAINS),
    ]
    return LadderClaim(
        "post-depth",
        settings,
        tuple(effects),
        "post-LN at 16 and 24 layers (the registered stop lies between them) at lr 1e-3, and pre-LN at 32; "
        "the registered lrs 3e-4 and 3e-3 are already swept at the small scale",
    )


def _post_diverge() -> LadderClaim:
    settings = {f"post 24L lr {lr:g}": _s("post", 24, 300, lr) for lr in (1e-3, 1e-2)}
    effects = tuple(_fails(label, "level", -FAILS) for label in settings)
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
    settings = {k: _s(w, 8, 150, 3e-3, warm, t_beta2=b2) for k, w, warm, b2, _ in grid}
    settings["post, Noam"] = _s("post", 8, 150, 3e-3, 50, t_schedule="noam", t_noam_lr=3e-3)
    effects = [(_trains if want == "trains" else _fails)(k, "level", -TRAINS) for k, _, _, _, want in grid]
    effects.append(_trains("post, Noam", "level", -TRAINS))
    sweeps, labels = {}, ()
    for k, _, _, _, want in grid:
        if want == "fails":
            extra, names = _lr_sweep(settings, k, 3e-3)
            sweeps.update(extra)
            labels += names
    effects += [_fails(label, "level", -FAILS, sweep=True) for label in labels]
    return LadderClaim(
        "recipe",
        {**settings, **sweeps},
        tuple(effects),
        "six of the seven settings (pre-LN with beta2 0.999 dropped: pre-LN trains with beta2 0.98 already)",
        labels,
    )


def _skip_ablation() -> LadderClaim:
    settings = {
        "pre 48L, no attention skip": _s("pre", 48, 300, residual=list(NO_ATTN_SKIP)),
        "pre 48L, all skips": _s("pre", 48, 300),
    }
    sweep, labels = _lr_sweep(settings, "pre 48L, no attention skip", 1e-3)
    effects = (
        Effect(
            "48L without the attention skip: stalls near unigram",
            "nats",
            "pre 48L, no attention skip",
            at_least=-0.1,
        ),
        _trains("pre 48L, all skips"),
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
    settings = {f"pre 2L, {n}": _s("pre", 2, 150, 3e-3, 10, norm=n) for n in ("layernorm", "batchnorm")}
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
    settings = {f"{w} 48L": _s(w, 48, 40, 1e-3, 5, t_batch_size=8) for w in ("pre", "deepnorm")}
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
        f"{w} {d}L lr {lr:g}": _s(w, d, 150, lr, 15, t_schedule="cosine")
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
    sweep, labels = _lr_sweep(settings, "post 6L, no warmup", multiplier)
    effects = (
        _trains("post 6L, warmup 100", "level", -TRAINS),
        _fails("post 6L, no warmup", "level", -FAILS),
        *(_fails(label, "level", -FAILS, sweep=True) for label in labels),
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
}

# The commit that first recorded each claim's ladder in tests/registered_ladder.json (checked against the
# history by tests/test_reproduce_ladder.py).
COMMIT = "af97c5f092df15ee08fd9f39db157a55c898471d"
# A claim added to the ladder later names the commit that first recorded it.
COMMITS = {name: COMMIT for name in LADDER} | {"original-shape": "3435a85e46725ba0e833f4cc3f059a14be3d73dc"}
REGISTRATIONS: dict[str, Registration] = {n: c.registration(COMMITS[n]) for n, c in LADDER.items()}
