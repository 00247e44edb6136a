"""The claim reproductions' training runs: the regime of each scale, a cached way to train in it, and
the per-seed numbers the results are decided on.

Scales: ``small`` is the tiny regime (:mod:`depthlab.train.regimes`) at lr 1e-3: in it a 24-layer post-LN
model without warmup ends at the unigram loss while pre-LN trains, in seconds on two cores. ``large``
is the d_model 256 regime of the same module, for a GPU, not a CPU night (``benchmarks/gpu.py
--reproduce --dry-run`` prints its plan). Each claim overrides what its source varies (wrapping, depth,
warmup, learning rate, steps, seed).

``train_run`` memoises on the resolved configs, so that ``depthlab reproduce all`` trains a
configuration that two claims share only once (training is deterministic for a given seed), and trains
through the run cache (:mod:`depthlab_lab.reproduce.run_cache`): a run stored by an earlier sitting is
loaded, not trained again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.corpus import load_corpus
from depthlab.errors import ConfigError
from depthlab.progress import Progress, TimeLeft, say
from depthlab.train.regimes import LARGE_LM_MODEL, LARGE_LM_TRAIN, TINY_LM_MODEL, TINY_LM_TRAIN
from depthlab.watch.outcome import STALL_MARGIN
from depthlab_lab.reproduce import cost, run_cache
from depthlab_lab.reproduce.reproduction import Check, seeded_check, with_revision

# The shared regimes at lr 1e-3; copies, so that a claim or a test may change them.
TINY_MODEL = dict(TINY_LM_MODEL)
TINY_TRAIN = {**TINY_LM_TRAIN, "lr": 1e-3}
LARGE_MODEL = dict(LARGE_LM_MODEL)
LARGE_TRAIN = {**LARGE_LM_TRAIN, "lr": 1e-3}
NO_ATTN_SKIP = ("cross", "ffn")  # the 48-layer skip ablation: the attention sublayer's skip removed


def base(scale: str) -> tuple[dict, dict]:
    """(model fields, train fields) of ``scale``: "small" (the tiny regime) or "large"."""
    bases = {"small": (TINY_MODEL, TINY_TRAIN), "large": (LARGE_MODEL, LARGE_TRAIN)}
    if scale not in bases:
        raise ConfigError("scale", scale, "small or large")
    return bases[scale]


@dataclass
class Run:
    """What a claim needs from one training run: its outcome, losses, curve and per-stream telemetry.

    ``curve`` is [(step, train loss)] at every logged step; ``layers_first`` / ``layers_last`` are the
    telemetry's per-stream rows (index 0 = the stream entering layer 1) at the first and last logged
    step; ``grad_by_step`` is [(step, [||d loss / d stream_i|| for i = 0..L])]. ``model`` is the trained
    module (not serialised).
    """

    label: str
    model_cfg: dict
    train_cfg: dict
    outcome: str
    reason: str | None
    val_loss: float
    final_train_loss: float
    unigram_loss: float | None
    seconds: float
    curve: list = field(default_factory=list)
    layers_first: list = field(default_factory=list)
    layers_last: list = field(default_factory=list)
    grad_by_step: list = field(default_factory=list)
    model: torch.nn.Module | None = None
    step: int | None = None  # the update at which it was found stalled or diverged (None: trained)
    commit: str | None = None  # the git commit it was trained at (None: not known)
    loaded: bool = False  # whether it came from the run cache rather than being trained here

    def to_dict(self) -> dict:
        """The JSON-able summary (no model, no per-step gradients)."""
        keys = (
            "label",
            "outcome",
            "reason",
            "step",
            "val_loss",
            "final_train_loss",
            "unigram_loss",
            "seconds",
            "commit",
            "loaded",
        )
        d = {k: _num(getattr(self, k)) for k in keys}
        d["curve"] = [[s, _num(v)] for s, v in self.curve]
        d["config"] = {"model": self.model_cfg, "train": self.train_cfg}
        return d

    @property
    def n_layers(self) -> int:
        return self.model_cfg["n_layers"]

    @property
    def seed(self) -> int:
        return self.train_cfg.get("seed", 0)

    def short(self) -> str:
        """e.g. '2.74 trained' (validation loss in nats, then the outcome)."""
        return f"{fmt_loss(self.val_loss)} {self.outcome}"


_CACHE: dict[tuple[str, str], Run] = {}


def configs(label_model: dict, label_train: dict, scale: str = "small") -> tuple[ModelConfig, TrainConfig]:
    """The regime of ``scale`` with the given overrides, validated."""
    model, train = base(scale)
    return ModelConfig(**{**model, **label_model}), TrainConfig(**{**train, **label_train})


def is_cached(mcfg: ModelConfig, tcfg: TrainConfig) -> bool:
    """Whether this process already trained (mcfg, tcfg)."""
    return (mcfg.config_hash(), tcfg.config_hash()) in _CACHE


def is_done(mcfg: ModelConfig, tcfg: TrainConfig) -> bool:
    """Whether (mcfg, tcfg) costs no training: trained by this process or stored in the run cache."""
    return is_cached(mcfg, tcfg) or run_cache.is_stored(mcfg, tcfg)


def train_run(
    label: str, model: dict, train: dict | None = None, quiet: bool = False, scale: str = "small"
) -> Run:
    """Train the regime of ``scale`` with these overrides once per process (or load it from the run
    cache in use); returns the :class:`Run`.

    ``model`` / ``train`` are ModelConfig / TrainConfig field overrides.
    """

    mcfg, tcfg = configs(model, train or {}, scale)
    key = (mcfg.config_hash(), tcfg.config_hash())
    if key in _CACHE:
        cached = _CACHE[key]
        return Run(**{**cached.__dict__, "label": label})
    got = run_cache.train_cached(mcfg, tcfg)
    run = _summarise(label, mcfg, tcfg, got.result, got.seconds)
    run.commit, run.loaded = got.commit, got.loaded
    _CACHE[key] = run
    if not got.loaded:
        _advance(mcfg, tcfg, got.seconds)
    if not quiet:
        where = "(loaded from the run cache)" if got.loaded else ""
        _log(f"  {label:44} {run.short():18} {run.seconds:5.1f} s {where}".rstrip())
    return run


def train_seeds(label: str, model: dict, train: dict, seeds, scale: str = "small") -> list[Run]:
    """One :class:`Run` per seed (the TrainConfig seed: initial weights and batch order)."""
    return [train_run(f"{label} (seed {s})", model, {**train, "seed": s}, scale=scale) for s in seeds]


def final_loss(run: Run) -> float:
    """The run's validation loss; a diverged run (its outcome, whatever loss it still reported: a run
    can diverge at step 21 and be evaluated finite later) or a run that ended without one counts as the
    loss of a uniform prediction over the vocabulary, ln V, the level of a model that learned nothing."""
    if run.outcome != "diverged" and math.isfinite(run.val_loss):
        return run.val_loss
    return math.log(run.model_cfg.get("vocab_size", 256))


def capped_loss(run: Run) -> float:
    """:func:`final_loss` capped at ln V, the revised rule: a finite loss above a uniform guess (a stack
    still falling from a huge loss at init) counts as ln V, the level of a model that learned nothing."""
    return min(final_loss(run), math.log(run.model_cfg.get("vocab_size", 256)))


# The revision that caps a final loss at ln V (the revised column; the first registration's loss decides).
CAP_REVISION = "a final loss above ln V counts as ln V"


def loss_gap_check(claim: str, stated: str, pairs, **kw) -> Check:
    """A check on the per-seed final-loss differences a - b of ``pairs`` [(a, b)], as first registered
    (:func:`final_loss`), with the differences of losses capped at ln V (:func:`capped_loss`) as the
    revised column, where the cap changes a loss (else the revision does not touch the check)."""
    pairs = list(pairs)
    first = seeded_check(claim, stated, [final_loss(a) - final_loss(b) for a, b in pairs], **kw)
    if all(capped_loss(x) == final_loss(x) for pair in pairs for x in pair):
        return first
    revised = seeded_check(claim, stated, [capped_loss(a) - capped_loss(b) for a, b in pairs], **kw)
    return with_revision(first, revised, CAP_REVISION)


def below_unigram(run: Run) -> float:
    """final_loss - unigram loss, nats: negative once the model learned more than byte frequencies."""
    return final_loss(run) - (run.unigram_loss if run.unigram_loss is not None else math.nan)


def _summarise(label: str, mcfg: ModelConfig, tcfg: TrainConfig, result, seconds: float) -> Run:
    records = list(result.metrics or [])
    with_layers = [r for r in records if r.get("layers")]
    return Run(
        label=label,
        model_cfg=mcfg.to_dict(),
        train_cfg=tcfg.to_dict(),
        outcome=result.outcome,
        reason=result.reason,
        val_loss=_float(result.val_loss),
        final_train_loss=_float(result.final_train_loss),
        unigram_loss=_float(result.unigram_loss),
        seconds=seconds,
        curve=[(r["step"], _float(r["loss"])) for r in records if r.get("loss") is not None],
        layers_first=with_layers[0]["layers"] if with_layers else [],
        layers_last=with_layers[-1]["layers"] if with_layers else [],
        grad_by_step=[(r["step"], [row.get("grad_norm") for row in r["layers"]]) for r in with_layers],
        model=getattr(result, "model", None),
        step=result.step,
    )


def clear_cache() -> None:
    """Forget every memoised run (tests use it to measure a fresh run)."""
    _CACHE.clear()


@torch.no_grad()
def eval_loss(model: torch.nn.Module, batches: list[torch.Tensor]) -> float:
    """Mean next-token cross-entropy (nats) of ``model`` over token batches, each (B, T)."""
    model.eval()
    total = 0.0
    for tokens in batches:
        logits = model(tokens[:, :-1])  # (B, T-1, V)
        total += float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()))
    return total / len(batches)


def lm_batches(n: int, batch_size: int, seq_len: int, seed: int, split: str = "val") -> list[torch.Tensor]:
    """``n`` batches of (batch_size, seq_len + 1) byte tokens from the default corpus's ``split``.

    Windows start at positions drawn with ``seed``; the +1 gives next-token targets for seq_len inputs.
    """

    corpus = load_corpus(None, seq_len)
    data = corpus.val if split == "val" else corpus.train  # 1-D uint8 tensors of bytes
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=g)
        out.append(torch.stack([data[s : s + seq_len + 1] for s in starts.tolist()]).long())
    return out


def fmt_loss(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "nan" if v is not None else "-"
    return f"{v:.2f}"


def _float(v) -> float:
    return float("nan") if v is None else float(v)


def _num(v):
    """A JSON-safe number: NaN and infinities become None."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _log(msg: str) -> None:
    say(msg)  # above the progress line, when one is drawn


