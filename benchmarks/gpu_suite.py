"""``python benchmarks/gpu.py --all --out DIR``: one prepared run of at most ten minutes on one GPU.

Three parts, each within its share of the time, every result written to files in DIR as it comes:

1. **speed**: tokens/s and MFU under bf16 autocast (fp32 weights, fused AdamW), eager and with each block
   ``torch.compile``d (regional compilation, the reference's blocks too), for depthlab's pre-LN, post-LN,
   sandwich and DeepNorm and the hyper-connections ``hc`` and ``mhc`` (n = 4 streams) against the
   nanoGPT-style reference (benchmarks/peers.py), at d 768 x 12 layers, d 2048 x 24 and d 512 x 96
   (seq 1024, batch 8). Each group of models is timed side by side, the models alternating step by step
   after a warm-up, the reference in every group: the ratio to the reference is measured within it.
2. **doctor**: the held-out set at real width for ``depthlab advise``, registered with every prediction
   in a commit before this runs (lab/depthlab_lab/grids/advise-heldout-width.registration.json): each run
   probed on the GPU (that prediction written to DIR before it trains), trained, and scored against the
   frozen predictions under the registered rules, on a corpus built here from the machine's own Python
   sources (no download).
3. **topologies**: ``hc`` and ``mhc`` at 48 layers and width 1,024, a few hundred steps: the composite
   gain by depth at init and after training, and the losses.

Each part sizes itself from rates it measures in its first seconds and skips what would not fit (it says
what, and why). ``--dry-run`` prints the plan with each part's expected time on an H200 (an estimate:
how it is made is printed with it), then runs every part at toy size on the CPU, so that each is known
to work before a GPU is spent on it.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import gc
import hashlib
import json
import math
import os
import platform
import sys
import sysconfig
import time
from pathlib import Path

import torch
from common import median, time_alternating
from peers import NanoGPT, Shape, build, train_flops, train_step

from depthlab import build_model
from depthlab.config import ModelConfig, TrainConfig
from depthlab.study.executors import LocalExecutor
from depthlab.study.grid import RunSpec
from depthlab.train.distributed import available_cores

# -- what runs ----------------------------------------------------------------------------------------
PARTS = ("speed", "doctor", "topologies")
BUDGET_S = 540.0  # the whole command, from its start: inside the device tool's 600 s for one command
# The phases and their shares of the budget, in seconds on an H200 (time a phase leaves passes on): the
# speed part alone (clean timings); then the held-out runs and the topologies' two runs side by side, one
# process each (their steps are mostly launch-bound, so the GPU has room for them together).
SLICES = {"setup": 30.0, "speed": 190.0, "train": 310.0}
TOPO_ALONE = 110.0  # the train phase when the topologies run without the doctor part
RESERVE_S = 10.0  # kept for writing the files at the end

SPEED_SHAPES = {  # name -> (d_model, layers, heads)
    "d768x12": (768, 12, 12),
    "d2048x24": (2048, 24, 16),
    "d512x96": (512, 96, 8),
}
SPEED_SEQ, SPEED_BATCH = 1024, 8
REFERENCE = "nanogpt"
GROUPS = (("pre", "post"), ("sandwich", "deepnorm"), ("hc", "mhc"))  # timed with the reference, in turn
WIDE = "d2048x24"  # the shape of the goals
GOAL_MFU, GOAL_RATIO = 0.40, 1.00
NOMINAL_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12, "L4": 121e12}

CORPUS_CAP = 128 * 2**20  # bytes of Python source the corpus takes at most
WORKERS = 8  # the doctor part's runs at a time (one process each)
STARTUP_S = 20.0  # a held-out run's fixed cost before its first step (prior: process, model init x2, probe)
LOOP_OVERHEAD = 1.3  # the training loop over a bare step: validation every 50 steps, telemetry every 10
FIRST_SLOWDOWN = 2.0  # the concurrency slowdown assumed before any held-out run has ended (registered)

TOPO = {"d_model": 1024, "n_layers": 48, "n_heads": 16, "seq_len": 128, "batch_size": 8, "lr": 1e-3,
        "warmup": 30, "streams": 4}  # fmt: skip
TOPO_STEPS = (50, 400)  # the fewest and most steps the topologies' runs take
TOPO_DEPTHS = (1, 6, 12, 24, 36, 48)  # layer boundaries the tables show

# -- the estimate on an H200 (the plan): stated assumptions, not measurements ---------------------------
H200_MM = 790e12  # bf16 matrix product on random data, as KINDS.md records it measured on this machine kind
H200_BW = 4.3e12  # device-to-device copy, bytes/s, as KINDS.md records it
EFFICIENCY = {"large": 0.45, "small": 0.25}  # assumed share of H200_MM a training step reaches
LAUNCH_S = 8e-6  # assumed host cost of one eager operator (dispatch + kernel launch)
COMPILE_S = 40.0  # assumed time of one regional compile (forward and backward of one block)

DRY = {  # --dry-run: toy sizes on the CPU
    "shapes": {"d768x12": (32, 2, 2), "d2048x24": (64, 3, 4), "d512x96": (16, 6, 2)},
    "seq": 32,
    "batch": 2,
    "corpus_cap": 2 * 2**20,
    "workers": 2,
    "heldout": {"d_model": 32, "steps": 10, "depth_div": 12},
    "topo": {"d_model": 32, "n_layers": 4, "n_heads": 2, "seq_len": 32, "steps": 10},
}


@dataclasses.dataclass
class Ctx:
    """One invocation: where it writes, on what, how much time is left."""

    out: Path
    work: Path
    device: str
    dry: bool
    parts: tuple[str, ...]
    workers: int
    budget: float
    start: float = dataclasses.field(default_factory=time.perf_counter)
    record: dict = dataclasses.field(default_factory=dict)
    log_lines: list = dataclasses.field(default_factory=list)
    deadlines: dict = dataclasses.field(default_factory=dict)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.log_lines.append(line)
        with open(self.out / "gpu-log.txt", "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def phases(self) -> list[str]:
        out = ["setup"]
        if "speed" in self.parts:
            out.append("speed")
        if "doctor" in self.parts or "topologies" in self.parts:
            out.append("train")
        return out

    def slice(self, phase: str) -> float:
        """A phase's share of the budget (scaled with ``--budget``)."""
        base = SLICES[phase]
        if phase == "train" and "doctor" not in self.parts:
            base = TOPO_ALONE
        return base * self.budget / BUDGET_S

    def deadline(self, phase: str) -> float:
        """Seconds since the start by which ``phase`` ("speed" or "train") must end: the end of its slice
        after the slices before it (time they left passes on), or its slice from now if they ran over;
        never into the slices of the phases after it, nor past the budget less the reserve. Fixed when
        first asked (the doctor and the topologies, which share the train phase, end by the same time)."""
        if phase in self.deadlines:
            return self.deadlines[phase]
        order = self.phases()
        i = order.index(phase)
        planned_end = sum(self.slice(p) for p in order[: i + 1])
        hard = self.budget - RESERVE_S - sum(self.slice(p) for p in order[i + 1 :])
        self.deadlines[phase] = min(max(planned_end, self.elapsed() + self.slice(phase)), hard)
        return self.deadlines[phase]

    def save(self) -> None:
        """The JSON record and the Markdown sections, rewritten after every step that adds to them (a run
        cut off by the command's time limit keeps what it had in both)."""
        self.record["elapsed_s"] = round(self.elapsed(), 1)
        for name, text in (
            ("gpu-record.json", json.dumps(self.record, indent=1, default=_jsonable)),
            ("gpu-results.md", markdown(self)),
        ):
            tmp = self.out / (name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(self.out / name)


def _jsonable(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Path):
        return str(x)
    return str(x)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


# -- the machine ----------------------------------------------------------------------------------------
def machine(device: str) -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__, "cpus": available_cores(),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")}  # fmt: skip
    if device.startswith("cuda"):
        p = torch.cuda.get_device_properties(device)
        info.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), sms=p.multi_processor_count,
                    cuda=torch.version.cuda)  # fmt: skip
    else:
        info["gpu"] = None
    return info


