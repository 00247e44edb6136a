"""CompleteP's depth coordinate check: under alpha = 1 the activations after a few Adam steps are flat
against depth, under the standard parametrization the pre-LN stream grows (Dey et al. 2025, "Don't be
lazy"); depth-muP (alpha = 1/2) keeps the stream flat while each layer's update shrinks with depth (Yang
et al. 2023, Tensor Programs VI; Bordelon et al. 2023). Extended to every wrapping with a depth rule.

The check is ``depthlab coord``'s (:mod:`depthlab.probe.coord`): each wrapping under sp, depth_mup and
completep (base depth = the smallest depth) at several depths, trained a few Adam steps at one lr on the
default corpus, several seeds; per seed, the slope of log(activation) against log(depth) at the last
step, decided on the mean over seeds with its t-interval (a slope is an exponent: decided on its own
linear scale). The activations: the last stream's mean |coordinate| and rms, and the sublayers' outputs
(before the branch multiplier, averaged over the layers).

Theory, per wrapping (the registered ``kind``): where each branch adds an output of depth-independent
scale to an unnormalised stream (pre, parallel, parallel_shared; sandwich and reorder, whose branch ends
in a LayerNorm), the stream is x_0 + m sum_l F_l: under SP (m = 1) it grows with L; under depth-muP (m =
L^-1/2) and CompleteP (m = 1/L) it stays O(1). A sublayer's own output F_l = F_l(0) + its update: under
CompleteP the update does not depend on depth (complete feature learning); under depth-muP it shrinks as
L^-1/2 (the hidden lr x L^-1/2: the layers turn lazy, Dey et al. 2025), so the output shrinks toward its
init scale. Where the measured output is a LayerNorm's (post-LN's stream, sandwich's and reorder's
sublayer outputs) it is flat by construction: sanity. ReZero (a learned gate starting at 0), LN-scaling
(each layer's input x l^-1/2) and mix (post-LN below, pre-LN above) have no theory here: they are in the
table, with no check.
"""

from __future__ import annotations

import math
import os
import sys

from depthlab.fit import loglog_slope
from depthlab.paths import save_figure
from depthlab.probe.coord import MODULES, CoordResult, CoordSpec, coord_check, seed_means
from depthlab.probe.coord_plot import coord_figure, coord_vs_size_figure
from depthlab_lab.reproduce.registration import DECISION, Registration
from depthlab_lab.reproduce.reproduction import Check, Reproduction, register, resolve, seeded_check

WRAPS = ["pre", "parallel", "parallel_shared", "sandwich", "reorder", "post", "rezero", "lns", "mix"]
SMALL = {
    "wraps": WRAPS,
    "params": ["sp", "depth_mup", "completep"],
    "depths": [2, 4, 8, 16, 32],
    "width": 32,
    "heads": 4,
    "steps": 10,
    "lr": 1e-2,
    "batch_size": 8,
    "seq_len": 32,
    "seeds": [0, 1, 2, 3, 4],
}
QUICK = {"wraps": ["pre", "sandwich", "post", "lns"], "depths": [2, 4], "width": 16, "heads": 2, "steps": 2,
         "seeds": [0, 1]}  # fmt: skip
