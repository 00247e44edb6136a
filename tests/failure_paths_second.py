"""The second round of failure-path classes, rerun by tests/rerun_failure_paths.py: one configuration one
key, no field under two names, store paths that keep nothing, a reused pid, files that are not
regular, probe --compare's cap, and the smaller refusals. Each case runs ``python -m depthlab`` in its
own limited process (``cli`` of the rerun script); not part of the test suite."""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "fixtures" / "legacy_store"
RUN_FLAGS = ["train", "--layers", "2", "--d-model", "16", "--heads", "2", "--wrap", "pre", "--steps", "6",
             "--batch-size", "4", "--seq-len", "16", "--log-every", "2", "--quiet", "--threads", "1"]  # fmt: skip
BASE = "model: {d_model: 16, n_heads: 2, n_layers: 2, max_len: 16}\ntrain: {steps: 2, log_every: 1, seq_len: 8, batch_size: 2}\n"


def keys(t, tmp: Path, cli, refused) -> None:
    """Spellings of one value: one run each (a dry run lists the runs); the legacy store resumes."""
    for axis, values in [("clip", "[0, 0.0]"), ("lr", "[1, 1.0]"), ("dropout", "[0, 0.0]"),
                         ("spike_factor", "[3, 3.0]"), ("weight_decay", "[0.0, -0.0]")]:  # fmt: skip
        (tmp / "k.yaml").write_text(f"name: k\n{BASE}axes: {{{axis}: {values}}}\n")
        code, out, err, _ = cli(["study", "--grid", "k.yaml", "--db", "k.sqlite", "--dry-run"], tmp)
        ok = code == 0 and out.strip().splitlines()[-1].endswith("1 run, 1 to run")
        t.add(
            "one configuration, one key",
            f"{axis}: {values}",
            ok,
            (out.strip().splitlines() or [err])[-1][:120],
        )
    legacy = tmp / "legacy"
    shutil.copytree(FIXTURE, legacy)
    for grid in ("grid-fixture.yaml", "grid-fixture-family.yaml"):
        code, out, err, _ = cli(["study", "--grid", f"legacy/{grid}", "--db", "legacy/store.sqlite",
                                 "--no-report", "--workers", "1"], tmp, timeout=300)  # fmt: skip
        want = (legacy / grid.replace("grid-", "outcome-").replace(".yaml", ".txt")).read_text().strip()
        got = out[out.find("outcome per cell") :].replace("legacy/store.sqlite", "STORE").strip()
        ok = code == 0 and "ran 0 of 4 runs" in out and got == want
        t.add("one configuration, one key", f"a store written before, {grid}: nothing re-run, same table", ok,
              (err.strip() or out.strip().splitlines()[0])[:120])  # fmt: skip
    grid = (legacy / "grid-fixture.yaml").read_text().replace(", weight_decay: 0}", "}")
    (tmp / "omit.yaml").write_text(grid.replace("name: fixture", "name: omitted"))
    code, out, err, _ = cli(["study", "--grid", "omit.yaml", "--db", "legacy/store.sqlite", "--dry-run"], tmp)
    ok = code == 0 and out.strip().endswith("4 runs, 0 to run")
    t.add("one configuration, one key", "the default omitted: the runs written with it are found", ok,
          out.strip().splitlines()[-1][:120] if out.strip() else err[:120])  # fmt: skip


def spellings(t, tmp: Path, cli, refused) -> None:
    model = "model: {d_model: 16, n_heads: 2, n_layers: 2, max_len: 16"
    train = "train: {steps: 2, log_every: 1, seq_len: 8, batch_size: 2}\n"
    cases = {
        "model: {checkpoint: true, activation_checkpointing: false}": f"{model}, checkpoint: true, activation_checkpointing: false}}\n{train}",
        "axes: {w: [{wrap: pre, model.wrap: post}]}": f"{model}}}\n{train}axes: {{w: [{{wrap: pre, model.wrap: post}}]}}\n",
        "axes: {w: [{lr: 1.0e-3, train.lr: 1.0e-2}]}": f"{model}}}\n{train}axes: {{w: [{{lr: 1.0e-3, train.lr: 1.0e-2}}]}}\n",
        "axes: {w: [{checkpoint: true, model.activation_checkpointing: false}]}": f"{model}}}\n{train}"
        "axes: {w: [{checkpoint: true, model.activation_checkpointing: false}]}\n",
    }  # fmt: skip
    for what, text in cases.items():
        (tmp / "sp.yaml").write_text(f"name: sp\n{text}")
        res = refused(
            *cli(["study", "--grid", "sp.yaml", "--db", "sp.sqlite", "--no-report"], tmp), "both set"
        )
        t.add("one field, two spellings", what, res[0] and not (tmp / "sp.sqlite").exists(), res[1])


