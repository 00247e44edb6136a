"""What the residual-topology claims share: one training run with its telemetry kept, the compact row a
claim decides on, and the small fits the decisions read.

The three claims (:mod:`~depthlab_lab.reproduce.claims.hc_gain`,
:mod:`~depthlab_lab.reproduce.claims.topology_stream`, :mod:`~depthlab_lab.reproduce.claims.value_residual`)
train decoders of the small regime (:mod:`depthlab_lab.reproduce.lm_runs`) with a topology as the wrapping,
at widths 32 to 128 and depths up to 48, and decide on numbers read from each run: the composite gain the
watcher logs (:mod:`depthlab.probe.topology`), the stream's rms per layer on a held-out batch, the
validation curve. Each run is reduced to one *row* (a JSON-able dict) as soon as it is trained, by the
claim's ``row`` function; the claim's ``decide`` function reads rows only. So the same decision is made
by ``depthlab reproduce NAME`` (which trains, or loads from the run cache, every run) and by the page
(:mod:`depthlab_lab.docgen.reproductions_topologies`), which reads the rows kept in the committed run
record (:mod:`depthlab_lab.reproduce.topology_record`).

Every run trains through the run cache (:mod:`depthlab_lab.reproduce.run_cache`), like every claim's; the
loop's logged records are kept here (the shared :class:`~depthlab_lab.reproduce.lm_runs.Run` drops the
topology records the first claim reads).
"""

from __future__ import annotations

import math

import torch

from depthlab.config import ModelConfig
from depthlab.model import build_model
from depthlab.probe.stats import stream_rms
from depthlab_lab.reproduce import run_cache
from depthlab_lab.reproduce.lm_runs import Run, _summarise, configs, lm_batches

# How the registrations' cost estimates were made (said in their notes).
COST = (
    "Cost, estimated by `python -m depthlab_lab.reproduce.topology_record plan` before the runs (each "
    "design's training step timed here, the best of three repeats, x 1.25 for the loop's telemetry, the "
    "evaluations counted; two plans a minute apart on this shared machine, load about 3 on 2 cores): "
)


def spec(design: str, depth: int, width: int, train: dict) -> tuple[dict, dict]:
    """(model overrides, train overrides) of one setting of the small regime: ``design`` as the wrapping
    at ``depth`` layers and d_model ``width`` (4 heads at every width, as on the scale ladder)."""
    return {"wrap": design, "n_layers": depth, "d_model": width}, dict(train)


def label(design: str, depth: int, width: int, seed: int) -> str:
    """e.g. 'hc 48L d32 (seed 0)'."""
    return f"{design} {depth}L d{width} (seed {seed})"


def train_one(
    name: str, model: dict, train: dict, scale: str = "small"
) -> tuple[Run, list[dict], ModelConfig]:
    """Train (or load from the run cache in use) one run: (its :class:`Run` summary, the loop's logged
    records, the model config). ``name`` labels the run."""
    mcfg, tcfg = configs(model, train, scale)
    got = run_cache.train_cached(mcfg, tcfg)
    run = _summarise(name, mcfg, tcfg, got.result, got.seconds)
    run.commit, run.loaded = got.commit, got.loaded
    return run, list(got.result.metrics or []), mcfg


def base_row(run: Run) -> dict:
    """The fields every row carries (design, depth, width, seed, outcome, losses), read from ``run``; a
    non-finite loss is None."""
    return {
        "design": run.model_cfg["wrap"],
        "depth": run.model_cfg["n_layers"],
        "width": run.model_cfg["d_model"],
        "seed": run.seed,
        "outcome": run.outcome,
        "val_loss": finite_or_none(run.val_loss),
        "final_train_loss": finite_or_none(run.final_train_loss),
        "unigram_loss": finite_or_none(run.unigram_loss),
        "vocab_size": run.model_cfg.get("vocab_size", 256),
    }


def as_run(row: dict) -> Run:
    """The :class:`Run` a row stands for, as the shared rules read it (final loss, trained or not)."""
    nan = float("nan")
    return Run(
        label(row["design"], row["depth"], row["width"], row["seed"]),
        {"vocab_size": row.get("vocab_size", 256), "n_layers": row["depth"], "wrap": row["design"]},
        {"seed": row["seed"]},
        row["outcome"],
        None,
        nan if row["val_loss"] is None else row["val_loss"],
        nan if row["final_train_loss"] is None else row["final_train_loss"],
        row["unigram_loss"],
        0.0,
    )


def finite_or_none(v) -> float | None:
    """``v`` as a float, or None when it is missing or not finite (the record is strict JSON)."""
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def slope(xs, ys) -> float:
    """The least-squares slope of ``ys`` on ``xs`` over the pairs where both are finite; nan with fewer
    than two such pairs or no spread in x."""
    pairs = [(float(x), float(y)) for x, y in zip(xs, ys) if _finite(x) and _finite(y)]
    if len(pairs) < 2:
        return math.nan
    mx = sum(x for x, _ in pairs) / len(pairs)
    my = sum(y for _, y in pairs) / len(pairs)
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    if sxx == 0:
        return math.nan
    return sum((x - mx) * (y - my) for x, y in pairs) / sxx


def _finite(v) -> bool:
    return v is not None and math.isfinite(float(v))


def log10_or_nan(v) -> float:
    """log10 of a positive finite value; nan otherwise."""
    return math.log10(v) if _finite(v) and v > 0 else math.nan


def find(rows: list[dict], **fields) -> dict | None:
    """The row whose fields equal ``fields`` (None when it is not there: a run not done yet)."""
    for row in rows:
        if all(row.get(k) == v for k, v in fields.items()):
            return row
    return None


def paired(rows: list[dict], seeds, value, **fields) -> list[float]:
    """``value(row_of_seed)`` for each seed whose row with ``fields`` exists (missing seeds left out)."""
    out = []
    for s in seeds:
        row = find(rows, seed=s, **fields)
        if row is not None:
            out.append(value(row))
    return out


@torch.no_grad()
def rms_profile(model: torch.nn.Module, tokens: torch.Tensor) -> list[float | None]:
    """rms of the stream at every layer boundary (0: the embedding entering layer 1, L: the top, before
    the final norm) of ``model`` on ``tokens`` (B, T), in eval mode: the stream each topology reports
    (:mod:`depthlab.probe.topology`: DenseFormer's Y_i, AttnRes's last aggregate, pre-LN's x_i); None
    where it is not finite."""
    model.eval()
    _, states = model(tokens, return_states=True)
    return [finite_or_none(stream_rms(s)) for s in states]


def probe_tokens(mcfg: ModelConfig, seed: int, batch: int, seq: int) -> torch.Tensor:
    """A held-out batch (validation split, windows drawn with ``seed``): (batch, min(seq, max_len))."""
    return lm_batches(1, batch, min(seq, mcfg.max_len), seed)[0][:, :-1]


def init_model(mcfg: ModelConfig, seed: int) -> torch.nn.Module:
    """The model a run of ``seed`` starts from (the training loop seeds torch, then builds), built without
    touching the global random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_model(mcfg)
