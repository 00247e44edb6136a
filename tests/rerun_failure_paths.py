"""Rerun the classes of hostile input that the failure-paths work was measured on, and count them.

    python tests/rerun_failure_paths.py            # about 5 minutes on 2 cores; prints a table
    python tests/rerun_failure_paths.py --quick    # the command-line and API classes only (no kills)
    python tests/rerun_failure_paths.py --lab      # the lab's classes only (calibrate, reproduce --restore)

Each command runs as ``python -m depthlab ...`` in its own process, under a time limit and an
address-space limit of 8 GB (so an input that is not handled shows up as a timeout, a crash or a
traceback instead of taking the machine). A case counts as handled when it ends as documented: for
bad input, exit 2 with one line on stderr and nothing written where it must not be; for the recovered
cases (a damaged checkpoint, an empty store), exit 0 and a line on stderr or stdout saying what was
done. The kill classes (a worker killed under the local pool and under a real Ray cluster, two drivers
on one store) are the tests of tests/test_worker_death.py and tests/test_study_ray_cluster.py, run
here through pytest. Not part of the test suite (its name does not start with test_).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import failure_paths_lab as lab_round  # noqa: E402 (found through the path above)
import failure_paths_second as second_round  # noqa: E402
import failure_paths_third as third_round  # noqa: E402

LIMIT_AS = 8 * 2**30
TINY = ["--layers", "2", "--d-model", "16", "--heads", "2", "--max-len", "16"]
TRAIN = ["train", *TINY, "--steps", "2", "--batch-size", "2", "--seq-len", "8", "--threads", "1", "--quiet"]
PROBE = ["probe", *TINY, "--batch-size", "2", "--seq-len", "8", "--perturbation", "0"]
LONG = "a" * 300
GRID = (
    "name: fake\nmodel: {d_model: 16, n_heads: 2, max_len: 16}\n"
    "train: {steps: 20, log_every: 5, seq_len: 16, batch_size: 2}\n"
    "axes: {wrap: [post, pre], n_layers: [2, 4], warmup: [0, 5], seed: [0]}\n"
)
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
)


def _limit():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))
    os.setsid()


def cli(argv, cwd, timeout=60.0, env=None):
    """(exit code, stdout, stderr, seconds) of ``python -m depthlab argv``; code None on a timeout."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "depthlab", *map(str, argv)], cwd=cwd, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_limit,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        code = None
    return code, out, err, time.perf_counter() - start


def refused(code, out, err, secs, *needles, within=30.0) -> tuple[bool, str]:
    """Handled bad input: exit 2, one stderr line holding the needles, no traceback, in time."""
    ok = code == 2 and err.count("\n") == 1 and "Traceback" not in err and all(n in err for n in needles)
    ok = ok and secs < within
    return ok, (err.strip() or out.strip()[-200:] or f"exit {code}")[:150]


class Tally:
    def __init__(self):
        self.rows: dict[str, list] = {}

    def add(self, klass: str, case: str, ok: bool, note: str) -> None:
        self.rows.setdefault(klass, []).append((case, ok, note))
        print(f"  [{'ok' if ok else 'NOT HANDLED'}] {klass}: {case}: {note}", flush=True)

    def report(self) -> int:
        tried = sum(len(v) for v in self.rows.values())
        handled = sum(ok for v in self.rows.values() for _, ok, _ in v)
        print(f"\n{'class':58} tried  handled")
        for klass, cases in self.rows.items():
            print(f"{klass:58} {len(cases):5}  {sum(ok for _, ok, _ in cases):7}")
        print(f"{'all':58} {tried:5}  {handled:7}")
        return 0 if tried == handled else 1


