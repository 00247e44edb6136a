"""Executors: where runs execute. Both hand each finished run's payload back to the driver.

- :class:`LocalExecutor`: a pool of ``workers`` processes (spawned, so no torch state is forked),
  each limited to ``threads`` torch threads.
- :class:`RayExecutor`: the same runs as Ray tasks, each asking for ``threads`` CPUs; ``ray.init()``
  starts a local instance unless an ``address`` names an existing cluster.

Interface: ``capacity`` (runs worth keeping in flight), ``in_flight``, ``submit(key, spec)``,
``next_done() -> (key, payload)`` (blocks for the next finished run), ``close()``.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import multiprocessing as mp
import os
from concurrent.futures.process import BrokenProcessPool

from depthlab.errors import ConfigError, InputError
from depthlab.study.grid import RunSpec
from depthlab.study.worker import Task, execute, start_worker
from depthlab.train.distributed import omp_threads

EXECUTORS = ("local", "ray")


def available_cores() -> int:
    """CPU cores this process may use (the affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def default_workers() -> int:
    """One single-threaded worker per core, at most 4 (tiny models gain little from more threads)."""
    return max(1, min(available_cores(), 4))


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """Torch threads for each of ``workers`` so that workers x threads <= cores (at least 1), and no
    more than ``OMP_NUM_THREADS`` when the user set it (a limit per process)."""
    share = max(1, (cores or available_cores()) // workers)
    limit = omp_threads() if cores is None else None  # an explicit core count (tests) ignores the env
    return min(share, limit) if limit else share


class LocalExecutor:
    """A process pool; a pool broken by a dying worker is replaced on the next submit."""

    def __init__(self, workers: int, threads: int, task: Task | None = None):
        self.workers, self.threads, self.task = workers, threads, task
        self.capacity = workers
        self.pool = self._new_pool()
        self.futures: dict[cf.Future, object] = {}

    def _new_pool(self) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=mp.get_context("spawn"),
            initializer=start_worker,
            initargs=(self.threads, os.getpid()),
        )

    @property
    def in_flight(self) -> int:
        return len(self.futures)

    def submit(self, key, spec: RunSpec) -> None:
        try:
            fut = self.pool.submit(execute, self.task, spec, self.threads)
        except BrokenProcessPool:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = self._new_pool()
            fut = self.pool.submit(execute, self.task, spec, self.threads)
        self.futures[fut] = key

    def next_done(self) -> tuple[object, dict]:
        done, _ = cf.wait(list(self.futures), return_when=cf.FIRST_COMPLETED)
        fut = next(iter(done))
        key = self.futures.pop(fut)
        try:
            return key, fut.result()
        except BrokenProcessPool:
            return key, {"error": "the worker process died (killed, or out of memory) during this run"}
        except Exception as e:  # e.g. a payload that could not be pickled back
            return key, {"error": f"{type(e).__name__}: {e}"}

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> None:
        """Stop at once (the driver was interrupted): end the workers mid-run; the driver puts their runs
        back in the queue. concurrent.futures has no public call for this, hence ``_processes``."""
        procs = getattr(self.pool, "_processes", None) or {}
        for proc in list(procs.values()):
            proc.terminate()
        self.pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor:
    """Runs as Ray tasks. ``address`` None starts (and at close stops) a local Ray instance."""

    def __init__(self, workers: int, threads: int, task: Task | None = None, address: str | None = None):
        import ray

        self.ray, self.task, self.threads = ray, task, threads
        self.started = not ray.is_initialized()
        if self.started:
            local = {} if address else {"num_cpus": workers * threads, "include_dashboard": False}
            ray.init(address=address, log_to_driver=False, configure_logging=False, **local)
        total = int(ray.cluster_resources().get("CPU", workers * threads))
        self.capacity = max(1, total // threads) if address else workers
        self.remote = ray.remote(num_cpus=threads, max_retries=0)(execute)
        self.refs: dict = {}

    @property
    def in_flight(self) -> int:
        return len(self.refs)

    def submit(self, key, spec: RunSpec) -> None:
        self.refs[self.remote.remote(self.task, spec, self.threads)] = key

    def next_done(self) -> tuple[object, dict]:
        ready, _ = self.ray.wait(list(self.refs), num_returns=1)
        key = self.refs.pop(ready[0])
        try:
            return key, self.ray.get(ready[0])
        except Exception as e:  # a dead worker node, or a task Ray could not run
            return key, {"error": f"ray task failed: {type(e).__name__}: {e}"}

    def close(self) -> None:
        for ref in self.refs:
            self.ray.cancel(ref, force=True)
        if self.started:
            self.ray.shutdown()

    abort = close  # close already cancels the running tasks by force


def check_executor(kind: str, workers: int, address: str | None = None) -> None:
    """Refuse bad executor settings (ConfigError, InputError) before anything is stored or started."""
    if kind not in EXECUTORS:
        raise ConfigError("executor", kind, f"one of {', '.join(EXECUTORS)}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError("workers", workers, "an integer >= 1")
    if address and kind != "ray":
        raise ConfigError("ray_address", address, "only with --executor ray")
    if kind == "ray" and importlib.util.find_spec("ray") is None:
        raise InputError("--executor ray needs Ray: pip install 'depthlab[ray]'")


def make_executor(
    kind: str, workers: int, threads: int, task: Task | None = None, address: str | None = None
):
    """The executor called ``kind`` (local | ray), started; check_executor says what is refused."""
    check_executor(kind, workers, address)
    if kind == "ray":
        return RayExecutor(workers, threads, task, address)
    return LocalExecutor(workers, threads, task)
