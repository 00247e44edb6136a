"""Float32 inside an autocast forward: where a measurement taken during training must not be rounded."""

from __future__ import annotations

import contextlib

import torch


def without_autocast(device_type: str):
    """A context in which ``device_type``'s autocast is off (float32 products even inside a bf16-autocast
    forward, where the watcher's taps run); a device without autocast gets a context that does nothing."""
    if device_type in ("cpu", "cuda"):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()
