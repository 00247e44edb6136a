"""Seed 002: past a few hundred layers, pre-LN's stream growth makes the late blocks' contribution vanish.

"Past a few hundred layers, the residual stream's growth becomes large enough that gradients through
the final blocks become vanishingly informative relative to gradients through the early blocks ...
[DeepNorm's] net effect is to hold the relative contribution of each new layer roughly constant
regardless of how many layers came before it." (seed 002, on Wang et al. 2022, DeepNet.)

Measured for pre-LN and DeepNorm decoders at L in {48, 192, 384} (d_model 32, activation checkpointing
from 192 layers) at init and after a short training run of 40 Adam updates (byte-level LM on the
default corpus), on one fixed validation batch; ``quick``: L in {48, 384} and 8 updates.

- per layer l: the update ratio ||x_l - x_{l-1}|| / ||x_{l-1}|| and the angular distance
  arccos(cos(x_{l-1}, x_l)) / pi (:mod:`depthlab.probe.stats`): how much layer l turns the stream;
- the share of the final stream that each quarter of the layers wrote. The stream telescopes,
  x_L = x_0 + sum_{l<L} delta_l with delta_l = x_{l+1} - x_l (exactly, for any wrapping), so projecting
  on x_L splits 1 into additive shares: 1 = <x_0, x_L>/||x_L||^2 + sum_l <delta_l, x_L>/||x_L||^2.
  The layers from a to b wrote share(a, b) = <x_b - x_a, x_L>/||x_L||^2 = C(b) - C(a), with the
  cumulative share C(l) = <x_l, x_L>/||x_L||^2 (C(L) = 1). For the last quarter that is 1 - C(3L/4):
  the part of the final stream not already present, in its own direction, a quarter from the top.
  Computed per token and averaged over tokens. A pre-LN delta is what the sublayers added; a DeepNorm
  delta also contains the renormalisation LN(alpha x + F(x)) applied to everything below it, so its
  share is the net change of the stream, which is what the claim is about.

How the per-layer contribution falls with the layer index is summarised by the log-log slope of the
update ratio against l (a least-squares fit over l = 1..L). If the stream grows as sqrt(l) (Xiong et al.
2020, Lemma 2: E||x_l||^2 linear in l) while each layer writes about the same amount, the slope is
-1/2 and the last layer of an L-layer stack changes the stream about L^(-1/2) times as much as the
first; a slope of 0 is DeepNorm's promise of a constant relative contribution. (The ratio of the mean
over the last quarter of the layers to the mean over the first quarter would not do: for a power law it
does not depend on L at all, so it cannot show a depth effect.)

Reading the shares: for pre-LN a delta is added to a growing stream, so the shares are first order in
what each layer writes. DeepNorm's stream is renormalised after every sublayer, ||x_l|| is the same at
every l and C(l) = cos(x_l, x_L): a layer that turns the stream by an angle theta changes the share by
about theta^2 / 2, so DeepNorm's shares are second order and small by construction; compare DeepNorm's
profiles by angular distance, and across depths rather than against pre-LN's magnitudes.
"""

from __future__ import annotations

import math
import time

import matplotlib
import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.fit import loglog_slope
from depthlab.model import build_model
from depthlab.probe.stats import stream_table
from depthlab.reproduce.claim import Check, Reproduction, register
from depthlab.reproduce.figures import new_figure, save
from depthlab.train.regimes import TINY_LM_MODEL
from depthlab.train.schedules import make_optimizer, make_scheduler
from depthlab.train.tasks import LMTask

WRAPS = ("pre", "deepnorm")
DEPTHS, DEPTHS_QUICK = (48, 192, 384), (48, 384)
MODEL = dict(TINY_LM_MODEL)
# A short run: Adam as in the original recipe, a brief warmup; enough updates to move every layer.
TRAIN = dict(task="lm", batch_size=8, seq_len=32, lr=1e-3, warmup=5, beta2=0.98, eval_batches=1)
STEPS, STEPS_QUICK = 40, 8
# Activation checkpointing from this depth on: at 384 layers it cut the process's peak memory from
# 710 MB to 509 MB (measured) at no visible cost in time (these tiny blocks are overhead-bound).
CHECKPOINT_FROM = 192