def announce(name: str, specs, seeds, scale: str = "small") -> float:
    """Print the expected time of training ``specs`` [(model overrides, train overrides)], each with every
    seed of ``seeds``, at ``scale`` before it starts (:mod:`depthlab_lab.reproduce.cost`); returns the seconds.
    The time left follows the runs (:class:`depthlab.progress.TimeLeft`: the cost model's seconds per run,
    corrected by the run times measured as they finish), on a line redrawn on a terminal, else printed
    as a plain line at each tenth of the runs (:mod:`depthlab.progress`)."""
    planned = [configs(m, {**t, "seed": s}, scale) for m, t in specs for s in seeds]
    where = "in this process or the run cache" if run_cache.folder() else "in this process"
    seconds = cost.announce(name, planned, is_done, where)
    todo = {(m.config_hash(), t.config_hash()): (m, t) for m, t in planned if not is_done(m, t)}
    if _PROGRESS:
        _PROGRESS.pop().close()
    if todo:
        clock = TimeLeft({key: cost.run_seconds(m, t) for key, (m, t) in todo.items()})
        bar = Progress(len(todo), f"reproduce {name}", unit="run", clock=clock, plain=True)
        _PROGRESS.append(bar)
    return seconds


_PROGRESS: list[Progress] = []  # the announced runs' progress line while they train


