"""``depthlab advise``: one answer a user can act on, from the probe and the measured runs.

For a model (a ModelConfig, from flags, a file or a Hugging Face config), a learning rate, a warmup and
a budget of steps, :func:`advise` returns an :class:`Advice`: the probability that the run trains (the
predictor of :mod:`depthlab.doctor.predict`, calibrated on the measured runs), the safe learning-rate
range for this stack and warmup (:class:`~depthlab.doctor.limit.LrLimit`, the number the probe's verdict
and ``probe --compare`` print), the other wrappings ranked by their own probability with their safe
lr, the nearest measured runs and how many of them agree, whether the question lies inside what was
measured, and one line per mechanism the probe sees. The probe is the study worker's own: the run's
model at its seed, on its first batch (deterministic), so the numbers are those the atlas's runs had.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from depthlab.advise import track_record
from depthlab.advise.evidence import disagreements, load_atlas, shipped_hashes
from depthlab.advise.screen import against_limit, agreeing, render
from depthlab.config import WRAPPINGS, ModelConfig, TrainConfig
from depthlab.config_topology import TopologyOptions
from depthlab.doctor.atlas import Atlas, MeasuredRun
from depthlab.doctor.limit import LrLimit
from depthlab.doctor.lr_limit import limit_of, width
from depthlab.doctor.plateau import plateau_verdict
from depthlab.doctor.predict import Prediction, Query, p_trains
from depthlab.doctor.recipe import recipe
from depthlab.doctor.record import load_record
from depthlab.doctor.verdict import Verdict
from depthlab.errors import ConfigError
from depthlab.model.stack import uses_final_norm
from depthlab.probe.result import ProbeResult
from depthlab.study.grid import RunSpec
from depthlab.study.worker import probe_run
from depthlab.train.cost import probes_seconds

ALTERNATIVES = ("pre", "sandwich", "deepnorm", "post")  # ranked beside the user's own by default
LR_GRID = tuple(10 ** (k / 8) for k in range(-40, 1))  # 1e-5 to 1, 8 per decade: where P(trains) is scanned
LIKELY = 0.8  # the probability above which a learning rate is called likely to train


@dataclass(frozen=True)
class Option:
    """One wrapping of the user's stack: its probability of training at the user's lr, its safe lr, and
    the lr range where the predictor gives it at least ``LIKELY``."""

    wrap: str
    p_trains: float
    safe_lr: float | None
    likely: tuple[float, float] | None
    confident: bool
    note: str = ""  # "no final norm" where the plain stack drops the final norm the user's config sets

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True, repr=False)
class Advice:
    """What :func:`advise` found (see the module docstring); ``verdicts`` are the probe's. ``str()`` is the
    screen, ``repr()`` its answer in one line."""

    model: ModelConfig
    train: TrainConfig
    prediction: Prediction
    limit: LrLimit | None
    likely: tuple[float, float] | None
    options: tuple[Option, ...]
    verdicts: tuple[Verdict, ...]
    outside: tuple[str, ...]
    transfer: dict | None = None
    held_out: dict | None = None  # advise's record on held-out runs of this wrapping (track_record)
    seed_splits: tuple[tuple[MeasuredRun, ...], ...] = ()  # evidence settings that went both ways by seed
    # evidence settings where a user's store (--atlas) and the shipped atlas went opposite ways: (theirs, shipped)
    disagreements: tuple[tuple[tuple[MeasuredRun, ...], tuple[MeasuredRun, ...]], ...] = ()

    def format(self) -> str:
        """The screen ``depthlab advise`` prints (about 25 lines, the answer first)."""
        return render(self, LIKELY)

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        m, p = self.model, self.prediction
        safe = "" if self.limit is None else f", safe lr <= {self.limit.lr_limit:.2g}"
        return (f"<Advice {m.wrap} {m.n_layers}L d{m.d_model} at lr {self.train.lr:g}: {p.call} "
                f"(P(trains) = {p.p_trains:.2f}){safe}>")  # fmt: skip

    @property
    def evidence(self) -> tuple[tuple[float, MeasuredRun], ...]:
        return self.prediction.neighbours

    def agreeing(self) -> int:
        """How many of the nearest measured runs went the way the call says."""
        return agreeing(self.prediction)

    def to_dict(self) -> dict:
        """The advice as JSON-able data (``depthlab advise --json``)."""
        return {
            "model": self.model.to_dict(),
            "train": {
                k: getattr(self.train, k) for k in ("lr", "warmup", "steps", "batch_size", "seq_len", "seed")
            },
            "recipe": recipe(self.model, self.train),  # what else the run sets; its evidence sets the same
            "p_trains": self.prediction.p_trains,
            "call": self.prediction.call,
            "confident": self.prediction.confident,
            "why_not_confident": self.prediction.why_not,
            "limit": None if self.limit is None else self.limit.to_dict(),
            "likely_lr": self.likely,
            "alternatives": [o.to_dict() for o in self.options],
            "evidence": [
                dict(dataclasses.asdict(r), distance=d, from_store=r.config_hash not in shipped_hashes())
                for d, r in self.evidence
            ],
            "agreeing": self.agreeing(),
            "trained_after_budget": self.prediction.later,  # of the evidence: left the plateau after the steps
            "nearest_runs_call": self.prediction.nearest_call,
            "nearest_escape": self.prediction.escape.to_dict(),
            "seed_splits": [[dataclasses.asdict(r) for r in runs] for runs in self.seed_splits],
            "disagreements": [
                {
                    "store": [dataclasses.asdict(r) for r in mine],
                    "atlas": [dataclasses.asdict(r) for r in theirs],
                }
                for mine, theirs in self.disagreements
            ],
            "outside": list(self.outside),
            "verdicts": [v.to_dict() for v in self.verdicts],
            "transfer": self.transfer,
            "held_out": self.held_out,
        }


def probe_for(model: ModelConfig, train: TrainConfig, full: bool = True) -> ProbeResult:
    """The study worker's at-init probe of this run (``full`` False: only what the limit reads)."""
    return probe_run(RunSpec(model, train), light=not full)


