"""DeepNet's "model update", measured on the stream before any final norm (Wang et al. 2022, Figs. 2
and 5; Liu et al. 2020, Admin).

The model-update claim measures the change of the head's input, which for pre-LN comes after the final
LayerNorm: the norm rescales every model's output to the same size, so the relative change saturates
near sqrt(2) (the distance between unrelated unit vectors) and says little about depth; and its pre-LN
expectation ("about flat") was depthlab's, not a source's. Here the change is read on the residual
stream leaving the last layer, x_L, before any final norm (for post-LN and DeepNorm, whose layers end in
a norm and which have no final one, that is the head's input as before), on DeepNet's own 64-128-2
models after a few Adam updates (lr 1e-4, no warmup), for seeds the model-update claim did not use.

The expectations are the sources': DeepNet (Figs. 2 and 5) shows post-LN's update growing several-fold
from 6 to 100 layers and DeepNorm's staying small and about flat; Admin (Liu et al. 2020) derives that
post-LN's output change grows about linearly with the number of layers and pre-LN's only
logarithmically, so per seed post-LN's growth from the shallowest to the deepest model exceeds pre-LN's.
Each is a ratio of positive changes, decided with a log-scale interval.
"""

from __future__ import annotations

import torch

from depthlab.model import build_model
from depthlab_lab.reproduce import cost
from depthlab_lab.reproduce.claim_plots import profiles
from depthlab_lab.reproduce.claims.model_update import BATCH, SEQ, tiny_config, train_config
from depthlab_lab.reproduce.lm_runs import lm_batches
from depthlab_lab.reproduce.registration import DECISION, Registration
from depthlab_lab.reproduce.reproduction import Check, Reproduction, register, resolve, seeded_check
from depthlab_lab.reproduce.run_cache import train

WRAPS = ("post", "pre", "deepnorm")
SMALL = {"depths": [6, 12, 24, 48, 96], "steps": 4, "lr": 1e-4, "seeds": [5, 6, 7, 8, 9]}
LARGE = {"depths": [6, 12, 24, 48, 96], "steps": 4, "lr": 1e-4, "seeds": list(range(10, 20))}
REGISTRATION = Registration(
    commit="4d04a2491016da804758c191552a245f3a84e4c1",
    expectation={
        # DeepNet: post-LN's change at the deepest depth at least this many times the shallowest's
        "post_grows": 2.0,
        # DeepNet: DeepNorm's same ratio within this range ("about flat")
        "deepnorm_flat": [2 / 3, 3 / 2],
        # Admin: post-LN's ratio over pre-LN's ratio above this (O(N) against O(log N))
        "post_over_pre": 1.0,
        "interval_scale": "log",
        "decision": DECISION,
    },
    regimes={"small": SMALL, "large": LARGE},
    notes="Registered before any of its runs. Known beforehand: the model-update claim's results for seeds "
    "0-4 on the head's input, which for post-LN and DeepNorm is the same quantity (their layers end in a "
    "norm and there is no final one); this claim's seeds are 5-9. The thresholds are the model-update "
    "claim's registered ones; Admin's comparison is new, its threshold 1 (post-LN grows faster).",
)

# What a larger scale is expected to change, shown in docs/reproductions.md under a MISMATCH or an
# inconclusive result (no measured numbers: only the registered regimes and the sources' own).
AT_SCALE = (
    "Not expected to change with training length: the claim is about the first updates of DeepNet's own "
    "64-128-2 models; the large scale adds seeds only."
)

QUICK = {"depths": [6, 24], "seeds": [5]}


def _last_stream(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """x_L, the stream leaving the last layer, before any final norm."""
    model.eval()
    with torch.no_grad():
        _, states = model(tokens, return_states=True)
    return states[-1]


def stream_change(cfg, seed: int, steps: int, lr: float) -> float:
    """Relative change of x_L on a held-out batch after ``steps`` updates of depthlab's training loop
    (theta_0 built as the loop builds it)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        initial = build_model(cfg)
    probe = lm_batches(1, BATCH, SEQ, seed=seed, split="val")[0][:, :-1]
    before = _last_stream(initial, probe)
    after = _last_stream(train(cfg, train_config(seed, steps, lr)).model, probe)
    return float((after - before).norm() / before.norm())


@register("model-update-stream", REGISTRATION)
def reproduce_model_update_stream(
    quick: bool = False, out_dir: str | None = None, scale: str = "small"
) -> Reproduction:
    """The stream's change after the first updates: grows with depth for post-LN, flat for DeepNorm.

    And it grows faster for post-LN than for pre-LN (Admin)."""
    r = resolve(REGISTRATION, scale, quick, QUICK)
    planned = [
        (tiny_config(w, d), train_config(s, r["steps"], r["lr"]))
        for w in WRAPS
        for d in r["depths"]
        for s in r["seeds"]
    ]
    cost.announce("model-update-stream", planned, lambda m, t: False)
    change = {
        w: {
            d: [stream_change(tiny_config(w, d), s, r["steps"], r["lr"]) for s in r["seeds"]]
            for d in r["depths"]
        }
        for w in WRAPS
    }
    plot = profiles(
        {w: [sum(change[w][d]) / len(change[w][d]) for d in r["depths"]] for w in WRAPS},
        out_dir, "model_update_stream",
        f"Stream change after {r['steps']} Adam updates (lr {r['lr']:g}), 64-128-2 models, mean over seeds",
        "layers", "||x_L after - x_L before|| / ||x_L before||", log=True, x=list(r["depths"]),
    )  # fmt: skip
    data = {
        "scale": scale,
        "regime": r,
        "change": {w: {str(d): v for d, v in t.items()} for w, t in change.items()},
    }
    source = "Wang et al. 2022 (DeepNet), Figs. 2 and 5; Liu et al. 2020 (Admin)"
    return Reproduction(
        "model-update-stream", data, stream_checks(change), [p for p in [plot] if p], source=source
    )


def stream_checks(change: dict) -> list[Check]:
    """Post-LN grows, DeepNorm flat (DeepNet), post-LN's growth over pre-LN's (Admin); ``change``:
    {wrap: {depth: [per seed]}}. Ratios of the deepest depth's change to the shallowest's, per seed."""
    e, scale = REGISTRATION.expectation, REGISTRATION.expectation["interval_scale"]
    depths = sorted(next(iter(change.values())))
    lo, hi = depths[0], depths[-1]
    ratio = {w: [b / a for a, b in zip(t[lo], t[hi], strict=True)] for w, t in change.items()}
    flat = e["deepnorm_flat"]
    where = f"x_L's change, {hi}L / {lo}L"
    return [
        seeded_check(f"post: {where} (DeepNet)", f"grows with depth: >= {e['post_grows']:g}", ratio["post"],
                     at_least=e["post_grows"], scale=scale),
        seeded_check(f"deepnorm: {where} (DeepNet)", f"about flat: in [{flat[0]:.2f}, {flat[1]:.2f}]",
                     ratio["deepnorm"], at_least=flat[0], at_most=flat[1], scale=scale),
        seeded_check(f"post's ratio / pre's ratio, {hi}L / {lo}L (Admin)",
                     f"post-LN grows faster: > {e['post_over_pre']:g}",
                     [p / q for p, q in zip(ratio["post"], ratio["pre"], strict=True)],
                     at_least=e["post_over_pre"], scale=scale),
    ]  # fmt: skip
