"""Executors: where runs execute. Both hand each finished run's payload back to the driver.

- :class:`LocalExecutor`: ``workers`` processes (spawned, so no torch state is forked), each limited
  to ``threads`` torch threads and holding one run at a time: a worker that dies costs only its run.
- :class:`RayExecutor`: the same runs as Ray tasks, each asking for ``threads`` CPUs; ``ray.init()``
  starts a local instance unless an ``address`` names an existing cluster.

Interface: ``capacity`` (runs worth keeping in flight), ``in_flight``, ``submit(key, spec)``,
``next_done() -> (key, payload)`` (blocks for the next finished run), ``close()``.
"""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import signal

from depthlab.config import check_int
from depthlab.errors import ConfigError, InputError, as_flags
from depthlab.study.grid import RunSpec
from depthlab.study.ray_auth import connect, use_token_if_found
from depthlab.study.worker import Task, execute, serve
from depthlab.train.distributed import available_cores, check_threads, omp_threads

EXECUTORS = ("local", "ray")


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
    """A pool of ``workers`` processes (spawned), each running one run at a time over its own pipe, so
    the driver always knows which run is on which process: a worker that dies (SIGKILL, the OOM
    killer) fails only the run it held, the others carry on, and a fresh worker takes its place."""

    def __init__(self, workers: int, threads: int, task: Task | None = None):
        self.workers, self.threads, self.task = workers, threads, task
        self.capacity = workers
        self.ctx = mp.get_context("spawn")
        self.pool: list[Worker] = []

    @property
    def in_flight(self) -> int:
        return sum(w.key is not None for w in self.pool)

    def submit(self, key, spec: RunSpec) -> None:
        for _ in range(2):  # an idle worker found dead is replaced once
            worker = next((w for w in self.pool if w.key is None), None)
            if worker is None:
                worker = Worker(self.ctx, self.threads, self.task)
                self.pool.append(worker)
            try:
                worker.conn.send((key, spec))
                worker.key = key
                return
            except (BrokenPipeError, ConnectionResetError, EOFError):
                self._drop(worker)
        raise RuntimeError("could not start a worker process")

    def next_done(self, timeout: float | None = None) -> tuple[object, dict] | None:
        """The next finished run: (key, payload). A worker that dies without a result gives its own
        run's key with an error payload; the runs on the other workers are not touched. With
        ``timeout`` (seconds), None when no run finished within it."""
        while True:
            busy = [w for w in self.pool if w.key is not None]
            ready = set(mp_connection.wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout))
            if not ready and timeout is not None:
                return None
            for w in busy:
                if w.conn in ready or w.conn.poll():
                    try:
                        key, payload = w.conn.recv()
                    except (EOFError, OSError):  # it died while sending
                        return self._died(w)
                    w.key, w.served = None, w.served + 1
                    return key, payload
            for w in busy:
                if w.proc.sentinel in ready:
                    return self._died(w)

    def _died(self, worker: Worker) -> tuple[object, dict]:
        key = worker.key
        worker.proc.join(5)
        self._drop(worker)
        if worker.served == 0 and worker.proc.exitcode == 1:  # a Python error as it started, not in a run
            raise InputError(
                "a worker process failed as it started (exit code 1; its error is on stderr): where a "
                'script runs the study, call run_study under `if __name__ == "__main__":`'
            )
        return key, {
            "error": f"the worker process (pid {worker.proc.pid}) died during this run ({worker.how()})"
        }

    def _drop(self, worker: Worker) -> None:
        worker.stop(wait=False)
        self.pool.remove(worker)

    def close(self) -> None:
        for w in self.pool:
            w.stop(wait=True)
        self.pool = []

    def abort(self) -> None:
        """Stop at once (the driver was interrupted): end the workers mid-run; the driver puts their runs
        back in the queue."""
        for w in self.pool:
            w.proc.terminate()
        self.close()


class Worker:
    """One worker process of a LocalExecutor and the driver's end of its pipe; ``key`` is the run it
    holds (None when idle)."""

    def __init__(self, ctx, threads: int, task: Task | None):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=serve, args=(child, threads, os.getpid(), task, as_flags()), daemon=True
        )
        self.proc.start()
        child.close()
        self.key, self.served = None, 0  # served: runs it sent back

    def how(self) -> str:
        """How the process ended, in words."""
        code = self.proc.exitcode
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            return f"killed by {name}; out of memory, or killed by hand"
        return f"exit code {code}"

    def stop(self, wait: bool) -> None:
        """Ask the process to exit (it finishes nothing more); with ``wait``, give it 5 s, then end it."""
        try:
            self.conn.send(None)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            pass
        if wait:
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        self.conn.close()


class RayExecutor:
    """Runs as Ray tasks. ``address`` None starts (and at close stops) a local Ray instance."""

    def __init__(self, workers: int, threads: int, task: Task | None = None, address: str | None = None):
        if address:
            use_token_if_found()  # before Ray is imported: it reads its authentication mode then
        import ray

        self.ray, self.task, self.threads = ray, task, threads
        self.started = not ray.is_initialized()
        if self.started and address:
            connect(ray, address, log_to_driver=False, configure_logging=False)
        elif self.started:
            ray.init(
                num_cpus=workers * threads,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
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
        except (
            Exception
        ) as e:  # its worker died (killed, out of memory), its node died, or Ray could not run it
            return key, {"error": f"the Ray task of this run failed: {_first_line(e)}"}

    def close(self) -> None:
        refs, self.refs = list(self.refs), {}
        for ref in refs:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # a task that already ended, or a cluster that is gone: nothing to stop
                pass
        if self.started:
            self.ray.shutdown()

    abort = close  # close already cancels the running tasks by force


def _first_line(e: Exception) -> str:
    """``Name: the first line of the message`` (Ray's messages run to dozens of lines)."""
    lines = str(e).strip().splitlines()
    first = lines[0] if lines else ""
    return f"{type(e).__name__}: {first[:200]}"


def check_executor(kind: str, workers: int, address: str | None = None) -> None:
    """Refuse bad executor settings (ConfigError, InputError) before anything is stored or started."""
    if kind not in EXECUTORS:
        raise ConfigError("executor", kind, f"one of {', '.join(EXECUTORS)}")
    if kind == "ray" and address:  # a cluster's size is its own: only the count's type is checked here
        check_int("workers", workers)
    else:  # processes on this machine: each needs at least one core's share
        check_threads(workers, "workers")
    if address is not None and not address.strip():  # read as no address, it would start a local Ray
        raise ConfigError("ray_address", address, "a Ray cluster's address (without one, a local Ray starts)")
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
