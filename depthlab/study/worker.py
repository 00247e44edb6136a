"""What a worker does for one run: probe the model at init, train it, and return a picklable payload.

Workers never touch the store: the payload flows back to the driver (through the process pool or
Ray), which writes it in one transaction. So a worker killed mid-run leaves no partial rows.

The payload (a dict of plain values) is what :meth:`depthlab.study.store.Store.finish` reads:
``result`` (result.json shape), ``metrics`` (the on_log records), ``data_info``, ``probe`` (probe
JSON) or ``probe_error``, ``host``, ``pid``, ``seconds``, and ``error`` (a traceback) if it crashed.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable

import torch

from depthlab.errors import spoken_as_flags
from depthlab.jsonable import finite_or_none
from depthlab.model import build_model
from depthlab.probe import ProbeResult, probe
from depthlab.study.grid import RunSpec
from depthlab.train import train
from depthlab.train.tasks import make_task

Task = Callable[[RunSpec], dict]


def start_worker(threads: int, driver_pid: int) -> None:
    """A pool worker's initializer: its torch threads, and a watchdog that ends the worker when the
    driver is gone (killed by SIGKILL, the OOM killer or a scheduler), so no orphan keeps computing."""
    limit_worker_threads(threads)
    threading.Thread(target=_exit_without_driver, args=(driver_pid,), daemon=True).start()


def _exit_without_driver(driver_pid: int, every_s: float = 0.5) -> None:
    while os.getppid() == driver_pid:  # an orphan is adopted by another process: its parent changes
        time.sleep(every_s)
    os._exit(1)


def limit_worker_threads(threads: int) -> None:
    """Limit this worker process's threads (torch's intra-op, OpenMP's, one inter-op thread), so that
    workers x threads <= cores."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # only settable before the first parallel op; later calls are harmless to skip
        pass


def serve(conn, threads: int, driver_pid: int, task: Task | None, flags: bool = False) -> None:
    """A local worker process: take ``(key, spec)`` from the driver's pipe, run it, send back ``(key,
    payload)``, until the driver sends None or goes away. ``flags``: the driver is the command line, and
    a run's refusal names its flags."""
    start_worker(threads, driver_pid)
    with spoken_as_flags() if flags else contextlib.nullcontext():
        _serve(conn, task, threads)


def _serve(conn, task: Task | None, threads: int) -> None:
    """The worker's loop: each run the driver sends, until it sends None or goes away."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the driver is gone
            return
        if message is None:
            return
        key, spec = message
        payload = execute(task, spec, threads)
        try:
            conn.send((key, payload))
        except OSError:  # the driver is gone
            return
        except (
            Exception
        ) as e:  # the payload does not pickle (nothing was sent): the run fails, not the worker
            conn.send((key, {"error": f"the run's payload could not be sent back: {type(e).__name__}: {e}"}))


def execute(task: Task | None, spec: RunSpec, threads: int | None = None) -> dict:
    """Run ``task(spec)`` (default :func:`probe_and_train`) and return its payload, never raising:
    an exception becomes ``payload["error"]`` (the run is then recorded as failed)."""
    start = time.time()
    base = {"hash": spec.hash, "host": socket.gethostname(), "pid": os.getpid()}
    try:
        if threads:
            limit_worker_threads(threads)
        payload = {**base, **(task or probe_and_train)(spec)}
    except Exception:
        payload = {**base, "error": traceback.format_exc(limit=20)}
    payload["seconds"] = time.time() - start
    return payload


def probe_and_train(spec: RunSpec) -> dict:
    """The real task: the at-init probe of the run's model, then the training run."""
    probed, probe_error = probe_at_init(spec)
    result = train(spec.model, spec.train, None, progress=False)
    trained_on = (result.data_info or {}).get("sha256")
    if spec.data_sha256 is not None and trained_on != spec.data_sha256:
        # the run's key names the data the study was expanded with: a file changed since must not be
        # stored under it (re-running the study keys the run by the new content)
        raise RuntimeError(f"train.data {spec.train.data} changed during the study (sha256 differs)")
    return {
        "result": finite_or_none(result.to_dict()),
        "metrics": [finite_or_none(r) for r in result.metrics],
        "data_info": finite_or_none(result.data_info),
        "probe": probed,
        "probe_error": probe_error,
    }


def probe_at_init(spec: RunSpec) -> tuple[dict | None, str | None]:
    """(probe JSON, None), or (None, why) when the probe cannot run for this configuration.

    The model is built with the run's seed, as training builds it, and probed on a real batch of the
    run's task, so the verdict is about the very model that is then trained. A configuration the
    probe cannot measure is recorded with its reason; it never stops the training run.
    """
    try:
        return finite_or_none(probe_run(spec).to_dict()), None
    except Exception as e:  # a probe that cannot run must not stop the training run
        return None, f"{type(e).__name__}: {e}"


def probe_run(spec: RunSpec, light: bool = False) -> ProbeResult:
    """The at-init probe of :func:`probe_at_init` as a :class:`ProbeResult` (raising what it raises).
    ``light``: only what the learning-rate limit reads (no position-varying gradient, no perturbed
    output): the same update gain and relative update, for about half the time."""
    torch.manual_seed(spec.train.seed)
    model = build_model(spec.model)
    batch = make_task(spec.model, spec.train).train_batch(1)  # the run's first batch
    inputs = batch.args[0] if len(batch.args) == 1 else batch.args
    t = spec.train  # the learning rate and warmup the run trains with: the doctor judges them too
    cheap = {"context": False, "perturbation": 0.0} if light else {}
    return probe(model, inputs, loss="lm", lr=t.lr, warmup=t.warmup, steps=t.steps, **cheap)
