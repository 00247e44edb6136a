"""The third round of failure-path classes, rerun by tests/rerun_failure_paths.py: coord's sizes and cost,
empty paths, stores and data that are not files (a FIFO to read, a symbolic link loop), run folders for
report --run (a damaged watch.json, one folder named twice), the param fields, a dry run of a huge grid,
an allocation that fails past the estimate, and the watch API's and callbacks' types. Each command runs
``python -m depthlab`` in its own limited process (``cli`` of the rerun script); not part of the suite."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

TINY = ["--layers", "2", "--d-model", "16", "--heads", "2", "--max-len", "16"]
TRAIN = ["train", *TINY, "--steps", "2", "--batch-size", "2", "--seq-len", "8", "--threads", "1", "--quiet"]
COORD = ["coord", "--heads", "2", "--steps", "1", "--seeds", "2", "--batch-size", "2", "--seq-len", "8"]
WATCHED = """
import torch, torch.nn.functional as F, depthlab
from depthlab import ModelConfig, build_model
m = build_model(ModelConfig(n_layers=2, d_model=16, n_heads=2, max_len=16))
opt = torch.optim.Adam(m.parameters(), lr=1e-3)
with depthlab.watch(m, opt, every=2, out="watched", echo=None) as w:
    for t in range(4):
        x = torch.randint(0, 256, (2, 16))
        loss = F.cross_entropy(m(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
        loss.backward(); opt.step(); opt.zero_grad(); w.step(loss)
"""


def coord_sizes(t, tmp: Path, cli, refused) -> None:
    """Sizes beyond memory, empty list items and a cost beyond the cap: refused before any model."""
    for extra, needle in [
        (["--depths", "2,99999999999999999999", "--width", "16"], "training needs about"),
        (["--depths", "2,100000000", "--width", "16"], "training needs about"),
        (["--widths", "16,1000000000", "--depth", "2"], "training needs about"),
        (["--depths", "2,,3", "--width", "16"], "an empty value between commas"),
        (["--depths", "2,3,", "--width", "16"], "an empty value between commas"),
        (
            ["--depths", "2,3", "--width", "16", "--seeds", "1000000", "--steps", "1000000"],
            "the limit is 1,000,000",
        ),
        (["--depths", "2,3", "--width", "16", "--seeds", "100000000000000000000"], "the limit is 1,000,000"),
    ]:
        t.add(
            "coord: sizes and cost", " ".join(extra), *refused(*cli([*COORD, *extra], tmp), needle, within=15)
        )
    # past the estimate: 250 layers of width 512 (3.1 GB of weights) need about 16 GB to train: over the
    # rerun's 8 GB address-space limit (measured: the Adam step's allocation fails after about 35 s). Its
    # plan and progress lines come first on stderr, then the refusal.
    argv = ["coord", "--depths", "2,250", "--width", "512", "--steps", "1", "--seeds", "2", "--force-memory"]
    code, out, err, secs = cli(argv, tmp, timeout=180)
    last = (err.strip().splitlines() or [""])[-1]
    ok = code == 2 and "Traceback" not in err and ("out of memory" in last or "needs" in last)
    t.add(
        "coord: sizes and cost", "an allocation that fails past the estimate (--force-memory)", ok, last[:150]
    )


def empty_paths(t, tmp: Path, cli, refused) -> None:
    """'' for a path: refused, never the default or the current folder; nothing written."""
    (tmp / "e").mkdir()
    cases = [
        ([*COORD, "--depths", "2,3", "--json", ""], "--json: an empty path"),
        ([*COORD, "--depths", "2,3", "--plot", ""], "--plot: an empty path"),
        (["probe", *TINY, "--batch-size", "2", "--seq-len", "8", "--json", ""], "--json: an empty path"),
        (["probe", *TINY, "--batch-size", "2", "--seq-len", "8", "--plot", " "], "--plot: an empty path"),
        (["explain", *TINY, "--json", ""], "--json: an empty path"),
        ([*TRAIN, "--out", ""], "--out: an empty path"),
        ([*TRAIN, "--data", ""], "--data '' is not allowed"),
        (["study", "--grid", "", "--no-report"], "--grid: an empty path"),
        (["study", "--preset", "smoke", "--report", "", "--db", "s.sqlite"], "--report: an empty path"),
        (["report", "--run", ".", "--out", ""], "--out: an empty path"),
        (["transfer", "--to-depth", "8", "--json", ""], "--json: an empty path"),
        (["forecast", "--json", ""], "--json: an empty path"),
    ]
    for argv, needle in cases:
        res = refused(*cli(argv, tmp / "e"), needle)
        t.add(
            "empty paths",
            " ".join(a if a else "''" for a in argv[-2:]),
            res[0] and not os.listdir(tmp / "e"),
            res[1],
        )


def not_files(t, tmp: Path, cli, refused) -> None:
    """A FIFO as a store to read is named a FIFO; a symbolic link loop is named a loop."""
    (tmp / "nf").mkdir()
    os.mkfifo(tmp / "nf" / "fifo")
    (tmp / "nf" / "a").symlink_to(tmp / "nf" / "b")
    (tmp / "nf" / "b").symlink_to(tmp / "nf" / "a")
    for argv in (["report"], ["transfer", "--to-depth", "8"], ["forecast"]):
        res = refused(*cli([*argv, "--db", "fifo"], tmp / "nf", timeout=20), "named pipe (FIFO)")
        t.add("a FIFO or a link loop for a path", f"{argv[0]} --db fifo", *res)
    for argv in (["report", "--db", "a"], ["study", "--preset", "smoke", "--db", "a", "--dry-run"],
                 [*TRAIN, "--data", "a"], ["study", "--grid", "a"]):  # fmt: skip
        res = refused(*cli(argv, tmp / "nf", timeout=20), "a symbolic link that loops")
        t.add("a FIFO or a link loop for a path", " ".join(argv[-2:]) + " (a -> b -> a)", *res)


def run_folders(t, tmp: Path, cli, refused) -> None:
    """report --run: a damaged watch.json is refused (not skipped); one folder named twice is refused."""
    subprocess.run([sys.executable, "-c", WATCHED], cwd=tmp, env={**os.environ, "OMP_NUM_THREADS": "1"},
                   capture_output=True, timeout=120)  # fmt: skip
    for name, data in [("cut short", b'{"outcome": '), ("a JSON list", b"[1, 2]"), ("binary", os.urandom(64)),
                       ("empty", b"")]:  # fmt: skip
        shutil.rmtree(tmp / "w2", ignore_errors=True)
        shutil.copytree(tmp / "watched", tmp / "w2")
        (tmp / "w2" / "watch.json").write_bytes(data)
        res = refused(*cli(["report", "--run", "w2"], tmp), "watch.json is damaged")
        t.add(
            "report --run folders",
            f"watch.json {name}",
            res[0] and not (tmp / "w2" / "report").exists(),
            res[1],
        )
    (tmp / "wlink").symlink_to(tmp / "watched")
    for second in ("watched", "./watched", "watched/", "wlink"):
        res = refused(*cli(["report", "--run", "watched", second, "--out", "both"], tmp), "twice")
        t.add(
            "report --run folders", f"--run watched {second}", res[0] and not (tmp / "both").exists(), res[1]
        )


def params_and_grids(t, tmp: Path, cli, refused) -> None:
    """A base width no proxy can have; the dry run of a grid of a million and of 100 million runs."""
    for argv in (["probe", "--layers", "2", "--d-model", "48", "--heads", "2", "--param", "mup", "--base-width", "7"],
                 [*TRAIN, "--d-model", "48", "--param", "mup", "--base-width", "7"],
                 ["explain", "--d-model", "40", "--heads", "4", "--param", "mup", "--base-width", "10"]):  # fmt: skip
        res = refused(*cli(argv, tmp), "--base-width", "a multiple of n_heads")
        t.add("param fields", " ".join(argv[-6:]), *res)
    for n in (1000, 10000):
        values = ", ".join(map(str, range(n)))
        text = f"name: big\nmodel: {{d_model: 16, n_heads: 2}}\naxes:\n  seed: [{values}]\n  warmup: [{values}]\n"
        (tmp / "big.yaml").write_text(text)
        start = time.perf_counter()
        code, out, err, secs = cli(
            ["study", "--grid", "big.yaml", "--db", "big.sqlite", "--dry-run"], tmp, timeout=60
        )
        ok = (
            code == 2
            and out == ""
            and f"{n * n:,} runs" in err
            and secs < 30
            and not (tmp / "big.sqlite").exists()
        )
        t.add(
            "a dry run over --max-runs",
            f"{n} x {n} grid",
            ok,
            f"{err.strip()[:120]} ({time.perf_counter() - start:.1f} s)",
        )


def api_types(t, tmp: Path, cli, refused) -> None:
    """The watch API and the framework callbacks: a wrong value or type is a one-line ValueError when
    given, before any hook or folder; build_model refuses weights beyond free memory."""
    code = """
import os, sys, depthlab
from depthlab import ModelConfig, build_model
m = build_model(ModelConfig(n_layers=2, d_model=16, n_heads=2))
cases = {"every=True": dict(every=True), "every=0": dict(every=0), "unigram_loss=nan": dict(unigram_loss=float("nan")),
         "steps=-3": dict(steps=-3), "out=''": dict(out=""), "out=5": dict(out=5), "echo=5": dict(echo=5),
         "thresholds={}": dict(thresholds={}), "blocks=5": dict(blocks=5), "when=5": dict(when=5),
         "detectors=['nope']": dict(detectors=["nope"]), "trackers=['x']": dict(trackers=["x"])}
for name, kw in cases.items():
    try:
        depthlab.watch(m, None, **{"echo": None, **kw})
        print(name, "NOT refused", "", sep="\\t")
    except ValueError as e:
        print(name, "ok" if "\\n" not in str(e) and not os.listdir(".") else "LEFT FILES", str(e)[:80], sep="\\t")
    except Exception as e:
        print(name, "RAW", f"{type(e).__name__}: {str(e)[:80]}", sep="\\t")
from depthlab.integrations.hf_trainer import DepthlabCallback as H
from depthlab.integrations.lightning import DepthlabCallback as L
for name, make in {"HF every=0": lambda: H(every=0), "HF out=''": lambda: H(out=""), "HF unigram_loss=nan": lambda: H(unigram_loss=float("nan")),
                   "Lightning every=0": lambda: L(every=0), "Lightning evry=3": lambda: L(evry=3),
                   "build_model(10**9 layers)": lambda: build_model(ModelConfig(n_layers=10**9, d_model=64, n_heads=4))}.items():
    try:
        make(); print(name, "NOT refused", "", sep="\\t")
    except ValueError as e:
        print(name, "ok", str(e)[:80], sep="\\t")
    except Exception as e:
        print(name, "RAW", f"{type(e).__name__}: {str(e)[:80]}", sep="\\t")
"""
    (tmp / "api").mkdir()
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp / "api", capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300, preexec_fn=_limit)  # fmt: skip
    rows = [line.split("\t") for line in proc.stdout.splitlines() if line.count("\t") == 2]
    if not rows:
        t.add("watch API and callbacks", "the script", False, proc.stderr.strip()[-150:])
    for name, status, message in rows:
        t.add("watch API and callbacks", name, status == "ok", f"{status}: {message}"[:150])


def _limit() -> None:
    """The rerun's address-space limit (8 GB) for a Python process: a build_model that is not refused
    fails inside it instead of taking the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


SECTIONS = (coord_sizes, empty_paths, not_files, run_folders, params_and_grids, api_types)
