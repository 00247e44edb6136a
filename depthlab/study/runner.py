"""Run a study: record it, skip what is done, run the rest on an executor, write each result as it lands.

Resume is the normal path: runs are keyed by config hash, so re-running a study skips its ``done``
runs, re-runs ``failed`` ones and those left ``running`` by a driver that no longer exists (killed),
and leaves alone runs a live driver on this machine is running. Every result is written by this
driver in one transaction (run row, metrics, telemetry, probe), so a kill at any moment leaves each
run either complete or absent, never doubled.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from depthlab.errors import InputError, as_flags, option
from depthlab.model.memory import USABLE, available_memory, gb
from depthlab.paths import printable
from depthlab.progress import Progress, TimeLeft, duration, say
from depthlab.study.executors import available_cores, check_executor, make_executor, threads_per_worker
from depthlab.study.grid import MAX_RUNS, RunSpec, StudyConfig
from depthlab.study.store import DEFAULT_DB, Store, check_sqlite_header, check_store_path, owner_id
from depthlab.study.tensorboard import StudyEvents
from depthlab.study.worker import Task
from depthlab.train.cost import estimate
from depthlab.train.tasks import train_memory
from depthlab.words import plural


@dataclass
class StudyOutcome:
    """What a study call did: the study id, runs in the grid, already done before, run now, failed
    now, left to another live driver, the wall time in seconds, and where the TensorBoard events went."""

    study_id: int
    total: int
    skipped: int
    ran: int = 0
    failed: int = 0
    elsewhere: int = 0
    seconds: float = 0.0
    outcomes: dict = field(default_factory=dict)
    events_dir: str | None = None  # the study's TensorBoard folder, once a run's events are in it
    stopped_early: int = 0  # runs that stopped when their outcome was decided (diverged)
    saved_seconds: float = 0.0  # the time those runs would have taken to their last step, estimated


def run_study(
    study: StudyConfig,
    db: str = DEFAULT_DB,
    workers: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    task: Task | None = None,
    progress: bool = True,
    out=None,
    tensorboard: bool = True,
    max_runs: int = MAX_RUNS,
    force_memory: bool = False,
) -> StudyOutcome:
    """Run every run of ``study`` not yet done in the store at ``db``; returns a StudyOutcome.

    ``task`` replaces the per-run work (default: probe at init, then train); it must be picklable
    (a module-level function) and return a payload dict (see ``depthlab.study.worker``).
    ``out`` receives the per-run lines (default stdout). ``tensorboard``: write each finished run's
    curves as TensorBoard events (``depthlab.study.tensorboard``: ``<db folder>/tensorboard/<study>/``).
    Refused before the store is touched: bad executor settings, a grid of more than ``max_runs`` runs,
    a bad combination, and runs that would not fit in free memory ``workers`` at a time (unless
    ``force_memory``; not checked for a Ray cluster, whose memory is its own).
    """
    out = out or sys.stdout
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # a worker process importing the script that started the study (the flag multiprocessing's own
        # check reads): without the guard each worker would start the study again, then die
        raise InputError(
            "run_study was called while a worker process imported the script that runs the study: "
            'call it under `if __name__ == "__main__":`'
        )
    check_store_path(db)  # a path where no result could be kept is refused before any run
    specs = _checked(study, workers, executor, ray_address, max_runs, force_memory)
    threads = threads_per_worker(workers)
    note = store_note(db)
    with Store(db) as store:
        for line in (note, repeat_note(study, len(specs))):
            if line:
                print(line, file=out, flush=True)
        sid = store.add_study(study.name, study.to_dict(), study.config_hash(specs), specs)
        namesakes = [str(s["id"]) for s in store.studies() if s["name"] == study.name and s["id"] != sid]
        if namesakes:  # a grid edited under the same name is a new study, not a change to the old one
            by_name, by_id = (
                (f"--study {study.name}", "--study ID")
                if as_flags()
                else (f"depthlab.open(db).study({study.name!r})", "depthlab.open(db).study(ID)")
            )
            print(
                f"note: {printable(db)} also holds {'a study' if len(namesakes) == 1 else 'studies'} named "
                f"{study.name!r} with another grid (id {', '.join(namesakes)}); this grid is study {sid}, "
                f"sharing the runs they have in common; {by_name} reads the one run last, {by_id} either",
                file=out,
                flush=True,
            )
        status = {r["config_hash"]: r for r in store.runs(sid)}
        todo = [(status[s.hash]["id"], s) for s in specs if status[s.hash]["status"] != "done"]
        todo = deque(sorted(todo, key=lambda t: -run_cost(t[1])))  # longest first: a shorter makespan
        res = StudyOutcome(study_id=sid, total=len(specs), skipped=len(specs) - len(todo))
        print(
            f"study {study.name!r}: {plural(res.total, 'run')} ({grid_shape(study, res.total)}), "
            f"{res.skipped} already done, {len(todo)} to run "
            f"({executor}: {plural(workers, 'worker')} x {plural(threads, 'thread')}, "
            f"{plural(available_cores(), 'core')}) -> {printable(db)}",
            file=out,
            flush=True,
        )
        clock = None
        if todo:
            clock, line = time_plan(
                todo, [(s, status[s.hash]) for s in specs], workers, threads, task is None
            )
            print(line, file=out, flush=True)
            events = StudyEvents(db, study.name) if tensorboard else None
            ex = make_executor(executor, workers, threads, task, ray_address)
            quiet = None if progress else io.StringIO()  # not a terminal: nothing is drawn
            bar = Progress(len(todo), f"study {study.name!r}", unit="run", clock=clock, stream=quiet)
            _drive(store, todo, ex, res, bar, out, events, clock)
    return res


def grid_shape(study: StudyConfig, runs: int) -> str:
    """The grid's axes' lengths (``2 x 3 x 2``; ``no axes``), and how many of its combinations repeat a run
    when fewer than their product are ``runs`` (:func:`repeat_note` says which)."""
    shape = " x ".join(str(n) for n in study.shape()) or "no axes"
    repeats = study.count() - runs
    return f"{shape}, {repeats:,} repeated" if repeats > 0 else shape


# A worker's start, before its first run's own time: the spawned process, its imports of torch and
# depthlab, and what its first run imports on first use (torch._dynamo at its first optimizer, the
# probe's autograd functions); its first run's corpus read. Measured: a 1-worker executor's first round
# of a smoke run less its second, a median of 3-4 rounds, 3.9 s and 4.7 s at load averages 3.8 and 5.4
# on the 2-core development machine (CPU torch 2.x, shared with other jobs); less on an idle machine.
WORKER_START_S = 4.0


def time_plan(todo, known, workers: int, threads: int, trains: bool = True) -> tuple[TimeLeft | None, str]:
    """The clock of the runs ``todo`` ((id, RunSpec) pairs) and the line that says how long they are
    expected to take: the cost model (:mod:`depthlab.train.cost`: step times measured now), corrected by
    the runs of ``known`` ((RunSpec, store row) pairs) already done with their measured seconds. A task
    other than training (``trains`` False) has no cost model: its runs count alike until measured. The
    ``workers`` longest runs each start a worker first (:data:`WORKER_START_S`)."""
    if not trains:
        clock = TimeLeft({rid: 1.0 for rid, _ in todo}, workers)
        return clock, "expected time: known once a run has finished"
    done = [(s, row["seconds"]) for s, row in known if row["status"] == "done" and row.get("seconds")]
    expected = estimate([(rid, s.model, s.train) for rid, s in todo], threads)
    before = estimate([(i, s.model, s.train) for i, (s, _) in enumerate(done)], threads) if done else {}
    if expected is None or before is None:
        return None, "expected time: unknown (the step times could not be measured here)"
    for rid in sorted(expected, key=lambda k: -expected[k])[:workers]:
        expected[rid] += WORKER_START_S
    clock = TimeLeft(expected, workers, known=[(before[i], sec) for i, (_, sec) in enumerate(done)])
    basis = "step times measured now"
    if done:
        basis += f", x {clock.speed():.2f} as {plural(len(done), 'stored run')} took"
    return (
        clock,
        f"expected time: about {duration(max(1.0, clock.total_s()))} ({basis}; the longest runs first)",
    )


def _checked(study, workers, executor, ray_address, max_runs, force_memory) -> list[RunSpec]:
    """The study's runs, once everything is checked that can be before the store is created or touched."""
    if not isinstance(study, StudyConfig):
        raise TypeError(f"study must be a depthlab.study.StudyConfig, not {type(study).__name__}")
    check_executor(executor, workers, ray_address)
    study.check_count(max_runs)  # from the axes' lengths, before anything is built
    specs = study.expand()
    if not (force_memory or (executor == "ray" and ray_address)):
        check_study_memory(specs, workers)
    return specs


