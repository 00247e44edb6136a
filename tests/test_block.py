"""A block's two forms, computed by hand from its sublayers, and the wrappings' declarations read as code."""

import ast
import inspect

import pytest
import torch
from torch import nn

from depthlab.config import WRAPPINGS, ModelConfig, wrap_names
from depthlab.model import build_model, wrapping_base, wrappings
from depthlab.model.layers import Block, Context
from depthlab.model.stack import layer_wraps
from depthlab.model.wrappings import PreLN, Wrapping


def _block(wrap, arch="decoder", layer=1):
    """One block of a small model, its norm gains and biases away from 1 and 0 so that a missing or
    misplaced norm shows; with (x, ctx) to run it on."""
    cfg = ModelConfig(arch=arch, n_layers=3, d_model=16, n_heads=2, vocab_size=20, wrap=wrap)
    torch.manual_seed(0)
    model = build_model(cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
    stack = model.decoder if arch == "encdec" else model.stack
    memory = torch.randn(2, 6, 16, generator=g) if arch == "encdec" else None
    return stack.layers[layer], torch.randn(2, 5, 16, generator=g) * 2, Context(memory=memory)


def F(w, h, ctx):
    return w.f(h, ctx)  # the bare sublayer: attention or FFN, no wrapping


@pytest.mark.parametrize("arch", ["decoder", "encdec"])
def test_sequential_pre_is_each_sublayer_in_turn(arch):
    block, x, ctx = _block("pre", arch)
    want = x
    for w in block.sublayers().values():  # attn, [cross], ffn: x = x + F(LN(x)), one after the other
        want = want + F(w, w.norm(want), ctx)
    assert len(block.sublayers()) == (3 if arch == "encdec" else 2)
    torch.testing.assert_close(block(x, ctx), want)


def test_sequential_post_is_each_sublayer_in_turn():
    block, x, ctx = _block("post")
    a, f = block.attn, block.ffn
    h = a.norm(x + F(a, x, ctx))  # x = LN(x + F(x)) for attn, then for the FFN
    torch.testing.assert_close(block(x, ctx), f.norm(h + F(f, h, ctx)))


@pytest.mark.parametrize("arch", ["decoder", "encdec"])
def test_parallel_is_one_skip_and_every_branch_from_one_stream(arch):
    block, x, ctx = _block("parallel", arch)
    want = x + sum(F(w, w.norm(x), ctx) for w in block.sublayers().values())  # x + sum_i F_i(LN_i(x))
    torch.testing.assert_close(block(x, ctx), want)
    assert block.norm is None


@pytest.mark.parametrize("arch", ["decoder", "encdec"])
def test_parallel_shared_reads_the_one_norm_of_its_block(arch):
    block, x, ctx = _block("parallel_shared", arch)
    h = block.norm(x)
    want = x + sum(F(w, h, ctx) for w in block.sublayers().values())  # x + sum_i F_i(LN(x))
    torch.testing.assert_close(block(x, ctx), want)
    assert all(not hasattr(w, "norm") for w in block.sublayers().values())


def test_the_two_forms_differ_on_the_same_weights():
    """pre and parallel hold the same parameters: only Block.forward's form tells them apart."""
    seq, _, _ = _block("pre")
    par, x, ctx = _block("parallel")
    par.load_state_dict(seq.state_dict())
    a, f = par.attn, par.ffn
    torch.testing.assert_close(par(x, ctx), x + F(a, a.norm(x), ctx) + F(f, f.norm(x), ctx))
    h = x + F(a, a.norm(x), ctx)
    torch.testing.assert_close(seq(x, ctx), h + F(f, f.norm(h), ctx))
    assert not torch.allclose(seq(x, ctx), par(x, ctx), atol=1e-4)


class _ParallelPre(PreLN):
    """pre-LN's module declared parallel: the block's form follows the declaration alone."""

    PARALLEL = True

    def branch(self, x, ctx):
        return self.f(self.norm(x), ctx)


def test_the_form_is_what_the_wrapping_declares():
    block, x, ctx = _block("pre")
    attn, ffn = (_ParallelPre(w.f, nn.Identity, True, 16) for w in (block.attn, block.ffn))
    attn.norm, ffn.norm = block.attn.norm, block.ffn.norm
    par = Block(attn, ffn)
    want = x + F(attn, attn.norm(x), ctx) + F(ffn, ffn.norm(x), ctx)
    torch.testing.assert_close(par(x, ctx), want)


def test_a_parallel_sublayer_on_its_own_is_pre_ln():
    block, x, ctx = _block("parallel")
    a = block.attn
    torch.testing.assert_close(a(x, ctx), x + F(a, a.norm(x), ctx))
    shared, x, ctx = _block("parallel_shared")
    a = shared.attn
    torch.testing.assert_close(a(x, ctx, shared.norm), x + F(a, shared.norm(x), ctx))


def test_mix_is_a_declaration_that_picks_a_module_per_layer():
    mix = WRAPPINGS["mix"]
    assert not issubclass(mix, nn.Module)
    cfg = ModelConfig(wrap="mix", n_layers=4, mix_ratio=0.5)
    assert layer_wraps(cfg, 4) == ["post", "post", "pre", "pre"]
    kinds = [type(b.attn).__name__ for b in build_model(cfg).stack.layers]
    assert kinds == ["PostLN", "PostLN", "PreLN", "PreLN"]


@pytest.mark.parametrize("wrap", wrap_names())
def test_every_declaration_gives_a_module_for_every_layer(wrap):
    cfg = ModelConfig(wrap=wrap, n_layers=4)
    for layer in range(1, 5):
        cls = WRAPPINGS[wrap].for_layer(cfg, layer, 4)
        assert issubclass(cls, Wrapping)
        assert cls.SHARED_NORM <= cls.PARALLEL  # a shared norm only in the parallel form
        assert cls.PARALLEL <= hasattr(cls, "branch")


def _classes():
    """Every class defined in the wrappings' modules, as (name, ast.ClassDef)."""
    for module in (wrapping_base, wrappings):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.ClassDef):
                yield node.name, node


def _body(fn: ast.FunctionDef) -> list[ast.stmt]:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return body


def test_no_wrapping_overrides_a_member_only_to_raise():
    found = []
    for name, cls in _classes():
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            body = _body(fn)
            if len(body) == 1 and isinstance(body[0], ast.Raise):
                found.append(f"{name}.{fn.name}")
    assert not found, f"members that only raise: {found}"
    assert {"PostLN", "MixLN", "Parallel", "ParallelShared"} <= {name for name, _ in _classes()}


def test_every_init_runs_its_parents():
    found = []
    for name, cls in _classes():
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"):
            calls = [c for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)]
            if not any(c.func.attr == "__init__" and _is_super(c.func.value) for c in calls):
                found.append(name)
    assert not found, f"__init__ without super().__init__: {found}"


def _is_super(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def test_deepnorm_under_gpt2_init_scales_by_beta_once():
    """GPT-2's 0.02/sqrt(2L) and DeepNorm's beta both shrink the residual outputs with depth: beta
    replaces GPT-2's factor (as LayerNorm Scaling's 1/sqrt(l) does), it is not applied on top of it."""
    from depthlab import ModelConfig, build_model

    torch.manual_seed(0)
    L = 16
    model = build_model(ModelConfig(wrap="deepnorm", init="gpt2", n_layers=L, d_model=128, n_heads=4))
    beta = (8 * L) ** -0.25
    fc2 = torch.cat([layer.sublayers()["ffn"].f.fc2.weight.flatten() for layer in model.stack.layers])
    assert abs(fc2.std().item() / (0.02 * beta) - 1) < 0.02
