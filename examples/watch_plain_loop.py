"""depthlab.watch in a plain PyTorch loop over a Hugging Face Llama built from a config (random weights).

python examples/watch_plain_loop.py [--steps 60] [--lr 3e-3] [--out runs/examples/plain]
depthlab report --run runs/examples/plain       # the run's page: heatmaps, loss with warnings, entropy
"""

from __future__ import annotations

import torch
import transformers
from example_flags import example_flags  # beside this script: --steps, --lr, --out, checked

import depthlab
from depthlab.corpus import text_batch


def main() -> None:
    args = example_flags(__doc__.splitlines()[0], steps=60, out="runs/examples/plain", lr=3e-3)
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