def limits(t: Tally, tmp: Path) -> None:
    for argv, needle in [
        ([*TRAIN, "--threads", "100000"], "--threads 100000"),
        (["reproduce", "seeds", "--threads", "100000"], "--threads 100000"),
        ([*TRAIN, "--threads", "0"], "--threads 0"),
    ]:
        t.add("threads beyond the cores", " ".join(argv[-2:]), *refused(*cli(argv, tmp), needle))
    code, out, err, secs = cli(
        [a for a in TRAIN if a not in ("--threads", "1")], tmp, env={"OMP_NUM_THREADS": "100000"}
    )
    t.add(
        "threads beyond the cores",
        "OMP_NUM_THREADS=100000",
        *refused(code, out, err, secs, "OMP_NUM_THREADS"),
    )
    for argv in (
        ["explain", "--layers", "100000"], ["train", "--layers", "100000", "--steps", "1"],
        ["train", "--d-model", "1000000", "--heads", "4", "--steps", "1"], ["probe", "--batch-size", "10000000"],
        ["probe", "--d-model", "1000000", "--heads", "4"], ["explain", "--layers", "10000000"],
    ):  # fmt: skip
        t.add(
            "memory beyond the machine", " ".join(argv), *refused(*cli(argv, tmp), "needs about", within=15)
        )
    t.add(
        "Jacobian samples",
        "--jacobian 1000000000",
        *refused(*cli([*PROBE, "--jacobian", "1000000000"], tmp), "1024"),
    )
    for argv in (
        [*TRAIN, "--seed", "99999999999999999999999"],
        [*PROBE, "--seed", "99999999999999999999999"],
    ):
        t.add(
            "seeds beyond 64 bits",
            argv[0],
            *refused(*cli(argv, tmp), "--seed 99999999999999999999999 is not allowed"),
        )
    (tmp / "seed.yaml").write_text(GRID.replace("seed: [0]", "seed: [99999999999999999999999]"))
    for extra in ([], ["--dry-run"]):
        argv = ["study", "--grid", "seed.yaml", "--db", "seeds.sqlite", "--no-report", *extra]
        t.add("seeds beyond 64 bits", "grid axis " + " ".join(extra), *refused(*cli(argv, tmp), "seed="))
    for argv in (
        [*TRAIN, "--data", LONG], [*TRAIN, "--out", LONG], [*PROBE, "--json", LONG + ".json"],
        ["study", "--grid", LONG, "--db", "x.sqlite"], ["study", "--preset", "smoke", "--db", LONG],
    ):  # fmt: skip
        t.add("a 300-byte path component", argv[-2], *refused(*cli(argv, tmp), "bytes long", "allows 255"))


def grids(t: Tally, tmp: Path) -> None:
    from depthlab.errors import InputError
    from depthlab.study.gridfile import parse_grid_text

    files = {
        "binary": os.urandom(3000),
        "UTF-16 with BOM": GRID.encode("utf-16"),
        "invalid UTF-8": b"name: caf\xe9\n",
        "the same axis twice": b"axes:\n  n_layers: [2]\n  n_layers: [4]\n",
    }
    for what in ("description: *i\n", "axes:\n  seed: *i\n", "model: {residual: *i}\n"):
        files[f"alias bomb as {what.split(':')[0]}"] = (BOMB + what).encode()
    values = ", ".join(map(str, range(1000)))
    big = f"name: big\nmodel: {{d_model: 16, n_heads: 2}}\naxes:\n  seed: [{values}]\n  warmup: [{values}]\n"
    files["a 1000 x 1000 grid"] = big.encode()
    for name, content in files.items():
        (tmp / "g.yaml").write_bytes(content)
        res = refused(*cli(["study", "--grid", "g.yaml", "--db", "g.sqlite", "--no-report"], tmp), "grid")
        t.add("grid files", name, res[0] and not (tmp / "g.sqlite").exists(), res[1])
        if "bomb" in name:
            start = time.perf_counter()
            try:
                parse_grid_text(content.decode())
                ok = False
            except InputError:
                ok = time.perf_counter() - start < 1.0
            t.add("grid files", name + " (parse time)", ok, f"{time.perf_counter() - start:.3f} s")
    code, out, err, secs = cli(["study", "--grid", "g.yaml", "--db", "g.sqlite", "--dry-run"], tmp, timeout=5)
    first = out.splitlines()[:3]
    ok = len(first) == 3 and "1,000,000 runs" in first[0] and "seed=0 warmup=0" in first[2]
    ok = ok and not (tmp / "g.sqlite").exists()
    t.add(
        "grid files",
        "a 1000 x 1000 grid, --dry-run (count first, streams; cut at 5 s)",
        ok,
        " | ".join(first)[:150],
    )


