"""Checkpoints: plain state_dict files that load with ``torch.load(..., weights_only=True)``.

A checkpoint holds only tensors, numbers, strings, lists and dicts: the model's, optimizer's and
scheduler's state_dicts, the RNG states, the step (which is also the data position: batches are a
function of the step), the outcome monitor's state and the running totals. No pickled objects, so a
checkpoint from elsewhere cannot run code when loaded.

Files: ``DIR/checkpoints/step-000050.pt``; the last ``KEEP`` are kept. Each is written to a temporary
file and renamed into place, so a run killed while saving leaves the previous checkpoint intact.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

SUBDIR = "checkpoints"
KEEP = 2
_NAME = re.compile(r"^step-(\d+)\.pt$")


def checkpoint_paths(out_dir: str) -> list[Path]:
    """The checkpoints of a run folder, oldest first."""
    folder = Path(out_dir) / SUBDIR
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def save(out_dir: str, step: int, state: dict) -> Path:
    """Write ``state`` as the checkpoint of ``step`` (atomically) and drop all but the newest KEEP."""
    folder = Path(out_dir) / SUBDIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step-{step:06d}.pt"
    tmp = folder / f".{path.name}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)
    for old in checkpoint_paths(out_dir)[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def load(path: str | Path) -> dict:
    """A checkpoint's state, on the CPU, loaded without unpickling arbitrary objects."""
    return torch.load(path, map_location="cpu", weights_only=True)


def rng_state() -> dict:
    """The torch RNG states (CPU, and every CUDA device if any) as tensors."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
