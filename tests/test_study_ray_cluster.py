"""The cluster path, for real: a Ray head started by ``ray start --head`` as its own process (free
ports, its own temporary folder, stopped afterwards) with Ray's default authentication, the smoke preset
run on it with --ray-address, and one task's worker process killed mid-run. The same guarantees as the
local pool: only that run fails, the rerun retries only it, nothing is lost or duplicated.

Authentication as Ray 2.60 ships it: ``RAY_AUTH_MODE`` is left unset, and a token is made first (``ray
get-auth-token --generate``, as Ray's docs say), so ``ray start --head`` turns token authentication on
and depthlab must send the token. The token lives in a throwaway home folder, never the user's."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'depthlab[ray]')")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")]

RAY = Path(sys.executable).with_name("ray")
# Ray's default authentication: no RAY_AUTH_* set; HOME (for ~/.ray/auth_token) is set by the fixture
ENV = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
ENV.update(OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def ray_head():
    """A one-node Ray cluster of 2 CPUs in its own session (so that it, its raylet and its workers can
    be stopped together, and nothing else), on free ports so that it meets no other cluster on this
    machine; yields (address, the session id of the head and everything it starts)."""
    if not RAY.exists():
        pytest.skip("no ray executable beside this Python")
    ENV["HOME"] = home = tempfile.mkdtemp(prefix="dlrayhome", dir="/tmp")  # this cluster's token only
    made = subprocess.run([str(RAY), "get-auth-token", "--generate"], env=ENV, capture_output=True, text=True)
    assert made.returncode == 0 and Path(home, ".ray", "auth_token").is_file(), made.stderr
    p = _free_ports(17)
    tmp = tempfile.mkdtemp(prefix="dlray", dir="/tmp")  # short: Ray's socket paths must stay < 108 bytes
    cmd = [
        str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={p[0]}",
        f"--object-manager-port={p[1]}", f"--node-manager-port={p[2]}", f"--ray-client-server-port={p[3]}",
        f"--dashboard-agent-listen-port={p[4]}", f"--dashboard-agent-grpc-port={p[5]}",
        f"--runtime-env-agent-port={p[6]}", f"--metrics-export-port={p[7]}", f"--dashboard-port={p[8]}",
        f"--worker-port-list={','.join(map(str, p[9:17]))}", "--include-dashboard=false", "--num-cpus=2",
        "--object-store-memory=100000000", f"--temp-dir={tmp}", "--disable-usage-stats",
    ]  # fmt: skip
    log = open(os.path.join(tmp, "head.log"), "w")
    head = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=ENV, start_new_session=True)
    try:
        end = time.time() + 180
        while "Ray runtime started" not in Path(tmp, "head.log").read_text():
            if head.poll() is not None or time.time() > end:
                pytest.fail("the Ray head did not start:\n" + Path(tmp, "head.log").read_text()[-3000:])
            time.sleep(0.5)
        assert "Token authentication is enabled" in Path(tmp, "head.log").read_text()
        yield f"127.0.0.1:{p[0]}", head.pid
    finally:
        _stop(head)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def _session(sid: int) -> list[int]:
    """The processes of the session ``sid``: the head, its raylet, GCS and agents, and the workers
    (each in a process group of its own, all in the session the head was started in)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _stop(head: subprocess.Popen) -> None:
    """SIGTERM to the head (ray start drains, then stops what it started); after 5 s, SIGKILL to every
    process left in its session."""
    try:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(5)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    for pid in _session(head.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    head.wait(30)


def _task_workers(sid: int) -> list[int]:
    """The processes of this cluster (the head's session) that are running a depthlab run right now."""
    found = []
    for pid in _session(sid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().startswith(b"ray::execute"):
                    found.append(pid)
        except OSError:
            continue
    return found


def _study(address: str, db: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "depthlab", "study", "--preset", "smoke", "--executor", "ray"]
    cmd += ["--ray-address", address, "--db", db, "--no-report", "--workers", "2"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def _rows(db: str) -> dict[str, dict]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    rows = {
        r["config_hash"]: dict(r)
        for r in conn.execute("SELECT config_hash, status, attempts, error FROM runs")
    }
    metrics = dict(conn.execute("SELECT run_id, COUNT(*) FROM metrics GROUP BY run_id").fetchall())
    dups = conn.execute(
        "SELECT COUNT(*) FROM (SELECT run_id, step FROM metrics GROUP BY 1, 2 HAVING COUNT(*) > 1)"
    ).fetchone()[0]
    conn.close()
    return {"runs": rows, "metrics": metrics, "dups": dups}


def test_a_killed_ray_worker_fails_only_its_own_run(ray_head, tmp_path):
    address, session = ray_head
    db = str(tmp_path / "s.sqlite")
    driver = _study(address, db)
    victim = None
    try:
        end = time.time() + 240
        while victim is None and driver.poll() is None and time.time() < end:
            busy = _task_workers(session)
            if busy:
                victim = busy[0]
                os.kill(victim, signal.SIGKILL)
            time.sleep(0.05)
        out, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert victim is not None, "no Ray worker was seen running a run"
    assert driver.returncode == 1, err  # a failed run: exit 1 (a result, not bad input)
    rows = _rows(db)["runs"]
    failed = [r for r in rows.values() if r["status"] == "failed"]
    assert len(rows) == 4 and len(failed) == 1, rows
    assert "Ray task of this run failed" in failed[0]["error"], failed[0]["error"]
    assert sum(r["status"] == "done" for r in rows.values()) == 3
    assert (
        "FAILED" in out
        and sum(out.count(f"-> {o}") for o in ("trained", "undertrained", "stalled", "diverged")) == 3
    )
    # the rerun retries the failed run only
    again = _study(address, db)
    out2, err2 = again.communicate(timeout=300)
    assert again.returncode == 0, err2
    assert "4 runs (2 x 2), 3 already done, 1 to run" in out2 and "ran 1 of 4" in out2
    rows2 = _rows(db)
    assert all(r["status"] == "done" for r in rows2["runs"].values()) and len(rows2["runs"]) == 4
    assert rows2["runs"][next(h for h, r in rows.items() if r["status"] == "failed")]["attempts"] == 2
    assert sorted(r["attempts"] for r in rows2["runs"].values()) == [1, 1, 1, 2]
    assert len(rows2["metrics"]) == 4 and len(set(rows2["metrics"].values())) == 1  # every run logged alike
    assert rows2["dups"] == 0