def stores(t: Tally, tmp: Path) -> None:
    from test_study_fakes import fake_study, fill_store

    (tmp / "fake.yaml").write_text(GRID)
    good_dir = tmp / "good"
    good_dir.mkdir()
    fill_store(str(good_dir / "s.sqlite"), fake_study())
    damaged_stores(t, tmp, good_dir / "s.sqlite")
    odd_stores(t, tmp, good_dir / "s.sqlite")


def damaged_stores(t: Tally, tmp: Path, source: Path) -> None:
    """Ten damaged copies of ``source``: five with a b-tree page header overwritten, five with 64
    random bytes anywhere; each through a real study, a dry run and a report."""
    good = source.read_bytes()
    conn = sqlite3.connect(source)
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    roots = [r[0] for r in conn.execute("SELECT rootpage FROM sqlite_master WHERE rootpage > 1")]
    conn.close()
    rng = random.Random(0)
    cases = []
    for i in range(5):  # b-tree page headers overwritten: damage SQLite can see
        data = bytearray(good)
        at = (roots[i % len(roots)] - 1) * size
        data[at : at + 64] = rng.randbytes(64)
        cases.append((f"page header of table page {roots[i % len(roots)]}", data))
    for _ in range(5):  # 64 random bytes anywhere past the header, as the table's cases were made
        data = bytearray(good)
        at = rng.randrange(size, len(good) - 64)
        data[at : at + 64] = rng.randbytes(64)
        cases.append((f"64 random bytes at {at}", data))
    for name, data in cases:
        store = tmp / "bad"
        shutil.rmtree(store, ignore_errors=True)
        store.mkdir()
        (store / "s.sqlite").write_bytes(bytes(data))
        codes = []
        for argv in (
            ["study", "--grid", "fake.yaml", "--db", "bad/s.sqlite", "--no-report"],
            ["study", "--grid", "fake.yaml", "--db", "bad/s.sqlite", "--dry-run"],
            ["report", "--db", "bad/s.sqlite", "--out", "report"],
        ):
            before = {p.name: p.read_bytes() for p in store.iterdir()}
            code, out, err, secs = cli(argv, tmp, timeout=120)
            after = {p.name: p.read_bytes() for p in store.iterdir()}
            if code == 2:
                codes.append("2" if err.count("\n") == 1 and before == after else "2-but-changed")
            else:
                codes.append(str(code) if "Traceback" not in err else f"{code}-traceback")
        # handled: refused untouched, or read as it is (the damage hit values, which SQLite keeps no
        # checksum of: documented); never exit 1 and never a traceback
        ok = all(c in ("0", "2") for c in codes)
        t.add(
            "a store with damaged pages", name, ok, "exits " + "/".join(codes) + " (study, dry run, report)"
        )


