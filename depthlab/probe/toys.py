"""The seeds' toy stacks as modules the probe can observe, and the seeds' worked numbers.

Each toy is a ``ToyStack`` (one ModuleList of identical blocks), so :func:`depthlab.probe.forward_backward`
finds it like any Transformer and its ``grad_norm`` column is exactly the seeds' "gradient reaching
each depth". Random draws happen in the texts' order, inside ``torch.random.fork_rng`` so that the
caller's global RNG is left as it was.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from depthlab.model.norms import make_norm
from depthlab.probe import probe


class ToyStack(nn.Module):
    """x -> layers[L-1](... layers[0](x))."""

    def __init__(self, layers: list[nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class TanhBlock(nn.Module):
    """The interview answer's block: x + tanh(f(x)) with the skip, tanh(f(x)) without."""

    def __init__(self, f: nn.Linear, residual: bool):
        super().__init__()
        self.f, self.residual = f, residual

    def forward(self, x):
        return x + torch.tanh(self.f(x)) if self.residual else torch.tanh(self.f(x))


class ReluUpdateBlock(nn.Module):
    """The stacks article's toy: update = 0.5 * relu(x @ w); x + update with the skip, update without."""

    def __init__(self, w: torch.Tensor, residual: bool):
        super().__init__()
        self.w, self.residual = nn.Parameter(w), residual

    def forward(self, x):
        update = 0.5 * torch.relu(x @ self.w)  # one sublayer's contribution
        return x + update if self.residual else update


def tanh_stack_gradients(seed: int = 0, d: int = 64, depth: int = 48) -> dict[bool, list[float]]:
    """The interview answer's tanh stack: {residual: ||d sum(out) / d x_i|| for i = 0..depth}; [0] is the gradient at the input.

    The text's order: manual_seed, build the ``depth`` Linear layers, then for residual in (False,
    True) draw x = randn(8, d) and backpropagate sum(run(x)).
    """

    out = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers = [nn.Linear(d, d) for _ in range(depth)]
        for residual in (False, True):
            x = torch.randn(8, d, requires_grad=True)
            stack = ToyStack([TanhBlock(f, residual) for f in layers])
            out[residual] = probe(stack, x, loss="sum", perturbation=0.0).column("grad_norm")
    return out


def _draw_gradient_by_depth(n_layers: int, d: int, seed: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The stacks article's draws in its order: the weights, then h (batch 8, 16 tokens, d features)."""
    torch.manual_seed(seed)
    weights = [torch.randn(d, d) * d**-0.5 for _ in range(n_layers)]
    return weights, torch.randn(8, 16, d)


def gradient_by_depth(n_layers=24, d=256, residual=True, seed=0, via: str = "probe") -> list[float]:
    """The stacks article's ``gradient_by_depth``: the gradient norm reaching each of the n_layers + 1 states.

    via "probe": depthlab.probe on a ToyStack; via "retain_grad": the text's code with
    ``retain_grad()`` on every state, which it needs (PyTorch keeps ``.grad`` for leaves only).
    """
    with torch.random.fork_rng(devices=[]):
        weights, h = _draw_gradient_by_depth(n_layers, d, seed)
    h.requires_grad_(True)
    if via == "probe":
        stack = ToyStack([ReluUpdateBlock(w, residual) for w in weights])
        return probe(stack, h, loss="sum", perturbation=0.0).column("grad_norm")
    states = [h]
    for w in (w.requires_grad_(True) for w in weights):
        update = 0.5 * torch.relu(states[-1] @ w)
        states.append(states[-1] + update if residual else update)
        states[-1].retain_grad()
    states[-1].sum().backward()
    return [s.grad.norm().item() for s in states]


def gradient_by_depth_as_printed(n_layers=24, d=256, residual=True, seed=0) -> str:
    """Run the stacks article's code exactly as printed; returns the error it raises, or "no error"."""
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns when .grad of a non-leaf is read
        torch.manual_seed(seed)
        weights = [(torch.randn(d, d) * d**-0.5).requires_grad_(True) for _ in range(n_layers)]
        h = torch.randn(8, 16, d).requires_grad_(True)
        states = [h]
        for w in weights:
            update = 0.5 * torch.relu(states[-1] @ w)
            states.append(states[-1] + update if residual else update)
        states[-1].sum().backward()
        try:
            [s.grad.norm().item() for s in states]
        except AttributeError as e:
            return f"AttributeError ({e}) on state 1"
    return "no error"


@torch.no_grad()
def variance_example() -> dict[str, dict]:
    """The stream chapter's worked example x1 = x0 + a LN(x0) + 1 for a = 0.5 and 1.0, with depthlab's LayerNorm.

    Per a: ln, f (= a LN(x0) + 1), x1 (4 floats each); mean, var (population) of x1; var_f, cov
    (Cov(x0, f)); closed_rounded = (1.5811 + a)^2 (the text's rounded std0); closed_exact = (std0 + a)^2.
    """
    x0 = torch.tensor([1.0, -1.0, 2.0, -2.0], dtype=torch.float64)
    ln = make_norm("layernorm", 4, eps=1e-8).double()  # gamma = 1, beta = 0, the text's eps
    std0 = float(x0.var(unbiased=False).sqrt())
    out = {}
    for a in (0.5, 1.0):
        z = ln(x0)
        f = a * z + 1.0
        x1 = x0 + f
        out[f"{a:.1f}"] = {
            "ln": z.tolist(),
            "f": f.tolist(),
            "x1": x1.tolist(),
            "mean": float(x1.mean()),
            "var": float(x1.var(unbiased=False)),
            "var_f": float(f.var(unbiased=False)),
            "cov": float(((x0 - x0.mean()) * (f - f.mean())).mean()),
            "closed_rounded": (round(std0, 4) + a) ** 2,
            "closed_exact": (std0 + a) ** 2,
        }
    return out