# Expected outcomes, stated before the run (seed 002, Wang et al. 2022):
# - pre-LN: the update ratio decays with the layer index like l^(-1/2): a fitted slope closer to -1/2
#   than to 0, i.e. <= DECAY, at every L; the last quarter's share of x_L falls with L and, at the
#   deepest L, is below the first quarter's share (late blocks' contribution vanishing relative to early).
# - DeepNorm: the update ratio is flat in l, a slope closer to 0 than to -1/2 (|slope| < -DECAY), at
#   every L; the last quarter's share stays within SHARE_FLAT of its value at the smallest L.
DECAY = -0.25
SHARE_FLAT = (2 / 3, 3 / 2)


def cumulative_share(states: list[torch.Tensor]) -> list[float]:
    """C(l) = mean over tokens of <x_l, x_L> / ||x_L||^2 for l = 0..L (C(L) = 1); see the module doc."""
    last = states[-1].float().flatten(0, -2)  # (tokens, d)
    denom = last.pow(2).sum(-1).clamp_min(1e-30)
    return [float(((x.float().flatten(0, -2) * last).sum(-1) / denom).mean()) for x in states]


def quarter_shares(cum: list[float]) -> dict:
    """Shares of x_L written by the embedding, the first and the last quarter of the layers."""
    L = len(cum) - 1
    q = L // 4
    return {"embedding": cum[0], "first_quarter": cum[q] - cum[0], "last_quarter": cum[L] - cum[L - q]}


def layer_slope(values: list[float]) -> float:
    """The log-log slope of values[l-1] against the layer index l = 1..len(values) (nan if none)."""
    slope = loglog_slope(range(1, len(values) + 1), values)
    return math.nan if slope is None else slope


@torch.no_grad()
def profile(model: torch.nn.Module, tokens: torch.Tensor) -> dict:
    """Per-layer update ratio and angular distance (L values each), cumulative share (L+1), quarter shares.

    tokens: (B, T). The model is evaluated in eval mode and returned to its previous mode.
    """
    was_training = model.training
    model.eval()
    _, states = model(tokens, return_states=True)
    model.train(was_training)
    rows = stream_table(states)[1:]
    upd = [r["update_ratio"] for r in rows]
    ang = [r["angular_distance"] for r in rows]
    cum = cumulative_share(states)
    return {
        "update_ratio": upd,
        "angular_distance": ang,
        "cumulative_share": cum,
        "shares": quarter_shares(cum),
        "update_slope": layer_slope(upd),
        "angular_slope": layer_slope(ang),
        "final_rms": float(states[-1].float().pow(2).mean().sqrt()),
    }


def short_training(model: torch.nn.Module, mcfg: ModelConfig, steps: int) -> dict:
    """``steps`` Adam updates on the default corpus (depthlab.train's task, optimiser and schedule).

    Returns the first and last training losses (nats/token) and whether every loss was finite.
    """

    tcfg = TrainConfig(**TRAIN, steps=steps)
    task = LMTask(tcfg)
    opt, model_losses = make_optimizer(model, tcfg), []
    sched = make_scheduler(opt, tcfg, mcfg.d_model)
    model.train()
    for step in range(1, steps + 1):
        batch = task.train_batch(step)
        logits = model(*batch.args)  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())
        model_losses.append(loss.item())
        if not math.isfinite(model_losses[-1]):
            break  # diverged: stop before a non-finite update reaches the weights
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    finite = all(math.isfinite(v) for v in model_losses)
    return {"first_loss": model_losses[0], "last_loss": model_losses[-1], "finite": finite, "steps": steps}


def measure(wrap: str, n_layers: int, steps: int, tokens: torch.Tensor) -> dict:
    """Profiles of one (wrap, depth) at init and after ``steps`` updates, with the run's losses."""
    torch.manual_seed(0)
    mcfg = ModelConfig(
        n_layers=n_layers, wrap=wrap, activation_checkpointing=n_layers >= CHECKPOINT_FROM, **MODEL
    )
    model = build_model(mcfg)
    start = time.perf_counter()
    at_init = profile(model, tokens)
    run = short_training(model, mcfg, steps)
    trained = profile(model, tokens)
    return {"init": at_init, "trained": trained, "run": run, "seconds": time.perf_counter() - start}


@register("collapse")
def reproduce_collapse(quick: bool = False, out_dir: str | None = None) -> Reproduction:
    """Pre-LN at hundreds of layers: late layers' contribution vanishes; DeepNorm's stays (seed 002)."""

    steps, depths = (STEPS_QUICK, DEPTHS_QUICK) if quick else (STEPS, DEPTHS)
    tokens = LMTask(TrainConfig(**TRAIN)).val_batches()[0].args[0]  # (8, 32): a fixed validation batch
    data = {"depths": list(depths), "steps": steps, "model": MODEL, "train": TRAIN, "runs": {}}
    for wrap in WRAPS:
        data["runs"][wrap] = {str(L): measure(wrap, L, steps, tokens) for L in depths}
    plots = []
    if out_dir is not None:
        plots.append(plot_collapse(data, out_dir))
    return Reproduction("collapse", data, _checks(data), plots, source="seed 002; Wang et al. 2022")


