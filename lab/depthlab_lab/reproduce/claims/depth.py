"""Deep post-LN fails where the other wrappings train (Liu et al. 2020; Wang et al. 2019; Wang et al. 2022).

Liu et al. 2020 (Admin): 18-layer post-LN diverged on WMT14 En-De where Admin trained (29.03 BLEU);
Wang et al. 2019 trained 30-layer pre-LN where post-LN failed; DeepNet (Wang et al. 2022): 18L-18L
post-LN diverged, DeepNorm trained to 100L-100L and beyond; ReZero (Bachlechner et al. 2020) trains
deep stacks with no norm at all. Reproduced at 24 and 48 layers on the byte-level task
(:mod:`depthlab_lab.reproduce.lm_runs`): Adam, betas (0.9, 0.98), no warmup, one learning rate for every
wrapping. Each (wrapping, depth) is trained with several seeds; the result is decided on the mean
final loss relative to the unigram loss (the level of a model that learned only which bytes are
common), with its interval.
"""

from __future__ import annotations

from depthlab_lab.reproduce.claim_plots import loss_curves
from depthlab_lab.reproduce.lm_runs import announce, below_unigram, outcomes, train_seeds
from depthlab_lab.reproduce.registration import DECISION, Registration, to_seeds
from depthlab_lab.reproduce.reproduction import Check, Reproduction, register, resolve, seeded_check

EXPECTED = {"post": "fails", "pre": "trains", "deepnorm": "trains", "admin": "trains", "rezero": "trains"}
LARGE = {"depths": [24, 48], "lr": 1e-3, "warmup": 0, "steps": 2000, "seeds": [0, 1, 2]}
REGISTRATION = Registration(
    commit="9fcf9413329ed4ec7efa19b6764a1e0122a1169b",
    typed_date="2026-11-30 05:23 UTC",
    expectation={
        **EXPECTED,
        # "fails": the final loss is within this many nats of the unigram loss, or above it
        "fails_within": 0.05,
        # "trains": the final loss is at least this many nats below the unigram loss
        "trains_below": 0.15,
        "decision": DECISION,
    },
    regimes={
        "small": {"depths": [24, 48], "lr": 1e-3, "warmup": 0, "steps": 150, "seeds": [0, 1, 2]},
        "large": LARGE,
    },
    notes="150 steps was chosen with pilot results known: with fewer, 24-layer pre-LN (seed 0) was still "
    "near the unigram plateau when the stall rule looks at the run.",
    revisions=to_seeds(
        "2026-11-30",
        "one seed: stalled or diverged, or within the margin (fails); trained and below it (trains)",
        {"regime.small.seeds": ([0], [0, 1, 2])},
        LARGE,
    ),
)

# What a larger scale is expected to change, shown in docs/reproductions.md under a MISMATCH or an
# inconclusive result (no measured numbers: only the registered regimes and the sources' own).
AT_SCALE = "At the small scale post-LN's rows cannot fail (sanity); at the large scale they are counted."

QUICK = {"depths": [24], "seeds": [0]}
# Post-LN's rows are sanity checks at small scale: before this claim was registered, 24-layer post-LN had
# not left the unigram plateau in any setting tried in this regime (warmups of 50-133 steps, lr 3e-4 to
# 1e-3), so its failure here was known in advance and cannot tell the wrappings apart.
POST_SANITY = "known in advance at this scale: post-LN at 24+ layers stalled in every setting tried here"


@register("depth", REGISTRATION)
def reproduce_depth(quick: bool = False, out_dir: str | None = None, scale: str = "small") -> Reproduction:
    """At 24 and 48 layers post-LN stalls or diverges where pre-LN, DeepNorm, Admin and ReZero train."""
    regime = resolve(REGISTRATION, scale, quick, QUICK)
    train = {"lr": regime["lr"], "warmup": regime["warmup"], "steps": regime["steps"]}
    specs = {(w, d): {"wrap": w, "n_layers": d} for d in regime["depths"] for w in EXPECTED}
    announce("depth", [(m, train) for m in specs.values()], regime["seeds"], scale)
    runs = {
        key: train_seeds(f"{key[0]} {key[1]}L", model, train, regime["seeds"], scale)
        for key, model in specs.items()
    }
    checks = [_check(wrap, depth, rs, scale) for (wrap, depth), rs in runs.items()]
    panels = {
        f"{d} layers": [rs[0] for (_, depth), rs in runs.items() if depth == d] for d in regime["depths"]
    }
    unigram = next(iter(runs.values()))[0].unigram_loss
    title = f"Deep stacks, lr {regime['lr']:g}, no warmup (seed {regime['seeds'][0]})"
    plot = loss_curves(panels, out_dir, "depth", title, unigram)
    data = {"scale": scale, "regime": regime, "runs": [r.to_dict() for rs in runs.values() for r in rs]}
    source = "Liu et al. 2020 (Admin); Wang et al. 2019; Wang et al. 2022 (DeepNet); Bachlechner et al. 2020"
    return Reproduction("depth", data, checks, [p for p in [plot] if p], source=source)


def _check(wrap: str, depth: int, runs: list, scale: str) -> Check:
    values = [below_unigram(r) for r in runs]
    context = outcomes(runs) + f"; unigram {runs[0].unigram_loss:.2f}"
    claim, e = f"{depth}L {wrap}: final loss - unigram loss (nats)", REGISTRATION.expectation
    if EXPECTED[wrap] == "fails":
        sanity = POST_SANITY if scale == "small" else ""
        stated = f"stalls or diverges: >= -{e['fails_within']:.2f}"
        return seeded_check(
            claim, stated, values, at_least=-e["fails_within"], fmt=".2f", context=context, sanity=sanity
        )
    stated = f"trains: <= -{e['trains_below']:.2f}"
    return seeded_check(claim, stated, values, at_most=-e["trains_below"], fmt=".2f", context=context)
