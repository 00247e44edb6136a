"""``probe(model, batch)``: one forward and backward at init, observed by hooks; per-stream numbers, verdicts.

Works on depthlab models, Hugging Face models (GPT-2, BERT, Llama, any model with one ModuleList of
identical blocks) and ``torch.nn.TransformerEncoder/Decoder`` (see :mod:`depthlab.probe.locate`).
The model is put in eval mode (dropout off) for the probe and restored after; its weights are
perturbed for the output-change pass and restored bit for bit; no ``.grad`` is written (gradients
come from ``torch.autograd.grad`` with respect to the recorded stream tensors and the parameters).
Random numbers (perturbation, Jacobian projections) come from a private generator seeded by ``seed``,
so the global RNG is left as it was.

Cost: one forward and backward, plus one backward to the streams for the position-varying gradient
(LM loss), one forward without grad for the output change and, if asked, ``jacobian_probes``
backward passes. benchmarks/probe_cost.py measures the total at about twice a plain forward and
backward (96 layers, d_model 64), the core (``perturbation=0, context=False``) at about once.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.config import check_seed
from depthlab.doctor.checks import diagnose
from depthlab.errors import ConfigError, InputError
from depthlab.probe.capture import StreamCapture, find_norms, position_axis, stream_tensor
from depthlab.probe.locate import StackInfo, locate_stack, missing_sublayers, with_sublayers
from depthlab.probe.pass_record import PassRecord
from depthlab.probe.result import ProbeResult
from depthlab.probe.stats import stream_table, token_cosine
from depthlab.probe.topology import attach as attach_topology
from depthlab.probe.topology import view_of
from depthlab.probe.update_size import group_scales, relative_update

LOSSES = ("lm", "sum")
# Each Jacobian projection is one more backward pass; the estimate's relative error falls as
# sqrt(2 / k), to 4% at 1,000 projections, so more only costs time.
JACOBIAN_MAX = 1024


def probe(
    model: nn.Module, batch, loss: str = "lm", *, model_config: dict | None = None, **options
) -> ProbeResult:
    """Probe ``model`` on ``batch`` and diagnose it; ``options`` are :func:`measure`'s.

    batch: a tensor (tokens (B, T) for a language model; a float stream for nn.TransformerEncoder), a
    tuple of positional inputs ((src, tgt) for an encoder-decoder, (tgt, memory) for
    nn.TransformerDecoder) or a dict of keyword inputs. loss: "lm" = mean next-token cross-entropy of
    logits[:, :-1] against tokens[:, 1:]; "sum" = the sum of the last stream (the toy stacks' loss).
    model_config: the config to record (default: read off the model). Returns a :class:`ProbeResult` with
    L+1 rows and the doctor's verdicts.
    """
    result = measure(model, batch, loss, **options)
    if model_config is not None:
        result.config["model"] = model_config
    result.verdicts = diagnose(result)
    return result


def measure(
    model,
    batch,
    loss="lm",
    *,
    perturbation=1e-3,
    jacobian_probes=0,
    context=True,
    seed=0,
    lr: float | None = None,
    warmup: int = 0,
    steps: int | None = None,
    sublayers=None,
    update_layout=None,
) -> ProbeResult:
    """The numbers of :func:`probe`, without verdicts.

    sublayers: each block's attention and FFN where their parameter names do not say so
    (:func:`depthlab.probe.locate.with_sublayers`); a kind not found is named in
    ``config["stack"]["blind_spots"]`` and in the result's header.

    perturbation: relative size of the weight perturbation for ``output_change`` (0 turns it off).
    jacobian_probes: random projections for the Jacobian estimate (0 = not estimated).
    context: also carry the position-varying part of the top gradient down (one more backward pass;
    LM loss only), the signal behind the ``vanishing-gradient`` verdict for skip-less attention.
    lr, warmup: the learning rate and linear warmup the model is to be trained with. Given ``lr``, the
    probe measures the model's *update gain*: Adam's first update on this batch moves each parameter by
    eta g / (|g| + eps) (the sign of the gradient, times eta), and the gain is the relative change of the
    output per unit eta, ||f(theta - eta sign g) - f(theta)|| / ||f(theta)|| / eta, at the small
    ``GAIN_LR`` where the change is still linear in eta (one more forward pass; weights restored).
    gain x lr is then the first full-size update's reach ("step size" below; it saturates in the real
    model near sqrt(2), an unrelated output, which is why the gain is taken small), gain x lr / warmup
    the first update's. Both go in ``config["probe"]`` for the doctor, with the relative update
    (:func:`depthlab.probe.update_size.relative_update`: the first full step against the block matrices'
    own size, comparable across width).
    steps: with ``lr``, the run's budget of training steps: the doctor's plateau verdict then says
    whether that budget would call the run stalled (None: only when it is expected to escape).
    update_layout: per block, the same weights as the model's in the layout the relative update is
    calibrated on (depthlab's: q, k, v in one matrix; a gated FFN's two inputs in one), for a model that
    splits them (an imported Hugging Face family). Adam moves every entry alike either way, so the run
    trains alike; only the median over matrices of different shapes would differ.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    check_options(loss, perturbation, jacobian_probes, seed)
    _check_lr(lr, warmup, steps)
    check_batch(batch)
    stack = with_sublayers(locate_stack(model), sublayers)
    norms = find_norms(model, stack)
    coarse = _too_coarse(stack, perturbation)
    with probe_mode(model) as batch_stats:
        with torch.enable_grad():
            run = _forward_backward(
                model, batch, loss, stack, norms, jacobian_probes, seed, context, lr is not None
            )
        delta = 0.0 if coarse else perturbation
        changes, out_change = _perturbed_change(model, batch, stack, norms, run, delta, seed)
        gain = None if lr is None or coarse else _first_update_change(model, batch, run, GAIN_LR) / GAIN_LR
        seen = [view_of(model)(s) for s in run.states]  # a residual topology's state: one stream each
        seen = [s.transpose(0, 1) for s in seen] if run.position_axis == 0 else seen  # reported (B, T, d)
        rows = stream_table(seen, run.grads)
        _add_layer_columns(rows, stack, run, changes, seen)
    config = {
        "model": describe_model(model),
        "stack": {
            "path": stack.path,
            "kind": stack.kind,
            "n_layers": len(rows) - 1,
            "note": stack.note,
            "blind_spots": list(missing_sublayers(stack).values()),
            "final_norm": run.final_norm,
            "stream_normalised": run.normalised[-1],
            "renormalised_share": sum(run.normalised) / len(run.normalised),
            "norms_on_input": run.norms_on_input[-1] if run.norms_on_input else None,
        },
        "probe": {
            "loss": loss,
            "loss_value": run.loss,
            "batch_shape": list(seen[0].shape),
            "perturbation": perturbation,
            "output_change": out_change,
            "output_change_note": coarse,
            "jacobian_probes": jacobian_probes,
            "seed": seed,
            "lr": lr,
            "warmup": warmup,
            "steps": steps,
            "update_gain": gain,
            "step_size": None if gain is None else gain * lr,
            "first_step_size": None if gain is None else gain * lr / max(1, warmup),
            "relative_update": None
            if lr is None
            else relative_update(update_layout or stack.layer_params, lr, seed, group_scales(model)),
            "mode": "eval, batch norms on batch statistics" if batch_stats else "eval",
        },
    }
    with probe_mode(model):
        attach_topology(model, lambda: call_model(model, batch), rows, config["stack"])
    return ProbeResult(config, rows)


