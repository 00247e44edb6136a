"""The third round's lab classes, rerun by tests/rerun_failure_paths.py: `depthlab calibrate` on runs it
cannot fit (no finished run, no probe, one class of outcome, part of the rules only), studies that share
runs, a --record that is not one, and `reproduce doctor|ladder --restore` given a record with a value of
the wrong type, a run twice, a row whose fields disagree with its hash, a step beyond SQLite's integers,
the other command's record, or a path that is not a file; a restore killed mid-run. Each command runs
``python -m depthlab`` in its own limited process (``cli`` of the rerun script), a kill through a Python
process of its own; not part of the suite (lab/tests/test_calibrate_failures.py and
lab/tests/test_restore_failures.py test the same in process)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "depthlab" / "doctor" / "calibration.json"  # the library's own: calibrate's default
GRID = {
    "name": "rho-tuning",
    "model": {"d_model": 16, "n_heads": 2, "max_len": 16},
    "train": {"steps": 20, "seq_len": 16, "batch_size": 2},
    "axes": {"wrap": ["pre", "rezero"], "n_layers": [2, 6, 12], "lr": [1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]},
}


def _judge(spec):
    rho = 30 * spec.train.lr
    cut = 1.0 if spec.model.wrap == "pre" else 0.3
    probe = {"stack": {"renormalised_share": 0.0}, "probe": {"relative_update": rho}}
    return probe, {"outcome": "trained" if rho < cut else "diverged"}


def _stores(tmp: Path) -> dict[str, str]:
    """Stores of one study each, built without training: every run fitted on the limits on rho ("rho"),
    one class of outcome only ("one"), finished without probes ("bare"), none finished ("queued"), and
    "shared": the rho study twice under two names."""
    sys.path.insert(0, str(ROOT))
    from depthlab.study.grid import StudyConfig
    from depthlab.study.store import Store
    from lab.tests.tuning_store import tuning_store

    out = {"rho": tuning_store(str(tmp / "rho.sqlite"), GRID, _judge)}
    one = dict(GRID, name="one-class", axes={"wrap": ["pre"], "n_layers": [2, 6], "lr": [1e-3]})
    out["one"] = tuning_store(str(tmp / "one.sqlite"), one, _judge)
    study = StudyConfig.from_dict(GRID)
    for name, finish in (("bare", True), ("queued", False)):
        with Store(str(tmp / f"{name}.sqlite")) as s:
            sid = s.add_study(study.name, study.to_dict(), study.config_hash(), study.expand())
            for run in s.runs(sid) if finish else []:
                s.finish(run["id"], {"result": {"outcome": "trained", "unigram_loss": 3.0}})
        out[name] = str(tmp / f"{name}.sqlite")
    shutil.copy(out["rho"], tmp / "shared.sqlite")
    again = StudyConfig.from_dict(dict(GRID, name="rho-again"))
    with Store(str(tmp / "shared.sqlite")) as s:
        s.add_study(again.name, again.to_dict(), again.config_hash(), again.expand())
    out["shared"] = str(tmp / "shared.sqlite")
    return out


def calibrate(t, tmp: Path, cli, refused) -> None:
    """Runs that fit none of the rules are refused, the record byte for byte as it was; a rule the runs
    cannot fit is kept and said; shared runs counted once; a --record that is not one is one line."""
    tmp = tmp / "calibrate"
    tmp.mkdir()
    db = _stores(tmp)
    rec = tmp / "calibration.json"
    for klass, name, argv, needle in [
        ("calibrate: runs it cannot fit", "a study with no finished run", [db["queued"], "rho-tuning"],
         "no finished run to fit on"),
        ("calibrate: runs it cannot fit", "finished runs without a probe", [db["bare"], "rho-tuning"],
         "has an at-init probe"),
        ("calibrate: runs it cannot fit", "one class of outcome (not a tuning study)", [db["one"], "one-class"],
         "fit none of the doctor's rules"),
        ("calibrate: shared runs", "the same study twice", [db["rho"], "rho-tuning", db["rho"], "rho-tuning"],
         "is named twice"),
        ("calibrate: shared runs", "the same study by another path and its id",
         [db["rho"], "rho-tuning", f"{tmp}/./rho.sqlite", "1"], "is named twice"),
    ]:  # fmt: skip
        shutil.copy(RECORD, rec)
        before = rec.read_bytes()
        flags = [x for i in range(0, len(argv), 2) for x in ("--from", argv[i], argv[i + 1])]
        code, out, err, secs = cli(["calibrate", *flags, "--record", rec], tmp)
        ok, note = refused(code, out, err, secs, needle)
        t.add(klass, name, ok and rec.read_bytes() == before and "wrote" not in out, note)
    # the default record (the library's own): refused, left byte for byte (put back if it was not)
    before = RECORD.read_bytes()
    try:
        code, out, err, secs = cli(["calibrate", "--from", db["queued"], "rho-tuning"], tmp)
        ok, note = refused(code, out, err, secs, "no finished run to fit on")
        t.add("calibrate: runs it cannot fit", "the default record, a study with no finished run",
              ok and RECORD.read_bytes() == before, note)  # fmt: skip
    finally:
        if RECORD.read_bytes() != before:
            RECORD.write_bytes(before)
    shutil.copy(RECORD, rec)
    old = json.loads(rec.read_text())
    code, out, err, secs = cli(["calibrate", "--from", db["rho"], "rho-tuning", "--record", rec], tmp)
    new = json.loads(rec.read_text())
    ok = code == 0 and new.get("escape") == old["escape"] and new.get("step_limit") == old["step_limit"]
    ok = ok and "kept the earlier plateau prediction" in out and "kept the earlier step limit" in out
    ok = ok and err.startswith("calibrate: 36 runs of 1 study (36 finished); fitting the limits on rho")
    kept = [line for line in out.splitlines() if line.startswith("kept the earlier")]
    t.add("calibrate: runs it cannot fit", "rules the runs cannot fit kept and said (and the plan said first)",
          ok, f"exit {code}; " + " | ".join(k[:60] for k in kept))  # fmt: skip
    shutil.copy(RECORD, rec)
    argv = [
        "--from",
        db["shared"],
        "rho-tuning",
        "--from",
        db["shared"],
        "rho-again",
        "--from",
        db["rho"],
        "rho-tuning",
    ]
    code, out, err, secs = cli(["calibrate", *argv, "--record", rec], tmp)
    fit = ((json.loads(rec.read_text()).get("update_limit") or {}).get("families") or {}).get("free") or {}
    ok = code == 0 and fit.get("runs") == 18 and "72 runs shared by the studies named" in out
    t.add(
        "calibrate: shared runs",
        "three studies, one set of runs: counted once",
        ok,
        f"free fit on {fit['runs']} runs",
    )
    (tmp / "dir.json").mkdir()
    os.mkfifo(tmp / "fifo.json")
    for name, text, needle in [
        ("a JSON list", "[1, 2]", "a JSON list, not an object"),
        ("a JSON string", '"x"', "a JSON string, not an object"),
        ("cut short", '{"range": {', "not a readable calibration record"),
        ("empty", "", "not a readable calibration record"),
        ("nested 100,000 deep", "[" * 100000, "not a readable calibration record"),
        ("binary", os.urandom(256), "not a readable calibration record"),
        ("a damaged section", '{"step_limit": [1]}', "its 'step_limit' is not an object"),
        ("a folder", None, "is a folder"),
        ("a FIFO", None, "named pipe (FIFO)"),
        ("missing", None, "no such file"),
    ]:
        path = {"a folder": tmp / "dir.json", "a FIFO": tmp / "fifo.json", "missing": tmp / "none.json"}.get(
            name
        )
        if path is None:
            path = tmp / "bad.json"
            path.write_bytes(text if isinstance(text, bytes) else text.encode())
        before = path.read_bytes() if path.is_file() else None
        code, out, err, secs = cli(
            ["calibrate", "--from", db["rho"], "rho-tuning", "--record", path], tmp, timeout=20
        )
        ok, note = refused(code, out, err, secs, needle)
        t.add(
            "calibrate --record that is not a record",
            name,
            ok and (before is None or path.read_bytes() == before),
            note,
        )


def _ladder_record(path: Path) -> list[dict]:
    """A record of the quick ladder's batchnorm rungs, every run finished (made without training)."""
    sys.path.insert(0, str(ROOT))
    from depthlab_lab.reproduce.ladder_run import rungs

    def _axis(setting: dict) -> dict:  # the "setting" axis value of a rung's setting, as a run keeps it
        return {f"{part}.{k}": v for part in ("model", "train") for k, v in setting[part].items()}

    studies = {}
    for r in rungs(["batchnorm"], quick=True):
        label = {json.dumps(_axis(s), sort_keys=True): name for name, s in r.settings.items()}
        studies[r.study.name] = [
            {"config_hash": spec.hash, "setting": label[json.dumps(spec.axes["setting"], sort_keys=True)],
             "seed": spec.train.seed, "outcome": "trained", "val_loss": 2.5, "final_train_loss": 2.4,
             "unigram_loss": 3.1, "escape_step": 8, "seconds": 1.5, "started_at": 1.8e9 + i, "finished_at": 1.8e9 + i + 1,
             "metrics": [{"step": 1, "loss": 5.5}],
             "layers": [{"step": 12, "layer": k, "update_ratio": 0.1} for k in range(3)]}
            for i, spec in enumerate(r.study.expand())
        ]  # fmt: skip
    path.write_text(json.dumps({"studies": studies}))
    return studies