def plan(study: StudyConfig, db: str = DEFAULT_DB) -> Iterator[tuple[RunSpec, str]]:
    """Every run of ``study`` with what the store at ``db`` knows of it ("new" or its status), one at a
    time as the grid is expanded (a long grid streams); runs nothing and creates no store. The store is
    read now: a folder, a non-SQLite or damaged file is refused as the real run refuses it."""
    check_sqlite_header(db)
    known = {}
    if os.path.isfile(db) and os.path.getsize(db) > 0:  # an empty file would become a new store
        with Store(db, create=False) as s:
            known = s.statuses()
    return ((spec, known.get(spec.hash, "new")) for spec in study.iter_specs())


def store_note(db: str) -> str | None:
    """The line that says an existing empty ``db`` file becomes a new store (None otherwise)."""
    if os.path.isfile(db) and os.path.getsize(db) == 0:
        return f"{printable(db)} is an empty file: it becomes a new study store"
    return None


def repeat_note(study: StudyConfig, runs: int) -> str | None:
    """The line that says ``runs`` (the grid's distinct runs) is fewer than its combinations: some of
    them resolve to a run listed before (:meth:`StudyConfig.expand` drops the repeats); None otherwise."""
    count = study.count()
    if runs >= count:
        return None
    return (
        f"note: {count - runs:,} of the grid's {count:,} combinations repeat a run listed before them once "
        f"resolved (a value listed twice, or a setting that restates a default): {plural(runs, 'run')}"
    )