def store_paths(t, tmp: Path, cli, refused) -> None:
    (tmp / "sp.yaml").write_text(f"name: sp\n{BASE}")
    (tmp / "dangling.sqlite").symlink_to(tmp / "nowhere" / "s.sqlite")
    (tmp / "adir").mkdir(exist_ok=True)
    for db, needle in [("", "empty path"), (" ", "empty path"), (":memory:", "in-memory"),
                       ("file:x.sqlite?mode=memory", "URI"), ("adir", "folder"), ("dangling.sqlite", "symbolic link"),
                       ("/proc/self/status", "/proc"), ("/dev/full", "/dev"), ("/sys/kernel", "/sys")]:  # fmt: skip
        before = sorted(os.listdir(tmp))
        res = refused(
            *cli(["study", "--grid", "sp.yaml", "--db", db, "--no-report"], tmp, timeout=60),
            needle,
            within=15,
        )
        ok = res[0] and sorted(os.listdir(tmp)) == before
        t.add("store paths that keep nothing", repr(db), ok, res[1])


def reused_pid(t, tmp: Path, cli, refused) -> None:
    sys.path.insert(0, str(HERE))
    from test_study_fakes import fake_study, fill_store

    from depthlab.study.owner import start_ticks

    db = tmp / "pid.sqlite"
    study = fake_study(depths=(2,), warmups=(0,))
    fill_store(str(db), study, leave_queued=1)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    time.sleep(0.3)
    try:
        host = socket.gethostname()
        for form, owner in (("host:pid (before)", f"{host}:{sleeper.pid}"),
                            ("host:pid:start", f"{host}:{sleeper.pid}:{int(start_ticks(sleeper.pid)) + 5}")):  # fmt: skip
            with sqlite3.connect(db) as c:
                c.execute("UPDATE runs SET status = 'running', owner = ?, started_at = ? WHERE id = "
                          "(SELECT MAX(id) FROM runs)", (owner, time.time() - 3600))  # fmt: skip
            from depthlab.study.store import Store

            with Store(str(db)) as s:
                rid = s.conn.execute("SELECT MAX(id) FROM runs").fetchone()[0]
                ok = s.claim(rid, "test:1:1")
                s.conn.execute("UPDATE runs SET status = 'queued', owner = NULL WHERE id = ?", (rid,))
            t.add("a reused pid", f"a dead driver's run, owner {form}, its pid now a live process", ok,
                  "claimed for a re-run" if ok else "left to another process")  # fmt: skip
    finally:
        sleeper.kill()
        sleeper.wait()


