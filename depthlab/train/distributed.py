"""One run across processes: torchrun's environment, the process group, DDP, devices and threads.

``torchrun --standalone --nproc-per-node=N -m depthlab train ...`` sets RANK, WORLD_SIZE and LOCAL_RANK;
:func:`setup` then joins the process group (gloo on CPU, NCCL on GPU). Every process builds the same
global batch and trains on its share (:func:`depthlab.train.batch.shard`), so N processes see the data a
single process would with the same global batch. Only rank 0 writes files or prints.
"""

from __future__ import annotations

import gc
import math
import os
from dataclasses import dataclass

import torch
import torch.distributed as tdist

from depthlab.config import check_int
from depthlab.errors import ConfigError


@dataclass
class Dist:
    """rank / world size / device of this process; ``owns_group`` if :func:`setup` created the group."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> Dist:
        """This process's rank and world size as torchrun set them, without joining a process group
        (what a command needs to decide which process speaks)."""
        return cls(rank=env_rank(), world=env_world_size())

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """The elementwise sum over processes (a no-op in one process); returned on t's device."""
        if self.world == 1:
            return t
        buf = t.to(self.device) if self.device.type == "cuda" else t.clone()
        tdist.all_reduce(buf, op=tdist.ReduceOp.SUM)
        return buf.to(t.device)

    def barrier(self) -> None:
        if self.world > 1:
            tdist.barrier()


def env_rank() -> int:
    """RANK as torchrun set it (0 outside torchrun, or where RANK is not a non-negative integer)."""
    return _env_int("RANK", 0)


def env_world_size() -> int:
    """WORLD_SIZE as torchrun set it (1 outside torchrun, or where WORLD_SIZE is not a positive integer)."""
    return max(_env_int("WORLD_SIZE", 1), 1)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isascii() and value.isdigit() else default


def resolve_device(pref: str, local_rank: int = 0) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU is a ConfigError."""
    if pref == "cuda" or (pref == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("device", "cuda", "cpu or auto (no CUDA device is visible)")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def setup(device_pref: str) -> Dist:
    """This process's Dist; joins torchrun's process group when WORLD_SIZE > 1."""
    world = env_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_pref, local_rank)
    if world == 1:
        return Dist(device=device)
    owns = False
    if not tdist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        tdist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        owns = True
    return Dist(tdist.get_rank(), tdist.get_world_size(), local_rank, device, owns)


def teardown(dist: Dist) -> None:
    """Destroy the process group :func:`setup` created, and free it now: a DDP wrapper left in a
    reference cycle would keep gloo's group alive into interpreter shutdown, where its worker threads
    free tensors without the GIL and abort the process (SIGABRT after a finished run)."""
    if dist.owns_group and tdist.is_initialized():
        gc.collect()  # the cycles holding the wrapper, while the interpreter still runs
        tdist.destroy_process_group()


def wrap_ddp(model: torch.nn.Module, dist: Dist) -> torch.nn.Module:
    """The model wrapped in DistributedDataParallel (averaging gradients), or as is in one process."""
    if dist.world == 1:
        return model
    ids = [dist.device.index] if dist.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)


def default_threads() -> int:
    """Intra-op threads: ``OMP_NUM_THREADS`` when the user set it; else min(cores, 2) for one process
    (:func:`available_cores`: ``taskset -c 0`` leaves one) and 1 per process under torchrun (the
    processes already share the cores, and more threads than cores make every one of them slower)."""
    limit = omp_threads()
    if limit is not None:
        return limit
    if env_world_size() > 1:
        return 1
    return min(available_cores(), 2)


def omp_threads() -> int | None:
    """``OMP_NUM_THREADS`` as a positive integer, or None when it is unset or not one."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    ok = value.isascii() and value.isdigit()  # "²" is a digit to str.isdigit, not to int()
    return int(value) if ok and int(value) >= 1 else None


# More threads than this many per core only slow a run down; far more (100,000) crash the OpenMP
# runtime outright (a segfault, before any message), so the count is refused above it.
THREADS_PER_CORE_MAX = 4


def available_cores() -> int:
    """CPU cores this process may use: those of its affinity mask (``taskset``, a container's cpuset)
    where the OS has one, and no more than its cgroup's CPU quota allows, rounded up (``docker
    --cpus=2`` or a Kubernetes CPU limit on a 64-core host: 2)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(cores, math.ceil(quota))) if quota is not None else max(1, cores)


def cgroup_cpu_quota(proc: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> float | None:
    """The CPUs this process's cgroup may use (quota / period: cgroup v2's ``cpu.max``, v1's
    ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``), the least on its path up to the root (a parent's
    limit binds too; in a container the host's path is absent, its own limit sits at the root), or None
    where nothing limits it."""
    try:  # a group's name is any bytes: kept as the file system's own (surrogateescape), not decoded
        with open(proc, errors="surrogateescape") as f:
            lines = [line.strip().split(":", 2) for line in f if line.count(":") >= 2]
    except OSError:
        return None
    found = []
    for _, controllers, group in lines:
        if controllers == "":  # v2: one hierarchy
            folder, read = root, _quota_v2
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's own hierarchy
            folder, read = os.path.join(root, controllers), _quota_v1
        else:
            continue
        path = group.strip("/")
        while True:
            quota = read(os.path.join(folder, path))
            found += [quota] if quota is not None else []
            if not path:
                break
            path = os.path.dirname(path)
    return min(found) if found else None


def _quota_v2(folder: str) -> float | None:
    try:
        with open(os.path.join(folder, "cpu.max")) as f:
            quota, period = f.read().split()[:2]
        return int(quota) / int(period) if quota != "max" and int(period) > 0 else None
    except (OSError, ValueError):  # no file at this level (a v2 root group has none)
        return None


def _quota_v1(folder: str) -> float | None:
    try:
        with (
            open(os.path.join(folder, "cpu.cfs_quota_us")) as f,
            open(os.path.join(folder, "cpu.cfs_period_us")) as g,
        ):
            quota, period = int(f.read()), int(g.read())
        return quota / period if quota > 0 and period > 0 else None  # -1: no limit
    except (OSError, ValueError):
        return None


def max_threads() -> int:
    """The most torch threads (or processes of one study) depthlab starts: THREADS_PER_CORE_MAX x cores."""
    return THREADS_PER_CORE_MAX * available_cores()


def check_threads(n, name: str = "threads") -> int:
    """ConfigError unless ``n`` is an integer in [1, :func:`max_threads`]; returns ``n``."""
    check_int(name, n, 1, max_threads())
    return n


def cap_torch_threads() -> int:
    """Lower torch's intra-op threads to :func:`available_cores` where they exceed it, unless the user
    set ``OMP_NUM_THREADS`` (torch follows it); returns the count now. Torch's own default counts the
    cores of the affinity mask, not a container's CPU quota, beyond which more threads only wait."""
    if omp_threads() is None and torch.get_num_threads() > available_cores():
        torch.set_num_threads(available_cores())
    return torch.get_num_threads()


def set_torch_threads(n: int | None) -> int:
    """Set torch's intra-op threads (``None`` = :func:`default_threads`); returns the number set.
    ConfigError for a count outside [1, :func:`max_threads`] (an OMP_NUM_THREADS beyond it is named)."""
    if n is None:
        n = default_threads()
        check_threads(n, "threads" if omp_threads() is None else "OMP_NUM_THREADS")
    check_threads(n)
    torch.set_num_threads(n)
    return n