# A worker is a process of its own: Python, torch and depthlab imported before its first run (226 MiB and
# 282 MiB measured in two installs of CPU torch 2.13, Linux x86-64: the installed packages move it;
# tests/test_memory.py measures it again), which the free memory the driver reads does not yet hold and a
# run's estimate does not count. The larger, rounded up.
WORKER_PROCESS = 288 << 20


def check_study_memory(specs: list[RunSpec], workers: int) -> None:
    """InputError when the ``workers`` largest runs, trained at once, each in a worker process of its own
    (:data:`WORKER_PROCESS`), would not fit in free memory."""
    free = available_memory()
    if free is None or not specs:
        return
    estimates = sorted((train_memory(s.model, s.train) for s in specs), key=lambda e: -e.total)
    at_once = estimates[:workers]
    need = sum(e.total + WORKER_PROCESS for e in at_once)
    if need > USABLE * free:
        n = len(at_once)
        raise InputError(
            f"{plural(n, 'run')} at once ({plural(workers, 'worker')}, each a process of "
            f"{gb(WORKER_PROCESS)} before its run) need about {gb(need)}, the largest "
            f"{estimates[0].describe()}, more than {USABLE:.0%} of the {gb(free)} free: use fewer "
            f"{option('workers')} or smaller runs, or {option('force_memory')} to try anyway"
        )