def predict(
    result: ProbeResult, model: ModelConfig, train: TrainConfig, atlas: Atlas, record: dict
) -> tuple[Prediction, LrLimit | None]:
    """The prediction for this run from its probe (taken at ``train.lr``) and the atlas. A stack whose
    residual is a state of several streams (hyper-connections, mHC) is not a confident call: every
    measured run, and every limit, is of one stream (unless the atlas holds runs of its wrapping: a user's
    own, added with ``--atlas``)."""
    found = limit_of(result, record)
    limit = None if found is None else found[0]
    q = Query.for_run(model, train)
    prediction = p_trains(record["predictor"], limit, q, atlas)
    state = (result.config.get("stack") or {}).get("state")
    if state and not any(r.wrap == model.wrap for _, r in prediction.neighbours):
        why = (f"its residual is {state['design']}'s state ({state['state'].split(',')[0]}), and the limit and "
               "every measured run are of one stream")  # fmt: skip
        prediction = dataclasses.replace(prediction, confident=False, why_not=why)
    return prediction, limit


def run_of(
    result: ProbeResult, model: ModelConfig | None = None, optimiser: dict | None = None
) -> tuple[ModelConfig, TrainConfig] | None:
    """The run a probe was given (its model, lr, warmup, batch and budget; without ``--steps`` the default
    budget), where advise can make a call on it; None where it cannot: no lr, or not a depthlab decoder
    language model of one stream (every measured run is one). ``model``: the depthlab config of a model
    the probe took as transformers built it (``probe --hf``), in place of the one the result names;
    ``optimiser``: the run's optimiser and schedule (TrainConfig fields: ``{"schedule": "cosine"}``), which
    the probe's first update does not read but the call does (default: depthlab train's)."""
    pr = result.config["probe"]
    m = model.to_dict() if model is not None else result.config.get("model") or {}
    if pr.get("lr") is None or m.get("arch") != "decoder" or result.config["stack"].get("state"):
        return None
    try:
        model = model or ModelConfig.from_dict(m)
    except (ConfigError, KeyError, TypeError, ValueError):  # a model depthlab did not build
        return None
    batch, seq = pr["batch_shape"][:2]
    steps = pr.get("steps") or TrainConfig().steps
    return model, TrainConfig(
        lr=pr["lr"],
        warmup=pr.get("warmup") or 0,
        steps=steps,
        batch_size=batch,
        seq_len=seq,
        **(optimiser or {}),
    )


