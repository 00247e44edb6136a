"""Pre-LN needs a final norm: its stream's scale grows with depth (seed 002, Q6 and A6).

Seed 002: "because each pre-LN block adds a positively-correlated contribution back onto the stream it
just read from, the stream's norm grows monotonically with depth ... This is exactly why every pre-LN
model ... appends one final LayerNorm after the last block and before the output projection ... the
unembedding matrix was never trained to see anything but a normalized input."

Measured: (1) at initialisation, the scale of the stream leaving the last pre-LN block relative to the
embedding's, by depth; (2) pre-LN trained with and without the final norm (tiny byte-level regime of
:mod:`depthlab.reproduce.lm_runs`, lr 1e-3, no warmup): the scale of the stream the output head reads
and the validation loss.
"""

from __future__ import annotations

import math
import time

import torch

from depthlab.config import ModelConfig
from depthlab.model import build_model
from depthlab.probe.stats import stream_rms
from depthlab.reproduce.claim import Check, Reproduction, register
from depthlab.reproduce.figures import loss_curves, profiles
from depthlab.reproduce.lm_runs import TINY_MODEL, Run, fmt_loss, lm_batches, train_run

INIT_DEPTHS = (3, 6, 12, 24, 48, 96)
TRAIN_DEPTHS, TRAIN_DEPTHS_QUICK = (24, 48), (24,)
STEPS = STEPS_QUICK = 150
LR = 1e-3

# Expected outcomes, stated before the run. "Grows monotonically with depth": the output/input rms
# ratio at init increases at every step of INIT_DEPTHS. "Far from unit scale": the trained model's
# last stream has rms >= FAR (a norm's output has rms 1). "Necessary rather than optional": without
# the final norm the validation loss ends higher by more than TOL, the seed-to-seed noise at this scale
# (the same margin as shallow_post's), or does not end at all (a non-finite loss).
FAR = 2.0
TOL = 0.02


@torch.no_grad()
def init_growth(depths: tuple[int, ...], seeds: tuple[int, ...] = (0, 1, 2)) -> dict[int, float]:
    """{depth: mean over seeds of rms(x_L) / rms(x_0)} for the tiny pre-LN model at initialisation."""
    tokens = lm_batches(1, 16, 32, seed=0)[0][:, :-1]
    out = {}
    for depth in depths:
        ratios = []
        for seed in seeds:
            torch.manual_seed(seed)
            model = build_model(ModelConfig(**{**TINY_MODEL, "n_layers": depth, "wrap": "pre"})).eval()
            _, states = model(tokens, return_states=True)
            ratios.append(stream_rms(states[-1]) / stream_rms(states[0]))
        out[depth] = sum(ratios) / len(ratios)
    return out


def _top_rms(run: Run) -> float:
    """rms of the last stream (what the head, or the final norm, reads) at the last logged step."""
    return run.layers_last[-1]["stream_rms"] if run.layers_last else float("nan")


@register("final-norm")
def reproduce_final_norm(quick: bool = False, out_dir: str | None = None) -> Reproduction:
    """Pre-LN with and without the final norm: the stream's scale at the output and the effect on training."""
    start = time.perf_counter()
    growth = init_growth(INIT_DEPTHS, seeds=(0,) if quick else (0, 1, 2))
    ratios = [growth[d] for d in INIT_DEPTHS]
    train = {"lr": LR, "warmup": 0, "steps": STEPS_QUICK if quick else STEPS}
    runs = {}
    for depth in TRAIN_DEPTHS_QUICK if quick else TRAIN_DEPTHS:
        for fn in ("on", "off"):
            # "on" is pre-LN's default (auto): the same config, and cached run, as the depth claim's
            model = {"wrap": "pre", "n_layers": depth, **({"final_norm": "off"} if fn == "off" else {})}
            runs[(depth, fn)] = train_run(f"pre {depth}L, final norm {fn}", model, train)
    checks = [
        Check(
            "at init, the pre-LN stream's scale grows with depth",
            "rms(x_L)/rms(x_0) increases with L",
            ", ".join(f"{d}L x{r:.2f}" for d, r in growth.items()),
            all(b > a for a, b in zip(ratios, ratios[1:])),
        )
    ]
    for depth in sorted({d for d, _ in runs}):
        on, off = runs[(depth, "on")], runs[(depth, "off")]
        top = _top_rms(off)
        checks.append(
            Check(
                f"{depth}L trained without it: the head reads a stream far from unit scale",
                f"rms(x_L) >= {FAR:g}",
                f"rms {top:.2f}",
                top >= FAR,
            )
        )
        checks.append(
            Check(
                f"{depth}L: training without the final norm ends worse",
                f"val loss: without > with + {TOL:.2f} nats (seed-to-seed noise)",
                f"without {fmt_loss(off.val_loss)} ({off.outcome}), with {fmt_loss(on.val_loss)} ({on.outcome})",
                not math.isfinite(off.val_loss) or off.val_loss > on.val_loss + TOL,
            )
        )
    plots = _plots(growth, runs, out_dir)
    data = {
        "init_rms_ratio": {str(d): r for d, r in growth.items()},
        "trained_top_rms": {f"{d}L final norm {fn}": _top_rms(r) for (d, fn), r in runs.items()},
        "runs": [r.to_dict() for r in runs.values()],
        "seconds": round(time.perf_counter() - start, 1),
    }
    return Reproduction(
        "final-norm", data, checks, plots, source="seed 002 (Q6, A6); Xiong et al. 2020, Lemma 2"
    )


def _plots(growth: dict, runs: dict, out_dir: str | None) -> list[str]:
    init = profiles(
        {"pre-LN at init": list(growth.values())},
        out_dir,
        "final_norm_growth",
        "Scale of the last stream vs the embedding's, pre-LN at initialisation",
        "layers",
        "rms(x_L) / rms(x_0)",
        x=list(growth),
    )
    streams = profiles(
        {r.label: [row["stream_rms"] for row in r.layers_last] for r in runs.values()},
        out_dir,
        "final_norm_streams",
        "Stream rms by index after training",
        "stream index",
        "rms",
        log=True,
    )
    unigram = next(iter(runs.values())).unigram_loss
    curves = loss_curves(
        {"training loss": list(runs.values())},
        out_dir,
        "final_norm_loss",
        "Pre-LN, final norm on/off",
        unigram,
    )
    return [p for p in (init, streams, curves) if p]