def odd_stores(t: Tally, tmp: Path, source: Path) -> None:
    """A read-only copy of ``source``, and an empty --db file."""
    ro = tmp / "ro"
    ro.mkdir()
    shutil.copy(source, ro / "s.sqlite")
    if os.geteuid():
        os.chmod(ro / "s.sqlite", 0o444)
    elif subprocess.run(["chattr", "+i", str(ro / "s.sqlite")], capture_output=True).returncode:
        t.add("a read-only store", "study", False, "could not make the file read-only (root without chattr)")
        return
    try:
        res = refused(
            *cli(["study", "--grid", "fake.yaml", "--db", "ro/s.sqlite", "--no-report"], tmp), "read-only"
        )
        t.add(
            "a read-only store",
            "study",
            res[0] and sorted(p.name for p in ro.iterdir()) == ["s.sqlite"],
            res[1],
        )
    finally:
        subprocess.run(["chattr", "-i", str(ro / "s.sqlite")], capture_output=True)
    (tmp / "empty.sqlite").touch()
    code, out, err, _ = cli(["study", "--grid", "fake.yaml", "--db", "empty.sqlite", "--dry-run"], tmp)
    t.add(
        "a zero-byte --db",
        "dry run",
        code == 0 and "is an empty file: it becomes a new study store" in out,
        out.splitlines()[1][:120] if out else err[:120],
    )


def checkpoints(t: Tally, tmp: Path) -> None:
    flags = [*TRAIN, "--steps", "20", "--checkpoint-every", "10", "--log-every", "5", "--eval-every", "10"]
    cli([*flags, "--out", "whole"], tmp, timeout=300)
    whole = json.loads((tmp / "whole" / "result.json").read_text())
    spoil = {
        "truncated": lambda b: b[: len(b) // 2],
        "zero bytes": lambda b: b"",
        "random": lambda b: os.urandom(len(b)),
        "64 random bytes inside": lambda b: b[:5000] + os.urandom(64) + b[5064:],
        "one byte flipped": lambda b: b[:3000] + bytes([b[3000] ^ 1]) + b[3001:],
    }
    for name, fn in spoil.items():
        cut = tmp / "cut"
        shutil.rmtree(cut, ignore_errors=True)
        shutil.copytree(tmp / "whole", cut)
        (cut / "result.json").unlink()
        last = cut / "checkpoints" / "step-000020.pt"
        last.write_bytes(fn(last.read_bytes()))
        code, out, err, _ = cli([*flags, "--out", "cut", "--resume"], tmp, timeout=300)
        got = json.loads((cut / "result.json").read_text()) if (cut / "result.json").exists() else {}
        same = {k: v for k, v in got.items() if k != "tokens_per_s"} == {
            k: v for k, v in whole.items() if k != "tokens_per_s"
        }
        ok = code == 0 and "is damaged" in err and same
        t.add("a damaged last checkpoint on --resume", name, ok, (err.strip().splitlines() or ["-"])[0][:150])
    (tmp / "cut" / "result.json").unlink()
    for p in (tmp / "cut" / "checkpoints").glob("*.pt"):
        p.write_bytes(b"garbage")
    t.add(
        "a damaged last checkpoint on --resume",
        "every checkpoint damaged",
        *refused(*cli([*flags, "--out", "cut", "--resume"], tmp), "none of the"),
    )


def blocking_and_flags(t: Tally, tmp: Path) -> None:
    import socket

    os.mkfifo(tmp / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp / "sock"))
    for path, kind in (("fifo", "named pipe"), ("/dev/zero", "character device"), ("sock", "socket")):
        t.add("--data that blocks", path, *refused(*cli([*TRAIN, "--data", path], tmp, timeout=20), kind))
    for argv, needle in [
        ([*PROBE, "--hf-weights"], "--hf-weights needs --hf"),
        ([*TRAIN, "--force"], "--force needs --out"),
        ([*TRAIN, "--checkpoint-every", "5"], "--checkpoint-every needs --out"),
        ([*TRAIN, "--symbols", "8"], "--symbols 8"),
        ([*TRAIN, "--min-lr-ratio", "0.2"], "--min-lr-ratio 0.2"),
        (["explain", "--seed", "3"], "--seed does nothing"),
        ([*PROBE, "--checkpoint-activations"], "does nothing in probe"),
        ([*PROBE, "--loss", "sum", "--no-context"], "--no-context"),
        (["reproduce", "list", "--json", "x.json"], "--json does nothing"),
        (["study", "--fields", "--preset", "smoke"], "--preset does nothing"),
    ]:
        t.add("flags that do nothing", " ".join(argv[len(argv) - 2 :]), *refused(*cli(argv, tmp), needle))


