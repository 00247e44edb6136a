"""``depthlab reproduce seeds``: every number the source texts state, recomputed with depthlab's own code.

| text | claim                                              | how depthlab recomputes it                     |
|------|----------------------------------------------------|------------------------------------------------|
| interview answer | 48 tanh layers, width 64, seed 0: input gradient   | the text's layers in the text's RNG order, as  |
|      | 2.24e-11 without skips, 2.50e+02 with; 0.5^32      | a stack of blocks measured by depthlab.probe   |
| stacks article   | gradient_by_depth(24, 256): orders of magnitude    | the same through the probe; the text's code as |
|      | without the +, within a small factor with          | printed is run too (see below)                 |
| stream chapter   | worked example Var(x1) = 4.3311 / 6.6623, closed   | depthlab's LayerNorm (gamma 1, beta 0, eps     |
|      | form, BERT-base FFN 4,718,592 weights, sqrt(97)    | 1e-8); depthlab.model.explain; a simulation    |
| Residual Connections Explained | [0.5, 1.2, -0.3] + [0.1, -0.2, 0.4] = [0.6, 1.0, 0.1] | depthlab's pre-LN wrapping around it       |

The stacks article's ``gradient_by_depth`` returns ``s.grad`` of every state, but PyTorch keeps ``.grad`` for
leaf tensors only: as printed it fails on the first intermediate state. It needs ``retain_grad()`` on
each state (the probe obtains the same gradients with ``torch.autograd.grad``); both are run and
compared. The interview answer's text says "same input" but its code draws a fresh x for each setting; depthlab
follows the code, which is what produces the stated numbers.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from depthlab.config import ModelConfig
from depthlab.model.explain import explain
from depthlab.model.wrappings import WRAPPINGS
from depthlab.probe.toys import (
    gradient_by_depth,
    gradient_by_depth_as_printed,
    tanh_stack_gradients,
    variance_example,
)
from depthlab_lab.reproduce.claim_plots import new_figure, save
from depthlab_lab.reproduce.registration import Registration, Revision
from depthlab_lab.reproduce.reproduction import Check, Reproduction, register

# The text computes f and x1 from LN(x0) already rounded to 0.6325: its 4th decimal can differ by one
# from the exact value (1.31623 -> "1.3163"), so these are checked to within one unit of that digit.
ROUNDED = "(within 1 in the 4th decimal: the text rounds LN(x0) first)"
TEXTS_OWN = "the texts' own statements, not tested before"
KNOWN = "yes: the inputs are the texts' own numbers, which were read before the thresholds were set"
REGISTRATION = Registration(
    commit="9fcf9413329ed4ec7efa19b6764a1e0122a1169b",
    typed_date="2026-11-30 04:22 UTC",
    expectation={
        "small_factor": 10.0,  # "within a small factor": at most one order of magnitude between any two depths
        "orders_of_magnitude": 1e-2,  # "orders of magnitude smaller": bottom/top below this
        "simulation_within": 0.02,
        # "arrives intact": the gradient at the input within this factor of the one at the output, both ways
        "intact_factor": 10.0,
        # "nearly doubled": Var(x1) at a = 1.0 over Var(x1) at a = 0.5 in this range
        "nearly_doubled": [1.8, 2.2],
    },
    revisions=(
        Revision("2026-11-30", "expectation.intact_factor", None, 10.0, TEXTS_OWN, KNOWN),
        Revision("2026-11-30", "expectation.nearly_doubled", None, [1.8, 2.2], TEXTS_OWN, KNOWN),
    ),
)

# What a larger scale is expected to change, shown in docs/reproductions.md under a MISMATCH or an
# inconclusive result (no measured numbers: only the registered regimes and the sources' own).
AT_SCALE = "Not a question of scale: these checks recompute the texts' own numbers and statements."

SMALL_FACTOR = REGISTRATION.expectation["small_factor"]
BY_ALGEBRA = (
    "by construction: the toy is linear, so the closed form is an identity (a check of the arithmetic)"
)
BY_SIMULATION = (
    "by construction: the simulation draws exactly the independent unit additions the formula assumes"
)


def stated_match(value: float, stated: str, units: float = 0.5) -> bool:
    """True if ``value`` rounds to the number written in ``stated`` (at the precision it is written).

    ``units``: the tolerance in units of the last written digit (0.5 = "rounds to"; 1 = "within one
    unit of the last digit", for numbers the text obtained from already-rounded intermediates)."""
    text = stated.replace(",", "")
    if "e" in text.lower():
        mantissa = text.lower().split("e")[0]
        digits = len(mantissa.split(".")[1]) if "." in mantissa else 0
        return f"{value:.{digits}e}" == f"{float(text):.{digits}e}"
    digits = len(text.split(".")[1]) if "." in text else 0
    return abs(value - float(text)) <= units * 10**-digits + 1e-12


def vector_match(values, stated: list[str], units: float = 0.5) -> bool:
    return len(values) == len(stated) and all(stated_match(v, s, units) for v, s in zip(values, stated))


def _fmt(values, digits: int = 4) -> str:
    return "[" + ", ".join(f"{v:.{digits}f}" for v in values) + "]"


def interview_checks(grads: dict) -> list[Check]:
    no, yes = grads[False][0], grads[True][0]
    return [
        Check(
            "interview answer: 48 tanh layers, grad norm at input, no skips",
            "2.24e-11",
            f"{no:.2e}",
            stated_match(no, "2.24e-11"),
        ),
        Check(
            "interview answer: 48 tanh layers, grad norm at input, with skips",
            "2.50e+02",
            f"{yes:.2e}",
            stated_match(yes, "2.50e+02"),
        ),
        Check("interview answer: 0.5^32", "2e-10", f"{0.5**32:.3g}", stated_match(0.5**32, "2e-10")),
        _intact(grads[True]),
    ]


def _intact(with_skips: list[float]) -> Check:
    """interview answer: "With skips it arrives intact": the input's gradient against the output's (d sum / d out = 1)."""
    factor = REGISTRATION.expectation["intact_factor"]
    ratio = with_skips[0] / with_skips[-1]
    return Check(
        "interview answer: with skips the gradient arrives intact (input's / output's gradient norm)",
        f"within x{factor:g} either way",
        f"{with_skips[0]:.3g} / {with_skips[-1]:.3g} = {ratio:.3g}",
        1 / factor <= ratio <= factor,
    )


def stacks_article_checks(
    res: list[float], nores: list[float], printed_error: str, retained: dict
) -> list[Check]:
    bottom_top = nores[0] / nores[-1]
    widening = {n: (g[0] / g[-1]) for n, g in retained["widening"].items()}
    ns = sorted(widening)
    spread = max(res) / min(res)
    return [
        Check(
            "stacks article: gradient_by_depth as printed needs retain_grad (.grad is kept for leaves only)",
            "25 gradient norms",
            f"as printed: {printed_error}; with retain_grad(): {len(retained['residual'])} norms, equal to "
            f"the probe's: {retained['equal']}",
            printed_error != "no error" and retained["equal"],
        ),
        Check(
            "stacks article: without the +, the bottom gradient is orders of magnitude below the top",
            "orders of magnitude smaller",
            f"bottom/top = {bottom_top:.2e} ({-math.log10(bottom_top):.1f} orders)",
            bottom_top < REGISTRATION.expectation["orders_of_magnitude"],
        ),
        Check(
            "stacks article: without the +, the gap widens with every layer added",
            "widens with depth",
            "bottom/top " + ", ".join(f"{widening[n]:.1e} at {n} layers" for n in ns),
            all(widening[a] > widening[b] for a, b in zip(ns, ns[1:])),
        ),
        Check(
            f"stacks article: with the +, the values stay within a small factor (<= {SMALL_FACTOR:g}x) of each other",
            "a small factor",
            f"max/min = {spread:.3g}x (bottom {res[0]:.3g} > top {res[-1]:.3g}: no vanishing, "
            f"vs {max(nores) / min(nores):.2g}x without the +)",
            spread <= SMALL_FACTOR,
        ),
    ]


def num_check(claim: str, stated: str, value: float, fmt: str = ".4f") -> Check:
    """A number beside the stated one; ok if it rounds to it."""
    return Check(claim, stated, format(value, fmt), stated_match(value, stated))


def vec_check(
    claim: str, stated: list[str], values: list[float], digits: int = 4, units: float = 0.5
) -> Check:
    """A vector beside the stated one; ok if every entry is within ``units`` of the last written digit."""
    return Check(
        claim, "[" + ", ".join(stated) + "]", _fmt(values, digits), vector_match(values, stated, units)
    )


def stream_chapter_checks(ex: dict, params: dict, d_ff: int, mc_ratio: float) -> list[Check]:
    """The worked example (both a), then the sizes: BERT-base FFN vs attention, GPT-3's std ratio."""
    ratio, within = math.sqrt(97), REGISTRATION.expectation["simulation_within"]
    ffn, attn = params["ffn_weights"], params["attn_weights"]
    return _worked_example_checks(ex) + [
        Check("stream chapter: BERT-base d_ff = 4 x 768", "3072", str(d_ff), d_ff == 3072),
        Check(
            "stream chapter: BERT-base FFN weights (depthlab explain)",
            "4,718,592",
            f"{ffn:,}",
            ffn == 4718592,
        ),
        Check(
            "stream chapter: one FFN sublayer outnumbers the whole attention sublayer (BERT-base, depthlab explain)",
            "FFN weights > attention weights",
            f"FFN {ffn:,} vs attention {attn:,} (x{ffn / attn:.2f})",
            ffn > attn,
        ),
        num_check("stream chapter: GPT-3 std ratio sqrt(1 + 96)", "9.85", ratio),
        Check(
            f"stream chapter: the same by simulation: 96 independent unit additions (within {within:.0%})",
            "9.85",
            f"{mc_ratio:.3f}",
            abs(mc_ratio - ratio) / ratio < within,
            BY_SIMULATION,
        ),
    ]


def _worked_example_checks(ex: dict) -> list[Check]:
    """LN(x0), f, x1 and its mean for a = 0.5; Var(x1), Var(f), Cov and the closed form for both a."""
    a5 = ex["0.5"]
    checks = [
        vec_check(
            "stream chapter: LN(x0) with gamma=1, beta=0",
            ["0.6325", "-0.6325", "1.2649", "-1.2649"],
            a5["ln"],
        ),
        vec_check(
            f"stream chapter: f(LN(x0)), a=0.5 {ROUNDED}",
            ["1.3163", "0.6838", "1.6325", "0.3675"],
            a5["f"],
            5,
            1,
        ),
        vec_check(
            f"stream chapter: x1, a=0.5 {ROUNDED}", ["2.3163", "-0.3163", "3.6325", "-1.6325"], a5["x1"], 5, 1
        ),
        num_check("stream chapter: mean of x1, a=0.5", "1.0", a5["mean"]),
        num_check("stream chapter: naive Var(x0) + Var(f), a=0.5", "2.75", 2.5 + a5["var_f"]),
    ]
    stated = {"0.5": ("4.3311", "0.25", "0.7906", "4.3310"), "1.0": ("6.6623", "1", "1.5811", "6.6621")}
    for a, (var, var_f, cov, closed) in stated.items():
        e = ex[a]
        checks += [
            num_check(f"stream chapter: Var(x1), a={a}", var, e["var"]),
            num_check(f"stream chapter: Var(f), a={a}", var_f, e["var_f"]),
            num_check(f"stream chapter: Cov(x0, f), a={a}", cov, e["cov"]),
            num_check(
                f"stream chapter: closed form (std0 + a)^2 with std0 = 1.5811, a={a}",
                closed,
                e["closed_rounded"],
            ),
            Check(
                f"stream chapter: the closed form is exact for the linear toy, a={a}",
                "matching to rounding",
                f"(sqrt(2.5) + a)^2 - Var(x1) = {e['closed_exact'] - e['var']:.1e}",
                abs(e["closed_exact"] - e["var"]) < 1e-6,
                BY_ALGEBRA,
            ),
        ]
    lo, hi = REGISTRATION.expectation["nearly_doubled"]
    growth = ex["1.0"]["var"] / ex["0.5"]["var"]
    increase = (ex["1.0"]["var"] - 2.5) / (ex["0.5"]["var"] - 2.5)
    checks.append(
        Check(
            "stream chapter: doubling a (0.5 -> 1.0) nearly doubled the stream variance: Var(x1) at 1.0 / at 0.5",
            f"in [{lo:g}, {hi:g}]",
            f"{ex['1.0']['var']:.4f} / {ex['0.5']['var']:.4f} = {growth:.3f} (its increase over Var(x0) "
            f"= 2.5 grew x{increase:.2f})",
            lo <= growth <= hi,
        )
    )
    return checks


def explained_check() -> tuple[list[float], Check]:
    """x + attention output through depthlab's own pre-LN wrapping (norm = identity, F = the given output)."""

    class Given(nn.Module):  # stands in for attention: returns the text's attention output
        def __init__(self, out: torch.Tensor):
            super().__init__()
            self.out = out

        def forward(self, x, ctx):
            return self.out

    x = torch.tensor([0.5, 1.2, -0.3], dtype=torch.float64)
    wrap = WRAPPINGS["pre"](Given(torch.tensor([0.1, -0.2, 0.4], dtype=torch.float64)), nn.Identity)
    y = wrap(x, None).tolist()
    stated = ["0.6", "1.0", "0.1"]
    return y, Check(
        "Residual Connections Explained: [0.5, 1.2, -0.3] + [0.1, -0.2, 0.4]",
        "[0.6, 1.0, 0.1]",
        _fmt(y, 1),
        vector_match(y, stated),
    )


def stream_std_ratio(n_layers: int = 96, samples: int = 20000, seed: int = 0) -> float:
    """std of a unit-variance stream after ``n_layers`` independent unit-variance additions, over the start."""
    gen = torch.Generator().manual_seed(seed)
    x0 = torch.randn(samples, generator=gen, dtype=torch.float64)
    x = x0 + torch.randn(n_layers, samples, generator=gen, dtype=torch.float64).sum(0)
    return float(x.std() / x0.std())


@register("seeds", REGISTRATION)
def seeds(quick: bool = False, out_dir: str | None = None, scale: str = "small") -> Reproduction:
    """Every number the source texts state, recomputed with depthlab's own code, beside the stated value."""

    tanh = tanh_stack_gradients()
    res, nores = gradient_by_depth(residual=True), gradient_by_depth(residual=False)
    printed_error = gradient_by_depth_as_printed()
    retained = {
        "residual": gradient_by_depth(residual=True, via="retain_grad"),
        "widening": {n: gradient_by_depth(n_layers=n, residual=False) for n in (6, 12, 24)},
    }
    retained["equal"] = (
        retained["residual"] == res and gradient_by_depth(residual=False, via="retain_grad") == nores
    )
    example = variance_example()
    bert = ModelConfig(arch="encoder", n_layers=12, d_model=768, n_heads=12, d_ff=3072)
    params = explain(bert)["params"]
    y_explained, check_explained = explained_check()
    checks = interview_checks(tanh) + stacks_article_checks(res, nores, printed_error, retained)
    checks += stream_chapter_checks(example, params, ModelConfig(d_model=768).ffn_dim, stream_std_ratio()) + [
        check_explained
    ]
    data = {
        "tanh48": {"residual": tanh[True][0], "no_residual": tanh[False][0]},
        "gradient_by_depth": {"residual": res, "no_residual": nores},
        "variance_example": {a: {"x1": e["x1"], "var": e["var"]} for a, e in example.items()},
        "bert_base_ffn_weights": params["ffn_weights"],
        "bert_base_attn_weights": params["attn_weights"],
        "gpt3_std_ratio": math.sqrt(97),
    }
    plots = [_plot(tanh, res, nores, out_dir)] if out_dir else []
    return Reproduction(
        "seeds", data, checks, plots, source="the four source texts described in docs/sources.md"
    )


def _plot(tanh: dict, res: list, nores: list, out_dir: str) -> str:
    """Gradient norm by depth, with and without the skip: the stacks article's toy and the interview answer's tanh stack."""
    fig, axes = new_figure(2, figsize=(10, 4))
    for ax, (title, on, off) in zip(
        axes,
        (
            ("the stacks article: gradient_by_depth(24, 256)", res, nores),
            ("the interview answer: 48 tanh layers, width 64", tanh[True], tanh[False]),
        ),
    ):
        ax.semilogy(on, marker=".", label="residual")
        ax.semilogy(off, marker=".", label="no residual")
        ax.set(title=title, xlabel="state index (0 = input)", ylabel="||d sum(out) / d state||")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    return save(fig, out_dir, "gradient_by_depth")
