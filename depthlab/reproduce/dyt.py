"""Dynamic Tanh in place of LayerNorm trains comparably (Zhu et al. 2025, "Transformers without
Normalization").

Zhu et al. replace every norm layer of pre-LN Transformers with DyT(x) = gamma * tanh(alpha x) + beta
(alpha_0 = 0.5 for most models) and match LayerNorm's results across vision, speech and language.
Reproduced with pre-LN decoders at 6 and 12 layers in the tiny byte-level regime
(:mod:`depthlab.reproduce.lm_runs`), lr 1e-3, no warmup: every norm (inside each branch and the final
one) is LayerNorm or DyT, nothing else differs.
"""

from __future__ import annotations

import time

from depthlab.reproduce.claim import Check, Reproduction, register
from depthlab.reproduce.figures import loss_curves
from depthlab.reproduce.lm_runs import fmt_loss, train_run

DEPTHS, DEPTHS_QUICK = (6, 12), (6,)
LR = 1e-3
STEPS = STEPS_QUICK = 150

# Expected outcome, stated before the run: "comparably" = DyT's run is labelled trained and its
# validation loss is within CLOSE nats of LayerNorm's (about 4% of the loss at this scale).
CLOSE = 0.10


@register("dyt")
def reproduce_dyt(quick: bool = False, out_dir: str | None = None) -> Reproduction:
    """DyT instead of LayerNorm in pre-LN trains comparably at small scale (Zhu et al. 2025)."""
    start = time.perf_counter()
    train = {"lr": LR, "warmup": 0, "steps": STEPS_QUICK if quick else STEPS}
    runs, checks = {}, []
    for depth in DEPTHS_QUICK if quick else DEPTHS:
        ln = train_run(f"pre {depth}L, LayerNorm", {"wrap": "pre", "n_layers": depth}, train)
        dyt = train_run(f"pre {depth}L, DyT", {"wrap": "pre", "n_layers": depth, "norm": "dyt"}, train)
        runs[depth] = (ln, dyt)
        gap = dyt.val_loss - ln.val_loss
        checks.append(
            Check(
                f"{depth}L pre-LN: DyT trains comparably to LayerNorm",
                f"trained, |DyT - LN| <= {CLOSE:.2f} nats",
                f"DyT {fmt_loss(dyt.val_loss)} ({dyt.outcome}), LN {fmt_loss(ln.val_loss)}: {gap:+.3f}",
                dyt.outcome == "trained" and abs(gap) <= CLOSE,
            )
        )
    panels = {f"{d} layers": list(pair) for d, pair in runs.items()}
    unigram = runs[min(runs)][0].unigram_loss
    plot = loss_curves(panels, out_dir, "dyt", f"Pre-LN with LayerNorm vs DyT, lr {LR:g}", unigram)
    data = {
        "lr": LR,
        "runs": [r.to_dict() for pair in runs.values() for r in pair],
        "seconds": round(time.perf_counter() - start, 1),
    }
    return Reproduction("dyt", data, checks, [p for p in [plot] if p], source="Zhu et al. 2025 (DyT)")