def worker_threads(processes: int) -> int:
    """Torch threads for each of ``processes`` worker processes: the cores this process may use shared
    out (its affinity mask, which a container or a VM's scheduler can set far below ``os.cpu_count()``:
    more threads than cores make every process's CPU work, a model's init, crawl), at least one."""
    return max(1, available_cores() // processes)


def nominal_peak(device: str) -> float | None:
    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in NOMINAL_BF16.items() if k in name), None)


def bf16_mm_peak(device: str, n: int, reps: int = 10) -> float:
    """Measured bf16 ``torch.mm`` FLOP/s on n x n random matrices (best of ``reps`` after one warm-up)."""
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


# -- the corpus -----------------------------------------------------------------------------------------
def source_roots() -> list[Path]:
    """Where this machine's Python sources are: the standard library, then each site-packages folder."""
    paths = sysconfig.get_paths()
    roots = [Path(paths["stdlib"])]
    for key in ("purelib", "platlib"):
        roots.append(Path(paths[key]))
    for p in sys.path:
        if p.endswith(("site-packages", "dist-packages")):
            roots.append(Path(p))
    seen, out = set(), []
    for r in roots:
        r = r.resolve()
        if r.is_dir() and r not in seen:
            seen.add(r)
            out.append(r)
    return out


def build_corpus(path: Path, cap: int) -> dict:
    """Concatenate this machine's Python sources into ``path``, at most ``cap`` bytes: first the standard
    library's top-level modules (depthlab's default corpus, in its order), then every other ``.py`` file
    under the standard library and the site-packages folders, each folder walked in sorted order; a file
    that would pass the cap ends it. Returns its size, file count, SHA-256 and roots."""
    roots = source_roots()
    stdlib = roots[0]
    first = sorted(p for p in stdlib.glob("*.py") if p.is_file())
    taken, n, h = 0, 0, hashlib.sha256()
    seen = set()
    with open(path, "wb") as out:

        def add(p: Path) -> bool:
            nonlocal taken, n
            try:
                data = p.read_bytes()
            except OSError:
                return True
            if taken + len(data) > cap:
                return False
            out.write(data)
            h.update(data)
            taken, n = taken + len(data), n + 1
            return True

        full = False
        for p in first:
            seen.add(p)
            if not add(p):
                full = True
                break
        for root in roots:
            if full:
                break
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                for name in sorted(filenames):
                    p = Path(dirpath) / name
                    if name.endswith(".py") and p not in seen and p.is_file():
                        seen.add(p)
                        if not add(p):
                            full = True
                            break
                if full:
                    break
    return {"path": str(path), "bytes": taken, "files": n, "sha256": h.hexdigest(), "cap": cap,
            "roots": [str(r) for r in roots]}  # fmt: skip