def _advance(mcfg: ModelConfig, tcfg: TrainConfig, seconds: float | None = None) -> None:
    """One announced run trained in ``seconds``: the time left is corrected by it and the progress line
    moves on (and goes when the last one is done)."""
    if _PROGRESS:
        bar = _PROGRESS[0]
        key = (mcfg.config_hash(), tcfg.config_hash())
        if bar.clock is not None and key in bar.clock.expected and key not in bar.clock.done:
            bar.clock.finished(key, seconds if seconds is not None else bar.clock.expected[key])
        bar.advance()
        if bar.done >= bar.total:
            _PROGRESS.pop().close()


def outcomes(runs: list[Run]) -> str:
    """The runs' outcome labels, e.g. 'outcomes trained/stalled/trained'."""
    return "outcomes " + "/".join(r.outcome for r in runs)


def paired_outcomes(without: list[Run], with_: list[Run]) -> str:
    """Two settings' outcome labels, e.g. 'outcomes without stalled/stalled, with trained/trained'."""
    labels = ("/".join(r.outcome for r in runs) for runs in (without, with_))
    return "outcomes without {}, with {}".format(*labels)


# The train package's stall level: a run "trained" when its loss ends more than this share below the
# unigram loss. The claims decide "trains" / "fails" on this level over seeds.
STALL_SHARE = STALL_MARGIN


def relative_to_unigram(run: Run) -> float:
    """final_loss / unigram loss - 1: below -STALL_SHARE the run learned more than byte frequencies."""
    return final_loss(run) / run.unigram_loss - 1


def all_trained(*groups: list[Run]) -> bool:
    """Whether every run of every group ended below the stall level (more than STALL_SHARE under the
    unigram loss): a "close" or "no worse" comparison means something only between trained runs (two
    stalled runs are close)."""
    return all(relative_to_unigram(r) < -STALL_SHARE for runs in groups for r in runs)


BOTH_TRAINED = "close and no worse need both sides trained"
