"""Vaswani et al. 2017: the original post-LN recipe needs both the warmup and Adam beta2 = 0.98.

"The original model uses a learning-rate warmup of 4000 steps and Adam with beta2 = 0.98; skip either
and the 6-layer base model fails to converge." At small scale (the tiny regime of
:mod:`depthlab_lab.reproduce.lm_runs`: byte-level LM on the default corpus, d_model 32, 150 Adam updates of
16 x 32 bytes), post-LN is trained with (warmup, beta2) in {(0, 0.98), (w, 0.98), (w, 0.999),
(0, 0.999)} and with the Noam schedule, against pre-LN without warmup at both beta2 values.

The regime (8 layers, lr 3e-3, w = 50) was chosen, before the beta2 runs were looked at, as the one
where the warmup half of the claim is visible at all within 150 updates (the registration's notes say
how). At this scale a missing warmup delays post-LN's escape from the unigram plateau rather than
ruling it out, and the window where "fails without warmup, trains with it" holds is narrow; the
`warmup` reproduction looks at the same question with longer runs.

The Noam schedule is the original recipe's whole learning rate, lr * d^-0.5 * min(t^-0.5, t w^-1.5)
(:mod:`depthlab.train.schedules`), which peaks at lr (d w)^-0.5 at t = w. With lr = 1 that peak would
be (32 * 50)^-0.5 = 0.025 here (the paper's (512 * 4000)^-0.5 = 7e-4), so lr is set to
3e-3 * sqrt(d w): the Noam run peaks at the same rate as the linear-warmup runs and differs from them
only in its t^-0.5 decay after the warmup.

"Fails" is decided on the final loss relative to the unigram loss, at the train package's stall level
(:mod:`depthlab.watch.outcome`: 5% below the unigram loss), on the mean over seeds with its interval.
A setting expected to fail is confirmed only if the full recipe (warmup, beta2 0.98) trains in the same
runs: otherwise its failure says nothing about the missing ingredient, and its result is inconclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from depthlab_lab.reproduce.claim_plots import loss_curves
from depthlab_lab.reproduce.lm_runs import TINY_MODEL, announce, base, below_unigram, outcomes, train_seeds
from depthlab_lab.reproduce.registration import (
    DECISION,
    Registration,
    Revision,
    to_seeds,
)
from depthlab_lab.reproduce.reproduction import (
    AGREE,
    Check,
    Reproduction,
    register,
    resolve,
    revised_unless_control,
    seeded_check,
)

N_LAYERS = 8
LR = 3e-3
WARMUP = 50  # a third of the 150 updates
NOAM_LR = LR * math.sqrt(TINY_MODEL["d_model"] * WARMUP)  # Noam's peak = the other runs' lr
SMALL = {"n_layers": N_LAYERS, "lr": LR, "warmup": WARMUP, "steps": 150, "seeds": [0, 1, 2, 3, 4]}
LARGE = {"n_layers": N_LAYERS, "lr": LR, "warmup": 700, "steps": 2000, "seeds": [0, 1, 2]}
REGISTRATION = Registration(
    commit="9fcf9413329ed4ec7efa19b6764a1e0122a1169b",
    typed_date="2026-11-30 05:05 UTC",
    expectation={
        "post, no warmup, beta2 0.98": "fails",
        "post, warmup, beta2 0.98": "trains",
        "post, warmup, beta2 0.999": "fails",
        "post, no warmup, beta2 0.999": "fails",
        "post, Noam": "trains",
        "pre, no warmup, beta2 0.98": "trains",
        "pre, no warmup, beta2 0.999": "trains",
        # "trains": final loss below the stall level, this share under the unigram loss; "fails": not
        "trained_share_below_unigram": 0.05,
        # a setting expected to fail, when the full recipe (the control) did not train
        "control_failed": "inconclusive",
        "decision": DECISION,
    },
    regimes={"small": SMALL, "large": LARGE},
    notes="8 layers, lr 3e-3 and w = 50 were chosen with pilot results known (seed 0, beta2 0.98, post-LN at "
    "6 to 24 layers, with and without warmup): the regime where the warmup half of the claim shows at all. "
    "The beta2 runs were not looked at before.",
    revisions=(
        *to_seeds(
            "2026-11-30",
            "majority of three seeds' outcome labels",
            {"regime.small.seeds": ([0, 1, 2], SMALL["seeds"])},
            LARGE,
            level=True,
            known="yes for seeds 0, 1, 2 (the run of 2026-11-30 08:25 UTC); no for seeds 3 and 4",
        ),
        Revision(
            "2026-11-30",
            "expectation.control_failed",
            "MISMATCH",
            "inconclusive",
            "a failure without the full recipe's success says nothing about the missing ingredient: it cannot "
            "be decided, which is what 'inconclusive' says (the three-way verdict did not exist before)",
            "yes, but the control trained in that run, so no verdict moved",
        ),
        Revision(
            "2026-12-01",
            "code._setting_check",
            "fd83f86a21cf446b",
            "aab0fd090278e0b4",
            "a rule revised with results known never decides: the first registration's result (the failure "
            "counted) decides again, and the revised rule's result (inconclusive) is shown beside it",
            "yes: it moves the results that the revision had moved back to the first registration's",
        ),
    ),
)

# What a larger scale is expected to change, shown in docs/reproductions.md under a MISMATCH or an
# inconclusive result (no measured numbers: only the registered regimes and the sources' own).
AT_SCALE = (
    "May change: the beta2 half of the claim concerns the noise of Adam's second-moment estimate over "
    "thousands of steps; in 150 updates beta2 0.98 and 0.999 differ little. The large scale trains 2,000 "
    "updates at width 256."
)

QUICK = {"seeds": [0]}
CONTROL = 1  # SETTINGS[CONTROL] is the full recipe: warmup and beta2 0.98
NOT_EVIDENCE = "the full recipe did not clearly train in these runs, so this failure is not evidence"


@dataclass(frozen=True)
class Setting:
    """One training setting and its expected outcome: ``expect_trains`` is what the source says."""

    label: str
    key: str  # its name in the registration's expectation
    wrap: str
    train: dict
    why: str

    @property
    def expect_trains(self) -> bool:
        return REGISTRATION.expectation[self.key] == "trains"


# (registration key, wrap, warmup?, beta2, why): the grid; the key names the setting's expectation
GRID = (
    ("post, no warmup, beta2 0.98", "post", False, 0.98, "Vaswani et al. 2017: needs warmup"),
    ("post, warmup, beta2 0.98", "post", True, 0.98, "the recipe"),
    ("post, warmup, beta2 0.999", "post", True, 0.999, "Vaswani et al. 2017: needs beta2 0.98"),
    ("post, no warmup, beta2 0.999", "post", False, 0.999, "Vaswani et al. 2017: needs both"),
    ("post, Noam", "post", True, 0.98, "the original schedule"),
    ("pre, no warmup, beta2 0.98", "pre", False, 0.98, "Xiong et al.: no warmup"),
    ("pre, no warmup, beta2 0.999", "pre", False, 0.999, "pre-LN needs neither"),
)


def settings(warmup: int, lr: float, d_model: int) -> tuple[Setting, ...]:
    """The seven settings of the grid for a warmup of ``warmup`` steps at peak ``lr``."""
    noam_lr = lr * math.sqrt(d_model * warmup)  # Noam's peak (at t = w) equals the other runs' lr
    out = []
    for key, wrap, warm, beta2, why in GRID:
        train = dict(warmup=warmup if warm else 0, beta2=beta2)
        label = key.replace(", warmup,", f", warmup {warmup},")
        if key.endswith("Noam"):
            train.update(schedule="noam", lr=noam_lr)
            label = f"post, Noam (w={warmup}, peak lr {lr:g})"
        out.append(Setting(label, key, wrap, train, why))
    return tuple(out)


SETTINGS = settings(WARMUP, LR, TINY_MODEL["d_model"])


@register("recipe", REGISTRATION)
def reproduce_recipe(quick: bool = False, out_dir: str | None = None, scale: str = "small") -> Reproduction:
    """Post-LN needs the warmup AND Adam beta2 0.98 (Vaswani et al. 2017, Attention Is All You Need); pre-LN needs neither."""
    r = resolve(REGISTRATION, scale, quick, QUICK)
    grid = settings(r["warmup"], r["lr"], base(scale)[0]["d_model"])
    model = {"n_layers": r["n_layers"]}
    plan = {
        s.label: ({**model, "wrap": s.wrap}, {"lr": r["lr"], "steps": r["steps"], **s.train}) for s in grid
    }
    announce("recipe", plan.values(), r["seeds"], scale)
    runs = {label: train_seeds(label, m, t, r["seeds"], scale) for label, (m, t) in plan.items()}
    control = _level(grid[CONTROL], runs[grid[CONTROL].label])
    checks = [_setting_check(s, runs[s.label], control.result) for s in grid]
    data = {"scale": scale, "regime": r, "noam_lr": grid[4].train["lr"], "control": control.result}
    data["settings"] = [{"label": s.label, "runs": [x.to_dict() for x in runs[s.label]]} for s in grid]
    plots = _plot({label: rs[0] for label, rs in runs.items()}, out_dir, r["n_layers"])
    return Reproduction(
        "recipe",
        data,
        checks,
        plots,
        source="Vaswani et al. 2017, Attention Is All You Need; Xiong et al. 2020, On Layer Normalization in the Transformer Architecture",
    )


def _level(setting: Setting, runs: list) -> Check:
    """The setting's final loss relative to the unigram loss, against the stall level."""
    share = REGISTRATION.expectation["trained_share_below_unigram"]
    values = [below_unigram(x) / x.unigram_loss for x in runs]
    context = outcomes(runs) + f"; unigram {runs[0].unigram_loss:.2f}"
    if setting.expect_trains:
        stated = f"trains: <= -{share:.2f} ({setting.why})"
        return seeded_check(
            setting.label + ": loss / unigram - 1",
            stated,
            values,
            at_most=-share,
            fmt="+.3f",
            context=context,
        )
    stated = f"fails: > -{share:.2f} ({setting.why})"
    return seeded_check(
        setting.label + ": loss / unigram - 1", stated, values, at_least=-share, fmt="+.3f", context=context
    )


