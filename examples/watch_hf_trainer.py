"""depthlab.watch in a Hugging Face Trainer run, as a callback (GPT-2 from a config, random weights).

python examples/watch_hf_trainer.py [--steps 40] [--out runs/examples/hf]
depthlab report --run runs/examples/hf
"""

from __future__ import annotations

import os

import torch
import transformers
from example_flags import example_flags  # beside this script: --steps, --lr, --out, checked

from depthlab.corpus import text_batch
from depthlab.integrations.hf_trainer import DepthlabCallback


def main() -> None:
    args = example_flags(__doc__.splitlines()[0], steps=40, out="runs/examples/hf")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=6, n_embd=64, n_head=4, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0
    )  # token ids inside the 256-byte vocabulary (GPT-2's 50256 is outside it)
    model = transformers.GPT2LMHeadModel(config)
    rows = text_batch(8 * args.steps, 64, 256, seed=0)
    data = [{"input_ids": r, "labels": r} for r in rows]
    # the Trainer's own folder goes inside --out; with these settings it saves nothing there
    training = transformers.TrainingArguments(
        output_dir=os.path.join(args.out, "trainer"), max_steps=args.steps, per_device_train_batch_size=8,
        logging_steps=5, learning_rate=1e-3, report_to=[], save_strategy="no", use_cpu=True,
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=model, args=training, train_dataset=data, callbacks=[DepthlabCallback(out=args.out)]
    )
    trainer.train()
    print(f"wrote {args.out}: depthlab report --run {args.out}")


if __name__ == "__main__":
    main()
