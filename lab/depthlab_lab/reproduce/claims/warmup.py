"""Post-LN needs a learning-rate warmup; pre-LN does not (Xiong et al. 2020, "On Layer Normalization in
the Transformer Architecture").

Xiong et al. showed that at initialisation the gradient of post-LN's last layers is large, so Adam at
a normal learning rate without warmup takes the model somewhere it does not recover from (IWSLT14
De-En, 6-6 layers: 8.45 BLEU without warmup vs about 34 with it), while pre-LN trains without warmup.
Reproduced at 6 and 12 layers on the byte-level task (:mod:`depthlab_lab.reproduce.lm_runs`), Adam betas
(0.9, 0.98), lr 1e-3 (and 1e-2 at 6 layers), each wrapping with and without a linear warmup over the
first third of the steps. Runs with and without warmup share their seed (the same initial weights and
batches), so each seed gives one paired difference: final loss without warmup minus final loss with it.
"""

from __future__ import annotations

from depthlab_lab.reproduce.claim_plots import loss_curves
from depthlab_lab.reproduce.lm_runs import (
    BOTH_TRAINED,
    CAP_REVISION,
    all_trained,
    announce,
    capped_loss,
    final_loss,
    loss_gap_check,
    paired_outcomes,
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
    seeded_check,
    with_revision,
)

# (layers, learning rate) settings; each is run with and without warmup, for post-LN and pre-LN. Seeds
# per depth: five where a run takes under 10 s (6 layers), three otherwise.
SMALL = {
    "settings": [[6, 1e-3], [12, 1e-3], [6, 1e-2]],
    "steps": 400,
    "warmup_share": 1 / 3,  # Xiong et al.: 4000 of ~100k steps; shorter runs need a larger share
    "seeds": {"6": [0, 1, 2, 3, 4], "12": [0, 1, 2]},
}
LARGE = {
    "settings": [[6, 1e-3], [12, 1e-3], [6, 1e-2]],
    "steps": 3000,
    "warmup_share": 1 / 3,
    "seeds": {"6": [0, 1, 2], "12": [0, 1, 2]},
}
RESTORED = (
    "a revision made with the results known must not decide a verdict: the expectation as first "
    "registered is restored, and the later rule is shown beside it"
)
REGISTRATION = Registration(
    commit="9fcf9413329ed4ec7efa19b6764a1e0122a1169b",
    typed_date="2026-11-30 05:23 UTC",
    expectation={
        # post-LN "clearly worse" without warmup: its final loss at least this many nats higher
        "clear": 0.10,
        # pre-LN "close": without warmup at most this many nats worse (better without it counts as close)
        "close": 0.05,
        # whether a run without warmup that stalled or diverged where the warmup run trained counts as
        # clearly worse whatever the loss gap
        "failed_run_counts_as_worse": False,
        "decision": DECISION,
    },
    regimes={"small": SMALL, "large": LARGE},
    notes="400 steps and lr 1e-2 at 6 layers were chosen with pilot results known (seed 0, 150 steps: "
    "12-layer post-LN did not leave the unigram plateau even with a warmup).",
    revisions=(
        Revision(
            "2026-11-30 07:48 UTC",
            "expectation.failed_run_counts_as_worse",
            False,
            True,
            "after a review: a failed run where the warmup run trained should count as worse",
            "yes: it turned the 6L lr 1e-2 row (stalled vs trained, gap below 0.10) from MISMATCH to agree",
            # carried before the registration commit: the first values are the code's from before it
            commit="0ed7622fcf2f5f5aa1c4d1e04e15d1b218304d45",
        ),
        Revision("2026-11-30", "expectation.failed_run_counts_as_worse", True, False, RESTORED, "yes"),
        *to_seeds(
            "2026-11-30",
            "one seed: the loss gap of the two runs",
            {"regime.small.seeds": ([0], SMALL["seeds"])},
            LARGE,
        ),
        Revision(
            "2026-12-01",
            "code.close_check",
            None,
            "74874e64b190fda3",
            "close and no worse need both sides trained: two stalled runs end close; the result under this rule is shown beside the first registration's, which decides",
            "yes: the documented results were known; this rule never decides them",
        ),
        Revision(
            "2026-12-01",
            "code.reproduce_warmup",
            "ca05940f816c70a0",
            "c532ef875f795c81",
            "the pre-LN close check moved into close_check",
            "yes: the documented results were known; this rule never decides them",
        ),
        Revision(
            "2026-12-01", "code._gaps", "a4434a7a6c387ecd", "f3ffe5703769a5d5", CAP_REASON, PUBLISHED_KNOWN
        ),
        Revision(
            "2026-12-01",
            "code.close_check",
            "74874e64b190fda3",
            "14eb54b2f31c48eb",
            CAP_REASON,
            PUBLISHED_KNOWN,
        ),
        Revision(
            "2026-12-01",
            "code.reproduce_warmup",
            "c532ef875f795c81",
            "246a6d6916859d6d",
            CAP_REASON,
            PUBLISHED_KNOWN,
        ),
        Revision("2026-12-01", "code.clear_check", None, "1fafa88e5340bdb5", CAP_REASON, PUBLISHED_KNOWN),
    ),
)

# What a larger scale is expected to change, shown in docs/reproductions.md under a MISMATCH or an
# inconclusive result (no measured numbers: only the registered regimes and the sources' own).
AT_SCALE = (
    "Expected to change at the large scale for the 6-layer rows: Xiong et al.'s failure without warmup is "
    "an effect of Adam's first, large updates on a wide post-LN model (d_model 512) over a long run; at width "
    "32 and 400 updates the early damage is small and the run has time to recover, so a small gap here says "
    "little about the claim. The pre-LN rows are not expected to change."
)