def _setting_check(setting: Setting, runs: list, control: str) -> Check:
    """The check of one setting. A failure expected from a missing ingredient counts only if the full
    recipe (the control) trained; otherwise it is inconclusive. That rule was added with results known
    (the revision of expectation.control_failed), so it never decides: the result stays the first
    registration's and the rule's result is kept beside it."""
    check = _level(setting, runs)
    if setting.expect_trains:
        return check
    return revised_unless_control(
        check,
        control == AGREE,
        "the full recipe did not clearly train in these runs, so this failure is not evidence",
        "expectation.control_failed: MISMATCH -> inconclusive",
    )


def _plot(first_seed: dict, out_dir: str | None, n_layers: int) -> list[str]:
    """Training-loss curves of the first seed: post-LN settings in one panel, pre-LN in the other."""
    panels = {
        f"post-LN, {n_layers} layers": [r for k, r in first_seed.items() if k.startswith("post")],
        f"pre-LN, {n_layers} layers": [r for k, r in first_seed.items() if k.startswith("pre")],
    }
    unigram = next(iter(first_seed.values())).unigram_loss
    title = "The original recipe at small scale: warmup and Adam beta2 (Vaswani et al. 2017; first seed)"
    path = loss_curves(panels, out_dir, "recipe", title, unigram=unigram)
    return [path] if path else []
