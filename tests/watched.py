"""A tiny model trained a few steps under ``depthlab.watch``: the loop the watcher's tests share."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import depthlab
from depthlab import ModelConfig, build_model

TINY = dict(n_layers=2, d_model=32, n_heads=4, max_len=32)


def watched_run(lr: float = 1e-3, steps: int = 4, **watch_kwargs):
    """The watcher (closed) of a 2-layer byte model trained ``steps`` Adam steps at ``lr`` on random
    bytes (4 x 16, one fixed batch per step); ``watch_kwargs`` go to :func:`depthlab.watch` (``echo``
    None unless given)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(**TINY))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    with depthlab.watch(model, opt, **{"echo": None, **watch_kwargs}) as w:
        for t in range(steps):
            x = torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(t))
            loss = F.cross_entropy(model(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
            w.step(loss)
    return w
