"""TensorBoard event files: every logged number as a scalar, per-layer ones named by layer.

``tensorboard --logdir DIR`` shows ``train/loss``, ``train/lr``, ``train/grad_norm``, ``train/logit_lse``,
``train/tokens_per_s``, ``val/loss``, ``val/bpb``, ``val/accuracy`` and, for each per-layer key
(:data:`depthlab.watch.keys.LAYER_KEYS`), one chart group with a curve per stream:
``stream_grad/layer_00`` ... ``attn_logit_max/layer_24``; each warning is a text entry under ``warnings``.
"""

from __future__ import annotations

import math

from depthlab.watch.keys import LAYER_KEYS

# metrics record key -> TensorBoard group (the stream gradient is named apart from the loss's grad_norm)
LAYER_TAGS = {k: "stream_grad" if k == "grad_norm" else k for k in LAYER_KEYS}


class Events:
    """A SummaryWriter on the run folder. ``purge_step`` (on resume) drops events from that step on, so a
    resumed run's curves do not hold the killed run's steps twice."""

    def __init__(self, out_dir: str, purge_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter  # imported here: tensorboard is slow to import

        self.writer = SummaryWriter(log_dir=out_dir, purge_step=purge_step)

    def log(self, record: dict, extra: dict | None = None) -> None:
        """Write one metrics record (and ``extra`` scalars such as val/bpb) at ``record["step"]``."""
        step = record["step"]
        scalars = {
            "train/loss": record.get("loss"),
            "train/lr": record.get("lr"),
            "train/grad_norm": record.get("grad_norm"),
            "train/logit_lse": record.get("logit_lse"),
            "train/tokens_per_s": record.get("tokens_per_s"),
            "val/loss": record.get("val_loss"),
            **(extra or {}),
        }
        for row in record.get("layers") or []:
            for key, group in LAYER_TAGS.items():
                scalars[f"{group}/layer_{row['index']:02d}"] = row.get(key)
        for tag, value in scalars.items():
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                self.writer.add_scalar(tag, value, step)
        for warning in record.get("warnings") or []:
            self.writer.add_text("warnings", warning["message"], step)
        self.writer.flush()

    def text(self, tag: str, text: str, step: int) -> None:
        self.writer.add_text(tag, text, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def write_records(
    out_dir: str, records: list[dict], final: dict | None = None, purge_step: int | None = None
) -> None:
    """Write a finished run's metrics records (the ``on_log`` records, in step order) as TensorBoard
    events in ``out_dir``, with the ``final`` scalars (e.g. ``{"val/bpb": ...}``) at the last step.

    ``purge_step`` hides, in TensorBoard, what an earlier event file in ``out_dir`` holds from that step
    on (a run written again replaces its curves; nothing is deleted)."""
    events = Events(out_dir, purge_step=purge_step)
    try:
        for i, record in enumerate(records):
            events.log(record, final if i == len(records) - 1 else None)
    finally:
        events.close()
