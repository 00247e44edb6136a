"""muP's width transfer: the best learning rate does not move with width under muP, and falls about as
1/width under the standard parametrization with Adam (Yang et al. 2021, Tensor Programs V; microsoft/mup).

Under SP with Adam every hidden matrix's update changes its output by ~ lr x width per coordinate, so the
best lr falls as 1/width; muP divides the hidden lr by the width multiplier (and scales the readout and
the attention), so that the lr tuned on a narrow proxy is the wide model's too. Reproduced on the
byte-level task with the width-transfer-quick preset's regime (:mod:`depthlab_lab.reproduce.transfer_runs`):
pre-LN at 4 layers under sp and mup (base width = the smallest width) at d_model 32, 64 and 128,
learning rates in half decades, three seeds. Per seed, the slope of log best lr against log width;
decided on the mean over seeds with its t-interval (an exponent, decided on its own linear scale). A
best lr at the sweep's edge at some width makes the slope a bound: that check is inconclusive.
"""

from __future__ import annotations

from depthlab_lab.reproduce import lr_transfer
from depthlab_lab.reproduce.lr_transfer import DECIDED_ELSEWHERE  # noqa: F401 -- pinned with the claim
from depthlab_lab.reproduce.registration import DECISION, Registration, Revision
from depthlab_lab.reproduce.reproduction import Reproduction, register

SMALL = {
    "wrap": "pre",
    "params": ["sp", "mup"],
    "sizes": [32, 64, 128],
    "n_layers": 4,
    "lrs": [1e-3, 3e-3, 1e-2, 3e-2, 1e-1],
    "steps": 100,
    "warmup": 10,
    "seeds": [3, 4, 5],
}
QUICK = {"sizes": [16, 32], "n_layers": 1, "lrs": [1e-3, 3e-2, 1.0], "steps": 8, "warmup": 1, "seeds": [0, 1]}
REGISTRATION = Registration(
    commit="f7731fee4114f0b9c59a370cf05b7308b23168f1",
    expectation={
        # per parametrization, the slope of log best lr against log width: its interval inside
        # [target - band, target + band]
        "slope": {"mup": 0.0, "sp": -1.0},
        # the lr-transfer-depth claim's band: a slope off by 0.25 moves the best lr by 4^0.25 = 1.4x
        # over 32 to 128, less than half the sweep's half-decade step (3.2x)
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
                ("_slope_check", "cb4b4b9d69b99a6b", None),
                ("depthlab.reproduce.lr_transfer.WORDS", None, "c23bb028f9fc87d4"),
                ("depthlab.reproduce.lr_transfer._bounds", None, "7442b53b435c6dec"),
                ("depthlab.reproduce.lr_transfer.reproduce", None, "1a394473253aded1"),
                ("depthlab.reproduce.lr_transfer.slope_check", None, "7215b8984153a1e0"),
                ("depthlab.reproduce.lr_transfer.slope_checks", None, "abcc3e1fe4c6b166"),
                ("reproduce_width_transfer", "0cabb53b377e5528", "7fee031abbf1d971"),
            )
        ),
    ),
    notes="The results of this regime with seeds 0-2 were known when it was registered: the "
    "width-transfer-quick preset (the same model, widths, training and lr sweep; docs/transfer.md) gave "
    "-1.05 [-1.17, -0.93] under sp and -0.40 [-0.49, -0.32] under mup, no best at the sweep's edge. The "
    "expectations are the paper's (0 under muP, -1 under SP with Adam), with the band of the "
    "lr-transfer-depth claim (the sweep's resolution), not derived from those numbers; the regime is the "
    "preset's, kept as it was rather than chosen after its result, and run with fresh seeds 3-5. These "
    "checks are therefore a replication on new seeds of a measurement already seen, not a prediction.",
)


@register("width-transfer", REGISTRATION)
def reproduce_width_transfer(
    quick: bool = False, out_dir: str | None = None, scale: str = "small"
) -> Reproduction:
    """The slope of log best lr against log width is near 0 under mup and near -1 under sp."""
    what = "Registered reproduction of muP's lr transfer across width (Yang et al. 2021)."
    return lr_transfer.reproduce(
        "width-transfer",
        "width",
        REGISTRATION,
        QUICK,
        "width-transfer-claim",
        what,
        "Yang et al. 2021 (muP, Tensor Programs V)",
        quick,
        out_dir,
        scale,
    )