def expect(
    result: ProbeResult,
    atlas: Atlas | None = None,
    record: dict | None = None,
    model: ModelConfig | None = None,
    optimiser: dict | None = None,
) -> Prediction | None:
    """The calibrated call on the run a probe was given (:func:`run_of`, ``model`` and ``optimiser`` as
    there), as :func:`advise` makes it: written into the probe as ``config["probe"]["expected"]`` and its
    plateau verdict judged by it (:func:`judge`). None, with the probe unchanged, where no call is made."""
    run = run_of(result, model, optimiser)
    if run is None:
        return None
    model, train = run
    atlas = Atlas.load() if atlas is None else atlas
    record = load_record() if record is None else record
    prediction, limit = predict(result, model, train, atlas, record)
    judge(result, prediction, train.steps, record, limit, recipe(model, train))
    return prediction


def judge(
    result: ProbeResult,
    prediction: Prediction,
    steps: int,
    record: dict,
    limit: LrLimit | None = None,
    sets: str = "",
) -> None:
    """Write ``prediction`` for a budget of ``steps`` (and what the run ``sets``: its recipe,
    :mod:`depthlab.doctor.recipe`) into the probe (``config["probe"]["expected"]``) and judge its plateau
    verdict's budget by it (:func:`depthlab.doctor.plateau.plateau_verdict`): one probability of training
    per run, in the probe, ``--compare`` and advise alike."""
    result.config["probe"]["expected"] = {
        "recipe": sets,
        "p_trains": prediction.p_trains,
        "call": prediction.call,
        "said": prediction.said,
        "steps": steps,
        "confident": prediction.confident,
        "why_not_confident": prediction.why_not,
        "nearest_runs": len(prediction.neighbours),
        "nearest_escape": prediction.escape.to_dict(),  # when the nearest runs left the unigram plateau
        "against_limit": against_limit(limit, result.config["probe"]["lr"], prediction),
        "safe_lr": None if limit is None else limit.lr_limit,  # the limit the call weighed
    }
    verdicts = []
    for v in result.verdicts:
        if v.code == "plateau":
            v = plateau_verdict(result, record, width(result), prediction, steps) or v
        verdicts.append(v)
    result.verdicts = sorted(verdicts, key=lambda v: v.severity)


def likely_range(
    limit: LrLimit | None, model: ModelConfig, train: TrainConfig, atlas: Atlas, record: dict
) -> tuple[float, float] | None:
    """The widest run of learning rates where P(trains) >= ``LIKELY`` for this stack, warmup and budget
    (the probe's quantities scale with lr, so no new probe is needed): found on :data:`LR_GRID`, each
    end then bisected (in ln lr) to where the probability crosses and given to two significant digits,
    rounded inward; the run's own lr, where it is likely and next to the range, widens it (so a run
    called likely has its lr inside the range said). None where there is none."""
    if limit is None:
        return None

    asked = Query.for_run(model, train)  # its recipe read once; only the lr moves below

    def likely(lr: float) -> bool:
        q = dataclasses.replace(asked, lr=lr)
        return p_trains(record["predictor"], limit, q, atlas).p_trains >= LIKELY

    hits = [likely(lr) for lr in LR_GRID]
    runs, start = [], None
    for i, hit in enumerate([*hits, False]):
        if hit and start is None:
            start = i
        if not hit and start is not None:
            runs.append((start, i - 1))
            start = None
    if not runs:
        return None
    lo, hi = max(runs, key=lambda r: r[1] - r[0])
    low = LR_GRID[lo] if lo == 0 else _crossing(likely, LR_GRID[lo - 1], LR_GRID[lo])
    high = LR_GRID[hi] if hi == len(LR_GRID) - 1 else _crossing(likely, LR_GRID[hi + 1], LR_GRID[hi])
    ends = _two_digits(low, up=True), _two_digits(high, up=False)
    if ends[0] > ends[1]:  # too narrow to say in two digits
        ends = low, high
    near = LR_GRID[max(lo - 1, 0)] <= train.lr <= LR_GRID[min(hi + 1, len(LR_GRID) - 1)]
    if near and likely(train.lr):  # the run's own lr, between an end and where its digits cut it off
        ends = min(ends[0], train.lr), max(ends[1], train.lr)
    return ends


