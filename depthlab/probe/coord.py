"""Coordinate checks across depth or width: does each module's activation scale stay put as the model grows?

A coordinate check (Yang et al. 2021, microsoft/mup ``coord_check``; Dey et al. 2025 across depth)
trains the same model at several depths (or widths) for a few Adam steps and records, at every step and
for every module, the mean absolute coordinate of its output. Under a parametrization that transfers,
the curves against depth are flat; under one that does not, some grow or shrink as a power of the size.

Recorded per step t = 1..N (the forward of update t, so t = 1 is the model at init), per module:

- ``embedding``: the embedding's output x_0;
- ``attn``, ``ffn``: each sublayer's output (the module its wrapping declares as ``BRANCH_END``: F, or
  the norm after it in sandwich and reorder) before the parametrization's branch multiplier, as mup's
  and CompleteP's checks hook the sublayer module; its mean |coordinate| averaged over the layers;
- ``stream@L/4``, ``stream@L/2``, ``stream@L``: the residual stream after layer max(1, round(f L)), with
  its rms as well;
- ``logits``: the head's output.

Per module and step the slope of log(mean |x|) against log(size) is fitted per seed
(:func:`depthlab.fit.loglog_slope`) and summarised over seeds by a 95% t-interval
(:func:`depthlab.intervals.mean_interval`). The trend: ``flat`` when the interval lies inside the
band [-band, band] (registered at |slope| < 0.1: a 64x deeper model changes the scale by less than
64^0.1 = 1.5x), ``grows``/``shrinks`` when the whole interval is above/below 0 and leaves the band,
``unclear`` otherwise (more seeds would decide).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from depthlab.config import ModelConfig, TrainConfig
from depthlab.corpus import text_batch
from depthlab.errors import InputError, as_flags, option
from depthlab.fit import loglog_slope
from depthlab.intervals import mean_interval
from depthlab.model import build_model
from depthlab.model.memory import available_memory, check_memory, estimate_memory
from depthlab.model.param_groups import param_groups
from depthlab.model.parametrization import ALPHA, SCALES_WIDTH

BAND = 0.1  # |slope| below this is flat (see the module docstring)
# Adam steps in all (models x steps each). A coordinate check needs tens of steps on a few dozen models;
# a request beyond this is a typo or a misunderstanding, refused before a model is built.
MAX_STEPS = 1_000_000
STREAM_AT = (("stream@L/4", 0.25), ("stream@L/2", 0.5), ("stream@L", 1.0))
MODULES = ("embedding", "attn", "ffn", *(name for name, _ in STREAM_AT), "logits")


@dataclass(frozen=True)
class CoordSpec:
    """What to check: ``axis`` "depth" (``sizes`` are depths at width ``fixed``) or "width" (widths at
    depth ``fixed``); the wrappings and parametrizations; ``steps`` of Adam at ``lr``; the seeds."""

    axis: str
    sizes: tuple[int, ...]
    fixed: int
    wraps: tuple[str, ...]
    params: tuple[str, ...]
    steps: int = 10
    lr: float = 1e-2
    seeds: tuple[int, ...] = (0, 1, 2)
    heads: int = 4
    batch_size: int = 8
    seq_len: int = 32
    band: float = BAND

    def __post_init__(self):
        if self.axis not in ("depth", "width"):
            raise InputError(f"axis must be depth or width, not {self.axis!r}")
        if len(set(self.sizes)) < 2:
            raise InputError(f"a coordinate check over {self.axis} needs at least two different {self.axis}s")
        if self.steps < 1:
            raise InputError(f"{option('steps')} {self.steps}: at least 1 (the check records each step)")
        if len(set(self.seeds)) < 2:  # the slopes' intervals are over seeds
            said = len(self.seeds) if as_flags() else tuple(self.seeds)
            raise InputError(f"{option('seeds')} {said}: at least 2 different seeds (an interval over seeds)")
        if not self.wraps or not self.params:
            raise InputError(f"give at least one {option('wraps')} and one {option('params')}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"{option('lr')} {self.lr}: a finite number > 0")
        for name in ("batch_size", "seq_len", "heads"):
            if (value := getattr(self, name)) < 1:
                raise InputError(f"{option(name)} {value}: at least 1")
        ModelConfig().check_length(self.seq_len, "seq_len")  # the position table's rows
        check_steps(len(self.wraps) * len(self.params) * len(self.sizes) * len(self.seeds), self.steps)

    def check_memory(self, force: bool = False) -> None:
        """InputError (with the estimate) when training the largest point would not fit in free memory,
        unless ``force``: :func:`depthlab.model.memory.check_memory`, the check of train and study."""
        cfg = self.config(self.wraps[0], self.params[0], max(self.sizes))  # one model at a time
        estimate = estimate_memory(cfg, "train", self.batch_size, self.seq_len)
        other = "--width" if self.axis == "depth" else "--depth"
        hint = f"smaller --{self.axis}s, {other}, --batch-size or --seq-len"
        check_memory(estimate, available_memory(), force, hint)

    def config(self, wrap: str, param: str, size: int) -> ModelConfig:
        """The ModelConfig of one point: base = the smallest size on the swept axis, where it scales."""
        depth, width = (size, self.fixed) if self.axis == "depth" else (self.fixed, size)
        base = min(self.sizes)
        bases = {}
        if self.axis == "depth" and ALPHA.get(param) is not None:
            bases["base_depth"] = base
        if self.axis == "width" and SCALES_WIDTH.get(param):
            bases["base_width"] = base
        return ModelConfig(n_layers=depth, d_model=width, n_heads=self.heads, wrap=wrap, param=param, **bases)

    def configs(self) -> list[ModelConfig]:
        """Every config the check builds (validated before anything runs: a refusal is one line)."""
        return [self.config(w, p, s) for w in self.wraps for p in self.params for s in self.sizes]


@dataclass
class CoordResult:
    """The check's measurements and fits. ``values[(wrap, param)][module]`` is [size][seed][step] of
    mean |x|; ``rms`` the same for the streams."""

    spec: CoordSpec
    values: dict = field(default_factory=dict)
    rms: dict = field(default_factory=dict)
    seconds: float = 0.0

    def slope(self, wrap: str, param: str, module: str, step: int, rms: bool = False):
        """The 95% interval over seeds of the log-log slope at ``step`` (1-based), or None."""
        table = (self.rms if rms else self.values)[(wrap, param)][module]
        per_seed = []
        for k in range(len(self.spec.seeds)):
            s = loglog_slope(self.spec.sizes, [table[i][k][step - 1] for i in range(len(self.spec.sizes))])
            if s is not None and math.isfinite(s):
                per_seed.append(s)
        return mean_interval(per_seed) if per_seed else None

    def trend(self, interval) -> str:
        """flat, grows, shrinks or unclear (module docstring); "n/a" without a slope."""
        if interval is None:
            return "n/a"
        b = self.spec.band
        if -b <= interval.low and interval.high <= b:
            return "flat"
        if interval.low > 0:
            return "grows"
        if interval.high < 0:
            return "shrinks"
        return "unclear"

    def to_dict(self) -> dict:
        """JSON: the spec, then per setting and module the mean over seeds of each size and step, and
        the slope (interval) and trend of each step."""
        s = self.spec
        settings = []
        for (wrap, param), modules in self.values.items():
            out = {}
            for module, table in modules.items():
                entry = {"mean_abs": seed_means(table)}
                slopes = [self.slope(wrap, param, module, t) for t in range(1, s.steps + 1)]
                entry["slopes"] = [None if i is None else i.to_dict() for i in slopes]
                entry["trends"] = [self.trend(i) for i in slopes]
                if module in self.rms[(wrap, param)]:
                    entry["rms"] = seed_means(self.rms[(wrap, param)][module])
                    rms = [self.slope(wrap, param, module, t, rms=True) for t in range(1, s.steps + 1)]
                    entry["rms_slopes"] = [None if i is None else i.to_dict() for i in rms]
                out[module] = entry
            settings.append({"wrap": wrap, "param": param, "modules": out})
        spec = {k: list(v) if isinstance(v, tuple) else v for k, v in s.__dict__.items()}
        return {"spec": spec, "settings": settings, "seconds": self.seconds}


def seed_means(table) -> list[list[float]]:
    """[size][step] means over seeds of a [size][seed][step] table."""
    return [[sum(col) / len(col) for col in zip(*per_seed)] for per_seed in table]


def check_steps(models: int, steps: int) -> None:
    """InputError when ``models`` models of ``steps`` Adam steps each exceed MAX_STEPS in all."""
    if models * steps > MAX_STEPS:
        raise InputError(
            f"the check would train {models:,} models for {steps:,} steps each ({models * steps:.2g} Adam "
            f"steps); the limit is {MAX_STEPS:,}: fewer --seeds, --steps, sizes, wrappings or parametrizations"
        )


def coord_check(spec: CoordSpec, on_point=None, force_memory: bool = False) -> CoordResult:
    """Run the check ``spec`` describes; ``on_point(wrap, param, size, seed)`` is called before each
    run (progress). Every config is validated first and the largest checked against free memory
    (unless ``force_memory``), so a refused combination costs nothing."""
    spec.configs()
    spec.check_memory(force_memory)
    result = CoordResult(spec)
    start = time.perf_counter()
    for wrap in spec.wraps:
        for param in spec.params:
            runs = {m: [] for m in MODULES}
            rms = {name: [] for name, _ in STREAM_AT}
            for size in spec.sizes:
                cfg = spec.config(wrap, param, size)
                per_seed = []
                for seed in spec.seeds:
                    if on_point is not None:
                        on_point(wrap, param, size, seed)
                    per_seed.append(measure_run(cfg, spec, seed))
                for m in MODULES:
                    runs[m].append([r[0][m] for r in per_seed])
                for name in rms:
                    rms[name].append([r[1][name] for r in per_seed])
            result.values[(wrap, param)] = {m: v for m, v in runs.items() if _present(v)}
            result.rms[(wrap, param)] = rms
    result.seconds = time.perf_counter() - start
    return result


def _present(table) -> bool:
    return all(len(steps) for per_size in table for steps in per_size)


def measure_run(cfg: ModelConfig, spec: CoordSpec, seed: int) -> tuple[dict, dict]:
    """({module: [mean |x| at step 1..N]}, {stream: [rms at step 1..N]}) of one model trained
    ``spec.steps`` Adam updates at ``spec.lr`` (its parametrization's groups) on the default corpus."""
    torch.manual_seed(seed)
    model = build_model(cfg)
    t = TrainConfig()
    opt = torch.optim.Adam(param_groups(model, spec.lr, eps=t.eps), lr=spec.lr, betas=(t.beta1, t.beta2))
    means = {m: [] for m in MODULES}
    rms = {name: [] for name, _ in STREAM_AT}
    branch: dict[str, list[float]] = {}
    handles = [_record(model.embed, lambda y: means["embedding"].append(_mean_abs(y)))]
    for layer in model.stack.layers:
        for kind, w in layer.sublayers().items():
            # the module m multiplies (its output is before m); F itself where m never enters
            end = w.branch_end() if w.BRANCH_END is not None else w.f

            def sublayer(y, kind=kind):
                branch.setdefault(kind, []).append(_mean_abs(y))

            handles.append(_record(end, sublayer))
    L = len(model.stack.layers)
    try:
        for step in range(1, spec.steps + 1):
            tokens = text_batch(spec.batch_size, spec.seq_len + 1, cfg.vocab_size, seed * 100_003 + step)
            branch.clear()
            logits, states = model(tokens[:, :-1], return_states=True)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
            for kind, vals in branch.items():
                means.setdefault(kind, []).append(sum(vals) / len(vals))
            for name, frac in STREAM_AT:
                x = states[max(1, round(frac * L))].detach()
                means[name].append(_mean_abs(x))
                rms[name].append(float(x.float().pow(2).mean().sqrt()))
            means["logits"].append(_mean_abs(logits))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    finally:
        for h in handles:
            h.remove()
    return means, rms


def _record(module, fn):
    return module.register_forward_hook(lambda mod, args, out: fn(out))


def _mean_abs(y: torch.Tensor) -> float:
    return float(y.detach().float().abs().mean())


def format_coord(result: CoordResult, step: int | None = None) -> str:
    """The table: per setting and module the slope at ``step`` (default the last) with its interval and
    trend, and for the streams the rms slope."""
    s = result.spec
    step = s.steps if step is None else step
    other = "width" if s.axis == "depth" else "depth"
    sizes = ",".join(str(v) for v in s.sizes)
    lines = [
        f"coordinate check over {s.axis} {sizes} at {other} {s.fixed}: {s.steps} Adam steps at lr {s.lr:g}, "
        f"{len(s.seeds)} seeds, batch {s.batch_size}x{s.seq_len} of the default corpus ({result.seconds:.0f} s)",
        f"slope of log mean|x| against log {s.axis} at step {step} (95% interval over seeds); "
        f"flat = inside [-{s.band:g}, {s.band:g}]",
        "",
        f"{'wrap':10} {'param':10} {'module':11} {'slope [95% interval]':26} {'trend':8} {'rms slope':>9}",
    ]
    for wrap, param in result.values:
        for module in result.values[(wrap, param)]:
            iv = result.slope(wrap, param, module, step)
            shown = "n/a" if iv is None else f"{iv.mean:+.2f} [{iv.low:+.2f}, {iv.high:+.2f}]"
            rms = ""
            if module in result.rms[(wrap, param)]:
                r = result.slope(wrap, param, module, step, rms=True)
                rms = "n/a" if r is None else f"{r.mean:+.2f}"
            lines.append(f"{wrap:10} {param:10} {module:11} {shown:26} {result.trend(iv):8} {rms:>9}")
    return "\n".join(lines)
