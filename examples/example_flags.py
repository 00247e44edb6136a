"""The flags every watch example takes (--steps, --out and, where the example sets it, --lr), each refused
before any work (exit code 2) where it cannot make a run."""

from __future__ import annotations

import argparse
import math

from depthlab.errors import InputError
from depthlab.watch.output import check_out


def example_flags(description: str, steps: int, out: str, lr: float | None = None) -> argparse.Namespace:
    """The parsed flags, with these defaults; ``lr`` None: the example takes no --lr."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=steps)
    if lr is not None:
        p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--out", default=out)
    args = p.parse_args()
    if args.steps < 1:
        p.error(f"--steps {args.steps}: train at least 1 step")
    if lr is not None and not (args.lr > 0 and math.isfinite(args.lr)):
        p.error(f"--lr {args.lr}: a learning rate is a positive, finite number")
    try:
        check_out(args.out, "--out")  # a folder that already holds a run is refused, not overwritten
    except InputError as e:
        p.error(str(e))
    return args