REGISTRATION = Registration(
    commit="f7731fee4114f0b9c59a370cf05b7308b23168f1",
    expectation={
        # flat: the slope's interval inside [-band, band]; grows: above +band; shrinks: below -band
        "band": 0.1,
        "kind": {
            **{w: "branch" for w in ("pre", "parallel", "parallel_shared")},
            **{w: "normed branch" for w in ("sandwich", "reorder")},
            "post": "normed stream",
            **{w: "no theory" for w in ("rezero", "lns", "mix")},
        },
        # the last stream (mean |x| and rms) of "branch" and "normed branch" wrappings, at the last step
        "stream": {"sp": "grows", "depth_mup": "flat", "completep": "flat"},
        # the attention and FFN outputs of "branch" wrappings, at the last step
        "sublayers": {"sp": "no expectation", "depth_mup": "shrinks", "completep": "flat"},
        "decision": DECISION,
    },
    regimes={"small": SMALL},
    notes="Registered before any run at width 32. Known when registering (docs/transfer.md): the same "
    "check at width 64 (depths 2-32, seeds 0-2) for every wrapping under sp and completep (sp: the "
    "stream grew for pre, sandwich, reorder, lns, the parallel forms and mix; completep: flat for pre, "
    "sandwich, reorder and the parallel forms, unclear for lns and mix), and pre-LN at width 128 (depths "
    "2-64) under all three, where depth_mup's attn and ffn shrank (-0.52, -0.70) and its stream shrank "
    "too (-0.19 [-0.29, -0.08]). The expectations are the theory's (module docstring), not those numbers: "
    "depth_mup's stream is registered flat although pre-LN's shrank at width 128. Width 32 is the "
    "lr-transfer claims' d_model; five seeds, because over three an interval is +-2.5 standard "
    "deviations wide and rarely fits in +-0.1. Defaults of depthlab coord otherwise (10 Adam steps at lr "
    "1e-2, 8 x 32 bytes per step).",
)

TREND_BOUNDS = {"flat": (-1.0, 1.0), "grows": (1.0, None), "shrinks": (None, -1.0)}  # x band
STREAM = (("stream@L", False), ("stream@L", True))  # (module, rms)
SUBLAYERS = (("attn", False), ("ffn", False))
# The output measured is a LayerNorm's: its rms is the norm's gain (1 at init, moved by at most ten steps).
NORMED_SANITY = (
    "flat by construction up to the distribution's shape: the measured output is a LayerNorm's, whose rms "
    "is its gain's (1 at init) and whose mean |x| is at most that"
)


@register("coord-depth", REGISTRATION)
def reproduce_coord_depth(
    quick: bool = False, out_dir: str | None = None, scale: str = "small"
) -> Reproduction:
    """The depth coordinate check of every wrapping with a depth rule under sp, depth_mup and completep."""
    r = resolve(REGISTRATION, scale, quick, QUICK)
    spec = CoordSpec("depth", tuple(r["depths"]), r["width"], tuple(r["wraps"]), tuple(r["params"]),
                     steps=r["steps"], lr=r["lr"], seeds=tuple(r["seeds"]), heads=r["heads"],
                     batch_size=r["batch_size"], seq_len=r["seq_len"])  # fmt: skip
    n = len(spec.wraps) * len(spec.params) * len(spec.sizes) * len(spec.seeds)
    print(f"coord-depth: {n} runs of {spec.steps} Adam steps (wrappings x parametrizations x depths x seeds)",
          file=sys.stderr, flush=True)  # fmt: skip
    result = coord_check(spec)
    checks = [c for wrap in spec.wraps for param in spec.params for c in _checks(result, wrap, param)]
    data = {"scale": scale, "regime": r, "seconds": round(result.seconds, 1), "tables": [_table(result)],
            "slopes": _record(result)}  # fmt: skip
    source = "Dey et al. 2025 (CompleteP); Yang et al. 2023 (depth-muP); Bordelon et al. 2023"
    return Reproduction("coord-depth", data, checks, _plots(result, out_dir), source=source)


def seed_slopes(result: CoordResult, wrap: str, param: str, module: str, rms: bool, step: int) -> list[float]:
    """Per seed, the slope of log(``module``'s mean |x|, or rms) against log(depth) at ``step``, fitted
    over the depths where it is positive; NaN for a seed with fewer than two such depths."""
    table = (result.rms if rms else result.values)[(wrap, param)].get(module)
    if table is None:
        return []
    sizes = result.spec.sizes
    out = []
    for k in range(len(result.spec.seeds)):
        s = loglog_slope(sizes, [table[i][k][step - 1] for i in range(len(sizes))])
        out.append(s if s is not None and math.isfinite(s) else math.nan)
    return out


