"""Forward hooks that observe the residual stream of a stack without changing the model.

    x_0 ─► block 1 ─► x_1 ─► ... ─► block L ─► x_L ─► [final norm?] ─► head

``StreamCapture`` records x_0 (the input of the first block call) and the output of every block call
(in call order, so a block applied twice, as in ALBERT, gives two streams). Blocks may return a tensor
or a tuple whose first element is the stream (Hugging Face blocks do either, by version); the tensor
recorded is the very object the model passes on, so autograd can differentiate the loss with respect
to it. Two structural facts are read off the same forward:

- ``normalised[j]``: block j's output *is* the output of a norm inside it (post-LN, DeepNorm, Admin:
  the stream is renormalised after every sublayer);
- ``final_norm``: a norm outside the stack takes x_L itself as its input (GPT-2's ``ln_f``);
- ``norms_on_input[j]``: how many norm calls inside block j take the stream entering it as their input
  (pre-LN: 1; the parallel form with two norms: 2; post-LN and x + LN(F(x)): 0), which names the wiring
  of a model whose family depthlab does not import.
"""

from __future__ import annotations

import torch
from torch import nn

from depthlab.probe.locate import StackInfo, is_norm


def stream_tensor(value) -> torch.Tensor | None:
    """The stream inside a block's input or output: the tensor itself, or the first element of a tuple."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    hidden = getattr(value, "last_hidden_state", None)
    return hidden if isinstance(hidden, torch.Tensor) else None


def position_axis(stack: StackInfo, tokens: torch.Tensor | None, x0: torch.Tensor) -> int:
    """The axis of a captured stream that runs over positions: 1 for the (B, T, d) layout depthlab reports,
    0 for a stack that carries its stream sequence-first (T, B, d): torch's Transformer layers built with
    ``batch_first=False`` (their default), or a model whose stream has the batch's tokens (B, T) the other
    way round (XLNet). Per-position measures (the context gradient, token_cos) read this axis."""
    attn = next((m for m in stack.blocks[0].modules() if isinstance(m, nn.MultiheadAttention)), None)
    if attn is not None:
        return 1 if attn.batch_first else 0
    B, T = tokens.shape if tokens is not None and tokens.ndim == 2 else (None, None)
    return 0 if x0.ndim >= 3 and B != T and tuple(x0.shape[:2]) == (T, B) else 1


def find_norms(model: nn.Module, stack: StackInfo) -> tuple[list[nn.Module], list[nn.Module]]:
    """(norms inside the blocks, norms elsewhere in the model): one walk over the modules, which a caller
    capturing several passes (the probe: the main pass and the perturbed one) can reuse."""
    inside_ids, inside = set(), []
    for block in stack.blocks:
        for m in block.modules():
            if id(m) not in inside_ids:
                inside_ids.add(id(m))
                if is_norm(m):
                    inside.append(m)
    outside = [m for m in model.modules() if id(m) not in inside_ids and is_norm(m)]
    return inside, outside


class StreamCapture:
    """Context manager: while active, ``states`` collects x_0 .. x_L of every forward through ``stack``.

    ``make_leaf``: if x_0 does not require grad (a raw float input to nn.TransformerEncoder), replace
    it by an equal tensor that does, so that d loss / d x_0 exists; values are unchanged.
    """

    def __init__(
        self, model: nn.Module, stack: StackInfo, make_leaf: bool = True, norms: tuple | None = None
    ):
        self.model, self.stack, self.make_leaf = model, stack, make_leaf
        self.norms = norms if norms is not None else find_norms(model, stack)
        self.states: list[torch.Tensor] = []
        self.normalised: list[bool] = []
        self.norms_on_input: list[int] = []
        self._reads = 0
        self.final_norm = False
        self._handles: list = []
        self._last_norm_out = None
        self._top = None  # a residual topology's reduced state, which its final norm reads

    def __enter__(self) -> StreamCapture:
        blocks = list(self.stack.blocks)
        self._handles.append(blocks[0].register_forward_pre_hook(self._enter_stack, with_kwargs=True))
        for block in blocks:
            self._handles.append(block.register_forward_hook(self._leave_block))
        state = getattr(getattr(self.model, "stack", None), "state", None)  # a residual topology's
        if isinstance(state, nn.Module):  # its reduction feeds the final norm in place of x_L
            self._handles.append(state.register_forward_hook(self._reduced))
        inside, outside = self.norms
        self._handles += [m.register_forward_hook(self._norm_inside) for m in inside]
        self._handles += [m.register_forward_hook(self._norm_outside) for m in outside]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _enter_stack(self, module, args, kwargs):
        if self.states:  # a block applied again (weight sharing): x_0 is the first entry only
            return None
        if args and isinstance(args[0], tuple) and stream_tensor(args[0]) is not None:
            self.states.append(args[0][0])  # a residual topology's state: its stream comes first
            return None
        in_args = bool(args) and isinstance(args[0], torch.Tensor)
        x = args[0] if in_args else kwargs.get("hidden_states", kwargs.get("src", kwargs.get("tgt")))
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{type(module).__name__}: cannot find the stream among the block's inputs")
        if self.make_leaf and torch.is_grad_enabled() and not x.requires_grad:
            x = x.detach().requires_grad_(True)
        self.states.append(x)
        if in_args:
            return (x, *args[1:]), kwargs
        key = next(k for k in ("hidden_states", "src", "tgt") if k in kwargs)
        return args, {**kwargs, key: x}

    def _leave_block(self, module, args, output):
        x = stream_tensor(output)
        if x is None:
            raise TypeError(f"{type(module).__name__} returned {type(output).__name__}: no stream tensor")
        self.states.append(x)
        self.normalised.append(x is self._last_norm_out)
        self.norms_on_input.append(self._reads)
        self._reads = 0

    def _norm_inside(self, module, args, output):
        self._last_norm_out = output
        if self.states and args and args[0] is self.states[-1]:  # states[-1]: this block's input
            self._reads += 1

    def _reduced(self, module, args, output):
        self._top = output

    def _norm_outside(self, module, args, output):
        if self.states and args and (args[0] is self.states[-1] or args[0] is self._top):
            self.final_norm = True
