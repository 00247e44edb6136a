"""The probe's numbers against brute force: hooks and autograd written here, the exact Jacobian, the expectation
of the randomised estimates, one real Adam step and exact spectral norms.

Each quantity is recomputed from its definition (docs/cli.md, docs/design.md, the docstrings of
:mod:`depthlab.probe.forward_backward`), on tiny stacks including residual topologies, whose reported stream
is a view of a wider state. The randomised estimates (the Jacobian's Hutchinson estimate, the output change
under a random weight perturbation) are checked against their expectation, computed exactly, within four
standard deviations, also computed exactly.
"""

from __future__ import annotations

import copy
import math
import statistics

import pytest
import torch
import torch.nn.functional as F

from depthlab import ModelConfig, build_model, param_groups
from depthlab.probe import probe
from depthlab.probe.forward_backward import GAIN_LR, measure

pytestmark = pytest.mark.usefixtures("one_thread")

V = 256


def _model(wrap: str, **kw):
    torch.manual_seed(0)
    cfg = dict(n_layers=3, d_model=32, n_heads=4, max_len=32, wrap=wrap) | kw
    model = build_model(ModelConfig(**cfg))
    with torch.no_grad():  # off the init's symmetries (H_res = I, alphas one-hot), so a mix-up shows
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _blocks_by_hand(model, tokens):
    """(block inputs/outputs as the model passes them on, logits): hooks written here, not the probe's."""
    seen, blocks = [], list(model.stack.layers)
    hooks = [blocks[0].register_forward_pre_hook(lambda m, a: seen.append(a[0]))]
    hooks += [b.register_forward_hook(lambda m, a, o: seen.append(o)) for b in blocks]
    try:
        logits = model(tokens)
    finally:
        for h in hooks:
            h.remove()
    return seen, logits


def _pairwise_token_cos(x: torch.Tensor) -> float:
    """Mean over sequences of the mean cosine over ordered pairs of distinct positions, from the Gram matrix."""
    xn = F.normalize(x.double(), dim=-1)
    gram = xn @ xn.transpose(1, 2)  # (B, T, T)
    T = x.shape[1]
    off = gram.sum((1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(-1)
    return float((off / (T * (T - 1))).mean())


@pytest.mark.parametrize("wrap", ["post", "mhc", "denseformer", "attnres"])
def test_per_stream_columns_equal_hooks_and_autograd(wrap):
    """Row i: stream i (0 = the first block's input, L = the last block's output, before the final norm);
    grad_norm = ||d loss / d (the state the model passes on)|| (a topology's whole state), the forward
    columns on the reported stream (a topology's view), the context gradient J_i^T (g_L - mean over
    positions), token_cos over pairs of positions, the sublayer gradient norms from .grad."""
    model = _model(wrap)
    tokens = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(1))
    result = probe(model, tokens)
    model.eval()
    seen, logits = _blocks_by_hand(model, tokens)
    states = [s if isinstance(s, torch.Tensor) else s[0] for s in seen]  # a tuple state: its stream first
    view = model.stack.state.view if model.stack.state is not None else (lambda x: x)
    streams = [view(s).detach() for s in seen]  # the reported stream: a topology's view of its state
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))
    grads = torch.autograd.grad(loss, states, retain_graph=True)
    centred = grads[-1] - grads[-1].mean(dim=1, keepdim=True)
    context = torch.autograd.grad(states[-1], states[:-1], grad_outputs=centred, retain_graph=True)
    loss.backward()
    assert result.config["probe"]["loss_value"] == pytest.approx(loss.item(), rel=1e-6)
    assert len(result.layers) == len(states) == 4
    for i, row in enumerate(result.layers):
        x = streams[i]
        expected = {
            "grad_norm": grads[i].norm().item(),
            "context_grad_norm": (context[i] if i < 3 else centred).norm().item(),
            "stream_rms": x.pow(2).mean().sqrt().item(),
            "token_cos": _pairwise_token_cos(x),
        }
        if i:
            prev, block = streams[i - 1], model.stack.layers[i - 1]
            cos = F.cosine_similarity(x, prev, dim=-1).mean().item()
            sub = {
                k: torch.sqrt(sum(p.grad.pow(2).sum() for p in getattr(block, k).f.parameters()))
                for k in ("attn", "ffn")
            }
            expected |= {
                "update_ratio": ((x - prev).norm() / prev.norm()).item(),
                "cos_prev": cos,
                "angular_distance": math.acos(cos) / math.pi,
                "attn_grad_norm": sub["attn"].item(),
                "ffn_grad_norm": sub["ffn"].item(),
                "layer_grad_norm": torch.sqrt(sum(p.grad.pow(2).sum() for p in block.parameters())).item(),
            }
        else:
            assert row["update_ratio"] is row["cos_prev"] is row["attn_grad_norm"] is None
        for key, value in expected.items():
            assert row[key] == pytest.approx(value, rel=1e-4, abs=1e-7), (i, key)


