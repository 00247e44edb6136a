"""How many torch threads depthlab starts, from the cores it may use: the affinity mask (``taskset``, a
container's cpuset) and the cgroup's CPU quota (``docker --cpus``); and that a library call leaves the
caller's thread count as it found it."""

from __future__ import annotations

import os

import pytest
import torch

from depthlab import ModelConfig, TrainConfig, build_model
from depthlab.cli import main
from depthlab.probe import probe
from depthlab.study import executors
from depthlab.train import distributed, train


def _machine(monkeypatch, affinity: int, cpus: int = 64, quota: float | None = None) -> None:
    """A machine of ``cpus`` CPUs of which this process may use ``affinity``, under a CPU ``quota``."""
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)), raising=False)
    monkeypatch.setattr(distributed, "cgroup_cpu_quota", lambda: quota)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def _cgroup(tmp_path, group: str, limits: dict[str, str], lines: str = "") -> tuple[str, str]:
    """A /proc/self/cgroup naming v2 ``group`` (after ``lines``), and a cgroup tree: ``limits`` maps a
    path to cpu.max's line (v2: "quota period") or to v1's two files ("quota/period")."""
    tmp_path.mkdir(exist_ok=True)
    proc = tmp_path / "cgroup"
    proc.write_text(f"{lines}0::{group}\n")
    for path, text in limits.items():
        folder = tmp_path / "fs" / path
        folder.mkdir(parents=True, exist_ok=True)
        if "/" in text:
            quota, period = text.split("/")
            (folder / "cpu.cfs_quota_us").write_text(quota + "\n")
            (folder / "cpu.cfs_period_us").write_text(period + "\n")
        else:
            (folder / "cpu.max").write_text(text + "\n")
    return str(proc), str(tmp_path / "fs")


def test_the_cgroup_quota_is_read_as_cpus_the_least_up_to_the_root(tmp_path):
    read = distributed.cgroup_cpu_quota
    assert read(*_cgroup(tmp_path / "a", "/", {"": "150000 100000"})) == 1.5  # a container's own root
    nested = {"": "max 100000", "kube": "400000 100000", "kube/pod": "max 100000"}
    assert read(*_cgroup(tmp_path / "b", "/kube/pod", nested)) == 4.0  # the parent's limit binds
    assert read(*_cgroup(tmp_path / "c", "/user.slice", {"user.slice": "max 100000"})) is None
    assert read(str(tmp_path / "no-such-file"), str(tmp_path)) is None  # no cgroups: no limit


def test_a_cgroup_v1_quota_is_read_too(tmp_path):
    # a v1 container sees the host's path in /proc/self/cgroup and its own group at the mount's root
    read, v1 = distributed.cgroup_cpu_quota, "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n"
    assert read(*_cgroup(tmp_path / "a", "/", {"cpu,cpuacct": "150000/100000"}, v1)) == 1.5
    assert read(*_cgroup(tmp_path / "b", "/", {"cpu,cpuacct": "-1/100000"}, v1)) is None
    assert read(*_cgroup(tmp_path / "c", "/", {"cpu": "200000/100000"}, "1:cpu:/\n")) == 2.0


def test_a_cgroup_named_in_bytes_that_are_not_utf8_is_read(tmp_path):
    # a cgroup's name is any bytes: reading /proc/self/cgroup as UTF-8 ended every command in a traceback
    name = b"caf\xe9"
    (tmp_path / "cgroup").write_bytes(b"0::/" + name + b"\n")
    os.makedirs(os.fsencode(tmp_path / "fs") + b"/" + name)
    with open(os.fsencode(tmp_path / "fs") + b"/" + name + b"/cpu.max", "w") as f:
        f.write("300000 100000\n")
    assert distributed.cgroup_cpu_quota(str(tmp_path / "cgroup"), str(tmp_path / "fs")) == 3.0


def test_the_usable_cores_are_the_affinity_mask_under_the_quota(monkeypatch):
    _machine(monkeypatch, affinity=1)
    assert distributed.available_cores() == 1  # taskset -c 0 on a 64-CPU machine
    _machine(monkeypatch, affinity=64, quota=1.5)
    assert distributed.available_cores() == 2  # docker --cpus=1.5: rounded up
    _machine(monkeypatch, affinity=64, quota=0.1)
    assert distributed.available_cores() == 1
    _machine(monkeypatch, affinity=8, quota=16.0)
    assert distributed.available_cores() == 8


def test_train_takes_no_more_threads_than_the_affinity_mask_allows(monkeypatch):
    # counted with os.cpu_count(), train set 2 threads on the one core of `taskset -c 0`
    _machine(monkeypatch, affinity=1)
    assert distributed.default_threads() == 1
    _machine(monkeypatch, affinity=64, quota=1.0)
    assert distributed.default_threads() == 1
    _machine(monkeypatch, affinity=64)
    assert distributed.default_threads() == 2


def test_study_workers_share_the_quota_not_the_hosts_cores(monkeypatch):
    # a 2-CPU container on a 64-core host started 2 workers of 32 threads each
    _machine(monkeypatch, affinity=64, quota=2.0)
    assert executors.default_workers() == 2
    assert executors.threads_per_worker(2) == 1 and executors.threads_per_worker(1) == 2


def test_the_command_line_caps_torchs_threads_at_the_usable_cores(monkeypatch, capsys):
    # probe, advise, explain, check and coord left torch's default: the affinity mask's cores, not the quota's
    torch.set_num_threads(2)  # conftest puts the count back after the test
    _machine(monkeypatch, affinity=2, quota=1.0)
    assert main(["explain", "--layers", "1", "--d-model", "16", "--heads", "2"]) == 0
    assert torch.get_num_threads() == 1
    torch.set_num_threads(2)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's own setting stands
    assert main(["explain", "--layers", "1", "--d-model", "16", "--heads", "2"]) == 0
    assert torch.get_num_threads() == 2


@pytest.mark.usefixtures("one_thread")
def test_a_library_call_leaves_the_callers_threads_as_it_found_them():
    cfg = ModelConfig(n_layers=2, d_model=16, n_heads=2)
    torch.set_num_threads(3)  # neither 1 nor min(cores, 2): a count no default would set
    probe(build_model(cfg), torch.randint(0, 256, (2, 8)))
    assert torch.get_num_threads() == 3
    train(cfg, TrainConfig(steps=2, batch_size=2, seq_len=8, eval_batches=1), progress=False)
    assert torch.get_num_threads() == 3