QUICK = {"settings": [[12, 1e-3]], "seeds": {"12": [0]}}


def _specs(regime: dict) -> dict:
    warmup = round(regime["steps"] * regime["warmup_share"])
    out = {}
    for depth, lr in regime["settings"]:
        for wrap in ("post", "pre"):
            for w in (0, warmup):
                out[(wrap, depth, lr, w)] = (
                    {"wrap": wrap, "n_layers": depth},
                    {"lr": lr, "warmup": w, "steps": regime["steps"]},
                )
    return out


@register("warmup", REGISTRATION)
def reproduce_warmup(quick: bool = False, out_dir: str | None = None, scale: str = "small") -> Reproduction:
    """Post-LN needs warmup, pre-LN does not (Xiong et al. 2020); tested at 6 and 12 layers, lr 1e-3 (and 1e-2)."""
    regime = resolve(REGISTRATION, scale, quick, QUICK)
    specs, seeds = _specs(regime), regime["seeds"]
    for depth in sorted({d for _, d, _, _ in specs}):  # the seeds differ by depth: one estimate per group
        announce(f"warmup {depth}L", [v for k, v in specs.items() if k[1] == depth], seeds[str(depth)], scale)
    runs = {}
    for (wrap, depth, lr, w), (model, train) in specs.items():
        label = f"{wrap} {depth}L lr {lr:g}, " + (f"warmup {w}" if w else "no warmup")
        runs[(wrap, depth, lr, w)] = train_seeds(label, model, train, seeds[str(depth)], scale)
    warmup = max(k[3] for k in runs)
    checks = []
    for depth, lr in regime["settings"]:
        post = runs[("post", depth, lr, 0)], runs[("post", depth, lr, warmup)]
        pre = runs[("pre", depth, lr, 0)], runs[("pre", depth, lr, warmup)]
        checks.append(clear_check(depth, lr, post))
        checks.append(close_check(depth, lr, pre))
    panels = {
        f"{d} layers, lr {lr:g}": [rs[0] for (_, d2, lr2, _), rs in runs.items() if (d2, lr2) == (d, lr)]
        for d, lr in regime["settings"]
    }
    unigram = next(iter(runs.values()))[0].unigram_loss
    plot = loss_curves(
        panels, out_dir, "warmup", "Post-LN vs pre-LN, with and without warmup (first seed)", unigram
    )
    data = {
        "scale": scale,
        "regime": regime,
        "warmup": warmup,
        "runs": [r.to_dict() for rs in runs.values() for r in rs],
    }
    return Reproduction("warmup", data, checks, [p for p in [plot] if p], source="Xiong et al. 2020")


def clear_check(depth: int, lr: float, post: tuple[list, list]):
    """Post-LN without warmup ends clearly worse, as first registered; where a loss above ln V is capped
    (the revised rule), the capped gaps' result beside it."""
    e = REGISTRATION.expectation
    claim = f"{depth}L lr {lr:g} post-LN: no warmup ends clearly worse (loss without - with, nats)"
    rule = {"at_least": e["clear"], "fmt": "+.2f", "context": paired_outcomes(*post) + _later_rule(*post)}
    gaps = _gaps(*post, e["failed_run_counts_as_worse"])
    first = seeded_check(claim, f">= {e['clear']:.2f}", gaps, **rule)
    capped = _gaps(*post, e["failed_run_counts_as_worse"], loss=capped_loss)
    if capped == gaps:  # no loss above ln V: the revision does not touch the check
        return first
    return with_revision(first, seeded_check(claim, first.stated, capped, **rule), CAP_REVISION)


def close_check(depth: int, lr: float, pre: tuple[list, list]):
    """Pre-LN with and without warmup end close; under the rule revised with results known, only when
    both sides trained (two stalled runs are close): kept beside the first registration's result."""
    e = REGISTRATION.expectation
    check = loss_gap_check(
        f"{depth}L lr {lr:g} pre-LN: with and without warmup end close (loss without - with, nats)",
        f"<= {e['close']:.2f}",
        zip(*pre, strict=True),
        at_most=e["close"],
        fmt="+.2f",
        context=paired_outcomes(*pre),
    )
    return revised_unless_control(check, all_trained(*pre), "not both sides trained", BOTH_TRAINED)


def _gaps(no_warmup: list, warmup: list, failed_counts: bool, loss=final_loss) -> list[float]:
    """Per seed: final loss without warmup - final loss with it (a diverged run counts as ln V). With
    ``failed_counts``, a seed whose run without warmup stalled or diverged where the one with it trained
    counts as at least the registered "clear" gap."""
    gaps = []
    for a, b in zip(no_warmup, warmup, strict=True):
        gap = loss(a) - loss(b)
        if failed_counts and a.outcome in ("stalled", "diverged") and b.outcome == "trained":
            gap = max(gap, REGISTRATION.expectation["clear"])
        gaps.append(gap)
    return gaps


def _later_rule(no_warmup: list, warmup: list) -> str:
    """What the revision of 07:48 (not adopted) would have counted: seeds where the run without warmup
    failed and the one with it trained."""
    failed = sum(
        a.outcome in ("stalled", "diverged") and b.outcome == "trained" for a, b in zip(no_warmup, warmup)
    )
    return (
        f"; under the unadopted 07:48 rule {failed} of {len(warmup)} seeds would count as worse by outcome"
        if failed
        else ""
    )