def _top_from(model, tokens, i: int, x: torch.Tensor) -> torch.Tensor:
    """x_L as a function of x_i: block i+1's input replaced by ``x``."""
    blocks, out = list(model.stack.layers), []
    handles = [
        blocks[i].register_forward_pre_hook(lambda m, a: (x, *a[1:])),
        blocks[-1].register_forward_hook(lambda m, a, o: out.append(o)),
    ]
    try:
        model(tokens)
    finally:
        for h in handles:
            h.remove()
    return out[-1]


@pytest.mark.parametrize("wrap", ["pre", "post"])
def test_jacobian_msv_is_the_exact_jacobian_s_within_its_estimator_error(wrap):
    """jacobian_msv[i] estimates ||d x_L / d x_i||_F^2 / numel(x_L). The exact Jacobian (autograd) gives
    the expectation and the estimate's standard deviation, sqrt(2) ||J J^T||_F / (numel sqrt(k)) for k
    Gaussian projections; the estimate lies within 4 of them, and row L is 1 (the identity)."""
    model = _model(wrap, n_layers=2, d_model=16, n_heads=2, d_ff=32).eval()
    tokens = torch.randint(0, V, (1, 4), generator=torch.Generator().manual_seed(1))
    k = 512
    got = measure(model, tokens, context=False, perturbation=0, jacobian_probes=k).column("jacobian_msv")
    seen, _ = _blocks_by_hand(model, tokens)
    n = seen[-1].numel()
    for i in range(2):
        J = torch.autograd.functional.jacobian(
            lambda x, i=i: _top_from(model, tokens, i, x), seen[i].detach()
        )
        J = J.reshape(n, -1).double()
        exact = J.pow(2).sum().item() / n
        sd = math.sqrt(2) * (J @ J.T).norm().item() / (n * math.sqrt(k))
        assert abs(got[i] - exact) < 4 * sd, (i, got[i], exact, sd)
        assert sd < 0.05 * exact  # the check has teeth: a factor off (a mean for a sum) is far outside
    assert got[-1] == 1.0


