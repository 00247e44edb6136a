"""Shared benchmark helpers: thread pinning, alternating timing, the matmul peak, memory, machine info.

Every benchmark here runs on a shared 2-core machine, so no single timing is trusted: models are timed
in alternation (round-robin, the order rotated each round, after a warm-up) and compared by the
median of many steps; every goal is a *ratio* measured within one process run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

# The machine's core count: every benchmark fixes torch's threads to it. The smoke tests set 1, since
# on an overloaded machine every OpenMP region waits for its slowest (descheduled) thread.
THREADS = int(os.environ.get("DEPTHLAB_BENCH_THREADS", "2"))


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr and exit code 2, before any work is done."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (argparse names the flag in the error)."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return v


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0")
    return v


def add_model_flags(p: argparse.ArgumentParser, layers: int, d_model: int, heads: int = 4) -> None:
    """--layers, --d-model and --heads: the shape of the one model a benchmark times."""
    p.add_argument("--layers", type=positive_int, default=layers)
    p.add_argument("--d-model", type=positive_int, default=d_model)
    p.add_argument("--heads", type=positive_int, default=heads)


def add_timing_flags(p: argparse.ArgumentParser, rounds: int, budget: float = 90.0) -> None:
    """--rounds and --budget of :func:`time_alternating`."""
    p.add_argument("--rounds", type=positive_int, default=rounds)
    p.add_argument(
        "--budget", type=positive_float, default=budget, help="seconds after which no new round starts"
    )


def shape_list(text: str) -> list[tuple[int, int]]:
    """An argparse type: shapes as ``DxL,DxL`` (width x layers, each >= 1)."""
    out = []
    for item in text.split(","):
        d, _, layers = item.strip().partition("x")
        if not (d.isdigit() and layers.isdigit() and int(d) >= 1 and int(layers) >= 1):
            raise argparse.ArgumentTypeError(f"{text!r}: shapes as DxL,DxL (e.g. 128x6,64x96)")
        out.append((int(d), int(layers)))
    return out


def check_heads(
    p: argparse.ArgumentParser, heads: int, widths: list[int], widths_from: str, heads_from: str
) -> None:
    """Refuse (one line, exit 2) a head count that does not divide every width; ``widths_from`` and
    ``heads_from`` say where each came from (``"--configs"``, ``"--heads 3"``, ``"the 4 heads"``)."""
    bad = [d for d in widths if d % heads]
    if bad:
        p.error(f"{widths_from} width {bad[0]} is not a multiple of {heads_from} (width = heads x head size)")


def check_names(p: argparse.ArgumentParser, flag: str, text: str, known: list[str], hint: str) -> list[str]:
    """The comma list ``text`` of flag ``flag``; refused (one line, exit 2) if empty or a name is not in
    ``known`` (``hint`` says what is)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        p.error(f"{flag} {text!r}: {'unknown ' + ', '.join(bad) if bad else 'no name'} ({hint})")
    return names


def pin_threads(n: int = THREADS) -> int:
    """Fix torch's intra-op threads (and OpenMP/MKL's, for child processes) to ``n``; returns ``n``."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    import torch

    torch.set_num_threads(n)
    return n


def time_alternating(
    fns: dict[str, Callable[[], object]],
    rounds: int,
    steps: int = 1,
    warmup: int = 1,
    between: Callable[[], None] | None = None,
    budget_s: float = float("inf"),
    min_rounds: int = 2,
) -> dict[str, list[float]]:
    """Time each callable ``steps`` times per round, the models alternating; returns name -> seconds.

    The order of the callables is rotated every round, so none always runs right after the same
    neighbour (cache, allocator and frequency effects are spread evenly). ``warmup`` untimed calls
    of each come first. ``between`` (e.g. a matmul-peak sample) runs once at the end of each round.
    The garbage collector is paused while timing so that a collection lands in no one's step.
    No new round starts once ``budget_s`` seconds have passed (after ``min_rounds`` rounds), so a
    quick run stays quick on a busy machine; every model still has the same number of rounds.
    """
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    start = time.perf_counter()
    for r in range(rounds):
        if r >= min_rounds and time.perf_counter() - start > budget_s:
            break
        order = names[r % len(names) :] + names[: r % len(names)]
        gc.collect()
        gc.disable()
        try:
            for name in order:
                for _ in range(steps):
                    t0 = time.perf_counter()
                    fns[name]()
                    times[name].append(time.perf_counter() - t0)
        finally:
            gc.enable()
        if between is not None:
            between()
    return times


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def matmul_flops_per_s(n: int = 2048, reps: int = 2) -> float:
    """fp32 ``torch.mm`` FLOP/s on two n x n matrices (2 n^3 FLOPs per product), best of ``reps``."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)  # first call pays MKL's setup
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def peak_rss_bytes() -> int:
    """This process's peak resident set size in bytes (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss_bytes() -> int:
    """This process's resident set size now, from /proc/self/status (VmRSS, KiB)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo: what the kernel can still hand out without swapping."""
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def load_line() -> str:
    """The 1-minute load average against the core count: a busy machine makes every figure noisy."""
    one = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    busy = "  (BUSY: other jobs share these cores, timings are inflated and noisy)" if one > cores else ""
    return f"load average {one:.1f} on {cores} cores{busy}"


def run_json_subprocess(script: str, args: list[str], timeout: float) -> dict:
    """Run ``python script args`` in a fresh process (so its peak RSS is its own); returns its JSON.

    The child prints exactly one JSON object as its last stdout line. A failure or a timeout comes
    back as ``{"error": "..."}`` rather than an exception, so one config cannot sink a whole run.
    """
    cmd = [sys.executable, script, *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {proc.returncode}: {tail[0]}"}
    return json.loads(lines[-1])


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least-squares y = a + b x; returns (a, b, r2), r2 the coefficient of determination."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    b = sxy / sxx
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return a, b, 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0


def machine_info() -> dict:
    """CPU model, core count, memory, Python, torch and x-transformers versions (for RESULTS.md)."""
    import torch

    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        from importlib.metadata import version

        xt = version("x-transformers")
    except Exception:  # the bench extra is optional
        xt = "not installed"
    with open("/proc/meminfo") as fh:
        mem_kib = int(fh.readline().split()[1])
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "x_transformers": xt,
        "threads": torch.get_num_threads(),
    }