def _checks(result: CoordResult, wrap: str, param: str) -> list[Check]:
    """The registered checks of one (wrapping, parametrization), by its kind (module docstring)."""
    e = REGISTRATION.expectation
    kind = e["kind"][wrap]
    out = []
    if kind in ("branch", "normed branch"):
        out += [_check(result, wrap, param, q, e["stream"][param], "") for q in STREAM]
    if kind == "normed stream":
        out += [_check(result, wrap, param, q, "flat", NORMED_SANITY) for q in STREAM]
    if kind == "branch" and e["sublayers"][param] != "no expectation":
        out += [_check(result, wrap, param, q, e["sublayers"][param], "") for q in SUBLAYERS]
    if kind == "normed branch":
        out += [_check(result, wrap, param, q, "flat", NORMED_SANITY) for q in SUBLAYERS]
    return out


def _check(result: CoordResult, wrap: str, param: str, quantity: tuple, trend: str, sanity: str) -> Check:
    module, rms = quantity
    band = REGISTRATION.expectation["band"]
    low, high = (None if b is None else b * band for b in TREND_BOUNDS[trend])
    shown = {"flat": f"in [{-band:+g}, {band:+g}]", "grows": f"> {band:+g}", "shrinks": f"< {-band:+g}"}
    what = f"{module} {'rms' if rms else 'mean |x|'}"
    return seeded_check(
        f"{wrap}, {param}: slope of log {what} against log depth at step {result.spec.steps}",
        f"{trend}: slope {shown[trend]}",
        seed_slopes(result, wrap, param, module, rms, result.spec.steps),
        at_least=low,
        at_most=high,
        fmt="+.2f",
        sanity=sanity,
    )


def _table(result: CoordResult) -> dict:
    """Every setting's slopes at the last step (interval and trend), checked or not, and how many of
    the seven modules are flat."""
    step, rows = result.spec.steps, []
    for wrap, param in result.values:
        cells = []
        for module, rms in (*STREAM, *SUBLAYERS):
            iv = result.slope(wrap, param, module, step, rms=rms)
            cells.append("n/a" if iv is None else f"{iv.format('+.2f')} {result.trend(iv)}")
        flat = sum(
            result.trend(result.slope(wrap, param, m, step)) == "flat" for m in result.values[(wrap, param)]
        )
        rows.append([wrap, param, *cells, f"{flat}/{len(result.values[(wrap, param)])}"])
    columns = ["wrapping", "param", "stream@L mean |x|", "stream@L rms", "attn", "ffn", "modules flat"]
    title = (
        f"slope of log activation against log depth at step {step} (95% interval over seeds; every setting)"
    )
    return {"title": title, "columns": columns, "rows": rows}


def _record(result: CoordResult) -> dict:
    """Compact, to re-derive every slope: per setting and module, each seed's slope at the last step
    and at step 1, and the seed-mean activation at each depth at the last step."""
    step, out = result.spec.steps, {}
    for wrap, param in result.values:
        modules = {}
        for module in MODULES:
            for rms in (False, True):
                table = (result.rms if rms else result.values)[(wrap, param)].get(module)
                if table is None:
                    continue
                means = [row[step - 1] for row in seed_means(table)]
                modules[module + (" rms" if rms else "")] = {
                    "slope_last": [_round(v) for v in seed_slopes(result, wrap, param, module, rms, step)],
                    "slope_first": [_round(v) for v in seed_slopes(result, wrap, param, module, rms, 1)],
                    "mean_last": [_round(v) for v in means],
                }
        out[f"{wrap} {param}"] = modules
    return out


def _round(v: float):
    return float(f"{v:.4g}") if math.isfinite(v) else None


def _plots(result: CoordResult, out_dir: str | None) -> list[str]:
    """CompleteP's view (every setting against depth) and mup's (a panel per step) for pre-LN."""
    if out_dir is None:
        return []
    paths = [save_figure(coord_vs_size_figure(result), os.path.join(out_dir, "coord-depth.png"))]
    for param in result.spec.params:
        if ("pre", param) in result.values:
            fig = coord_figure(result, "pre", param)
            paths.append(save_figure(fig, os.path.join(out_dir, f"coord-depth-pre-{param}.png")))
    return paths
