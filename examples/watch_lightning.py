"""depthlab.watch in a Lightning run, as a callback (a 12-layer post-LN depthlab decoder).

python examples/watch_lightning.py [--steps 60] [--lr 1e-3] [--out runs/examples/lightning]
depthlab report --run runs/examples/lightning

At this learning rate, without warmup, the 12 post-LN layers stall: the watcher warns of gradient
starvation in the bottom layers and labels the run stalled (docs/watch.md, "The examples").
"""

from __future__ import annotations

import argparse
import math

import lightning.pytorch as L
import torch
import torch.nn.functional as F

from depthlab import ModelConfig, build_model
from depthlab.corpus import text_batch
from depthlab.errors import InputError
from depthlab.integrations.lightning import DepthlabCallback
from depthlab.watch.output import check_out


class ByteLM(L.LightningModule):
    def __init__(self, lr: float):
        super().__init__()
        self.lr = lr
        self.model = build_model(ModelConfig(n_layers=12, d_model=64, n_heads=4, max_len=64, wrap="post"))

    def training_step(self, tokens, idx):
        logits = self.model(tokens)  # (B, T, 256)
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def arguments() -> argparse.Namespace:
    """The flags, each refused before any work (exit code 2) where it cannot make a run."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--out", default="runs/examples/lightning")
    args = p.parse_args()
    if args.steps < 1:
        p.error(f"--steps {args.steps}: train at least 1 step")
    if not (args.lr > 0 and math.isfinite(args.lr)):
        p.error(f"--lr {args.lr}: a learning rate is a positive, finite number")
    try:
        check_out(args.out, "--out")  # a folder that already holds a run is refused, not overwritten
    except InputError as e:
        p.error(str(e))
    return args


def main() -> None:
    args = arguments()
    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(list(text_batch(8 * args.steps, 64, 256, seed=0)), batch_size=8)
    trainer = L.Trainer(
        max_steps=args.steps, callbacks=[DepthlabCallback(every=5, out=args.out)], logger=False,
        enable_checkpointing=False, accelerator="cpu",
    )  # fmt: skip
    trainer.fit(ByteLM(args.lr), data)
    print(f"wrote {args.out}: depthlab report --run {args.out}")


if __name__ == "__main__":
    main()