def _fmt(values: list[float]) -> str:
    return " -> ".join(f"{v:.3g}" for v in values)


def _checks(data: dict) -> list[Check]:
    """Eight checks: update-ratio slope and last-quarter share, for pre-LN and DeepNorm, init and trained."""
    checks, Ls = [], data["depths"]
    span = f"L={', '.join(map(str, Ls))}"
    for phase in ("init", "trained"):
        runs = {w: [data["runs"][w][str(L)][phase] for L in Ls] for w in WRAPS}
        pre_k = [r["update_slope"] for r in runs["pre"]]
        dn_k = [r["update_slope"] for r in runs["deepnorm"]]
        checks.append(
            Check(
                f"pre-LN update ratio ~ l^k ({phase}, {span})",
                f"k <= {DECAY:g} (decays like l^-1/2)",
                "k = " + _fmt(pre_k),
                all(k <= DECAY for k in pre_k),
            )
        )
        checks.append(
            Check(
                f"DeepNorm update ratio ~ l^k ({phase})",
                f"|k| < {-DECAY:g} (flat in l)",
                "k = " + _fmt(dn_k),
                all(abs(k) < -DECAY for k in dn_k),
            )
        )
        last = [r["shares"]["last_quarter"] for r in runs["pre"]]
        first = runs["pre"][-1]["shares"]["first_quarter"]
        checks.append(
            Check(
                f"pre-LN last quarter's share of x_L ({phase})",
                f"falls with L; < first quarter's at L={Ls[-1]}",
                f"{_fmt(last)} (first quarter {first:.3g})",
                all(b < a for a, b in zip(last, last[1:])) and last[-1] < first,
            )
        )
        dn = [r["shares"]["last_quarter"] for r in runs["deepnorm"]]
        ok = dn[0] > 0 and all(SHARE_FLAT[0] <= v / dn[0] <= SHARE_FLAT[1] for v in dn)
        checks.append(
            Check(
                f"DeepNorm last quarter's share of x_L ({phase})",
                f"within [{SHARE_FLAT[0]:.2g}, {SHARE_FLAT[1]:.2g}] x L={Ls[0]}'s",
                _fmt(dn),
                ok,
            )
        )
    return checks


def plot_collapse(data: dict, out_dir: str) -> str:
    """Three panels against relative depth l/L: update ratio, angular distance, cumulative share C(l).

    Colour = wrapping, shade = depth, solid = at init, dashed = after the short training run.
    Returns the PNG's path (out_dir/collapse.png).
    """
    fig, axes = new_figure(3, figsize=(14, 3.9))
    cmaps = {"pre": matplotlib.colormaps["Blues"], "deepnorm": matplotlib.colormaps["Oranges"]}
    keys = (
        ("update_ratio", "update ratio ||x_l - x_(l-1)|| / ||x_(l-1)||", True),
        ("angular_distance", "angular distance arccos(cos) / pi", True),
        ("cumulative_share", "cumulative share C(l) = <x_l, x_L> / ||x_L||^2", False),
    )
    for ax, (key, ylabel, log) in zip(axes, keys):
        for wrap in WRAPS:
            for i, L in enumerate(data["depths"]):
                colour = cmaps[wrap](0.45 + 0.5 * i / max(1, len(data["depths"]) - 1))
                for phase, ls in (("init", "-"), ("trained", "--")):
                    ys = data["runs"][wrap][str(L)][phase][key]
                    first = 0 if key == "cumulative_share" else 1  # C starts at the embedding, l = 0
                    xs = [(first + j) / L for j in range(len(ys))]
                    label = f"{wrap} L={L}" if phase == "init" else None
                    ax.plot(xs, ys, ls=ls, color=colour, lw=1.2, label=label)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("relative depth l / L")
        ax.set_ylabel(ylabel, fontsize=8)
    axes[2].axvline(0.75, color="grey", lw=0.8, ls=":")
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(
        f"pre-LN vs DeepNorm by depth: solid = init, dashed = after {data['steps']} updates "
        "(last quarter's share = 1 - C(0.75 L))",
        fontsize=10,
    )
    return save(fig, out_dir, "collapse")