def test_output_change_has_the_expectation_of_its_definition():
    """output_change[i] = ||x_i' - x_i|| / ||x_i|| with every block weight matrix W moved by
    delta rms(W) N(0, 1). To first order E[change^2] = delta^2 sum_W rms(W)^2 ||d x_i / d W||_F^2 / ||x_i||^2
    (the Jacobians by autograd); the mean over 100 seeds lies within 4 standard deviations of it, for each
    stream and for the model's output (config.probe.output_change)."""
    model = _model("post", n_layers=2, d_model=16, n_heads=2, d_ff=32, vocab_size=32).eval()
    tokens = torch.randint(0, 32, (1, 4), generator=torch.Generator().manual_seed(1))
    delta, seeds = 1e-3, 100
    weights = [p for b in model.stack.layers for p in b.parameters() if p.ndim >= 2]
    seen, logits = _blocks_by_hand(model, tokens)

    def expectation(y: torch.Tensor) -> tuple[float, float]:
        rows = []
        for j in range(y.numel()):
            gs = torch.autograd.grad(y.flatten()[j], weights, retain_graph=True, allow_unused=True)
            gs = [torch.zeros_like(w) if g is None else g for g, w in zip(gs, weights)]  # a later block's
            rows.append(
                torch.cat([(g * w.detach().pow(2).mean().sqrt()).flatten() for g, w in zip(gs, weights)])
            )
        J = torch.stack(rows).double() * delta
        A, norm2 = J @ J.T, y.detach().double().pow(2).sum()
        return (A.trace() / norm2).item(), (math.sqrt(2) * A.norm() / norm2).item() / math.sqrt(seeds)

    expected = [expectation(y) for y in (*seen[1:], logits)]
    mean_sq = [0.0] * len(expected)
    for seed in range(seeds):
        r = measure(model, tokens, context=False, perturbation=delta, seed=seed)
        for i, c in enumerate([*r.column("output_change")[1:], r.config["probe"]["output_change"]]):
            mean_sq[i] += c * c / seeds
    for got, (mean, sd) in zip(mean_sq, expected):
        assert abs(got - mean) < 4 * sd and sd < 0.1 * mean, (got, mean, sd)
    assert r.layers[0]["output_change"] == 0.0  # the embedding is no block weight's output


@pytest.mark.parametrize(("wrap", "param"), [("pre", "sp"), ("pre", "mup"), ("mhc", "completep")])
def test_update_gain_is_one_real_adam_step(wrap, param):
    """update_gain = ||f(theta after Adam's first step at GAIN_LR) - f(theta)|| / ||f(theta)|| / GAIN_LR,
    the step taken here by torch.optim.Adam on depthlab.param_groups (each group's lr and eps under a
    parametrization); step_size = gain x lr, first_step_size = gain x lr / warmup."""
    scaled = {"base_width": 16} | ({"base_depth": 1} if param == "completep" else {})
    model = _model(
        wrap, n_layers=2, d_model=32, n_heads=2, d_ff=64, param=param, **(scaled if param != "sp" else {})
    )
    tokens = torch.randint(0, V, (2, 8), generator=torch.Generator().manual_seed(1))
    pr = measure(model, tokens, lr=1e-2, warmup=4, context=False, perturbation=0).config["probe"]
    twin = copy.deepcopy(model).eval()
    opt = torch.optim.Adam(param_groups(twin, GAIN_LR, eps=1e-8))
    logits = twin(tokens)
    F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1)).backward()
    opt.step()
    with torch.no_grad():
        moved = twin(tokens)
    gain = ((moved - logits.detach()).norm() / logits.detach().norm()).item() / GAIN_LR
    assert pr["update_gain"] == pytest.approx(gain, rel=1e-4)
    assert pr["step_size"] == pytest.approx(gain * 1e-2, rel=1e-4)
    assert pr["first_step_size"] == pytest.approx(gain * 1e-2 / 4, rel=1e-4)


def test_relative_update_is_the_median_over_block_matrices_of_lr_sqrt_mn_over_the_spectral_norm():
    """relative_update = median over the blocks' weight matrices of lr sqrt(m n) / ||W||_2, here with the
    exact spectral norm (torch.linalg.matrix_norm); the probe's power iteration is within a few parts in
    1e3 of it. The embeddings, the head and the vectors do not count."""
    model = _model("pre", n_layers=2, d_model=32, n_heads=2, d_ff=64)
    tokens = torch.randint(0, V, (2, 8), generator=torch.Generator().manual_seed(1))
    got = measure(model, tokens, lr=1e-2, context=False, perturbation=0).config["probe"]["relative_update"]
    ratios = [
        1e-2 * math.sqrt(p.numel()) / torch.linalg.matrix_norm(p.detach(), ord=2).item()
        for b in model.stack.layers
        for p in b.parameters()
        if p.ndim == 2
    ]
    assert len(ratios) == 8 and got == pytest.approx(statistics.median(ratios), rel=5e-3)
