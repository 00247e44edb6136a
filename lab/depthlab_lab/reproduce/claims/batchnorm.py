"""Ba et al. 2016 (Layer Normalization): LayerNorm's statistics come from one token's features, BatchNorm's from the batch.

"The mean and variance come from the features of that single vector for that single example ... batch
normalization estimates statistics across the batch, so it behaves differently at different batch sizes
... whereas layer normalization does exactly the same computation at training and inference time."

Measured, for LayerNorm, RMSNorm and BatchNorm, on the norm alone and on a small pre-LN model built
with each: (1) the change in one sequence's output when the *other* items of its batch change,
(2) when the batch size changes, (3) train-mode vs eval-mode output; and (4) a short training run of a
small causal LM with each norm, where BatchNorm's train/eval mismatch should show as a larger gap
between the validation loss (scored in eval mode, with the running statistics) and the training loss
(batch statistics) than LayerNorm's: the check registered first. After that check failed in its first
run, two more were added (the validation loss scored in eval mode, in train mode and one sequence at a
time); they are shown, not counted. (1)-(3) hold by the norms' definitions: they check depthlab's norms.
"""

from __future__ import annotations

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.model import build_model
from depthlab.model.norms import make_norm
from depthlab.train.evaluate import token_loss_sum
from depthlab.train.tasks import make_task
from depthlab_lab.reproduce import cost
from depthlab_lab.reproduce.registration import (
    DECISION,
    EFFECT_REASON,
    PUBLISHED_KNOWN,
    Registration,
    Revision,
    to_seeds,
)
from depthlab_lab.reproduce.reproduction import (
    Check,
    Reproduction,
    effect_revised,
    register,
    resolve,
)
from depthlab_lab.reproduce.run_cache import train

NORMS = ("layernorm", "rmsnorm", "batchnorm")
SMALL = {"n_layers": 2, "d_model": 32, "lr": 3e-3, "warmup": 10, "steps": 150, "seeds": [0, 1, 2, 3, 4]}
LARGE = {"n_layers": 2, "d_model": 256, "lr": 1e-3, "warmup": 200, "steps": 2000, "seeds": [0, 1, 2]}
ADDED_AFTER = "added after the registered training check failed (results known): shown, not counted"
REGISTRATION = Registration(
    commit="9fcf9413329ed4ec7efa19b6764a1e0122a1169b",
    typed_date="2026-11-30 03:31 UTC",
    expectation={
        # "does not depend" = equal to float32 rounding; "depends" = a relative change of at least 1%
        "same": 1e-5,
        "different": 1e-2,
        # the training check: BN's (val loss - train loss) exceeds LN's by more than this, in nats
        "bn_gap_exceeds_ln_by": 0.0,
        "decision": DECISION,
        # the revised column's minimum effect (revision of 2026-12-01): a difference of two loss gaps must exceed
        # 0.02 nats, the seed-to-seed noise of a final loss that final-norm registered before these revisions
        "revised_min_effect_nats": 0.02,
    },
    regimes={"small": SMALL, "large": LARGE},
    revisions=(
        Revision(
            "2026-11-30 05:23 UTC",
            "expectation.training_check",
            None,
            "val loss in eval mode, train mode and one sequence at a time: LN equal, BN apart by >= 1%",
            "the registered check (val-train gap, BN > LN) failed; the mismatch was looked for elsewhere",
            "yes: the registered check had failed",
            # carried before the registration commit: the first values are the code's from before it
            commit="a63e20cb3bd9918e3221a360572d0e86182a1818",
        ),
        Revision(
            "2026-11-30",
            "expectation.training_check",
            "val loss in eval mode, train mode and one sequence at a time: LN equal, BN apart by >= 1%",
            None,
            "a check added after the registered one failed cannot replace it: the registered check is restored "
            "and decides; the added ones are shown as not counted",
            "yes",
        ),
        *to_seeds(
            "2026-11-30",
            "one seed: the two runs' gaps",
            {"regime.small.seeds": ([0], SMALL["seeds"])},
            LARGE,
            known="yes for seed 0 (the first run's gaps, 2026-11-30 05:23 UTC); no for the other seeds",
        ),
        Revision(
            "2026-12-01",
            "code._checks",
            "92532b90ad7550d3",
            "01c7eb5daf666ecb",
            EFFECT_REASON,
            PUBLISHED_KNOWN,
        ),
        Revision(
            "2026-12-01", "expectation.revised_min_effect_nats", None, 0.02, EFFECT_REASON, PUBLISHED_KNOWN
        ),
    ),
)

