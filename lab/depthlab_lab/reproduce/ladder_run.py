"""Running the scale ladder (:mod:`depthlab_lab.reproduce.ladder`) into a study store, and its cost.

Each claim's rung is one study, ``ladder-CLAIM-dWIDTH``, whose runs are the rung's settings x seeds,
on the small regime of :mod:`depthlab_lab.reproduce.lm_runs` with the rung's overrides. The store is
depthlab's study store: a run already done in it is skipped, so the ladder resumes across sittings,
and a run shared by two claims trains once. ``quick`` is a smoke version that is not registered (widths
16 and 32, two seeds, 4 layers at most, 12 updates): its studies are named ``ladder-quick-...``.
"""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass

from depthlab.errors import ConfigError
from depthlab.progress import TimeLeft, duration
from depthlab.study import StudyConfig, plan, run_study
from depthlab.study.executors import default_workers
from depthlab.study.storefile import check_sqlite_header
from depthlab_lab import REPOSITORY
from depthlab_lab.reproduce import cost
from depthlab_lab.reproduce.ladder import COMMIT, LADDER, LadderClaim
from depthlab_lab.reproduce.lm_runs import TINY_MODEL, TINY_TRAIN

QUICK_WIDTHS = (16, 32)
QUICK_SEEDS = [0, 1]
QUICK_LAYERS, QUICK_STEPS = 4, 12


@dataclass(frozen=True)
class Rung:
    """One claim at one width: its study and, per setting label, the axis value that selects it."""

    claim: str
    width: int
    study: StudyConfig
    settings: dict  # label -> {"model": ..., "train": ...}
    seeds: tuple[int, ...]


def chosen(names: str | None) -> list[str]:
    """The ladder's claims named in ``names`` (comma-separated; None: all, in ladder order); an unknown
    name is a ConfigError naming the claims the ladder has."""
    if names is None:
        return list(LADDER)
    picked = [n.strip() for n in names.split(",") if n.strip()]
    if not picked:  # '' or ',': not every claim, which leaving --claims out asks for
        raise ConfigError("--claims", names, f"one or more of {', '.join(LADDER)}")
    for n in picked:
        if n not in LADDER:
            raise ConfigError("--claims", n, f"one of {', '.join(LADDER)}")
    return picked