def not_regular(t, tmp: Path, cli, refused) -> None:
    out = tmp / "frun"
    for name in (
        "metrics.jsonl",
        "result.json",
        "config.json",
        "checkpoints/step-000006.pt",
        "checkpoints/step-000006.pt.sha256",
    ):
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(FIXTURE / "run", out)
        if name != "result.json":
            (out / "result.json").unlink()
        (out / name).unlink()
        os.mkfifo(out / name)
        res = refused(
            *cli([*RUN_FLAGS, "--out", "frun", "--resume"], tmp, timeout=60), "named pipe", within=30
        )
        t.add(
            "files that are not regular",
            f"a FIFO as {name}, --resume",
            res[0] and stat.S_ISFIFO(os.lstat(out / name).st_mode),
            res[1],
        )
    os.mkfifo(tmp / "x.json")
    res = refused(*cli(["explain", "--layers", "2", "--json", "x.json"], tmp), "named pipe")
    t.add(
        "files that are not regular",
        "--json onto a FIFO",
        res[0] and stat.S_ISFIFO(os.lstat(tmp / "x.json").st_mode),
        res[1],
    )
    if os.geteuid() == 0:
        os.mknod(tmp / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        res = refused(*cli(["explain", "--layers", "2", "--json", "null"], tmp), "character device")
        t.add(
            "files that are not regular",
            "--json onto a device node",
            res[0] and stat.S_ISCHR(os.lstat(tmp / "null").st_mode),
            res[1],
        )
    (tmp / ".y.json.tmp").write_text("mine\n")
    code, _, err, _ = cli(["explain", "--layers", "2", "--json", "y.json"], tmp)
    t.add("files that are not regular", "a user file named .y.json.tmp beside --json y.json",
          code == 0 and (tmp / ".y.json.tmp").read_text() == "mine\n", err.strip()[:120] or "kept")  # fmt: skip


def compare_and_minors(t, tmp: Path, cli, refused) -> None:
    probe = [
        "probe",
        "--layers",
        "2",
        "--d-model",
        "16",
        "--heads",
        "2",
        "--batch-size",
        "2",
        "--seq-len",
        "8",
        "--perturbation",
        "0",
    ]
    code, out, err, _ = cli([*probe, "--compare", "--wrap", "pre,pre,post,pre"], tmp)
    rows = [line for line in out.splitlines() if line.startswith("wrap=") and not line.endswith(":")]
    t.add("probe --compare", "--wrap pre,pre,post,pre", code == 0 and len(rows) == 2, f"{len(rows)} rows")
    many = ",".join(f"w{i}" for i in range(8000))
    t.add(
        "probe --compare",
        "8,000 x 8,000 values",
        *refused(*cli([*probe, "--compare", "--wrap", many, "--norm", many], tmp), "limit of 64", within=10),
    )
    run = tmp / "mrun"
    cases = []
    for what, setup, argv, needle in [
        ("--preset ''", None, ["study", "--preset", "", "--dry-run", "--db", "m.sqlite"], "--preset ''"),
        ("result.json = []", ("result.json", "[]"), [*RUN_FLAGS, "--out", "mrun", "--resume"], "result.json"),
        ("config.json = {}", ("config.json", "{}"), [*RUN_FLAGS, "--lr", "0.5", "--out", "mrun", "--resume"], "config.json"),
        ("checkpoints a file", ("checkpoints", "x"), [*RUN_FLAGS, "--out", "mrun", "--resume"], "not a folder"),
        ("probe --warmup 5 without --lr", None, [*probe, "--warmup", "5"], "needs --lr"),
        ("--init-std with xavier", None, ["explain", "--layers", "2", "--init-std", "0.1"], "--init-std"),
        ("report --run r --study x", None, ["report", "--run", "r", "--study", "x"], "--study"),
        ("forecast --share 0", None, ["forecast", "--share", "0"], "share"),
        ("a flag typo", None, ["train", "--warmpu", "5"], "did you mean --warmup?"),
        ("a newline and an ANSI escape in --db", None, ["report", "--db", "a\nb\x1b[31m.sqlite"], "\\n"),
    ]:  # fmt: skip
        if setup:
            shutil.rmtree(run, ignore_errors=True)
            shutil.copytree(FIXTURE / "run", run)
            if setup[0] == "checkpoints":
                (run / "result.json").unlink()
                shutil.rmtree(run / "checkpoints")
            (run / setup[0]).write_text(setup[1])
        res = refused(*cli(argv, tmp, timeout=60), needle)
        prefix_ok = what != "a flag typo" or res[1].startswith("depthlab train:")
        cases.append((what, res[0] and prefix_ok and "\x1b" not in res[1], res[1]))
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(FIXTURE / "run", run)
    (run / "result.json").unlink()
    shutil.rmtree(run / "checkpoints")
    code, out, err, _ = cli([*RUN_FLAGS, "--out", "mrun", "--resume"], tmp, timeout=120)
    cases.append(
        ("--resume without a checkpoint", code == 0 and "starts over from step 0" in err, err.strip()[:120])
    )
    code, out, err, _ = cli([*RUN_FLAGS, "--out", "o"], tmp, env={"OMP_NUM_THREADS": "\u00b2"}, timeout=120)
    cases.append(("OMP_NUM_THREADS=\u00b2", code == 0, (err.strip() or "trained")[:120]))
    for what, ok, note in cases:
        t.add("the minors", what, ok, note)


def disk_full(t, tmp: Path, cli, refused) -> None:
    mnt = tmp / "tiny"
    mnt.mkdir()
    if (
        os.geteuid()
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True
        ).returncode
    ):
        t.add("a full disk", "train --out on a 256 kB tmpfs", False, "could not mount a tmpfs (needs root)")
        return
    try:
        flags = [a if a != "16" else "48" for a in RUN_FLAGS]
        res = refused(
            *cli([*flags, "--out", str(mnt / "run"), "--checkpoint-every", "2"], tmp, timeout=120),
            "disk is full",
            "needs about",
        )
        left = (
            [p.name for p in (mnt / "run" / "checkpoints").iterdir() if p.name.endswith(".tmp")]
            if (mnt / "run" / "checkpoints").is_dir()
            else []
        )
        t.add("a full disk", "train --out on a 256 kB tmpfs", res[0] and not left, res[1])
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


SECTIONS = (keys, spellings, store_paths, reused_pid, not_regular, compare_and_minors, disk_full)