# -- estimates (the plan) -------------------------------------------------------------------------------
@functools.cache
def ops_per_step(name: str, layers: int) -> int:
    """Aten operators one training step of benchmark model ``name`` dispatches (forward, backward, fused
    AdamW), counted here on the CPU at a toy width: on a GPU each is about one kernel launch."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    s = Shape(d=16, layers=layers, heads=2, seq=8, batch=2)
    step = train_step(build(name, s), s)
    step()
    Count.n = 0
    with Count():
        step()
    return Count.n


def per_layer_ops(name: str) -> tuple[int, int]:
    """(fixed, per layer) operators of one training step of ``name``."""
    one, two = ops_per_step(name, 1), ops_per_step(name, 2)
    return one - (two - one), two - one


def params_of(name: str, s: Shape) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in build(name, s).parameters())


def step_estimate(name: str, s: Shape, small: bool = False) -> float:
    """Expected seconds of one bf16 training step on an H200: the larger of the arithmetic (model FLOPs at
    an assumed share of the measured bf16 rate, plus Adam's state traffic at the copy bandwidth) and the
    host's launches (operators counted here, an assumed cost each)."""
    n = params_of(name, s)
    flop = train_flops(s, n)
    arithmetic = flop / (EFFICIENCY["small" if small else "large"] * H200_MM) + 2 * 16 * n / H200_BW
    fixed, per = per_layer_ops(name)
    return max(arithmetic, (fixed + per * s.layers) * LAUNCH_S)


def speed_shape(name: str) -> Shape:
    d, L, h = SPEED_SHAPES[name]
    return Shape(d=d, layers=L, heads=h, seq=SPEED_SEQ, batch=SPEED_BATCH)


def speed_items() -> list[tuple[str, tuple[str, ...], bool]]:
    """(shape, depthlab models, compiled) in the order the speed part runs them, the reference joining
    every group: first what the goals read (every group eager at the wide shape, then pre-LN compiled
    there), then every group eager at the other shapes, pre-LN compiled at them, and the other models
    compiled, at the wide shape first."""
    others = [s for s in SPEED_SHAPES if s != WIDE]
    items = [(WIDE, g, False) for g in GROUPS] + [(WIDE, ("pre",), True)]
    items += [(shape, g, False) for shape in others for g in GROUPS]
    items += [(shape, ("pre",), True) for shape in others]
    items += [(shape, g, True) for shape in [WIDE, *others] for g in COMPILED_REST]
    return items


COMPILED_REST = (("post", "sandwich"), ("deepnorm", "hc"), ("mhc",))
AUTOCAST = torch.bfloat16  # the speed part's models and the measured steps train under bf16 autocast
ROUNDS = 5  # alternation rounds of a group, two timed steps each per model
WARM = 2  # untimed steps of each model before its group's rounds (a compiled model compiles in the first)


def plan_speed(share: float) -> tuple[list[str], float]:
    """Each group's expected time, in order; the groups past the part's share are marked (the run skips
    what its measured rates say would not fit, which may be more or fewer)."""
    lines, total, compiled_seen = [], 0.0, set()
    fit = skipped = 0
    for shape, group, compiled in speed_items():
        s = speed_shape(shape)
        names = [REFERENCE, *(f"depthlab-{w}" for w in group)]
        steps = sum(step_estimate(n, s) for n in names)
        t = (WARM + 2 * ROUNDS) * steps + 2.0 * len(names)
        if compiled:
            new = [n for n in names if (n, shape) not in compiled_seen]
            t += COMPILE_S * len(new)
        within = total + t <= share
        if within:
            total += t
            fit += 1
            if compiled:
                compiled_seen.update((n, shape) for n in names)
        else:
            skipped += 1
        lines.append(f"  {shape:9s} {'compiled' if compiled else 'eager':8s} {' + '.join(names)}: about "
                     f"{t:.0f} s{'' if within else ' (past the share: skipped at these rates)'}")  # fmt: skip
    lines.append(f"  {fit} of {fit + skipped} groups expected to fit")
    return lines, total


def doctor_runs_estimate() -> list[tuple[float, float]]:
    """Per registered run, in order: (seconds alone, seconds of the GPU's arithmetic)."""
    from depthlab_lab.calibrate import heldout_width as hw

    out = []
    for spec in hw.specs():
        s = Shape(
            d=spec.model.d_model, layers=spec.model.n_layers, heads=spec.model.n_heads, seq=32, batch=16
        )
        name = f"depthlab-{spec.model.wrap}"
        alone = STARTUP_S + spec.train.steps * step_estimate(name, s, small=True) * LOOP_OVERHEAD
        n = params_of(name, s)
        gpu = spec.train.steps * (train_flops(s, n) / (EFFICIENCY["small"] * H200_MM) + 2 * 16 * n / H200_BW)
        out.append((alone, gpu))
    return out


def plan_doctor(share: float) -> tuple[list[str], float]:
    runs = doctor_runs_estimate()
    k, wall = 0, 0.0
    for i in range(1, len(runs) + 1):  # the longest prefix of the order expected to end within the share
        w = max(sum(a for a, _ in runs[:i]) / WORKERS, sum(g for _, g in runs[:i])) + 15.0
        if w > share:
            break
        k, wall = i, w
    alone = [a for a, _ in runs]
    lines = [
        f"  {len(runs)} registered runs, {WORKERS} at a time: one alone about {min(alone):.0f}-{max(alone):.0f} s; "
        f"the GPU's own arithmetic about {sum(g for _, g in runs):.0f} s in all; expected: the first {k} of the "
        f"{len(runs)} runs end in about {wall:.0f} s"
        + ("" if k == len(runs) else " (the rest are not started: the registered prefix rule)"),
    ]
    return lines, wall


def plan_topologies(share: float) -> tuple[list[str], float]:
    s = Shape(d=TOPO["d_model"], layers=TOPO["n_layers"], heads=TOPO["n_heads"], seq=TOPO["seq_len"],
              batch=TOPO["batch_size"])  # fmt: skip
    steps = {w: step_estimate(f"depthlab-{w}", s) for w in ("hc", "mhc")}
    per = max(steps.values()) * LOOP_OVERHEAD * SHARED
    n = int((share - STARTUP_S - 10) / per) // 10 * 10
    total = STARTUP_S + 10 + min(max(n, 0), TOPO_STEPS[1]) * per
    lines = [
        f"  hc and mhc at {TOPO['n_layers']} x {TOPO['d_model']}, {TOPO['batch_size']} x {TOPO['seq_len']} tokens: "
        "a step alone about "
        + ", ".join(f"{w} {1000 * t:.0f} ms" for w, t in steps.items())
        + (
            f"; {min(n, TOPO_STEPS[1])} steps each expected to fit"
            if n >= TOPO_STEPS[0]
            else f"; only {n} steps would fit: skipped at these rates"
        )  # fmt: skip
    ]
    return lines, total


SHARED = 2.0  # the topologies' runs beside the held-out runs: their step assumed twice as long as alone


def plan(parts: tuple[str, ...]) -> list[str]:
    """The plan: each part's work and its expected time on an H200, and how that is estimated."""
    lines = ["# plan on one H200 (expected times are estimates, not measurements; see the last lines)"]
    total = SLICES["setup"] / 2
    lines.append(f"setup: the bf16 matmul rate, the corpus (<= {CORPUS_CAP // 2**20} MiB of Python sources), the "
                 f"plan: about {total:.0f} s")  # fmt: skip
    if "speed" in parts:
        body, t = plan_speed(SLICES["speed"])
        total += t
        lines += [f"speed (alone): expected about {t:.0f} s of its {SLICES['speed']:.0f} s", *body]
    train = [p for p in ("doctor", "topologies") if p in parts]
    if train:
        share = SLICES["train"] if "doctor" in parts else TOPO_ALONE
        body, t = [], 0.0
        if "doctor" in parts:
            b, t = plan_doctor(share)
            body += ["  doctor:", *b]
        if "topologies" in parts:
            b, tt = plan_topologies(share)
            body += ["  topologies (beside the held-out runs):" if "doctor" in parts else "  topologies:", *b]
            t = max(t, tt)
        total += t
        lines += [f"{' and '.join(train)}: expected about {t:.0f} s of its {share:.0f} s", *body]
    lines.append(f"whole: expected about {total / 60:.1f} min, at most {BUDGET_S / 60:.0f} min by its own clock "
                 "(then the files are written)")  # fmt: skip
    lines.append(
        "how estimated: a step takes the larger of its arithmetic (model FLOPs at an assumed "
        f"{EFFICIENCY['large']:.0%} of the {H200_MM / 1e12:.0f} TFLOP/s bf16 matrix rate KINDS.md records for "
        f"this machine, {EFFICIENCY['small']:.0%} at 512 tokens a step, plus Adam's state read and written at "
        f"{H200_BW / 1e12:.1f} TB/s) and its launches (the operators of one step, counted here on the CPU, at "
        f"an assumed {LAUNCH_S * 1e6:.0f} us each); a regional compile is assumed to take {COMPILE_S:.0f} s; "
        f"a held-out run adds {STARTUP_S:.0f} s of start and its loop {LOOP_OVERHEAD - 1:.0%} (validation, "
        f"telemetry), {WORKERS} at a time; a topologies' step beside them {SHARED:.0f}x its time alone. None of "
        "these was measured on a GPU: the run measures its own rates and sizes each part from them."
    )
    return lines


# -- part 1: speed --------------------------------------------------------------------------------------
def build_on(name: str, s: Shape, device: str, compiled: bool, backend: str) -> torch.nn.Module:
    """Benchmark model ``name`` built on ``device`` (initialised there); ``compiled``: each block
    ``torch.compile``d with static shapes (regional compilation, the reference's blocks too)."""
    try:
        with torch.device(device):
            model = build(name, s)
    except Exception:  # an init that cannot run on the device: build on the CPU and move it
        model = build(name, s).to(device)
    if compiled:
        blocks = model.h if isinstance(model, NanoGPT) else model.stack.layers
        for block in blocks:
            block.compile(backend=backend, dynamic=False)
    return model


def _synced(step, device: str):
    def run():
        step()
        sync(device)

    return run


def time_group(ctx: Ctx, shape: Shape, names: list[str], compiled: bool, backend: str) -> dict:
    """Build ``names`` at ``shape``, warm each up (a compiled one compiles on its first step), then time
    them alternating; per model: median step, tokens/s, TFLOP/s, MFU, and the ratio to the reference."""
    device = ctx.device
    dtype = AUTOCAST  # the dry run's too: the models' forward under bf16 autocast, as on the GPU
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    fns, params, first = {}, {}, {}
    for name in names:
        key = name + ("+compile" if compiled else "")
        model = build_on(name, shape, device, compiled, backend)
        params[key] = sum(p.numel() for p in model.parameters())
        fns[key] = _synced(train_step(model, shape, device=device, dtype=dtype), device)
        t0 = time.perf_counter()
        fns[key]()  # the first step: compiles a compiled model
        first[key] = time.perf_counter() - t0
    for fn in fns.values():
        for _ in range((1 if ctx.dry else WARM) - 1):
            fn()
    times = time_alternating(fns, rounds=2 if ctx.dry else ROUNDS, steps=2, warmup=0)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.startswith("cuda") else None
    nominal, ref = nominal_peak(device), REFERENCE + ("+compile" if compiled else "")
    rows = {}
    for key, ts in times.items():
        m = median(ts)
        flops = train_flops(shape, params[key]) / m
        rows[key] = {
            "step_ms": 1000 * m,
            "tokens_per_s": shape.tokens / m,
            "tflops": flops / 1e12,
            "mfu": flops / nominal if nominal else None,
            "ratio_to_reference": median(times[ref]) / m,
            "first_step_s": first[key],
            "params": params[key],
            "steps_timed": len(ts),
        }
    del fns
    free(device)
    return {"models": rows, "peak_gib": peak}


def speed_part(ctx: Ctx) -> dict:
    deadline = ctx.deadline("speed")
    compile_prior = 5.0 if ctx.dry else COMPILE_S
    # the dry run: AOTAutograd's capture of forward and backward, as inductor's, without its code generation
    backend = "inductor" if ctx.device.startswith("cuda") else "aot_eager"
    if ctx.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True  # as nanoGPT's train.py sets
    import torch._dynamo as dynamo

    dynamo.config.cache_size_limit = max(dynamo.config.cache_size_limit, 256)
    if hasattr(dynamo.config, "accumulated_cache_size_limit"):
        dynamo.config.accumulated_cache_size_limit = max(dynamo.config.accumulated_cache_size_limit, 4096)
    out = {"seq": SPEED_SEQ if not ctx.dry else DRY["seq"], "batch": SPEED_BATCH if not ctx.dry else DRY["batch"],
           "compile_backend": backend, "autocast": str(AUTOCAST).removeprefix("torch."), "groups": [],
           "skipped": []}  # fmt: skip
    step_s: dict[str, float] = {}  # shape -> the slowest measured eager step there
    compile_s: list[float] = []  # measured first-step time of compiled models, less their eager step
    compiled_done: set = set()
    ctx.record["speed"] = out
    for shape_name, group, compiled in speed_items():
        if ctx.dry and compiled and shape_name != WIDE:
            out["skipped"].append({"shape": shape_name, "models": list(group), "compiled": True,
                                   "why": "dry run: compiled groups at one toy shape only"})  # fmt: skip
            continue
        s = dry_speed_shape(shape_name) if ctx.dry else speed_shape(shape_name)
        names = [REFERENCE, *(f"depthlab-{w}" for w in group)]
        per_step = step_s.get(shape_name)
        if per_step is None:
            per_step = max(step_estimate(n, speed_shape(shape_name)) for n in names)
        expected = (WARM + 2 * ROUNDS) * per_step * len(names) + 2.0 * len(names)
        if compiled:
            new = sum((n, shape_name) not in compiled_done for n in names)
            expected += new * (max(compile_s) if compile_s else compile_prior)
        left = deadline - ctx.elapsed()
        if expected > left:
            out["skipped"].append({"shape": shape_name, "models": names, "compiled": compiled,
                                   "why": f"expected {expected:.0f} s (from the rates measured so far), "
                                          f"{max(left, 0):.0f} s left of the part"})  # fmt: skip
            ctx.say(f"speed: skip {shape_name} {'compiled' if compiled else 'eager'} {'+'.join(group)}: "
                    f"expected {expected:.0f} s, {max(left, 0):.0f} s left")  # fmt: skip
            continue
        t0 = time.perf_counter()
        try:
            res = time_group(ctx, s, names, compiled, backend)
        except Exception as e:  # one group's failure (out of memory, a compile error) is recorded
            free(ctx.device)
            out["groups"].append({"shape": shape_name, "models": names, "compiled": compiled,
                                  "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})  # fmt: skip
            ctx.say(f"speed: {shape_name} {'+'.join(group)}: failed: {type(e).__name__}")
            ctx.save()
            continue
        took = time.perf_counter() - t0
        rows = res["models"]
        if not compiled:
            step_s[shape_name] = max(
                step_s.get(shape_name, 0.0), *(r["step_ms"] / 1000 for r in rows.values())
            )
        else:
            for key, r in rows.items():
                base = key.removesuffix("+compile")
                if (base, shape_name) not in compiled_done:
                    compile_s.append(max(0.0, r["first_step_s"] - r["step_ms"] / 1000))
                    compiled_done.add((base, shape_name))
        out["groups"].append({"shape": shape_name, "d_model": s.d, "layers": s.layers, "heads": s.heads,
                              "compiled": compiled, "seconds": round(took, 1), **res})  # fmt: skip
        for key, r in rows.items():
            mfu = f"MFU {r['mfu']:.0%}" if r["mfu"] is not None else "MFU n/a"
            ctx.say(f"speed {shape_name} {key:26s} {r['tokens_per_s']:11,.0f} tok/s {r['tflops']:7.1f} TFLOP/s "
                    f"{mfu}  x{r['ratio_to_reference']:.2f} of the reference")  # fmt: skip
        ctx.save()
    out["goals"] = goals(out)
    for line in out["goals"]["lines"]:
        ctx.say(line)
    return out


def dry_speed_shape(name: str) -> Shape:
    d, L, h = DRY["shapes"][name]
    return Shape(d=d, layers=L, heads=h, seq=DRY["seq"], batch=DRY["batch"])


def goals(speed: dict) -> dict:
    """The goals at the wide shape: the best depthlab pre-LN variant's MFU (>= 40%) and its ratio to the
    reference measured beside it (>= 1.0)."""
    best = None
    for g in speed["groups"]:
        if g.get("shape") != WIDE or "models" not in g or not isinstance(g["models"], dict):
            continue
        for key, r in g["models"].items():
            if key.startswith("depthlab-pre") and r["mfu"] is not None:
                if best is None or r["tokens_per_s"] > best[1]["tokens_per_s"]:
                    best = (key, r)
    if best is None:
        return {
            "lines": ["goals: not measured (no MFU: no GPU, or the wide shape's pre-LN group did not run)"]
        }
    key, r = best
    return {
        "model": key,
        "mfu": r["mfu"],
        "ratio": r["ratio_to_reference"],
        "lines": [
            f"goal MFU >= {GOAL_MFU:.0%} at {WIDE} ({key}): {r['mfu']:.0%} "
            + ("met" if r["mfu"] >= GOAL_MFU else "MISSED"),
            f"goal ratio >= {GOAL_RATIO:.2f} to the reference at {WIDE} ({key}): {r['ratio_to_reference']:.2f} "
            + ("met" if r["ratio_to_reference"] >= GOAL_RATIO else "MISSED"),
        ],
    }


# -- part 2: the doctor at real width -------------------------------------------------------------------
def toy(spec: RunSpec) -> RunSpec:
    """A registered run at toy size for --dry-run: its wrapping, lr and seed, a small width and depth,
    a few steps; the shape's depth divided by 12."""
    m = dataclasses.replace(spec.model, d_model=DRY["heldout"]["d_model"],
                            n_layers=max(1, spec.model.n_layers // DRY["heldout"]["depth_div"]))  # fmt: skip
    t = dataclasses.replace(spec.train, steps=DRY["heldout"]["steps"], warmup=min(spec.train.warmup, 3))
    return dataclasses.replace(spec, model=m, train=t)


def probe_on(spec: RunSpec, device: str):
    """The study worker's probe of ``spec`` (its model at its seed, on its first batch), on ``device``."""
    from depthlab.probe import probe
    from depthlab.train.tasks import make_task

    torch.manual_seed(spec.train.seed)
    model = build_model(spec.model).to(device)
    batch = make_task(spec.model, spec.train).train_batch(1)
    inputs = batch.args[0].to(device)
    t = spec.train
    try:
        return probe(model, inputs, loss="lm", lr=t.lr, warmup=t.warmup, steps=t.steps)
    finally:
        del model
        free(device)


def _append(path: str, row: dict) -> None:
    line = json.dumps(row, default=_jsonable) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def heldout_task(spec: RunSpec, *, probes: str, device: str, registered_hash: dict) -> dict:
    """One held-out run in a worker process: its probe on the GPU and advise's probability from it,
    appended to ``probes`` before training; then the run itself. Returns what the score reads."""
    from depthlab.doctor.atlas import Atlas
    from depthlab.doctor.record import load_record
    from depthlab.train import train
    from depthlab_lab.calibrate.heldout_width import prediction

    key = registered_hash[spec.label]
    t0 = time.perf_counter()
    try:
        result = probe_on(spec, device)
        gpu = {
            k: v for k, v in prediction(result, spec, Atlas.load(), load_record()).items() if k != "lookups"
        }
    except Exception as e:  # the check must never stop the run
        gpu = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    probe_s = time.perf_counter() - t0
    _append(probes, {"config_hash": key, "run": spec.label, "gpu_probe": gpu, "probe_s": round(probe_s, 1),
                     "written": time.time()})  # fmt: skip
    t1 = time.perf_counter()
    r = train(spec.model, spec.train, None, progress=False)
    metrics = r.metrics
    return {
        "config_hash": key,
        "run": spec.label,
        "outcome": r.outcome,
        "reason": r.reason,
        "val_loss": _num(r.val_loss),
        "unigram_loss": _num(r.unigram_loss),
        "final_train_loss": _num(r.final_train_loss),
        "steps_done": metrics[-1]["step"] if metrics else 0,
        "escape_step": r.escape_step,
        "tokens_per_s": _num(r.tokens_per_s),
        "train_s": round(time.perf_counter() - t1, 1),
        "probe_s": round(probe_s, 1),
        "gpu_probe": gpu,
        "val_curve": [(m["step"], _num(m["val_loss"])) for m in metrics if m.get("val_loss") is not None],
    }


def _num(x):
    return x if isinstance(x, int | float) and math.isfinite(x) else None


def measured_step(
    ctx: Ctx, shape: tuple[int, int], heads: int, seq: int, batch: int, wrap: str = "pre"
) -> float:
    """Median seconds of a bf16 training step of depthlab ``wrap`` at (d, layers), alone on the device."""
    d, L = shape
    s = Shape(d=d, layers=L, heads=heads, seq=seq, batch=batch)
    dtype = AUTOCAST
    model = build_on(f"depthlab-{wrap}", s, ctx.device, False, "eager")
    step = _synced(train_step(model, s, device=ctx.device, dtype=dtype), ctx.device)
    step()
    step()
    ts = []
    for _ in range(3):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    del model, step
    free(ctx.device)
    return median(ts)


def doctor_part(ctx: Ctx, before_runs=None) -> dict:
    """The held-out set: checked against its registration, each shape's step measured alone, then the
    runs in their registered order, ``ctx.workers`` at a time, under the registered prefix rule; scored.
    ``before_runs()`` is called once the measurements are taken, before the first run starts."""
    from depthlab_lab.calibrate import heldout_width as hw

    deadline = ctx.deadline("train")
    reg = hw.load_registration()
    specs = hw.specs()
    by_hash = {s.hash: s for s in specs}
    order = [r["config_hash"] for r in reg["runs"]]
    missing = [h for h in order if h not in by_hash]
    out = {"registration": hw.REGISTRATION, "registered": len(order), "corpus": ctx.record.get("corpus"),
           "workers": ctx.workers, "runs": [], "not_run": [], "dry_run": ctx.dry}  # fmt: skip
    ctx.record["doctor"] = out
    if missing:
        out["error"] = (
            f"{len(missing)} registered runs are not in the grid file: the registration does not match"
        )
        ctx.say("doctor: " + out["error"])
        return out
    corpus = ctx.record["corpus"]
    todo = []
    for h in order:
        spec = by_hash[h]
        if ctx.dry:
            spec = toy(spec)
        todo.append(
            (
                h,
                hw.replace_train(
                    spec,
                    data=corpus["path"],
                    device="cuda" if ctx.device.startswith("cuda") else "cpu",
                    telemetry=spec.train.telemetry and not ctx.record.get("telemetry_off"),
                ),
            )
        )
    labels = {spec.label: h for h, spec in todo}
    if len(labels) != len(todo):
        out["error"] = "two registered runs share a label"
        return out
    seq, batch = todo[0][1].train.seq_len, todo[0][1].train.batch_size
    out["tokens_per_run"] = {h: spec.train.steps * batch * seq for h, spec in todo}
    out["passes_per_run"] = max(out["tokens_per_run"].values()) / max(corpus["train_bytes"], 1)
    # the step time of each shape, measured alone (the prior of the registered rule)
    step_s = {}
    for _, spec in todo:
        shape = (spec.model.d_model, spec.model.n_layers)
        if shape not in step_s:
            step_s[shape] = measured_step(ctx, shape, spec.model.n_heads, seq, batch)
    out["measured_step_s"] = {f"{d}x{L}": v for (d, L), v in step_s.items()}
    ctx.say(
        "doctor: a step alone " + ", ".join(f"{d} x {L}: {1000 * v:.0f} ms" for (d, L), v in step_s.items())
    )
    if before_runs is not None:
        before_runs()
    probes = str(ctx.out / "heldout-probes.jsonl")
    runs_path = ctx.out / "heldout-runs.jsonl"
    task = functools.partial(heldout_task, probes=probes, device=ctx.device, registered_hash=labels)
    threads = worker_threads(ctx.workers)
    ex = LocalExecutor(ctx.workers, threads, task)
    started, slowdowns, stop_why = {}, [], None

    def expect(spec: RunSpec) -> float:
        s = step_s[(spec.model.d_model, spec.model.n_layers)]
        slow = max(slowdowns) if slowdowns else FIRST_SLOWDOWN
        return STARTUP_S + spec.train.steps * s * LOOP_OVERHEAD * slow

    pending = list(todo)
    try:
        while pending or ex.in_flight:
            while pending and stop_why is None and ex.in_flight < ctx.workers:
                h, spec = pending[0]
                need, left = expect(spec), deadline - ctx.elapsed()
                if need > left:
                    stop_why = (f"its expected {need:.0f} s passed the {max(left, 0):.0f} s left of the part "
                                "(registered rule: no later run starts either)")  # fmt: skip
                    break
                ex.submit(h, spec)
                started[h] = (time.perf_counter(), spec)
                pending.pop(0)
            if not ex.in_flight:
                break
            got = ex.next_done(timeout=max(0.1, deadline - ctx.elapsed()))
            if got is None:  # the part's time is up: end what is still going
                ex.abort()
                for h, (_, spec) in started.items():
                    if not any(r["config_hash"] == h for r in out["runs"]):
                        out["not_run"].append(
                            {
                                "config_hash": h,
                                "run": spec.label,
                                "why": "not finished: the part's time ran out",
                            }
                        )
                break
            h, payload = got
            t, spec = started[h]
            took = time.perf_counter() - t
            if "error" in payload:
                row = {
                    "config_hash": h,
                    "run": spec.label,
                    "error": payload["error"][-2000:],
                    "seconds": round(took, 1),
                }
            else:
                row = {k: v for k, v in payload.items() if k not in ("hash", "host", "pid")}
                row["seconds"] = round(took, 1)
                base = spec.train.steps * step_s[(spec.model.d_model, spec.model.n_layers)] * LOOP_OVERHEAD
                slowdowns.append(max(0.1, (took - STARTUP_S) / base))
            out["runs"].append(row)
            _append(str(runs_path), row)
            ctx.say(f"doctor [{len(out['runs'])}/{len(todo)}] {spec.label}: "
                    + (row.get("outcome") or "error") + f" in {took:.0f} s")  # fmt: skip
            ctx.save()
    finally:
        ex.close()
    for h, spec in pending:
        out["not_run"].append({"config_hash": h, "run": spec.label, "why": stop_why or "not started"})
    out["slowdown_measured"] = slowdowns
    outcomes = {r["config_hash"]: r["outcome"] for r in out["runs"] if r.get("outcome")}
    out["score"] = hw.score(reg["runs"], outcomes)
    for line in hw.format_score(out["score"]):
        ctx.say("doctor: " + line)
    if out["not_run"]:
        ctx.say(f"doctor: {len(out['not_run'])} registered runs not run: {out['not_run'][0]['why']}")
    return out


# -- part 3: the topologies at depth --------------------------------------------------------------------
def topo_spec(wrap: str, steps: int, ctx: Ctx) -> RunSpec:
    t = dict(TOPO)
    if ctx.dry:
        t.update({k: v for k, v in DRY["topo"].items() if k != "steps"})
    model = ModelConfig(arch="decoder", wrap=wrap, d_model=t["d_model"], n_layers=t["n_layers"],
                        n_heads=t["n_heads"], vocab_size=256, max_len=t["seq_len"]).replace(streams=t["streams"])  # fmt: skip
    every = max(1, steps // 8)
    train = TrainConfig(task="lm", data=ctx.record["corpus"]["path"], steps=steps, batch_size=t["batch_size"],
                        seq_len=t["seq_len"], lr=t["lr"], warmup=min(t["warmup"], steps // 4), log_every=every,
                        eval_every=every, bf16=True, seed=0, telemetry=not ctx.record.get("telemetry_off"),
                        device="cuda" if ctx.device.startswith("cuda") else "cpu")  # fmt: skip
    return RunSpec(model, train, axes={"wrap": wrap})


def topology_task(spec: RunSpec, *, device: str, steps_path: str) -> dict:
    """One topology run in a worker: the composite gain by depth at init (the probe, on the GPU), then
    training, with the watcher's topology record at every logged step. The probe and each logged step
    are also appended to ``steps_path`` as they come, so that a run the phase's end cuts keeps them."""
    from depthlab.train import train

    wrap = spec.model.wrap
    out = {"wrap": wrap}
    try:
        result = probe_on(spec, device)
        out["init_probe"] = {k: [row.get(k) for row in result.layers] for k in
                             ("composite_gain", "composite_gain_back", "h_res_distance", "contribution")}  # fmt: skip
    except Exception as e:
        out["init_probe"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    _append(steps_path, {"wrap": wrap, "init_probe": out["init_probe"]})
    t0 = time.perf_counter()
    r = train(spec.model, spec.train, None, progress=False,
              on_log=lambda m: _append(steps_path, {"wrap": wrap, **topology_step(m)}))  # fmt: skip
    out.update(
        outcome=r.outcome,
        val_loss=_num(r.val_loss),
        unigram_loss=_num(r.unigram_loss),
        final_train_loss=_num(r.final_train_loss),
        tokens_per_s=_num(r.tokens_per_s),
        train_s=round(time.perf_counter() - t0, 1),
        steps=[topology_step(m) for m in r.metrics],
    )
    return out


def topology_step(m: dict) -> dict:
    """What the tables read of one logged step's record: its losses and the watcher's topology record."""
    return {"step": m["step"], "loss": _num(m["loss"]), "val_loss": _num(m.get("val_loss")),
            "topology": m.get("topology")}  # fmt: skip


def topology_partial(path: Path, wrap: str) -> dict:
    """A cut run as far as ``path`` holds it: its init probe and the logged steps it wrote, outcome "cut"."""
    run = {"wrap": wrap, "outcome": "cut", "steps": []}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("wrap") != wrap:
                continue
            if "init_probe" in row:
                run["init_probe"] = row["init_probe"]
            else:
                run["steps"].append({k: v for k, v in row.items() if k != "wrap"})
    return run


def topologies_measure(ctx: Ctx) -> dict:
    """The topologies part's config, each design's step measured alone, and the steps that fit the train
    phase (run beside the held-out runs: a step assumed ``SHARED`` times as long)."""
    deadline = ctx.deadline("train")
    out = {"config": dict(TOPO) if not ctx.dry else {**TOPO, **DRY["topo"]}, "runs": {}}
    ctx.record["topologies"] = out
    c = out["config"]
    if ctx.dry:
        out.update(steps=DRY["topo"]["steps"], measured_step_s={})
        return out
    step_s = {w: measured_step(ctx, (c["d_model"], c["n_layers"]), c["n_heads"], c["seq_len"], c["batch_size"],
                               wrap=w) for w in ("hc", "mhc")}  # fmt: skip
    shared = SHARED if "doctor" in ctx.parts else 1.0
    left = deadline - ctx.elapsed() - STARTUP_S - 10
    steps = int(left / (max(step_s.values()) * LOOP_OVERHEAD * shared)) // 10 * 10
    out["measured_step_s"] = step_s
    if steps < TOPO_STEPS[0]:
        out["skipped"] = (f"only {max(steps, 0)} steps would fit in the {max(left, 0):.0f} s left at the measured "
                          f"rates; fewer than {TOPO_STEPS[0]}")  # fmt: skip
        ctx.say("topologies: skipped: " + out["skipped"])
        return out
    out["steps"] = min(steps, TOPO_STEPS[1])
    return out


def topologies_start(ctx: Ctx) -> LocalExecutor | None:
    """Start the two runs (hc, mhc), one process each; None where the part was skipped."""
    out = ctx.record["topologies"]
    if "steps" not in out:
        return None
    c = out["config"]
    alone = ", ".join(f"{w} {1000 * v:.0f} ms" for w, v in out["measured_step_s"].items())
    ctx.say(f"topologies: hc and mhc at {c['n_layers']} x {c['d_model']}, {out['steps']} steps each"
            + (f" (a step alone: {alone})" if alone else ""))  # fmt: skip
    threads = worker_threads(2 + (ctx.workers if "doctor" in ctx.parts else 0))
    steps_path = str(ctx.out / "topologies-steps.jsonl")
    ex = LocalExecutor(2, threads, functools.partial(topology_task, device=ctx.device, steps_path=steps_path))
    for w in ("hc", "mhc"):
        ex.submit(w, topo_spec(w, out["steps"], ctx))
    return ex


def topologies_finish(ctx: Ctx, ex: LocalExecutor) -> None:
    """Wait for the two runs until the train phase's end; a run still going then is ended and said."""
    out = ctx.record["topologies"]
    deadline = ctx.deadline("train")
    try:
        while ex.in_flight:
            got = ex.next_done(timeout=max(0.1, deadline - ctx.elapsed()))
            if got is None:
                ex.abort()
                cut = [w for w in ("hc", "mhc") if w not in out["runs"]]
                for w in cut:  # what the cut runs had written: the init probe, the logged steps
                    out["runs"][w] = topology_partial(ctx.out / "topologies-steps.jsonl", w)
                out["cut"] = (f"the phase's time ran out before {' and '.join(cut)} ended: "
                              + ", ".join(f"{w} at step {(out['runs'][w]['steps'] or [{'step': 0}])[-1]['step']}"
                                          for w in cut))  # fmt: skip
                ctx.say("topologies: " + out["cut"])
                break
            w, payload = got
            out["runs"][w] = payload
            if "error" in payload:
                ctx.say(f"topologies {w}: error: {payload['error'].strip().splitlines()[-1]}")
            else:
                ctx.say(f"topologies {w}: {payload['outcome']}, val loss {_f(payload['val_loss'])}, composite gain "
                        f"at the top after training {_f(top_gain(payload))}")  # fmt: skip
            ctx.save()
    finally:
        ex.close()


def top_gain(run: dict):
    last = next((s["topology"] for s in reversed(run.get("steps", [])) if s.get("topology")), None)
    gains = (last or {}).get("composite_gain") or []
    return gains[-1] if gains else None


def gains_at(gains: list, depths=TOPO_DEPTHS) -> list:
    """The gains after each of ``depths`` (None where the stack has no such layer)."""
    return [gains[d] if d < len(gains) else None for d in depths]


# -- the preflight -------------------------------------------------------------------------------------
def preflight(ctx: Ctx) -> None:
    """Before any part: a tiny pre-LN and hc model through the training loop on the device (every step
    logged, the watcher's telemetry on) and through the probe, so that a failure of depthlab's own code on
    this device shows in the first seconds. Where the loop fails only with telemetry on, the held-out and
    topology runs train without it (the outcome then read from the losses alone) and the record says so;
    a failing probe costs only the GPU re-probe, which never decides a score."""
    from depthlab.train import train

    found = {}
    for wrap in ("pre", "hc"):
        m = ModelConfig(
            arch="decoder", wrap=wrap, d_model=32, n_layers=2, n_heads=2, vocab_size=256, max_len=32
        )
        t = TrainConfig(task="lm", data=ctx.record["corpus"]["path"], steps=3, batch_size=2, seq_len=16,
                        log_every=1, eval_every=3, bf16=True, device="cuda" if ctx.device.startswith("cuda") else "cpu")  # fmt: skip
        row = {}
        for what, fn in (
            ("train", functools.partial(train, m, t, None)),
            ("probe", functools.partial(probe_on, RunSpec(m, t), ctx.device)),
        ):
            try:
                fn()
                row[what] = "ok"
            except Exception as e:
                row[what] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if row["train"] != "ok":
            try:
                train(m, dataclasses.replace(t, telemetry=False), None)
                row["train without telemetry"] = "ok"
                ctx.record["telemetry_off"] = (
                    f"the training loop failed on this device with telemetry on ({row['train']})"
                )
            except Exception as e:
                row["train without telemetry"] = (
                    f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                )
        found[wrap] = row
    free(ctx.device)
    ctx.record["preflight"] = found
    ctx.say(
        "preflight: "
        + "; ".join(f"{w}: " + ", ".join(f"{k} {v}" for k, v in r.items()) for w, r in found.items())
    )
    if ctx.record.get("telemetry_off"):
        ctx.say(
            "preflight: the held-out and topology runs train WITHOUT telemetry: "
            + ctx.record["telemetry_off"]
        )
    ctx.save()


# -- the markdown ---------------------------------------------------------------------------------------
def markdown(ctx: Ctx) -> str:
    rec = ctx.record
    m = rec["machine"]
    where = (f"measured on one {m['gpu']} (torch {m['torch']}, CUDA {m.get('cuda')}, Python {m['python']}), "
             f"{m['date']}") if m.get("gpu") else "a dry run on the CPU at toy sizes: no figure here is a result"  # fmt: skip
    cmd = "python benchmarks/gpu.py --all --out DIR"
    lines = [
        f"<!-- written by `{cmd}`{' --dry-run' if ctx.dry else ''}; {rec.get('elapsed_s', 0):.0f} s -->",
        "",
    ]
    sp = rec.get("speed")
    if sp and "groups" not in sp:  # the part failed before its first group
        lines += ["## gpu", "", f"Speed: failed: {_last_line(sp.get('error'))}", ""]
    elif sp:
        lines += ["## gpu", "", f"Speed, {where}: bf16 autocast (fp32 weights, fused AdamW), seq {sp['seq']} x batch "
                  f"{sp['batch']}; each group timed side by side with the nanoGPT-style reference, the models "
                  "alternating; ratio = the model's tokens/s over the reference's in the same group "
                  f"(compiled: each block `torch.compile`d, backend {sp['compile_backend']}). MFU against the "
                  "nominal dense bf16 peak.", "",
                  "| shape | model | tokens/s | TFLOP/s | MFU | x reference | peak GiB (group) |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for g in sp["groups"]:
            if "error" in g:
                lines.append(f"| {g['shape']} | {' + '.join(g['models'])}{' compiled' if g['compiled'] else ''} | "
                             f"failed: {g['error']} | | | | |")  # fmt: skip
                continue
            for key, r in g["models"].items():
                mfu = f"{r['mfu']:.0%}" if r["mfu"] is not None else "-"
                peak = f"{g['peak_gib']:.1f}" if g.get("peak_gib") is not None else "-"
                lines.append(f"| {g['shape']} | {key} | {r['tokens_per_s']:,.0f} | {r['tflops']:.1f} | {mfu} | "
                             f"{r['ratio_to_reference']:.2f} | {peak} |")  # fmt: skip
        goals = sp.get("goals", {}).get("lines") or ["goals: not read yet (the part had not ended)"]
        lines += ["", *[f"- {x}" for x in goals]]
        lines += [f"- skipped: {s['shape']} {' + '.join(s['models'])}{' compiled' if s['compiled'] else ''}: "
                  f"{s['why']}" for s in sp["skipped"]]  # fmt: skip
        if sp.get("error"):
            lines.append(f"- failed: {_last_line(sp['error'])}")
        lines.append("")
    dr = rec.get("doctor")
    if dr and "registration" not in dr:  # the part failed before it read the registration
        lines += ["## depthlab advise at real width (held-out, registered before it ran)", "",
                  f"Failed: {_last_line(dr.get('error'))}", ""]  # fmt: skip
    elif dr:
        c = dr.get("corpus") or {}
        lines += ["## depthlab advise at real width (held-out, registered before it ran)", "",
                  f"{where}. The set and every prediction were committed before this run "
                  f"(`{dr['registration']}`); scored under the rules registered there. Corpus: "
                  f"{c.get('bytes', 0):,} bytes of this machine's Python sources ({c.get('files', 0):,} files, "
                  f"sha256 {str(c.get('sha256'))[:16]}); a run reads at most {dr.get('passes_per_run', 0):.4f} "
                  "passes of its training split."
                  + (f" Trained WITHOUT telemetry: {rec['telemetry_off']}." if rec.get("telemetry_off") else ""),
                  "", "```", *hw_format(dr), "```", ""]  # fmt: skip
        lines += ["| run | outcome | val loss | advise P(trains), frozen | on the GPU's probe | seconds |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        frozen = {r["config_hash"]: r for r in _registered_runs()}
        for r in dr["runs"]:
            f = frozen.get(r["config_hash"], {})
            gp = (r.get("gpu_probe") or {}).get("p_trains")
            lines.append(f"| {r['run']} | {r.get('outcome') or 'error'} | {_f(r.get('val_loss'))} | "
                         f"{_f(f.get('p_trains'), 2)} | {_f(gp, 2)} | {r.get('seconds')} |")  # fmt: skip
        lines += [f"- not run: {x['run']}: {x['why']}" for x in dr["not_run"]]
        lines.append("")
    tp = rec.get("topologies")
    if tp and "config" not in tp:  # the part failed before it set its runs up
        lines += ["## Topologies at depth", "", f"Failed: {_last_line(tp.get('error'))}", ""]
    elif tp:
        c = tp["config"]
        lines += ["## Topologies at depth", "",
                  f"{where}. hc and mhc (n = {c['streams']}) at {c['n_layers']} layers, d_model {c['d_model']}, "
                  f"{tp.get('steps')} steps of {c['batch_size']} x {c['seq_len']} tokens, lr {c['lr']}, warmup "
                  f"{min(c['warmup'], (tp.get('steps') or 0) // 4)}, bf16 autocast; composite gain (forward, "
                  "max row sum of the product of the H_res maps) after layers " + ", ".join(map(str, TOPO_DEPTHS)) + ":",
                  "", "| design | when | composite gain by depth | backward, top | train loss | val loss |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for w, run in tp["runs"].items():
            if "error" in run:
                lines.append(f"| {w} | - | error: {run['error'].strip().splitlines()[-1]} | | | |")
                continue
            init = run.get("init_probe") or {}
            if "composite_gain" in init:
                g = init["composite_gain"]
                lines.append(
                    f"| {w} | init (probe) | {_gl(gains_at(g))} | {_f((init.get('composite_gain_back') or [None])[-1], 3)} | | |"
                )
            for s in run.get("steps", []):
                topo = s.get("topology") or {}
                if topo.get("composite_gain"):
                    lines.append(f"| {w} | step {s['step']} | {_gl(gains_at(topo['composite_gain']))} | "
                                 f"{_f(topo['composite_gain_back'][-1], 3)} | {_f(s['loss'])} | {_f(s['val_loss'])} |")  # fmt: skip
            lines.append(
                f"| {w} | end: {run.get('outcome')} | | | {_f(run.get('final_train_loss'))} | {_f(run.get('val_loss'))} |"
            )
        if tp.get("skipped"):
            lines.append(f"\nSkipped: {tp['skipped']}.")
        if tp.get("cut"):
            lines.append(f"\nCut: {tp['cut']}.")
        if tp.get("error"):
            lines.append(f"\nFailed: {_last_line(tp['error'])}.")
        lines.append("")
    return "\n".join(lines)


def _last_line(error) -> str:
    """The last line of a recorded traceback (its exception and message)."""
    lines = str(error or "").strip().splitlines()
    return lines[-1] if lines else "unknown error"


def _registered_runs() -> list[dict]:
    from depthlab_lab.calibrate import heldout_width as hw

    return hw.load_registration()["runs"]


def hw_format(dr: dict) -> list[str]:
    from depthlab_lab.calibrate import heldout_width as hw

    return hw.format_score(dr["score"]) if "score" in dr else [dr.get("error", "not scored")]


def _f(x, digits: int = 3) -> str:
    """A number for a table: ``digits`` significant digits ("-" for none)."""
    if x is None:
        return "-"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def _gl(xs: list) -> str:
    return ", ".join("-" if x is None else f"{x:.3g}" for x in xs)


# -- the command ----------------------------------------------------------------------------------------
def run_all(
    out: str, parts: tuple[str, ...], dry: bool, workers: int | None, budget: float, work: str | None
) -> int:
    """The suite: setup, then the speed part alone, then the doctor part with the topologies' runs beside
    it; every result into files in ``out``. Returns 1 if a part failed (its error is in the record)."""
    device = "cpu" if dry else "cuda"
    # ten processes share the GPU's memory: let each one's allocator grow and shrink its segments
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    for name in (
        "gpu-log.txt",
        "heldout-probes.jsonl",
        "heldout-runs.jsonl",
        "topologies-steps.jsonl",
        "gpu-results.md",
        "gpu-record.json",
    ):
        (outp / name).unlink(missing_ok=True)
    workp = Path(work) if work else Path(os.environ.get("TMPDIR", "/tmp")) / "depthlab-gpu-work"
    workp.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(out=outp, work=workp, device=device, dry=dry, parts=parts,
              workers=workers or (DRY["workers"] if dry else WORKERS), budget=budget)  # fmt: skip
    lines = plan(parts)
    for line in lines:
        ctx.say(line)
    if dry:
        ctx.say("# dry run: every part at toy size on the CPU (its times are this machine's, not a GPU's)")
    ctx.record.update(command="python benchmarks/gpu.py --all" + (" --dry-run" if dry else ""), dry_run=dry,
                      plan=lines, machine=machine(device), parts=list(parts), budget_s=budget)  # fmt: skip
    peak = bf16_mm_peak(device, 64 if dry else 8192)
    ctx.record["mm_peak_tflops"] = peak / 1e12
    ctx.record["nominal_tflops"] = (nominal_peak(device) or 0) / 1e12 or None
    t0 = time.perf_counter()
    corpus = build_corpus(workp / "corpus.txt", DRY["corpus_cap"] if dry else CORPUS_CAP)
    from depthlab.corpus import load_corpus

    info = load_corpus(corpus["path"], 32).info
    corpus.update(train_bytes=info["train_bytes"], val_bytes=info["val_bytes"],
                  seconds=round(time.perf_counter() - t0, 1))  # fmt: skip
    ctx.record["corpus"] = corpus
    ctx.say(f"setup: {ctx.record['machine'].get('gpu') or 'CPU'}; bf16 mm {peak / 1e12:.1f} TFLOP/s measured; corpus "
            f"{corpus['bytes']:,} bytes from {corpus['files']:,} files in {corpus['seconds']:.0f} s")  # fmt: skip
    ctx.save()
    preflight(ctx)
    failed = []

    def guarded(part: str, fn, *args):
        t = time.perf_counter()
        try:
            return fn(*args)
        except Exception as e:  # one part's failure leaves the others
            import traceback

            ctx.record.setdefault(part, {})["error"] = traceback.format_exc(limit=8)
            ctx.say(f"{part}: failed: {type(e).__name__}: {e}")
            failed.append(part)
            free(device)
        finally:
            ctx.say(f"{part}: {time.perf_counter() - t:.0f} s")
            ctx.save()

    if "speed" in parts:
        guarded("speed", speed_part, ctx)
    topo = {"ex": None}
    if "topologies" in parts:
        guarded("topologies", topologies_measure, ctx)

    def start_topologies():
        topo["asked"] = True
        if "topologies" in parts and "topologies" not in failed:
            topo["ex"] = guarded("topologies", topologies_start, ctx)

    try:
        if "doctor" in parts:
            guarded("doctor", doctor_part, ctx, start_topologies)
        if not topo.get("asked"):  # no doctor part, or it failed before its runs: the topologies alone
            start_topologies()
    finally:
        if topo["ex"] is not None:
            guarded("topologies", topologies_finish, ctx, topo["ex"])
    ctx.save()
    ctx.say(f"done in {ctx.elapsed():.0f} s; wrote {outp}/gpu-record.json, gpu-results.md, gpu-log.txt, "
            "heldout-probes.jsonl, heldout-runs.jsonl, topologies-steps.jsonl")  # fmt: skip
    return 1 if failed else 0