def _quick(settings: dict) -> dict:
    out = {}
    for label, s in settings.items():
        m = {**s["model"], "n_layers": min(s["model"]["n_layers"], QUICK_LAYERS)}
        t = {**s["train"], "steps": QUICK_STEPS, "log_every": 4, "eval_batches": 2}
        t["warmup"] = min(t.get("warmup", 0), QUICK_STEPS // 3)
        out[label] = {"model": m, "train": t}
    return out


def rung(claim: LadderClaim, width: int, quick: bool = False) -> Rung:
    """The study of ``claim`` at ``width`` (one run per setting and seed)."""
    if quick:  # the first rung's settings (its lr sweep at the first quick width only), shrunk
        first = claim.settings_at(claim.widths[0])
        if width != QUICK_WIDTHS[0]:
            first = {k: v for k, v in first.items() if k not in claim.lr_sweep}
        settings = {k: {**v, "model": {**v["model"], "d_model": width}} for k, v in _quick(first).items()}
    else:
        settings = claim.settings_at(width)
    seeds = QUICK_SEEDS if quick else claim.registration(COMMIT).regimes[f"d{claim.widths[0]}"]["seeds"]
    values = [
        {
            **{f"model.{k}": v for k, v in s["model"].items()},
            **{f"train.{k}": v for k, v in s["train"].items()},
        }
        for s in settings.values()
    ]
    name = f"ladder-{'quick-' if quick else ''}{claim.name}-d{width}"
    study = StudyConfig.from_dict(
        {
            "name": name,
            "description": f"The scale ladder: {claim.name} at d_model {width}",
            "model": dict(TINY_MODEL),
            "train": dict(TINY_TRAIN),
            "axes": {"setting": values, "seed": list(seeds)},
        }
    )
    return Rung(claim.name, width, study, settings, tuple(seeds))


def rungs(names: list[str], quick: bool = False) -> list[Rung]:
    """Every rung of the named claims, widths ascending within a claim."""
    return [rung(LADDER[n], w, quick) for n in names for w in (QUICK_WIDTHS if quick else LADDER[n].widths)]


def estimate(todo: list[Rung], db: str) -> list[tuple[str, int, int, float]]:
    """Per claim: (name, runs, runs already done in ``db``, expected serial seconds of the rest), from
    :mod:`depthlab_lab.reproduce.cost` (step times measured now on this machine)."""
    out: dict[str, list] = {}
    for r in todo:
        row = out.setdefault(r.claim, [r.claim, 0, 0, 0.0])
        n, done, seconds = rung_estimate(r, db)
        row[1] += n
        row[2] += done
        row[3] += seconds
    return [tuple(v) for v in out.values()]


def rung_estimate(r: Rung, db: str) -> tuple[int, int, float]:
    """(runs, runs already done in ``db``, expected serial seconds of the rest) of one rung."""
    n = done = 0
    seconds = 0.0
    for spec, status in plan(r.study, db):
        n += 1
        if status == "done":
            done += 1
        else:
            seconds += cost.run_seconds(spec.model, spec.train)
    return n, done, seconds


def plan_lines(rows: list[tuple[str, int, int, float]], workers: int) -> list[str]:
    """The plan's text from :func:`estimate`'s rows: a line per claim, then the total (serial, and with
    ``workers`` workers on as many cores)."""
    total = sum(r[3] for r in rows)
    lines = [
        f"ladder {name}: {n} runs ({done} already in the store), about {_hours(s)}"
        for name, n, done, s in rows
    ]
    lines.append(
        f"ladder: {sum(r[1] for r in rows)} runs, {sum(r[2] for r in rows)} already done; expected about "
        f"{_hours(total)} of one core, {_hours(total / max(workers, 1))} with {workers} workers "
        "(cost model: step times measured now, one torch thread a run)"
    )
    return lines


def print_plan(todo: list[Rung], db: str, workers: int, out=None) -> float:
    """Print the plan (:func:`plan_lines`) of ``todo`` against ``db``; returns the total serial seconds."""
    rows = estimate(todo, db)
    print("\n".join(plan_lines(rows, workers)), file=out or sys.stdout, flush=True)
    return sum(r[3] for r in rows)


def _hours(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def run_ladder(
    db: str, names: list[str], quick: bool = False, workers: int | None = None, out=None
) -> list[Rung]:
    """Run (or resume) every rung of ``names`` into ``db``; returns the rungs. The plan and its expected
    time are printed first; each rung's study prints its runs with the time left of the rung, and a line
    after each rung gives the time left of the whole ladder (:class:`depthlab.progress.TimeLeft` over the
    rungs: the cost model's seconds, corrected by the rungs' measured times)."""
    workers = workers or default_workers()
    out = out or sys.stdout
    todo = rungs(names, quick)
    print_plan(todo, db, workers, out)
    left = {r.study.name: rung_estimate(r, db)[2] / workers for r in todo}
    clock = TimeLeft({k: v for k, v in left.items() if v > 0})
    for k, r in enumerate(todo, 1):
        res = run_study(r.study, db=db, workers=workers, progress=False, out=out, tensorboard=False)
        name = r.study.name
        if name in clock.expected and res.ran:
            clock.finished(name, res.seconds)
        elif name in clock.expected:
            clock.skip(name)  # run elsewhere, or nothing to run after all
        if res.ran or k == len(todo):
            tail = f"; about {duration(clock.left_s())} left" if k < len(todo) else ""
            print(f"ladder: {k}/{len(todo)} rungs done ({name}: {res.ran} runs, {duration(res.seconds)}){tail}",
                  file=out, flush=True)  # fmt: skip
    return todo


def commit_time(commit: str = COMMIT) -> float | None:
    """The commit time (Unix seconds) of the ladder's registration, from git; None without git or
    without a registered commit."""
    if not commit:
        return None
    root = REPOSITORY
    try:
        done = subprocess.run(
            ["git", "show", "-s", "--format=%ct", commit],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return float(done.stdout.strip())


def runs_before(runs: list[dict], registered: float | None) -> list[dict]:
    """The stored runs that started before the registration's commit time ``registered`` (none for a
    ladder run as registered); an empty list when the commit time is unknown (no git history)."""
    if registered is None:
        return []
    return [r for r in runs if r.get("started_at") is not None and r["started_at"] < registered]


def check_db(db: str) -> None:
    """InputError (one line) when ``db`` cannot be a study store: a folder, a file that is not SQLite,
    a path where no result could be kept."""
    check_sqlite_header(db)


def finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)