def restore(t, tmp: Path, cli, refused) -> None:
    """A record that cannot be written back as it is: one line, exit 2, no store made; a good record
    restores; a kill mid-run leaves no run done without its telemetry, and the next restore completes it."""
    tmp = tmp / "restore"
    tmp.mkdir()
    good = _ladder_record(tmp / "good.json")
    first, last = list(good)[0], list(good)[-1]

    def edit(fn):
        record = json.loads(json.dumps({"studies": good}))
        fn(record["studies"])
        (tmp / "bad.json").write_text(json.dumps(record))
        return str(tmp / "bad.json")

    def swap(s):
        rows = s[first]
        other = next(r for r in rows if r["setting"] != rows[0]["setting"])
        rows[0]["config_hash"], other["config_hash"] = other["config_hash"], rows[0]["config_hash"]

    cases = [
        ("a number column given text", lambda s: s[first][0].update(val_loss="abc"), "val_loss is 'abc'"),
        ("a number column given true", lambda s: s[first][0].update(val_loss=True), "val_loss is true"),
        ("a string seconds", lambda s: s[first][0].update(seconds="1.5"), "seconds is '1.5'"),
        ("a string started_at", lambda s: s[first][0].update(started_at="today"), "started_at is 'today'"),
        ("a string escape_step", lambda s: s[first][0].update(escape_step="8"), "escape_step is '8'"),
        ("an escape_step of 2**70", lambda s: s[first][0].update(escape_step=2**70), "not a step"),
        ("a layer row at step 2**70 on the last row", lambda s: s[last][-1]["layers"].append({"step": 2**70, "layer": 0}),
         "beyond a stored step"),
        ("a layer value given text", lambda s: s[first][0]["layers"].append({"step": 4, "layer": 0, "grad_norm": "x"}),
         "not a number"),
        ("a run recorded twice", lambda s: s[first].append(dict(s[first][0])), "is recorded 2 times"),
        ("two rows' hashes swapped", swap, "names a run of another setting"),
        ("an edited seed", lambda s: s[first][0].update(seed=7), "its seed is 7 but its config_hash"),
        ("an unknown setting", lambda s: s[first][0].update(setting="mine"), "is none of the study's settings"),
        ("a null config_hash", lambda s: s[first][0].update(config_hash=None), "not a hash"),
    ]  # fmt: skip
    for name, fn, needle in cases:
        db = tmp / "l.sqlite"
        argv = [
            "reproduce",
            "ladder",
            "--quick",
            "--plan",
            "--claims",
            "batchnorm",
            "--db",
            db,
            "--restore",
            edit(fn),
        ]
        ok, note = refused(*cli(argv, tmp, timeout=120), needle, within=60)
        t.add("restore: a record checked whole first", name, ok and not db.exists(), note)
    db = tmp / "l.sqlite"
    argv = [
        "reproduce",
        "ladder",
        "--quick",
        "--plan",
        "--claims",
        "batchnorm",
        "--db",
        db,
        "--restore",
        tmp / "good.json",
    ]
    code, out, err, _ = cli(argv, tmp, timeout=120)
    ok = code == 0 and f"{first}: 4 runs restored" in out
    t.add(
        "restore: a record checked whole first",
        "the record unedited (control): restored",
        ok,
        out.strip()[:150],
    )
    killed(t, tmp, good)
    other_commands(t, tmp, cli, refused)


