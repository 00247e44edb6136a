"""The best learning rate does not move with depth under CompleteP, and falls with depth under SP (Dey et
al. 2025, "Don't be lazy: CompleteP enables compute-efficient deep transformers").

CompleteP (alpha = 1: every residual branch x (L / L_base)^-1, the hidden Adam lr without a depth factor,
Adam's eps scaled) is built so that the hyperparameters tuned on a shallow proxy stay optimal at depth;
Dey et al. show the best learning rate staying put across depth for pre-LN GPTs where the standard
parametrization's moves. Reproduced on the byte-level task with the depth-transfer presets' tiny regime
(:mod:`depthlab_lab.reproduce.transfer_runs`): pre-LN under sp and completep (base depth = the smallest
depth) at 2, 4, 8 and 16 layers, learning rates in half decades, three seeds. Per seed, the slope of
log best lr (its own curve's argmin refined by a parabola in log lr) against log depth; decided on the
mean over seeds with its t-interval. The slope is an exponent (log against log), so it is decided on
its own linear scale. A best lr at the sweep's edge at some depth makes the slope a bound, not an
estimate: that check is inconclusive.
"""

from __future__ import annotations

from depthlab_lab.reproduce import lr_transfer
from depthlab_lab.reproduce.lr_transfer import DECIDED_ELSEWHERE  # noqa: F401 -- pinned with the claim
from depthlab_lab.reproduce.registration import DECISION, Registration, Revision
from depthlab_lab.reproduce.reproduction import Reproduction, register

SMALL = {
    "wrap": "pre",
    "params": ["sp", "completep"],
    "sizes": [2, 4, 8, 16],
    "lrs": [1e-3, 3e-3, 1e-2, 3e-2, 1e-1],
    "steps": 100,
    "warmup": 10,
    "seeds": [3, 4, 5],
}
QUICK = {"sizes": [1, 2], "lrs": [1e-3, 3e-2, 1.0], "steps": 8, "warmup": 1, "seeds": [0, 1]}
REGISTRATION = Registration(
    commit="f7731fee4114f0b9c59a370cf05b7308b23168f1",
    expectation={
        # per parametrization: "near 0" (the slope's interval inside [-band, band]) or "negative" (the
        # interval below 0)
        "slope": {"completep": "near 0", "sp": "negative"},
        # over 2 to 16 layers a slope of 0.25 moves the best lr by 8^0.25 = 1.7x, about half the sweep's
        # half-decade step (3.2x): less than the sweep resolves
        "band": 0.25,
        "edge_is_inconclusive": True,
        "decision": DECISION,
    },
    regimes={"small": SMALL},
    revisions=(
        # transfer_runs.store, pinned with the claim once the pins followed imported code
        Revision(
            "2026-12-01 12:13 UTC",
            "code.depthlab.reproduce.transfer_runs.store",
            "1b89309110e80340",
            "2edf8bb0ac40acf1",
            "the quick smoke version's store is named NAME.sqlite (was NAME-quick.sqlite); the registered "
            "regime's store is the default one, as before",
            "yes; it decides nothing (a file name of the unregistered quick version)",
        ),
        # the two lr-transfer claims merged into one implementation (depthlab_lab.reproduce.lr_transfer)
        *(
            Revision("2026-12-04", f"code.{key}", old, new, lr_transfer.MERGED, lr_transfer.MERGED_KNOWN)
            for key, old, new in (
                ("_checks", "d16fa6e54ea13093", None),
                ("_slope_check", "0c95a9db4135a312", None),
                ("depthlab.reproduce.lr_transfer.WORDS", None, "c23bb028f9fc87d4"),
                ("depthlab.reproduce.lr_transfer._bounds", None, "7442b53b435c6dec"),
                ("depthlab.reproduce.lr_transfer.reproduce", None, "1a394473253aded1"),
                ("depthlab.reproduce.lr_transfer.slope_check", None, "7215b8984153a1e0"),
                ("depthlab.reproduce.lr_transfer.slope_checks", None, "abcc3e1fe4c6b166"),
                ("reproduce_lr_transfer_depth", "33f974cf138d0d5d", "471f51a4a0cec729"),
            )
        ),
    ),
    notes="Registered before any run of this regime. Known when registering: the depth-transfer-quick "
    "preset (this model, training and lr sweep at 2, 4 and 8 layers, seeds 0-2, docs/transfer.md) gave "
    "slopes of -0.06 [-0.78, +0.66] under sp and -0.03 [-0.29, +0.23] under completep, no best at the "
    "sweep's edge; the lr-sensitivity study (150 steps, 2 to 24 layers) gave pre-LN under sp -0.39 "
    "[-0.79, +0.00]. This regime adds 16 layers (a lever of 8x in depth, against the preset's 4x) and "
    "fresh seeds 3-5, so none of its runs had been made. The expectations are the paper's (0 under "
    "CompleteP, falling under SP); the band is set by the sweep's resolution, the same band as the "
    "width-transfer claim's. Only pre-LN and two parametrizations fit the time (about 12 minutes of one "
    "core); depth_mup and the other wrappings are not in this regime.",
)


@register("lr-transfer-depth", REGISTRATION)
def reproduce_lr_transfer_depth(
    quick: bool = False, out_dir: str | None = None, scale: str = "small"
) -> Reproduction:
    """The slope of log best lr against log depth is near 0 under completep and negative under sp."""
    what = "Registered reproduction of CompleteP's lr transfer across depth (Dey et al. 2025)."
    return lr_transfer.reproduce(
        "lr-transfer-depth",
        "depth",
        REGISTRATION,
        QUICK,
        "lr-transfer-depth",
        what,
        "Dey et al. 2025 (CompleteP)",
        quick,
        out_dir,
        scale,
    )