# What a larger scale is expected to change, shown in docs/reproductions.md under a MISMATCH or an
# inconclusive result (no measured numbers: only the registered regimes and the sources' own).
AT_SCALE = (
    "May change: the registered training check compares two generalisation gaps (validation minus "
    "training loss) of 2-layer models after 150 updates, where both gaps are small; longer training at width "
    "256 (the large scale) gives BatchNorm's running statistics more room to part from the batch's."
)

QUICK = {"steps": 60, "seeds": [0]}
BY_DEFINITION = "by construction: {what} (a check of depthlab's norms, not of the claim)"


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@torch.no_grad()
def sensitivity(fn, x: torch.Tensor, others: torch.Tensor) -> dict:
    """How item 0's output of ``fn`` moves with its batch: other items swapped, batch of one, eval mode.

    ``fn(batch, train: bool)`` returns the output for the whole batch. Returns relative changes.
    """
    base = fn(x, True)[0]
    swapped = torch.cat([x[:1], others[1:]])
    return {
        "other_items": _rel(fn(swapped, True)[0], base),
        "batch_size": _rel(fn(x[:2], True)[0], base),
        "train_vs_eval": _rel(fn(x, False)[0], base),
    }


def _norm_fn(name: str, d: int):
    norm = make_norm(name, d)
    # give BatchNorm running statistics of a different batch, as after some training
    if name == "batchnorm":
        norm.train()
        for _ in range(20):
            norm(torch.randn(8, 16, d) * 2 + 0.5)

    def fn(batch, train):
        norm.train(train)
        return norm(batch)

    return fn


def _model_fn(name: str, d: int, seed: int):
    torch.manual_seed(seed)
    cfg = ModelConfig(arch="encoder", n_layers=2, d_model=d, n_heads=4, vocab_size=256, wrap="pre", norm=name)
    model = build_model(cfg)
    with torch.no_grad():  # warm BatchNorm's running statistics on other batches
        model.train()
        for _ in range(20):
            model(torch.randint(0, 256, (8, 16)))

    def fn(tokens, train):
        model.train(train)
        return model(tokens)

    return fn


def _train_config(norm: str, r: dict, seed: int) -> tuple[ModelConfig, TrainConfig]:
    mcfg = ModelConfig(
        arch="decoder", n_layers=r["n_layers"], d_model=r["d_model"], n_heads=4, wrap="pre", norm=norm
    )
    tcfg = TrainConfig(
        steps=r["steps"], batch_size=16, seq_len=32, lr=r["lr"], warmup=r["warmup"], log_every=10, seed=seed
    )
    return mcfg, tcfg


def _train_gap(norm: str, r: dict, seed: int) -> dict:
    """Train a small causal LM with ``norm``; its (val loss - final train loss), and its validation
    batches scored three ways.

    eval mode (what inference does: BatchNorm uses its running statistics), train mode (batch statistics
    of the 16 validation sequences) and train mode one sequence at a time (statistics of one sequence).
    In a causal LM, BatchNorm's batch-and-time statistics also carry information from future tokens,
    another reason Transformers do not use it.
    """
    mcfg, tcfg = _train_config(norm, r, seed)
    result = train(mcfg, tcfg)
    model, batches = result.model, make_task(mcfg, tcfg).val_batches()

    @torch.no_grad()
    def loss(train_mode: bool, per_sequence: bool) -> float:
        model.train(train_mode)
        total = count = 0.0
        for b in batches:
            groups = (
                [(b.args[0][i : i + 1], b.targets[i : i + 1]) for i in range(len(b.targets))]
                if per_sequence
                else [(b.args[0], b.targets)]
            )
            for x, y in groups:
                total += float(token_loss_sum(model(x), y))
                count += y.numel()
        return total / count

    out = {"eval_mode": loss(False, False), "train_mode": loss(True, False), "one_sequence": loss(True, True)}
    out["mismatch"] = max(
        abs(out["train_mode"] - out["eval_mode"]), abs(out["one_sequence"] - out["eval_mode"])
    )
    out["val_minus_train"] = result.val_loss - result.final_train_loss
    return out


