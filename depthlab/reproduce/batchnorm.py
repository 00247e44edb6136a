"""Seed 000: LayerNorm's statistics come from one token's features, BatchNorm's from the batch.

"The mean and variance come from the features of that single vector for that single example ... batch
normalization estimates statistics across the batch, so it behaves differently at different batch sizes
... whereas layer normalization does exactly the same computation at training and inference time."

Measured, for LayerNorm, RMSNorm and BatchNorm, on the norm alone and on a small pre-LN model built
with each: (1) the change in one sequence's output when the *other* items of its batch change,
(2) when the batch size changes, (3) train-mode vs eval-mode output; and (4) after a short training run,
the validation loss scored in eval mode, in train mode and one sequence at a time.
"""

from __future__ import annotations

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.model import build_model
from depthlab.model.norms import make_norm
from depthlab.reproduce.claim import Check, Reproduction, register
from depthlab.train import train
from depthlab.train.evaluate import token_loss_sum
from depthlab.train.tasks import make_task

NORMS = ("layernorm", "rmsnorm", "batchnorm")
# "Does not depend" = equal to float32 rounding; "depends" = a relative change of at least 1%.
SAME, DIFFERENT = 1e-5, 1e-2


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


def _train_gap(norm: str, quick: bool) -> dict:
    """Train a small causal LM with ``norm``, then score its validation batches three ways.

    eval mode (what inference does: BatchNorm uses its running statistics), train mode (batch statistics
    of the 16 validation sequences) and train mode one sequence at a time (statistics of one sequence).
    LayerNorm gives the same loss all three ways; BatchNorm's differ, and the last is the seed's "behaves
    differently at different batch sizes". In a causal LM, BatchNorm's batch-and-time statistics also
    carry information from future tokens, another reason Transformers do not use it.
    """

    mcfg = ModelConfig(arch="decoder", n_layers=2, d_model=32, n_heads=4, wrap="pre", norm=norm)
    tcfg = TrainConfig(
        steps=60 if quick else 150, batch_size=16, seq_len=32, lr=3e-3, warmup=10, log_every=10
    )
    model = train(mcfg, tcfg).model
    batches = make_task(mcfg, tcfg).val_batches()

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
    return out


@register("batchnorm")
def reproduce_batchnorm(quick: bool = False, out_dir: str | None = None) -> Reproduction:
    """LayerNorm vs BatchNorm (seed 000): batch dependence, train/eval mismatch, and its effect on training."""
    torch.manual_seed(0)
    d = 64
    x, others = torch.randn(8, 16, d), torch.randn(8, 16, d)
    tokens, other_tokens = torch.randint(0, 256, (8, 16)), torch.randint(0, 256, (8, 16))
    data = {"norm_alone": {}, "model": {}, "training": {}}
    for name in NORMS:
        data["norm_alone"][name] = sensitivity(_norm_fn(name, d), x, others)
        data["model"][name] = sensitivity(_model_fn(name, d, seed=0), tokens, other_tokens)
    for name in ("layernorm", "batchnorm"):
        data["training"][name] = _train_gap(name, quick)
    return Reproduction("batchnorm", data, _checks(data), source="seed 000; Ba et al. 2016")


def _checks(data: dict) -> list[Check]:
    checks = []
    for where in ("norm_alone", "model"):
        for name in NORMS:
            s = data[where][name]
            worst = max(s.values())
            if name == "batchnorm":
                stated, ok = f"depends on the batch (>= {DIFFERENT:g})", min(s.values()) >= DIFFERENT
            else:
                stated, ok = f"independent of the batch (<= {SAME:g})", worst <= SAME
            measured = ", ".join(f"{k} {v:.2g}" for k, v in s.items())
            checks.append(Check(f"{name} ({where.replace('_', ' ')})", stated, measured, ok))
    ln, bn = data["training"]["layernorm"], data["training"]["batchnorm"]
    checks.append(
        Check(
            "trained LN: same val loss in train and eval mode, any batch",
            f"<= {SAME:g} nats apart",
            f"{ln['mismatch']:.2g} nats",
            ln["mismatch"] <= SAME,
        )
    )
    checks.append(
        Check(
            "trained BN: val loss depends on mode and batch",
            f">= {DIFFERENT:g} nats apart",
            f"eval {bn['eval_mode']:.3f}, batch {bn['train_mode']:.3f}, one sequence "
            f"{bn['one_sequence']:.3f}",
            bn["mismatch"] >= DIFFERENT,
        )
    )
    return checks