@contextmanager
def probe_mode(model: nn.Module):
    """Dropout off (eval mode), except that batch norms use the batch's statistics: at init their
    running statistics are 0 and 1, so in eval mode they would be the identity and the probe would see
    a stack without normalisation. Their buffers are restored afterwards, and every module's mode.
    Yields whether the model has batch norms."""
    modes = [(m, m.training) for m in model.modules()]
    bns = [m for m, _ in modes if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [(b, b.detach().clone()) for m in bns for b in m.buffers(recurse=False)]
    model.eval()
    for m in bns:
        m.train()
    try:
        yield bool(bns)
    finally:
        with torch.no_grad():
            for buf, value in saved:
                buf.copy_(value)
        for m, training in modes:
            m.training = training


def _too_coarse(stack: StackInfo, delta: float) -> str | None:
    """Why the output change cannot be measured (None if it can): weights whose float format cannot
    hold a relative change of ``delta`` (bfloat16's step is 2^-7 = 0.0078: a 1e-3 change rounds away
    or jumps a whole step, which inflates the measure several times)."""
    dtypes = {p.dtype for ps in stack.layer_params for p in ps if p.ndim >= 2 and p.is_floating_point()}
    coarse = sorted(str(t).removeprefix("torch.") for t in dtypes if torch.finfo(t).eps > delta / 8)
    if not delta or not coarse:
        return None
    return f"not measured: {', '.join(coarse)} weights cannot hold a {delta:g} relative perturbation"


def _check_lr(lr, warmup, steps=None) -> None:
    ok = lr is None or (
        isinstance(lr, (int, float)) and not isinstance(lr, bool) and math.isfinite(lr) and lr > 0
    )
    if not ok:
        raise ConfigError("lr", lr, "a finite number > 0, or None (no learning rate to judge)")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ConfigError("warmup", warmup, "an integer >= 0 (steps)")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ConfigError("steps", steps, "an integer >= 1 (the run's budget of training steps), or None")
    if steps is not None and lr is None:
        raise ConfigError("steps", steps, "None without lr (the budget is judged with the learning rate)")


def check_options(loss="lm", perturbation=1e-3, jacobian_probes=0, seed=0) -> None:
    """ConfigError naming the first of :func:`probe`'s options that is not allowed."""
    if not isinstance(loss, str) or loss not in LOSSES:
        raise ConfigError("loss", loss, f"one of {', '.join(LOSSES)}")
    ok = isinstance(perturbation, (int, float)) and not isinstance(perturbation, bool)
    if not ok or not 0 <= perturbation < 1:
        raise ConfigError("perturbation", perturbation, "a number in [0, 1)")
    jac = jacobian_probes
    if isinstance(jac, bool) or not isinstance(jac, int) or not 0 <= jac <= JACOBIAN_MAX:
        raise ConfigError("jacobian_probes", jac, f"an integer from 0 to {JACOBIAN_MAX}")
    check_seed(seed)


def check_batch(batch) -> None:
    """TypeError unless ``batch`` is a tensor, a tuple or list of inputs or a dict of keyword inputs;
    InputError when one of its tensors is empty (the probe needs at least one sequence of tokens)."""
    if isinstance(batch, dict):
        tensors = list(batch.values())
    elif isinstance(batch, (tuple, list)):
        tensors = list(batch)
    elif isinstance(batch, torch.Tensor):
        tensors = [batch]
    else:
        raise TypeError(
            f"batch must be a tensor, a tuple of inputs or a dict of keyword inputs, not {type(batch).__name__}"
        )
    if not any(isinstance(t, torch.Tensor) for t in tensors):
        raise TypeError("batch holds no tensor")
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel() == 0:
            raise InputError(f"the batch holds an empty tensor of shape {tuple(t.shape)}: nothing to probe")


def call_model(model: nn.Module, batch):
    """model(**batch) for a dict, model(*batch) for a tuple or list, model(batch) otherwise."""
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def _forward_backward(
    model, batch, loss, stack: StackInfo, norms, jacobian_probes: int, seed: int, context: bool, every: bool
) -> PassRecord:
    """Forward with hooks, then d loss / d (every stream, every layer parameter; with ``every``, every
    parameter of the model) in one autograd call."""
    with StreamCapture(model, stack, norms=norms) as cap:
        output = call_model(model, batch)
    states = cap.states
    if len(states) < 2:
        raise InputError(f"{stack.path}: the blocks did not run on this batch")
    loss_t = loss_value(loss, output, batch, states[-1])
    params = _unique(p for ps in stack.layer_params for p in ps if p.requires_grad)
    if every:
        params = _unique([*params, *(p for p in model.parameters() if p.requires_grad)])
    # a stream (B, T, d), or a topology's n streams (B, T, n, d): positions on axis 1 either way, or 0
    # for a stack that carries its stream sequence-first (T, B, d)
    axis = position_axis(stack, batch_tokens(batch), states[0])
    with_context = context and loss == "lm" and states[-1].ndim >= 3 and states[-1].shape[axis] > 1
    grads = torch.autograd.grad(
        loss_t, states + params, allow_unused=True, retain_graph=with_context or jacobian_probes > 0
    )
    stream_grads = list(grads[: len(states)])
    context = _context_grads(states, stream_grads[-1], jacobian_probes > 0, axis) if with_context else None
    gen = torch.Generator().manual_seed(seed)
    return PassRecord(
        states=[s.detach() for s in states],
        grads=stream_grads,
        context_grads=context,
        param_grads={id(p): g for p, g in zip(params, grads[len(states) :])},
        loss=float(loss_t.detach()),
        output=model_output(output).detach(),
        jacobian=_jacobian_msv(states, jacobian_probes, gen) if jacobian_probes else None,
        final_norm=cap.final_norm,
        normalised=cap.normalised,
        norms_on_input=cap.norms_on_input,
        position_axis=axis,
    )


def loss_value(loss: str, output, batch, last_stream: torch.Tensor) -> torch.Tensor:
    """The scalar to differentiate: "sum" = last_stream.sum(); "lm" = next-token cross-entropy."""
    if loss == "sum":
        return last_stream.sum()
    if getattr(output, "logits", None) is None and getattr(output, "last_hidden_state", None) is not None:
        raise InputError(
            f"loss 'lm' needs logits, and {type(output).__name__} holds hidden states (a model without an "
            "LM head, e.g. BertModel): use its ...ForMaskedLM / ...ForCausalLM class, or loss 'sum'"
        )
    logits, tokens = model_output(output), batch_tokens(batch)
    if tokens is None or logits.ndim != 3 or logits.shape[:2] != tokens.shape:
        got = "no integer tokens in the batch" if tokens is None else f"output {tuple(logits.shape)}"
        raise InputError(f"loss 'lm' needs logits (B, T, V) for tokens (B, T): {got}; use loss 'sum'")
    if tokens.shape[1] < 2:
        raise InputError("loss 'lm' predicts the next token: it needs sequences of at least 2 tokens")
    V = logits.shape[-1]
    if int(tokens.max()) >= V:  # the output is not a distribution over these tokens (hidden states?)
        raise InputError(
            f"loss 'lm': token id {int(tokens.max())} but the output has only {V} classes; use loss 'sum'"
        )
    return F.cross_entropy(logits[:, :-1].reshape(-1, V).float(), tokens[:, 1:].reshape(-1))


def model_output(output) -> torch.Tensor:
    """The main output tensor: logits if the model returns them, else its first tensor."""
    for attr in ("logits", "last_hidden_state"):
        if isinstance(getattr(output, attr, None), torch.Tensor):
            return getattr(output, attr)
    x = stream_tensor(output)
    if x is None:
        raise InputError(f"the model returned {type(output).__name__}, with no output tensor")
    return x


def batch_tokens(batch) -> torch.Tensor | None:
    """The integer tokens the LM loss predicts: the batch, the last integer tensor of a tuple, or a dict's
    decoder_input_ids / input_ids."""
    if isinstance(batch, dict):
        batch = batch.get("decoder_input_ids", batch.get("input_ids"))
    if isinstance(batch, (tuple, list)):
        ints = [b for b in batch if isinstance(b, torch.Tensor) and not b.is_floating_point()]
        batch = ints[-1] if ints else None
    if isinstance(batch, torch.Tensor) and not batch.is_floating_point() and batch.ndim == 2:
        return batch
    return None


def _context_grads(
    states: list[torch.Tensor], top_grad: torch.Tensor | None, keep_graph: bool, axis: int = 1
) -> list:
    """Per stream, the gradient carried down from only the position-varying part of d loss / d x_L.

    C g_L = g_L minus its mean over positions (``axis``: 1, or 0 sequence-first) is the part of the top gradient that asks
    different positions to change differently: the signal that teaches layers to use context. It is
    propagated to every stream with one more backward pass (J_i^T C g_L). When attention loses its skip,
    all positions of the stream collapse to one vector (rank collapse, Dong et al. 2021), and this
    signal vanishes at the bottom even when the plain gradient norm does not.
    """
    if top_grad is None:
        return [None] * len(states)
    centred = top_grad - top_grad.mean(dim=axis, keepdim=True)
    below = torch.autograd.grad(
        states[-1], states[:-1], grad_outputs=centred, retain_graph=keep_graph, allow_unused=True
    )
    return [*below, centred]


def _jacobian_msv(states: list[torch.Tensor], k: int, gen: torch.Generator) -> list[float]:
    """Mean squared singular value of d x_L / d x_i for every i, from k random projections.

    For u ~ N(0, I), E ||u^T J||^2 = ||J||_F^2 (Hutchinson), so ||J||_F^2 / n, n = numel(x_L), is
    estimated by the mean of ||u^T J||^2 / n; one backward pass gives u^T J for every i at once.
    ReZero (Bachlechner et al. 2020) reports this quantity of the whole network.
    """
    top, acc = states[-1], [0.0] * (len(states) - 1)
    for j in range(k):
        u = torch.randn(top.shape, generator=gen, dtype=torch.float32).to(top)
        vjps = torch.autograd.grad(
            top, states[:-1], grad_outputs=u, retain_graph=j < k - 1, allow_unused=True
        )
        for i, v in enumerate(vjps):
            acc[i] += 0.0 if v is None else float(v.double().pow(2).sum())
    return [a / (k * top.numel()) for a in acc] + [1.0]  # d x_L / d x_L = I


@torch.no_grad()
def _perturbed_change(model, batch, stack: StackInfo, norms, run: PassRecord, delta: float, seed: int):
    """Per stream ||x_i' - x_i|| / ||x_i|| with every block weight matrix W moved by delta * rms(W) * N(0, 1)
    (so ||dW|| ~ delta ||W||), and the same ratio for the model's output. Weights are restored exactly."""
    if delta == 0:
        return None, None
    weights = _unique(p for ps in stack.layer_params for p in ps if p.ndim >= 2)
    saved = [p.detach().clone() for p in weights]
    gen = torch.Generator().manual_seed(seed + 1)
    rms = [float(n) / math.sqrt(p.numel()) for p, n in zip(weights, torch._foreach_norm(saved))]
    try:
        for p, r in zip(weights, rms):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p)
            p.add_(noise, alpha=delta * r)
        with StreamCapture(model, stack, make_leaf=False, norms=norms) as cap:
            output = model_output(call_model(model, batch))
    finally:
        for p, s in zip(weights, saved):
            p.copy_(s)
    changes = [_rel(new, old) for new, old in zip(cap.states, run.states)]
    return changes, _rel(output, run.output)