def run_cost(spec: RunSpec) -> int:
    """A run's relative cost (layers x tokens trained), to start the longest runs first."""
    m, t = spec.model, spec.train
    return (m.enc_depth + m.dec_depth) * t.steps * t.batch_size * t.seq_len


def _drive(
    store: Store,
    todo: deque,
    ex,
    res: StudyOutcome,
    bar: Progress,
    out,
    events: StudyEvents | None,
    clock: TimeLeft | None,
) -> None:
    """Keep the executor full, write each result as it lands (the store, then TensorBoard events),
    print a line per finished run with the time left (``clock``); ``bar`` is drawn on a terminal."""
    owner, start, specs, began = owner_id(), time.time(), {}, {}
    try:
        while todo or ex.in_flight:
            while todo and ex.in_flight < ex.capacity:
                rid, spec = todo.popleft()
                if store.claim(rid, owner):
                    specs[rid], began[rid] = spec, time.monotonic()
                    ex.submit(rid, spec)
                    if clock is not None:
                        clock.started(rid)
                else:
                    res.elsewhere += 1
                    if clock is not None:
                        clock.skip(rid)  # another driver's
                    bar.advance()
            if not ex.in_flight:
                break
            rid, payload = ex.next_done()
            status = store.finish(rid, payload)
            spec = specs.pop(rid)
            if events is not None and events.write(spec, payload):
                res.events_dir = events.root
            res.ran += 1
            res.failed += status == "failed"
            outcome = (payload.get("result") or {}).get("outcome") or status
            res.outcomes[outcome] = res.outcomes.get(outcome, 0) + 1
            saved = saved_seconds(spec, payload)
            if saved:
                res.stopped_early += 1
                res.saved_seconds += saved
            line = run_line(res.skipped + res.ran + res.elsewhere, res.total, spec, status, payload)
            took = time.monotonic() - began.pop(rid)  # its worker's start too, where the run started one
            if clock is not None and status == "done":  # a run stopped early: measured at its whole length
                clock.finished(rid, took + saved)
            elif clock is not None:  # a failed run says nothing of the speed
                clock.skip(rid)
            if clock is not None and (todo or ex.in_flight):
                line += f" (about {duration(clock.left_s())} left)"
            bar.advance()
            say(line, stream=out)
    except BaseException:  # Ctrl-C, SIGTERM (see depthlab.cli.study), or a bug: stop the workers now
        ex.abort()
        raise
    finally:
        bar.close()
        try:
            ex.close()
        finally:  # even when stopping the executor fails
            store.release(owner)  # an interrupted driver puts its unfinished runs back in the queue
            res.seconds = time.time() - start


def saved_seconds(spec: RunSpec, payload: dict) -> float:
    """The time a run that stopped at a decided outcome saved: its remaining steps at its own mean
    seconds per step so far (0 for a run that reached its last step, or failed)."""
    r = payload.get("result") or {}
    step, steps = r.get("step"), spec.train.steps
    if r.get("outcome") != "diverged" or not step or step >= steps:
        return 0.0
    return payload.get("seconds", 0.0) / step * (steps - step)


def run_line(n: int, total: int, spec: RunSpec, status: str, payload: dict) -> str:
    """One line per finished run: position, axis values, outcome (or the error's last line), loss, time."""
    width = len(str(total))
    head = f"[{n:>{width}}/{total}] {spec.label}"
    if status == "failed":
        err = (payload.get("error") or "").strip().splitlines() or ["unknown error"]
        return f"{head} -> FAILED: {err[-1]}"
    r = payload.get("result") or {}
    val = r.get("val_loss")
    loss = f"val {val:.3f}" if isinstance(val, (int, float)) else "val -"
    why = f" ({r['reason']})" if r.get("reason") and r.get("outcome") != "trained" else ""
    return f"{head} -> {r.get('outcome', '?')}{why}, {loss}, {payload.get('seconds', 0.0):.1f} s"