def api(t: Tally) -> None:
    import torch

    from depthlab import ModelConfig, build_model
    from depthlab.probe import probe
    from depthlab.train import train

    m = build_model(ModelConfig(n_layers=2, d_model=16, n_heads=2))
    calls = {
        "build_model(None)": lambda: build_model(None),
        "build_model('x')": lambda: build_model("x"),
        "build_model({})": lambda: build_model({}),
        "tokens >= vocab": lambda: m(torch.full((2, 4), 256)),
        "tokens < 0": lambda: m(torch.full((2, 4), -1)),
        "1-D tokens": lambda: m(torch.zeros(4, dtype=torch.long)),
        "3-D tokens": lambda: m(torch.zeros(1, 2, 4, dtype=torch.long)),
        "list tokens": lambda: m([[1, 2]]),
        "None tokens": lambda: m(None),
        "float tokens": lambda: m(torch.zeros(2, 4)),
        "probe on an empty batch": lambda: probe(m, torch.zeros(0, 4, dtype=torch.long)),
        "probe on no batch": lambda: probe(m, None),
        "probe(None, tokens)": lambda: probe(None, torch.zeros(2, 4, dtype=torch.long)),
        "train(None, None)": lambda: train(None, None),
        "train(cfg, dict)": lambda: train(ModelConfig(), {"steps": 1}),
        "ModelConfig(n_layers=2.5)": lambda: ModelConfig(n_layers=2.5),
        "ModelConfig.from_json('{')": lambda: ModelConfig.from_json("{"),
    }
    for name, call in calls.items():
        try:
            call()
            t.add("API calls", name, False, "no error")
        except (TypeError, ValueError) as e:  # ConfigError and InputError are ValueErrors
            t.add("API calls", name, True, f"{type(e).__name__}: {str(e)[:100]}")
        except Exception as e:
            t.add("API calls", name, False, f"{type(e).__name__}: {e}"[:120])


def kills(t: Tally) -> None:
    tests = {
        "SIGKILL of one of two local workers": "tests/test_worker_death.py::test_a_killed_worker_fails_only_its_own_run",
        "two drivers on one store": "tests/test_worker_death.py::test_two_drivers_share_a_store_and_leave_live_runs_alone",
        "SIGKILL of a Ray worker on a real cluster": "tests/test_study_ray_cluster.py",
    }
    for name, test in tests.items():
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
            cwd=HERE.parent, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
        t.add(
            "workers killed mid-run", name, proc.returncode == 0, proc.stdout.strip().splitlines()[-1][:120]
        )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the command-line and API classes only (no kills)")
    p.add_argument(
        "--lab", action="store_true", help="the lab's classes only (calibrate, reproduce --restore)"
    )
    a = p.parse_args(argv)
    t = Tally()
    tmp = Path(tempfile.mkdtemp(prefix="failure-paths-"))
    try:
        if not a.lab:
            for section in (limits, grids, stores, checkpoints, blocking_and_flags):
                section(t, tmp)
            for section in (
                second_round.SECTIONS + third_round.SECTIONS
            ):  # tests/failure_paths_{second,third}.py
                section(t, tmp, cli, refused)
            api(t)
        for section in lab_round.SECTIONS:  # tests/failure_paths_lab.py
            section(t, tmp, cli, refused)
        if not (a.quick or a.lab):
            kills(t)
    finally:
        subprocess.run(["chattr", "-i", str(tmp / "ro" / "s.sqlite")], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return t.report()


if __name__ == "__main__":
    sys.exit(main())