def _crossing(likely, miss: float, hit: float, halvings: int = 6) -> float:
    """The likely lr nearest where ``likely`` turns false, between ``miss`` (not likely) and ``hit``
    (likely), by bisection in ln lr (6 halvings of a grid step: within 0.5%)."""
    for _ in range(halvings):
        mid = math.sqrt(miss * hit)
        miss, hit = (miss, mid) if likely(mid) else (mid, hit)
    return hit


def _two_digits(x: float, up: bool) -> float:
    """``x`` to two significant digits, rounded up (``up``) or down: an end of a range, rounded inward."""
    scale = 10 ** (math.floor(math.log10(x)) - 1)
    units = math.ceil(x / scale - 1e-9) if up else math.floor(x / scale + 1e-9)  # 1e-9: 71.0000001 is 71
    return float(f"{units * scale:.2g}")


def check_schedule(train: TrainConfig, d_model: int | None = None) -> None:
    """ConfigError for a schedule the call cannot read its learning rate from: Noam's ``lr`` multiplies
    (d_model warmup)^-0.5, where the probe's first update and the limit read ``lr`` as the peak rate."""
    if train.schedule == "noam":
        peak = "" if d_model is None else f" (here {(d_model * train.warmup) ** -0.5:.2g} x lr)"
        raise ConfigError("schedule", "noam", f"a schedule whose lr is the peak rate: noam's peak is lr x (d_model x "
                          f"warmup)^-0.5{peak}; ask about that peak with --schedule linear")  # fmt: skip


def check_alternatives(model: ModelConfig, alternatives) -> tuple[str, ...]:
    """``alternatives``, each once, in order; ConfigError naming ``alternatives`` (``--alternatives`` on the
    command line) for a wrapping that ``model`` cannot be rewired to; TypeError where ``alternatives`` is
    no collection of wrapping names."""
    if isinstance(alternatives, (str, bytes)) or not isinstance(alternatives, (tuple, list)):
        raise TypeError(f"alternatives must be wrappings: a tuple or list of names or one comma-separated "
                        f"string, not {type(alternatives).__name__}")  # fmt: skip
    for wrap in alternatives:
        try:
            rewired(model, wrap)
        except ConfigError as e:
            raise ConfigError("alternatives", wrap, e.allowed) from None
    return tuple(dict.fromkeys(alternatives))  # a wrapping named twice is probed and ranked once


def final_norm_note(model: ModelConfig, other: ModelConfig) -> str:
    """'no final norm' (or 'final norm') where the alternative ``other`` (:func:`rewired` from ``model``)
    goes without the final norm (or with one) that ``model``'s own setting would give it, as
    ``--wrap`` with the same flags or ``--hf`` config does: its row is then another stack than that
    command's, and says so; "" where the two agree."""
    if other.final_norm == model.final_norm:
        return ""
    plain = uses_final_norm(other)
    if plain == uses_final_norm(dataclasses.replace(other, final_norm=model.final_norm)):
        return ""
    return "final norm" if plain else "no final norm"


def probed(model: ModelConfig, alternatives: tuple[str, ...]) -> tuple[tuple[str, ModelConfig], ...]:
    """The stacks :func:`advise` probes, in order, each as (wrapping, config): ``model`` itself (the full
    probe), then each of ``alternatives`` (:func:`check_alternatives`'s) but its own wrapping, rewired."""
    return ((model.wrap, model), *((w, rewired(model, w)) for w in alternatives if w != model.wrap))


def expected_seconds(model: ModelConfig, train: TrainConfig, alternatives: tuple[str, ...]) -> dict | None:
    """{wrapping: expected seconds of its probe} for the stacks :func:`advise` probes (:func:`probed`), from
    step times measured on this machine now; None where the probes are quick or cannot be timed
    (:func:`depthlab.train.cost.probes_seconds`)."""
    return probes_seconds([(w, m, i > 0) for i, (w, m) in enumerate(probed(model, alternatives))], train)


