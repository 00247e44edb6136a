"""depthlab.watch in a Lightning run, as a callback (a 12-layer post-LN depthlab decoder).

python examples/watch_lightning.py [--steps 60] [--lr 1e-3] [--out runs/examples/lightning]
depthlab report --run runs/examples/lightning

At this learning rate, without warmup, the 12 post-LN layers stall: the watcher warns of gradient
starvation in the bottom layers and labels the run stalled (docs/watch.md, "The examples").
"""

from __future__ import annotations

import lightning.pytorch as L
import torch
import torch.nn.functional as F
from example_flags import example_flags  # beside this script: --steps, --lr, --out, checked

from depthlab import ModelConfig, build_model
from depthlab.corpus import text_batch
from depthlab.integrations.lightning import DepthlabCallback


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


def main() -> None:
    args = example_flags(__doc__.splitlines()[0], steps=60, out="runs/examples/lightning", lr=1e-3)
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
