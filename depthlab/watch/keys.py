"""The names of what the watcher measures: a metrics record's keys and, per stream, its layer keys.

A record (one per logged step; a line of ``metrics.jsonl``) holds, in this order:

| key          | what                                                                                  |
|--------------|---------------------------------------------------------------------------------------|
| step         | the update (1-based)                                                                  |
| loss         | mean training loss over the updates since the last logged one                         |
| lr           | the lr at this update: depthlab train's peak lr x its schedule; in a watched loop the optimizer's first group's, unless ``watcher.step(lr=...)`` gives it (under a parametrization the first group is the hidden matrices', lr / m_w) |
| grad_norm    | ||d loss / d theta|| over all parameters, before any clipping                          |
| logit_lse    | mean over tokens of log sum_v exp(logit_v), the log-partition that z-loss keeps near 0 (PaLM; Wortsman et al. 2023) |
| val_loss     | validation loss where the loop evaluates (depthlab train), else None                  |
| tokens_per_s | training throughput where the loop measures it (depthlab train), else None           |
| layers       | one dict per stream (below)                                                           |
| warnings     | the warnings first raised at this step (:mod:`depthlab.watch.rules`)                  |

``layers[i]`` describes stream i (0 = entering layer 1, L = leaving layer L; docs/design.md):

| key          | what                                                                    |
|--------------|-------------------------------------------------------------------------|
| grad_norm    | ||d loss / d stream_i|| (the gradient reaching stream i)               |
| stream_rms   | sqrt(mean(stream_i^2))                                                  |
| update_ratio | ||stream_i - stream_{i-1}|| / ||stream_{i-1}||                          |
| cos_prev     | mean cosine between each token's vector in stream_i and stream_{i-1}     |
| angular_distance | arccos(cos_prev) / pi: how far layer i turned the stream (ShortGPT)  |
| attn_grad_norm | ||d loss / d theta|| over layer i's attention weights (the probe's quantity, Xiong et al. 2020 Fig. 3) |
| cross_grad_norm | the same for cross-attention (None outside an encoder-decoder's decoder) |
| ffn_grad_norm  | the same for the feed-forward sublayer                                 |
| param_update | ||W_after - W_before|| / ||W_before|| over all of layer i's parameters   |
| attn_entropy | layer i's self-attention entropy -sum_j p_ij log p_ij (nats), mean over the batch's first ``ROWS`` = 4 sequences, heads and queries (Zhai et al. 2023) |
| attn_logit_max | the largest pre-softmax attention logit of layer i over those sequences (Dehghani et al. 2023) |

The per-layer keys are None at i = 0, and the attention keys None where the scores cannot be observed
(:mod:`depthlab.watch.attention_stats`). The sublayer groups are the probe's
(:func:`depthlab.probe.locate.locate_stack`): a sublayer's own weights, not its wrapping's norm.
"""

from __future__ import annotations

from depthlab.probe.locate import SUBLAYER_KINDS

# The study store's layer_metrics table has one column per LAYER_KEYS entry (a test keeps them equal);
# the TensorBoard writer names its charts after them.
STREAM_KEYS = ("grad_norm", "stream_rms", "update_ratio", "cos_prev", "angular_distance")
GRAD_KEYS = tuple(f"{kind}_grad_norm" for kind in SUBLAYER_KINDS)  # attn, cross, ffn
ATTN_KEYS = ("attn_entropy", "attn_logit_max")
LAYER_KEYS = (*STREAM_KEYS, *GRAD_KEYS, "param_update", *ATTN_KEYS)
RECORD_KEYS = (
    "step",
    "loss",
    "lr",
    "grad_norm",
    "logit_lse",
    "val_loss",
    "tokens_per_s",
    "layers",
    "warnings",
)


def layer_rows(streams: list[dict], grads: list, updates: list | None, attn: list) -> list[dict]:
    """``layers`` of a record: per stream row (``streams``, from index 0) its stream keys, and for
    i >= 1 layer i's sublayer gradient norms (``grads[i-1]``), weight update and attention values."""
    rows = []
    for row in streams:
        i = row["index"]
        g = grads[i - 1] if i and grads else (None,) * len(GRAD_KEYS)
        upd = updates[i - 1] if (i and updates) else None
        att = attn[i - 1] if i else (None, None)
        rows.append({"index": i, **{k: row.get(k) for k in STREAM_KEYS}, **dict(zip(GRAD_KEYS, g)),
                     "param_update": upd, **dict(zip(ATTN_KEYS, att))})  # fmt: skip
    return rows


def new_record(step: int, lr, grad_norm, logit_lse, layers: list[dict]) -> dict:
    """A logged step's record in RECORD_KEYS order; its loss and warnings are filled in later."""
    values = {"step": step, "loss": None, "lr": lr, "grad_norm": grad_norm, "logit_lse": logit_lse,
              "val_loss": None, "tokens_per_s": None, "layers": layers, "warnings": []}  # fmt: skip
    return {k: values[k] for k in RECORD_KEYS}