def rewired(model: ModelConfig, wrap: str) -> ModelConfig:
    """``model`` as an alternative wrapping ``wrap``: a final-norm setting that only says what the model's
    own wrapping does anyway (``on`` for pre-LN) is left to ``wrap``'s own, so that the alternative is
    the plain stack of that wrapping, not one with a final norm it does not have; a residual topology's
    option that ``wrap`` does not read (``streams`` of hc, DenseFormer's dilation) goes back to its
    default, so that the model's own topology never rules out the plain wrappings beside it."""
    if uses_final_norm(model) == uses_final_norm(dataclasses.replace(model, final_norm="auto")):
        model = dataclasses.replace(model, final_norm="auto")
    known = WRAPPINGS.get(wrap) if isinstance(wrap, str) else None
    reads = getattr(known, "OPTIONS", None)  # None for no wrapping: refused below, by its name
    if reads is not None:
        unread = {f.name: f.default for f in dataclasses.fields(TopologyOptions) if f.name not in reads}
        model = dataclasses.replace(model, topology=dataclasses.replace(model.topology, **unread))
    return dataclasses.replace(model, wrap=wrap)


def advise(
    model: ModelConfig,
    train: TrainConfig,
    atlas: Atlas | str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    alternatives: tuple[str, ...] | str = ALTERNATIVES,
    record: dict | None = None,
    on_probed: Callable[[str], None] | None = None,
) -> Advice:
    """The advice for training ``model`` under ``train`` (its lr, warmup, steps, batch and seed).
    ``atlas``: the measured runs (default the shipped atlas), or a study store's path (or a list of them)
    whose finished runs join it; ``alternatives``: wrappings, or one comma-separated string of them;
    ``on_probed``: called with each wrapping once its stack is probed (:func:`probed`'s order)."""
    for name, value, cls in (("model", model, ModelConfig), ("train", train, TrainConfig)):
        if not isinstance(value, cls):
            raise TypeError(f"{name} must be a depthlab.{cls.__name__}, not {type(value).__name__}")
    check_schedule(train, model.d_model)
    if isinstance(alternatives, str):  # "pre, sandwich" as the command line takes it
        alternatives = tuple(w.strip() for w in alternatives.split(",") if w.strip())
    alternatives = check_alternatives(model, alternatives)  # each a stack this model can be: before any probe
    if atlas is not None and not isinstance(atlas, Atlas):
        atlas = load_atlas(atlas, name="atlas")  # a store's path, or a list: its runs join the shipped ones
    atlas = Atlas.load() if atlas is None else atlas
    record = load_record() if record is None else record
    done = on_probed or (lambda wrap: None)
    result = probe_for(model, train)
    done(model.wrap)
    prediction, limit = predict(result, model, train, atlas, record)
    judge(result, prediction, train.steps, record, limit, recipe(model, train))
    options = [_option(model.wrap, prediction, limit, model, train, atlas, record)]
    for wrap, other in probed(model, alternatives)[1:]:
        p, lim = predict(probe_for(other, train, full=False), other, train, atlas, record)
        done(wrap)
        options.append(dataclasses.replace(_option(wrap, p, lim, other, train, atlas, record),
                                           note=final_norm_note(model, other)))  # fmt: skip
    options.sort(key=lambda o: (-o.p_trains, o.wrap))
    found = limit_of(result, record)
    return Advice(
        model=model,
        train=train,
        prediction=prediction,
        limit=limit,
        likely=options[[o.wrap for o in options].index(model.wrap)].likely,
        options=tuple(options),
        verdicts=tuple(v for v in result.verdicts if v.level != "ok"),
        outside=tuple(found[2] if found else ()),
        held_out=track_record.for_wrap(model.wrap),
        seed_splits=seed_splits(atlas, prediction.neighbours),
        disagreements=disagreements(atlas, prediction.neighbours),
    )


def seed_splits(atlas: Atlas, evidence) -> tuple[tuple[MeasuredRun, ...], ...]:
    """The settings of the evidence rows (nearest first, each once) that the atlas measured at several
    seeds with both outcomes: where the seed alone decides, no call is sure."""
    out, seen = [], set()
    for _, run in evidence:
        if run.setting() not in seen:
            seen.add(run.setting())
            split = atlas.seed_split(run)
            if split:
                out.append(split)
    return tuple(out)


def _option(wrap, prediction, limit, model, train, atlas, record) -> Option:
    likely = likely_range(limit, model, train, atlas, record)
    safe = None if limit is None or not math.isfinite(limit.lr_limit) else limit.lr_limit
    return Option(wrap, prediction.p_trains, safe, likely, prediction.confident)
