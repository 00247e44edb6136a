"""depthlab.watch in a plain PyTorch loop over a Hugging Face Llama built from a config (random weights).

python examples/watch_plain_loop.py [--steps 60] [--lr 3e-3] [--out runs/examples/plain]
depthlab report --run runs/examples/plain       # the run's page: heatmaps, loss with warnings, entropy
"""

from __future__ import annotations

import argparse
import math

import torch
import transformers

import depthlab
from depthlab.corpus import text_batch
from depthlab.errors import InputError
from depthlab.watch.output import check_out


def arguments() -> argparse.Namespace:
    """The flags, each refused before any work (exit code 2) where it cannot make a run."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--out", default="runs/examples/plain")
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
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    with depthlab.watch(model, opt, every=5, out=args.out):  # the only line depthlab adds
        for step in range(args.steps):
            tokens = text_batch(8, 64, 256, seed=step)  # bytes of the Python standard library's source
            loss = model(input_ids=tokens, labels=tokens).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
    print(f"wrote {args.out}: depthlab report --run {args.out}")


if __name__ == "__main__":
    main()