KILLER = """
import os, signal, sys
import depthlab.study.store as store
from depthlab_lab.reproduce.ladder_record import restore_ladder
real = store.connect
def connect(path, read_only):
    conn = real(path, read_only)
    conn.create_function("die", 0, lambda: os.kill(os.getpid(), signal.SIGKILL))
    return conn
store.connect = connect
restore_ladder(sys.argv[1], sys.argv[2], ["batchnorm"], quick=True)
"""


def _whole(db: Path, good: dict) -> tuple[bool, str]:
    """Whether every run the store holds done has the times and telemetry its row gives."""
    rows = {r["config_hash"]: r for rs in good.values() for r in rs}
    conn = sqlite3.connect(db)
    bad, done = [], 0
    for rid, h, status, started in conn.execute("SELECT id, config_hash, status, started_at FROM runs"):
        if status == "done":
            done += 1
            layers = conn.execute("SELECT COUNT(*) FROM layer_metrics WHERE run_id = ?", (rid,)).fetchone()[0]
            if layers != len(rows[h]["layers"]) or started != rows[h]["started_at"]:
                bad.append(h)
    conn.close()
    return not bad, f"{done} runs done, {len(bad)} without their telemetry or times"


def killed(t, tmp: Path, good: dict) -> None:
    """SIGKILL while the third run's telemetry is written (a trigger calls a function that kills the
    process); then the next restore."""
    db = tmp / "k.sqlite"
    sys.path.insert(0, str(ROOT))
    from depthlab.study.store import Store
    from depthlab_lab.reproduce.ladder_run import rungs

    with Store(str(db)) as s:
        for r in rungs(["batchnorm"], quick=True):
            specs = r.study.expand()
            s.add_study(r.study.name, r.study.to_dict(), r.study.config_hash(specs), specs)
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TRIGGER trap AFTER INSERT ON layer_metrics WHEN NEW.run_id = 3 BEGIN SELECT die(); END"
    )
    conn.commit()
    conn.close()
    proc = subprocess.run([sys.executable, "-c", KILLER, str(tmp / "good.json"), str(db)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    ok, note = _whole(db, good)
    t.add("restore: one transaction a run", "SIGKILL while a run's telemetry is written", ok and proc.returncode == -9,
          f"exit {proc.returncode}; {note}")  # fmt: skip
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER trap")
    conn.commit()
    conn.close()
    proc = subprocess.run([sys.executable, "-c", KILLER, str(tmp / "good.json"), str(db)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    ok, note = _whole(db, good)
    n = sum(len(v) for v in good.values())
    t.add("restore: one transaction a run", "the next restore completes it", ok and proc.returncode == 0 and
          note.startswith(f"{n} runs done"), note)  # fmt: skip


def other_commands(t, tmp: Path, cli, refused) -> None:
    """The other command's record, a study of neither, and paths that are not files, from a folder outside
    the repository (the doctor finds its grids there): one line before anything is written or trained."""
    out_dir = tmp / "elsewhere"
    out_dir.mkdir()
    os.mkfifo(tmp / "fifo")
    docs = ROOT / "docs"
    doctor = ["reproduce", "doctor", "--db", "d.sqlite", "--doc", "d.md", "--restore"]
    ladder = ["reproduce", "ladder", "--plan", "--db", "l.sqlite", "--restore"]
    foreign = tmp / "foreign.json"
    rows = json.loads((docs / "doctor-runs.json").read_text())["studies"]["doctor-tuning"][:2]
    foreign.write_text(json.dumps({"studies": {"doctor-tuning": rows, "mine": []}}))
    for name, argv, needle in [
        ("doctor given the ladder's record", [*doctor, docs / "reproductions-ladder-runs.json"],
         "holds none of the doctor's studies"),
        ("ladder given the doctor's record", [*ladder, docs / "doctor-runs.json"], "holds none of the ladder's studies"),
        ("doctor given a record with a study of neither", [*doctor, foreign], "mine is none of the doctor's studies"),
        ("doctor --restore a FIFO", [*doctor, tmp / "fifo"], "is a named pipe (FIFO)"),
        ("ladder --restore a FIFO", [*ladder, tmp / "fifo"], "is a named pipe (FIFO)"),
        ("doctor --restore /dev/zero", [*doctor, "/dev/zero"], "is a character device"),
        ("ladder --restore /dev/zero", [*ladder, "/dev/zero"], "is a character device"),
        ("doctor --restore a folder", [*doctor, tmp], "is a directory"),
        ("ladder --restore a missing file", [*ladder, tmp / "none.json"], "no such run record"),
    ]:  # fmt: skip
        ok, note = refused(*cli(argv, out_dir, timeout=90), needle, within=60)
        t.add("restore: the other command's record, not a file", name, ok and not os.listdir(out_dir), note)


SECTIONS = (calibrate, restore)
