"""Validation: loss per target token, bits per byte (lm) and exact-match accuracy (copy/reverse/sort)."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from depthlab.train.batch import IGNORE, Batch, shard
from depthlab.train.distributed import Dist


def token_loss_sum(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy (nats) over the target tokens; logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(
        logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE, reduction="sum"
    )


def z_loss_sum(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Summed (log Z)^2 over the target tokens, log Z = logsumexp of a position's logits (PaLM's z-loss)."""
    log_z = torch.logsumexp(logits.float(), dim=-1)  # (B, T)
    return (log_z.pow(2) * (targets != IGNORE)).sum()


def exact_matches(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """How many sequences have every target token as the argmax (0-dim tensor)."""
    hit = (logits.argmax(-1) == targets) | (targets == IGNORE)  # (B, T)
    return hit.all(dim=1).sum()


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    batches: list[Batch],
    dist: Dist,
    autocast=contextlib.nullcontext,
    lm: bool = True,
) -> dict:
    """{"loss", "bpb", "accuracy"} over the validation batches (each process scores its share; the sums
    are combined). bpb is loss / ln 2 for byte-level lm, else None; accuracy is None for lm."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64)  # loss sum, target tokens, exact matches, sequences
    for global_batch in batches:
        b = shard(global_batch, dist.rank, dist.world).to(dist.device)
        with autocast():
            logits = model(*b.args, **b.kwargs)
        sums += torch.stack(
            [
                token_loss_sum(logits, b.targets).double().cpu(),
                torch.tensor(float((b.targets != IGNORE).sum())),
                exact_matches(logits, b.targets).double().cpu(),
                torch.tensor(float(b.targets.shape[0])),
            ]
        )
    model.train(was_training)
    loss_sum, n_tokens, matches, n_seqs = dist.all_reduce(sums).tolist()
    loss = loss_sum / max(n_tokens, 1.0)
    return {
        "loss": loss,
        "bpb": loss / math.log(2) if lm else None,
        "accuracy": None if lm else matches / max(n_seqs, 1.0),
    }
