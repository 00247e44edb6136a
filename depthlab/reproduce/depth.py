"""Deep post-LN fails where the other wrappings train (Liu et al. 2020; Wang et al. 2019; Wang et al. 2022).

Liu et al. 2020 (Admin): 18-layer post-LN diverged on WMT14 En-De where Admin trained (29.03 BLEU);
Wang et al. 2019 trained 30-layer pre-LN where post-LN failed; DeepNet (Wang et al. 2022): 18L-18L
post-LN diverged, DeepNorm trained to 100L-100L and beyond; ReZero (Bachlechner et al. 2020) trains
deep stacks with no norm at all. Reproduced at 24 and 48 layers in the tiny byte-level regime
(:mod:`depthlab.reproduce.lm_runs`): Adam lr 1e-3, betas (0.9, 0.98), no warmup, one learning rate for
every wrapping.
"""

from __future__ import annotations

import time

from depthlab.reproduce.claim import Check, Reproduction, register
from depthlab.reproduce.figures import loss_curves
from depthlab.reproduce.lm_runs import Run, ended_at_unigram, train_run, trained_below_unigram

DEPTHS, DEPTHS_QUICK = (24, 48), (24,)
WRAPS = ("post", "pre", "deepnorm", "admin", "rezero")
LR = 1e-3
STEPS = STEPS_QUICK = 150  # fewer and 24-layer pre-LN is still near the plateau at the stall check

# Expected outcomes, stated before the run. Post-LN "stalls or diverges": the run is labelled stalled
# or diverged (depthlab.train.outcome), or ends within STALL nats of the unigram loss (the level of a
# model that has learned only which bytes are common). The others "train": labelled trained and at
# least TRAIN nats below the unigram loss.
STALL = 0.05
TRAIN = 0.15
EXPECTED = {"post": "fails", "pre": "trains", "deepnorm": "trains", "admin": "trains", "rezero": "trains"}


def _runs(quick: bool) -> dict[tuple[str, int], Run]:
    depths, steps = (DEPTHS_QUICK, STEPS_QUICK) if quick else (DEPTHS, STEPS)
    return {
        (wrap, depth): train_run(
            f"{wrap} {depth}L", {"wrap": wrap, "n_layers": depth}, {"lr": LR, "warmup": 0, "steps": steps}
        )
        for depth in depths
        for wrap in WRAPS
    }


@register("depth")
def reproduce_depth(quick: bool = False, out_dir: str | None = None) -> Reproduction:
    """At 24 and 48 layers post-LN stalls or diverges where pre-LN, DeepNorm, Admin and ReZero train."""
    start = time.perf_counter()
    runs = _runs(quick)
    checks = [_check(wrap, depth, run) for (wrap, depth), run in runs.items()]
    depths = sorted({d for _, d in runs})
    panels = {f"{d} layers": [r for (_, depth), r in runs.items() if depth == d] for d in depths}
    unigram = next(iter(runs.values())).unigram_loss
    plot = loss_curves(panels, out_dir, "depth", f"Deep stacks, lr {LR:g}, no warmup", unigram)
    data = {
        "lr": LR,
        "runs": [r.to_dict() for r in runs.values()],
        "seconds": round(time.perf_counter() - start, 1),
    }
    return Reproduction(
        "depth",
        data,
        checks,
        [p for p in [plot] if p],
        source="Liu et al. 2020 (Admin); Wang et al. 2019; Wang et al. 2022 (DeepNet); Bachlechner et al. 2020",
    )


def _check(wrap: str, depth: int, run: Run) -> Check:
    measured = f"{run.short()} (unigram {run.unigram_loss:.2f})"
    if EXPECTED[wrap] == "fails":
        stated = f"stalls or diverges (within {STALL:.2f} nats of unigram)"
        return Check(f"{depth}L {wrap}", stated, measured, ended_at_unigram(run, STALL))
    stated = f"trains (>= {TRAIN:.2f} nats below unigram)"
    return Check(f"{depth}L {wrap}", stated, measured, trained_below_unigram(run, TRAIN))