@register("batchnorm", REGISTRATION)
def reproduce_batchnorm(
    quick: bool = False, out_dir: str | None = None, scale: str = "small"
) -> Reproduction:
    """LayerNorm vs BatchNorm (Ba et al. 2016): batch dependence, train/eval mismatch, and its effect on training."""
    r = resolve(REGISTRATION, scale, quick, QUICK)
    planned = [_train_config(n, r, seed) for n in ("layernorm", "batchnorm") for seed in r["seeds"]]
    cost.announce("batchnorm", planned, lambda m, t: False)
    torch.manual_seed(0)
    d = 64
    x, others = torch.randn(8, 16, d), torch.randn(8, 16, d)
    tokens, other_tokens = torch.randint(0, 256, (8, 16)), torch.randint(0, 256, (8, 16))
    data = {"scale": scale, "regime": r, "norm_alone": {}, "model": {}, "training": {}}
    for name in NORMS:
        data["norm_alone"][name] = sensitivity(_norm_fn(name, d), x, others)
        data["model"][name] = sensitivity(_model_fn(name, d, seed=0), tokens, other_tokens)
    for name in ("layernorm", "batchnorm"):
        data["training"][name] = [_train_gap(name, r, seed) for seed in r["seeds"]]
    return Reproduction("batchnorm", data, _checks(data), source="Ba et al. 2016, Layer Normalization")


def _norm_row(data: dict, where: str, name: str) -> Check:
    """One norm's batch dependence, on the norm alone or in a model: a sanity check by its definition."""
    e, s = REGISTRATION.expectation, data[where][name]
    if name == "batchnorm":
        stated, ok = f"depends on the batch (>= {e['different']:g})", min(s.values()) >= e["different"]
        why = "BatchNorm in training mode normalises with the batch's statistics"
    else:
        stated, ok = f"independent of the batch (<= {e['same']:g})", max(s.values()) <= e["same"]
        why = f"{name}'s statistics are one token's features"
    measured = ", ".join(f"{k} {v:.2g}" for k, v in s.items())
    return Check(f"{name} ({where.replace('_', ' ')})", stated, measured, ok, BY_DEFINITION.format(what=why))


def _checks(data: dict) -> list[Check]:
    """The registered training check, the norms' rows, and the two checks added after it failed."""
    e, checks = REGISTRATION.expectation, []
    ln, bn = data["training"]["layernorm"], data["training"]["batchnorm"]
    checks.append(
        effect_revised(
            "BN's train/eval mismatch shows in validation: BN's (val - train loss) - LN's (nats)",
            f"> {e['bn_gap_exceeds_ln_by']:g} (val-train gap: BN > LN)",
            [b["val_minus_train"] - a["val_minus_train"] for a, b in zip(ln, bn, strict=True)],
            e["revised_min_effect_nats"],
            at_least=e["bn_gap_exceeds_ln_by"],
            fmt="+.3f",
            context="BN gaps "
            + "/".join(f"{b['val_minus_train']:+.2f}" for b in bn)
            + ", LN gaps "
            + "/".join(f"{a['val_minus_train']:+.2f}" for a in ln),
        )
    )
    checks += [_norm_row(data, where, name) for where in ("norm_alone", "model") for name in NORMS]
    worst_ln = max(a["mismatch"] for a in ln)
    checks.append(
        Check(
            "trained LN: same val loss in train and eval mode, any batch (worst seed)",
            f"<= {e['same']:g} nats apart",
            f"{worst_ln:.2g} nats",
            worst_ln <= e["same"],
            BY_DEFINITION.format(what="LayerNorm has no mode- or batch-dependent state"),
        )
    )
    least_bn = min(b["mismatch"] for b in bn)
    checks.append(
        Check(
            "trained BN: val loss depends on mode and batch (least seed)",
            f">= {e['different']:g} nats apart",
            f"{least_bn:.3f} nats; eval/batch/one sequence, first seed: "
            f"{bn[0]['eval_mode']:.3f}/{bn[0]['train_mode']:.3f}/{bn[0]['one_sequence']:.3f}",
            least_bn >= e["different"],
            ADDED_AFTER,
        )
    )
    return checks