ADAM_EPS = 1e-8  # Adam's epsilon in the first update lr g / (|g| + eps)
# The learning rate at which the update gain is measured: small enough that the output's change is
# linear in it (measured: the change at 2e-5 is 1.98-2.00 times the change at 1e-5 for post-LN, pre-LN
# and DeepNorm stacks of 2 and 24 layers at d_model 32 and 64).
GAIN_LR = 1e-5


@torch.no_grad()
def _first_update_change(model, batch, run: PassRecord, lr1: float) -> float:
    """||f(theta - lr1 g / (|g| + eps)) - f(theta)|| / ||f(theta)|| for the model's output f: how far
    Adam's first update (bias-corrected, so the sign of the gradient times lr1) moves it. Weights are
    restored exactly; parameters without a gradient do not move. A depthlab model under a
    parametrization moves each parameter by its own group's lr and eps (:func:`depthlab.param_groups`,
    as training does); under sp every parameter takes ``lr1`` and ``ADAM_EPS``."""
    grads = run.param_grads
    params = [p for p in model.parameters() if grads.get(id(p)) is not None]
    scales = group_scales(model)
    saved = [p.detach().clone() for p in params]
    try:
        for p in params:
            g = grads[id(p)]
            lr_p, eps_p = scales.get(id(p), (1.0, 1.0))
            p.sub_(lr1 * lr_p * g / (g.abs() + ADAM_EPS * eps_p))
        output = model_output(call_model(model, batch))
    finally:
        for p, s in zip(params, saved):
            p.copy_(s)
    return _rel(output, run.output)


