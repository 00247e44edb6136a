"""When post-LN converges it is at least as good as pre-LN (Liu et al. 2020, "Understanding the
Difficulty of Training Transformers").

Liu et al.: on WMT14 En-De with 6 layers, post-LN 27.80 BLEU vs pre-LN 27.27; pre-LN's easier training
costs some of the model's potential. Reproduced at 6 layers on the byte-level task
(:mod:`depthlab_lab.reproduce.lm_runs`), each wrapping at its best warmup among a few (a tuned warmup, as the
claim says): the warmup with the lowest mean final loss over seeds is chosen per wrapping, then each
seed gives one paired difference, post-LN's final loss minus pre-LN's. This is a soft claim at this
scale (a few hundred steps of a tiny model): it is reported either way.
"""

from __future__ import annotations

import statistics

from depthlab_lab.reproduce.claim_plots import loss_curves
from depthlab_lab.reproduce.lm_runs import (
    BOTH_TRAINED,
    all_trained,
    announce,
    final_loss,
    loss_gap_check,
    train_seeds,
)
from depthlab_lab.reproduce.registration import (
    CAP_REASON,
    DECISION,
    PUBLISHED_KNOWN,
    Registration,
    Revision,
    to_seeds,
)
from depthlab_lab.reproduce.reproduction import (
    Reproduction,
    register,
    resolve,
    revised_unless_control,
)

SMALL = {"depth": 6, "lr": 1e-3, "steps": 300, "warmups": [0, 30, 100], "seeds": [0, 1, 2, 3, 4]}
LARGE = {"depth": 6, "lr": 1e-3, "steps": 3000, "warmups": [0, 300, 1000], "seeds": [0, 1, 2]}
REGISTRATION = Registration(
    commit="9fcf9413329ed4ec7efa19b6764a1e0122a1169b",
    typed_date="2026-11-30 05:23 UTC",
    expectation={
        # post-LN's best final loss at most this many nats above pre-LN's best (seed-to-seed noise)
        "tolerance": 0.02,
        "decision": DECISION,
    },
    regimes={"small": SMALL, "large": LARGE},
    revisions=(
        *to_seeds(
            "2026-11-30",
            "one seed: the best run of each wrapping",
            {"regime.small.seeds": ([0], SMALL["seeds"])},
            LARGE,
        ),
        Revision(
            "2026-12-01",
            "code.no_worse_check",
            None,
            "5ac7e84afb494a66",
            "close and no worse need both sides trained: two stalled runs end close; the result under this rule is shown beside the first registration's, which decides",
            "yes: the documented results were known; this rule never decides them",
        ),
        Revision(
            "2026-12-01",
            "code.reproduce_shallow_post",
            "c11d67a500d1f4cf",
            "01b8881f6b49ecb4",
            "the no-worse check moved into no_worse_check",
            "yes: the documented results were known; this rule never decides them",
        ),
        Revision(
            "2026-12-01",
            "code.no_worse_check",
            "5ac7e84afb494a66",
            "26f7d524c31a0bb8",
            CAP_REASON,
            PUBLISHED_KNOWN,
        ),
    ),
)

# What a larger scale is expected to change, shown in docs/reproductions.md under a MISMATCH or an
# inconclusive result (no measured numbers: only the registered regimes and the sources' own).
AT_SCALE = (
    "Expected to change: Liu et al.'s advantage of post-LN is small (half a BLEU point) and appears after "
    "full convergence; a few hundred updates of a width-32 model end before either wrapping converges, and "
    "pre-LN's faster start dominates. The large scale trains ten times longer at width 256."
)

QUICK = {"steps": 150, "warmups": [0, 50], "seeds": [0]}


@register("shallow-post", REGISTRATION)
def reproduce_shallow_post(
    quick: bool = False, out_dir: str | None = None, scale: str = "small"
) -> Reproduction:
    """At 6 layers with a tuned warmup, post-LN ends at least as good as pre-LN (Liu et al. 2020; soft)."""
    r = resolve(REGISTRATION, scale, quick, QUICK)
    specs = {
        (wrap, w): ({"wrap": wrap, "n_layers": r["depth"]}, {"lr": r["lr"], "warmup": w, "steps": r["steps"]})
        for wrap in ("post", "pre")
        for w in r["warmups"]
    }
    announce("shallow-post", specs.values(), r["seeds"], scale)
    runs = {
        (wrap, w): train_seeds(
            f"{wrap} {r['depth']}L, " + (f"warmup {w}" if w else "no warmup"), m, t, r["seeds"], scale
        )
        for (wrap, w), (m, t) in specs.items()
    }
    best = {wrap: best_warmup(runs, wrap) for wrap in ("post", "pre")}
    post, pre = runs[("post", best["post"])], runs[("pre", best["pre"])]
    tol = REGISTRATION.expectation["tolerance"]
    check = no_worse_check(r["depth"], post, pre, tol, best)
    panels = {w: [rs[0] for (wrap, _), rs in runs.items() if wrap == w] for w in ("post", "pre")}
    title = f"{r['depth']} layers, lr {r['lr']:g}, warmup tuned (first seed)"
    plot = loss_curves(panels, out_dir, "shallow_post", title, post[0].unigram_loss)
    data = {
        "scale": scale,
        "regime": r,
        "best_warmup": best,
        "runs": [x.to_dict() for rs in runs.values() for x in rs],
    }
    return Reproduction("shallow-post", data, [check], [p for p in [plot] if p], source="Liu et al. 2020")


def no_worse_check(depth: int, post: list, pre: list, tol: float, best: dict):
    """Post-LN no worse than pre-LN; under the rule revised with results known, only when both trained
    (two stalled runs are no worse than each other): kept beside the first registration's result."""
    check = loss_gap_check(
        f"{depth}L, best warmup each: post-LN's final loss - pre-LN's (nats; soft)",
        f"<= +{tol:.2f}",
        zip(post, pre, strict=True),
        at_most=tol,
        fmt="+.3f",
        context=f"best warmup: post {best['post']}, pre {best['pre']}",
    )
    return revised_unless_control(check, all_trained(post, pre), "not both sides trained", BOTH_TRAINED)


def best_warmup(runs: dict, wrap: str) -> int:
    """The warmup of ``wrap`` with the lowest mean final loss over seeds (a diverged run counts as ln V)."""
    return min(
        (w for (w2, w) in runs if w2 == wrap),
        key=lambda w: statistics.fmean(final_loss(x) for x in runs[(wrap, w)]),
    )
