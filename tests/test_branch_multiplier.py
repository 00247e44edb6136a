"""The branch multiplier m is declared by each wrapping class: its forward applies m where its FORMULA
shows it (checked here with the sublayer's output known), its BRANCH_END names the module m follows,
and the wrappings that refuse a depth rule say why."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from depthlab import ConfigError, ModelConfig, build_model
from depthlab.config import wrap_names
from depthlab.model import parametrization as P
from depthlab.model.explain import explain
from depthlab.model.wrappings import WRAPPINGS, PreLN, ReZero, Wrapping

D, M = 8, 0.3


class _Known(nn.Module):
    """A sublayer whose output is the fixed tensor ``c``, whatever its input: F(.) = c."""

    def __init__(self, c: torch.Tensor):
        super().__init__()
        self.c = c
        self.out = nn.Linear(D, D)  # for the wrapping's width, unused

    def forward(self, x, ctx=None):
        return self.c.expand_as(x)


def _norm() -> nn.Module:
    n = nn.LayerNorm(D)
    with torch.no_grad():  # gains and biases away from 1 and 0, so that a misplaced norm shows
        n.weight.uniform_(0.5, 1.5)
        n.bias.uniform_(-0.5, 0.5)
    return n


CONSTANTS = {"rezero": {"a": 0.5}, "lns": {"scale": 0.5}}
# the formula with F's output c known, written out: x the stream, LN the wrapping's own norm(s)
EXPECTED = {
    "post": lambda w, x, c, m: w.norm(x + m * c),
    "pre": lambda w, x, c, m: x + m * c,
    "sandwich": lambda w, x, c, m: x + m * w.norm_out(c),
    "reorder": lambda w, x, c, m: x + m * w.norm(c),
    "rezero": lambda w, x, c, m: x + 0.5 * (m * c),
    "lns": lambda w, x, c, m: x + m * c,
    "parallel": lambda w, x, c, m: x + m * c,
    "parallel_shared": lambda w, x, c, m: x + m * c,
}
# m at another place, which the formula does not say: each must give another output
ELSEWHERE = {
    "post": lambda w, x, c: M * w.norm(x + c),
    "pre": lambda w, x, c: M * (x + c),
    "sandwich": lambda w, x, c: x + w.norm_out(M * c),  # before the out-norm, which undoes it
    "reorder": lambda w, x, c: x + w.norm(M * c),
    "rezero": lambda w, x, c: x + 0.5 * c,
    "lns": lambda w, x, c: x + c,
    "parallel": lambda w, x, c: x + c,
    "parallel_shared": lambda w, x, c: x + c,
}


def _defined() -> list[str]:
    return [
        n
        for n in wrap_names()
        if issubclass(WRAPPINGS[n], Wrapping)
        and not WRAPPINGS[n].DEPTH_RULE_REFUSED
        and WRAPPINGS[n].STATE is None
    ]  # the residual topologies' m: tests/test_topologies.py


def _wrapping(name: str, m: float) -> tuple[Wrapping, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    c = torch.randn(1, 1, D) * 2
    w = WRAPPINGS[name](_Known(c), _norm, True, D, **CONSTANTS.get(name, {}))
    w.set_branch_multiplier(m)
    return w, torch.randn(2, 3, D) * 3, c


def _call(w: Wrapping, x: torch.Tensor) -> torch.Tensor:
    if w.SHARED_NORM:
        return w(x, None, _norm())  # the block's norm; F ignores its input here
    return w(x, None)


def test_every_wrapping_that_is_a_module_is_in_the_cases():
    assert set(_defined()) == set(EXPECTED), "a new wrapping needs its formula with m written out here"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_m_enters_where_the_formula_says(name):
    w, x, c = _wrapping(name, M)
    with torch.no_grad():
        got = _call(w, x)
        torch.testing.assert_close(got, EXPECTED[name](w, x, c, M))
        assert not torch.allclose(got, ELSEWHERE[name](w, x, c), atol=1e-3)
    assert "m*" in w.FORMULA and "m*" in w.formula_for(True, M)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_m_multiplies_the_output_of_the_declared_branch_end(name):
    """Hooking BRANCH_END sees the branch before m: the coordinate check reads it there."""
    w, x, c = _wrapping(name, M)
    seen = []
    w.branch_end().register_forward_hook(lambda mod, args, out: seen.append(out))
    with torch.no_grad():
        got = _call(w, x)
    y = seen[0]
    gate = 0.5 if name == "rezero" else 1.0
    want = w.norm(x + M * y) if w.NORM_AFTER_ADD else x + gate * M * y
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_at_m_1_the_branch_is_not_multiplied(name):
    """sp: times_m hands back the very tensor, so sp computes what it did before parametrizations."""
    w, x, c = _wrapping(name, 1.0)
    y = torch.randn(3)
    assert w.times_m(y) is y
    with torch.no_grad():
        assert torch.equal(_call(w, x), EXPECTED[name](w, x, c, 1.0))  # 1.0 * c is c exactly


@pytest.mark.parametrize("name", sorted(P.depth_refused()))
def test_the_refusing_classes_say_why_and_take_no_multiplier(name):
    cls = WRAPPINGS[name]
    assert cls.BRANCH_END is None and "m*" not in cls.FORMULA
    assert "by depth" in cls.DEPTH_RULE_REFUSED
    with pytest.raises(ConfigError, match="by depth") as e:
        ModelConfig(wrap=name, n_layers=4, param="completep", base_depth=2)
    assert "\n" not in str(e.value)
    model = build_model(ModelConfig(wrap=name, n_layers=2, d_model=16, n_heads=2, vocab_size=32, max_len=8))
    w = model.stack.layers[0].attn
    with pytest.raises(ValueError, match="by depth"):
        w.set_branch_multiplier(0.5)
    w.set_branch_multiplier(1.0)  # what sp and mup set


def test_formulas_drop_m_at_1_and_the_skip_when_off():
    assert PreLN.formula_for(True) == "x = x + F(LN(x))"
    assert PreLN.formula_for(True, 0.5) == "x = x + m*F(LN(x))"
    assert PreLN.formula_for(False, 0.5) == "x = m*F(LN(x))"
    assert ReZero.formula_for(False, 0.5) == "x = a*m*F(x)"
    assert ReZero.formula_at(1.0) == "x = x + a*F(x)"


def test_explain_shows_m_where_it_is_not_1():
    cfg = ModelConfig(n_layers=8, d_model=16, n_heads=2, vocab_size=32, max_len=8, wrap="sandwich")
    sub = explain(cfg)["layers"][0]["sublayers"][0]
    assert sub["formula"] == "x = x + LN(F(LN(x)))" and "m" not in sub["constants"]
    sub = explain(cfg.replace(param="completep", base_depth=2))["layers"][0]["sublayers"][0]
    assert sub["formula"] == "x = x + m*LN(F(LN(x)))" and sub["constants"]["m"] == pytest.approx(0.25)


class _NoEnd(Wrapping):
    """A wrapping that says nothing of m: refused under a depth rule, accepted under sp."""

    FORMULA = "x = x + F(LN(x))"
    SOURCE = "a test"

    def __init__(self, f, make_norm, residual=True, d_model=None):
        super().__init__(f, make_norm, residual, d_model)
        self.norm = make_norm()

    def forward(self, x, ctx):
        return self.skip(x) + self.f(self.norm(x), ctx)


@pytest.fixture
def no_end():
    from depthlab.model.wrappings import register

    register("no_end")(_NoEnd)
    yield _NoEnd
    WRAPPINGS.pop("no_end")


def test_a_wrapping_without_a_branch_end_is_undeclared_and_refuses_depth_rules(no_end):
    assert P.undeclared() == {"no_end"}
    ModelConfig(wrap="no_end", n_layers=4)
    with pytest.raises(ConfigError, match="BRANCH_END"):
        ModelConfig(wrap="no_end", n_layers=4, param="depth_mup", base_depth=2)