def _rel(new: torch.Tensor, old: torch.Tensor) -> float:
    return float((new.float() - old.float()).norm() / old.float().norm().clamp_min(1e-30))


def _add_layer_columns(rows: list[dict], stack: StackInfo, run: PassRecord, changes, seen) -> None:
    """Per-layer parameter gradient norms by sublayer, output change, Jacobian estimate."""
    per_block = len(stack.blocks) == len(rows) - 1  # False when a block is applied several times
    names = stack.group_names
    sq = _squared_norms(run.param_grads)
    for i, row in enumerate(rows):
        block = i - 1 if i and per_block else None
        for g in names:
            params = stack.groups[block].get(g, []) if block is not None else None
            row[f"{g}_grad_norm"] = _grad_norm(params, sq)
        row["layer_grad_norm"] = _grad_norm(stack.layer_params[block], sq) if block is not None else None
        ctx = run.context_grads[i] if run.context_grads is not None else None
        row["context_grad_norm"] = float(ctx.float().norm()) if ctx is not None else None
        row["token_cos"] = token_cosine(seen[i])
        row["output_change"] = changes[i] if changes is not None else None
        row["jacobian_msv"] = run.jacobian[i] if run.jacobian is not None else None


def _squared_norms(grads: dict) -> dict:
    """id(parameter) -> ||g||^2 for every gradient present, computed in one batched call."""
    keys = [k for k, g in grads.items() if g is not None]
    norms = torch._foreach_norm([grads[k] for k in keys]) if keys else []
    return {k: float(n) ** 2 for k, n in zip(keys, torch.stack(norms).double().tolist() if keys else [])}


def _grad_norm(params, sq: dict) -> float | None:
    """sqrt(sum ||g||^2) over ``params`` (a parameter without a gradient contributes 0); None for None."""
    if params is None:
        return None
    return math.sqrt(sum(sq.get(id(p), 0.0) for p in _unique(params)))


def _unique(params) -> list[nn.Parameter]:
    seen, out = set(), []
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def describe_model(model: nn.Module) -> dict:
    """A JSON-able description: a depthlab ModelConfig's dict, a HF config's dict, or the class name."""
    cfg = getattr(model, "cfg", None)
    if hasattr(cfg, "to_dict") and hasattr(cfg, "config_hash"):
        return cfg.to_dict()
    hf = getattr(model, "config", None)
    if hasattr(hf, "to_json_string"):
        return {"hf": json.loads(hf.to_json_string(use_diff=True)), "class": type(model).__name__}
    return {"class": type(model).__name__}
