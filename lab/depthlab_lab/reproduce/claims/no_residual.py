"""Without residual connections extra layers make results worse (Residual Connections Explained: "Lacking residual
connections, deep networks are hard to optimize, gradients vanish more readily, information gradually
drains away, and extra layers often make results worse").

Pre-LN decoders with every skip removed (each sublayer's output replaces the stream) and the same with
both skips are trained on the byte-level task (:mod:`depthlab_lab.reproduce.lm_runs`) at 2, 4, 8 and 16
layers, lr 1e-3, no warmup, several seeds. Each seed gives one paired difference: the deepest model's
final loss minus the shallowest's (a diverged run counts as ln V, an untrained model's loss).
"""

from __future__ import annotations

from depthlab_lab.reproduce.claim_plots import profiles
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
    PUBLISHED_KNOWN,
    Registration,
    Revision,
)
from depthlab_lab.reproduce.reproduction import (
    Reproduction,
    register,
    resolve,
    revised_unless_control,
)

SMALL = {"depths": [2, 4, 8, 16], "lr": 1e-3, "steps": 150, "seeds": [0, 1, 2, 3, 4]}
LARGE = {"depths": [2, 4, 8, 16], "lr": 1e-3, "steps": 2000, "seeds": [0, 1, 2]}
REGISTRATION = Registration(
    commit="9fcf9413329ed4ec7efa19b6764a1e0122a1169b",
    typed_date="2026-11-30",
    expectation={
        # "extra layers make results worse": without skips, deepest - shallowest final loss at least this
        "worse_by": 0.10,
        # the contrast: with skips the deepest ends no more than this many nats above the shallowest
        "with_skips_at_most": 0.05,
    },
    regimes={"small": SMALL, "large": LARGE},
    notes="Registered before any run without skips at these depths.",
    revisions=(
        Revision(
            "2026-12-01",
            "code.reproduce_no_residual",
            "c21e2776c11d41f9",
            "00d2ab17b9028338",
            "close and no worse need both sides trained: two stalled runs end close; the result under this rule is shown beside the first registration's, which decides",
            "yes: the documented results were known; this rule never decides them",
        ),
        Revision(
            "2026-12-01",
            "code.reproduce_no_residual",
            "00d2ab17b9028338",
            "4dc06b6888832a54",
            CAP_REASON,
            PUBLISHED_KNOWN,
        ),
    ),
)

# What a larger scale is expected to change, shown in docs/reproductions.md under a MISMATCH or an
# inconclusive result (no measured numbers: only the registered regimes and the sources' own).
AT_SCALE = "May change with longer training: deep plain stacks improve slowly rather than never."

QUICK = {"depths": [2, 8], "seeds": [0]}
SKIPS = {"without skips": (), "with skips": ("attn", "cross", "ffn")}


@register("no-residual", REGISTRATION)
def reproduce_no_residual(
    quick: bool = False, out_dir: str | None = None, scale: str = "small"
) -> Reproduction:
    """Without skips, extra layers make the result worse; with them they do not (Residual Connections Explained)."""
    r = resolve(REGISTRATION, scale, quick, QUICK)
    e, lo, hi = REGISTRATION.expectation, r["depths"][0], r["depths"][-1]
    train = {"lr": r["lr"], "warmup": 0, "steps": r["steps"]}
    models = {
        (k, d): {"wrap": "pre", "n_layers": d, "residual": res}
        for k, res in SKIPS.items()
        for d in r["depths"]
    }
    announce("no-residual", [(m, train) for m in models.values()], r["seeds"], scale)
    runs = {
        (k, d): train_seeds(f"pre {d}L, {k}", m, train, r["seeds"], scale) for (k, d), m in models.items()
    }

    def gaps(k):  # (deep, shallow) per seed: the deep one's final loss minus the shallow one's
        return zip(runs[(k, hi)], runs[(k, lo)], strict=True)

    checks = [
        loss_gap_check(
            f"without skips: final loss at {hi} layers - at {lo} layers (nats)",
            f">= {e['worse_by']:.2f} (extra layers make it worse)",
            gaps("without skips"),
            at_least=e["worse_by"],
            fmt="+.3f",
            context=f"outcomes at {hi}L " + "/".join(x.outcome for x in runs[("without skips", hi)]),
        ),
        revised_unless_control(
            loss_gap_check(
                f"with skips: final loss at {hi} layers - at {lo} layers (nats)",
                f"<= {e['with_skips_at_most']:.2f} (the contrast)",
                gaps("with skips"),
                at_most=e["with_skips_at_most"],
                fmt="+.3f",
            ),
            all_trained(runs[("with skips", lo)], runs[("with skips", hi)]),
            "not both depths trained",
            BOTH_TRAINED,
        ),
    ]
    series = {
        k: [sum(final_loss(x) for x in runs[(k, d)]) / len(r["seeds"]) for d in r["depths"]] for k in SKIPS
    }
    plot = profiles(
        series,
        out_dir,
        "no_residual",
        "Final loss by depth, with and without skips (mean over seeds)",
        "layers",
        "final loss (nats)",
        x=list(r["depths"]),
    )
    data = {"scale": scale, "regime": r, "runs": [x.to_dict() for rs in runs.values() for x in rs]}
    return Reproduction(
        "no-residual",
        data,
        checks,
        [p for p in [plot] if p],
        source="Residual Connections Explained: depth without skips",
    )
