"""What the watcher reads from a training forward's inputs and outputs, whatever the model's conventions.

- the loss: a Hugging Face output's ``loss`` (or a dict's ``"loss"``), when the model computed it;
- the logits: an HF output's ``logits``, or a depthlab language model's returned tensor;
- the tokens: ``labels`` (ignoring the -100 padding), else ``input_ids``, else an integer first
  argument; their frequencies give the unigram loss, the reference a model that learned nothing of
  the context sits at (depthlab.watch.outcome calls such a run stalled).
"""

from __future__ import annotations

import torch


def output_loss(output) -> torch.Tensor | None:
    """The scalar loss inside a model's output, or None."""
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) and loss.ndim == 0 else None


def output_logits(output, kind: str) -> torch.Tensor | None:
    """The (..., V) output logits, or None where the output holds none (a bare stack's hidden states)."""
    logits = output.get("logits") if isinstance(output, dict) else getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if kind == "depthlab":  # LanguageModel / EncoderDecoder: logits, or (logits, states)
        first = output[0] if isinstance(output, tuple) else output
        return first if isinstance(first, torch.Tensor) else None
    return None


def log_partition(logits: torch.Tensor) -> torch.Tensor:
    """[sum over tokens of log sum_v exp(logit_v), number of tokens] as a (2,) float64 tensor (summed
    over processes, then divided, it is the mean log-partition of the whole batch)."""
    with torch.no_grad():
        lse = torch.logsumexp(logits.detach().float(), dim=-1)
        count = torch.tensor(float(lse.numel()), dtype=torch.float64, device=lse.device)
        return torch.stack([lse.sum().double(), count])


def batch_tokens(args, kwargs) -> torch.Tensor | None:
    """The integer token ids of a forward call's batch (labels first: they are what is predicted)."""
    for key in ("labels", "input_ids", "tgt", "tokens"):
        t = kwargs.get(key)
        if isinstance(t, torch.Tensor) and not t.is_floating_point():
            return t
    if args and isinstance(args[0], torch.Tensor) and not args[0].is_floating_point():
        return args[0]
    return None


class TokenCounts:
    """Token frequencies over the batches seen (on logged steps only, where the cost does not matter)."""

    def __init__(self):
        self.counts = torch.zeros(0, dtype=torch.long)

    def add(self, tokens: torch.Tensor | None) -> None:
        if tokens is None:
            return
        ids = tokens.detach().reshape(-1).cpu()
        ids = ids[ids >= 0]  # -100 marks ignored label positions
        if not ids.numel():
            return
        new = torch.bincount(ids, minlength=max(int(ids.max()) + 1, self.counts.numel()))
        new[: self.counts.numel()] += self.counts
        self.counts = new

    def entropy(self) -> float | None:
        """-sum p log p (nats) of the frequencies, None before any token was seen."""
        total = int(self.counts.sum())
        if not total:
            return None
        p = self.counts[self.counts > 0].double() / total
        return float(-(p * p.log()).sum())


def loss_value(value) -> float | None:
    """A step's loss as a float: the mean of its micro-batches' losses when it has several."""
    if value is None:
        return None
    if isinstance(value, list):
        return float(torch.stack([v.detach().float() for v in value]).mean()) if value else None
    return float(value.detach()) if isinstance(value, torch.Tensor) else float(value)


def mean_log_partition(pair: torch.Tensor | None) -> float | None:
    """The mean log-partition from :func:`log_partition`'s (sum, count), None without tokens."""
    return float(pair[0] / pair[1]) if pair is not None and float(pair[1]) else None
