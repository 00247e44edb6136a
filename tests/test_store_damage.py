"""A damaged, read-only or empty study store: a damaged one is refused (exit 2, one line) and left byte
for byte as it was with nothing made beside it; a read-only one is refused before SQLite writes a byte
(and can still be read); an empty file becomes a new store and says so."""

from __future__ import annotations

import io
import os
import random
import shutil
import sqlite3
import subprocess

import pytest
from test_study_fakes import fake_study, fake_task, fill_store

from depthlab import InputError
from depthlab.cli import main
from depthlab.report import load
from depthlab.study import Store, run_study
from depthlab.study.runner import store_note


def _snapshot(folder) -> dict:
    """Every file of ``folder``: name -> (bytes, mtime in ns)."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def _store(tmp_path) -> str:
    db = str(tmp_path / "s.sqlite")
    fill_store(db, fake_study())
    return db


def _grid(tmp_path) -> str:
    path = tmp_path / "fake.yaml"
    path.write_text(
        "name: fake\nmodel: {d_model: 16, n_heads: 2, max_len: 16}\n"
        "train: {steps: 20, log_every: 5, seq_len: 16, batch_size: 2}\n"
        "axes: {wrap: [post, pre], n_layers: [2, 4], warmup: [0, 5], seed: [0]}\n"
    )
    return str(path)


def _commands(db: str, grid: str) -> list[list[str]]:
    return [
        ["report", "--db", db, "--out", os.path.join(os.path.dirname(os.path.dirname(db)), "report")],
        ["study", "--grid", grid, "--db", db, "--dry-run"],
        ["study", "--grid", grid, "--db", db, "--no-report"],
    ]


def _refused_untouched(capsys, tmp_path, db: str, grid: str, *needles) -> None:
    """Every command that opens ``db`` exits 2 with one line, and the folder is as it was."""
    folder = tmp_path / "store"
    before = _snapshot(folder)
    for argv in _commands(db, grid):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (argv, err)
        assert all(n in err for n in needles), err
        assert out == "", out
        assert _snapshot(folder) == before, argv  # same bytes, same mtime, nothing beside it


def _page_of(db: str, table: str) -> tuple[int, int]:
    """(page size, root page number) of ``table``."""
    conn = sqlite3.connect(db)
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    conn.close()
    return size, root


@pytest.mark.parametrize("table", ["runs", "metrics", "study_runs"])
def test_a_damaged_table_page_is_refused_and_left_as_it_was(capsys, tmp_path, table):
    (tmp_path / "store").mkdir()
    db = str(tmp_path / "store" / "s.sqlite")
    fill_store(db, fake_study())
    size, root = _page_of(db, table)
    with open(db, "r+b") as f:  # a b-tree page whose header says nothing SQLite knows
        f.seek((root - 1) * size)
        f.write(b"\x07" + bytes(range(1, 64)))
    _refused_untouched(capsys, tmp_path, db, _grid(tmp_path), "is damaged", "left as it was")


def test_text_that_is_not_utf8_is_refused_where_it_is_read(capsys, tmp_path):
    """quick_check does not read values: a run key that is not UTF-8 passes it, and is refused when read
    (the dry run reads the keys), one line, exit 2, the file untouched."""
    (tmp_path / "store").mkdir()
    db = str(tmp_path / "store" / "s.sqlite")
    fill_store(db, fake_study())
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE runs SET config_hash = CAST(X'C3FFFE' AS TEXT), config_json = CAST(X'FF' AS TEXT) WHERE id = 1"
    )
    conn.commit()
    conn.close()
    _refused_untouched(capsys, tmp_path, db, _grid(tmp_path), "is damaged", "decode")
    with pytest.raises(InputError, match="is damaged"):
        load(db)


def test_random_damage_is_refused_or_read_never_a_traceback(capsys, tmp_path):
    """64 random bytes over a random page, twenty times: the dry run exits 0 (the damage hit values,
    which SQLite keeps no checksum of) or 2 with the file left as it was, never 1 or a traceback; the
    report's reading (everything it shows) succeeds or raises InputError, nothing else."""
    (tmp_path / "store").mkdir()
    db = str(tmp_path / "store" / "s.sqlite")
    fill_store(db, fake_study())
    good = open(db, "rb").read()
    grid, rng, refused = _grid(tmp_path), random.Random(7), 0
    for _ in range(20):
        data = bytearray(good)
        at = rng.randrange(4096, len(good) - 64)
        data[at : at + 64] = rng.randbytes(64)
        for p in (tmp_path / "store").iterdir():
            p.unlink()
        with open(db, "wb") as f:
            f.write(data)
        before = _snapshot(tmp_path / "store")
        code = main(["study", "--grid", grid, "--db", db, "--dry-run"])
        _, err = capsys.readouterr()
        assert code in (0, 2) and "Traceback" not in err, (at, err)
        if code == 2:
            refused += 1
            assert err.count("\n") == 1 and _snapshot(tmp_path / "store") == before, at
        try:
            load(db)
        except InputError:
            refused += 1
    assert refused > 0  # some damage is structural, and is caught


def _make_read_only(path) -> bool:
    """Make ``path`` unwritable, even to root (the immutable attribute); False when that cannot be done."""
    if os.geteuid() != 0:
        os.chmod(path, 0o444)
        return True
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0


def _make_writable(path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    os.chmod(path, 0o644)


def test_a_read_only_store_is_refused_before_writing_and_leaves_nothing_beside_it(capsys, tmp_path):
    (tmp_path / "store").mkdir()
    db = str(tmp_path / "store" / "s.sqlite")
    fill_store(db, fake_study())
    if not _make_read_only(db):
        pytest.skip("cannot make a file read-only here (root without chattr)")
    try:
        before = _snapshot(tmp_path / "store")
        code = main(["study", "--grid", _grid(tmp_path), "--db", db, "--no-report"])
        out, err = capsys.readouterr()
        assert code == 2 and err.count("\n") == 1 and "is read-only" in err and out == "", err
        assert _snapshot(tmp_path / "store") == before  # no -wal, no -shm
        # reading it is fine, and leaves nothing behind either
        assert len(load(db).runs) == 8
        assert main(["study", "--grid", _grid(tmp_path), "--db", db, "--dry-run"]) == 0
        assert "8 runs, 0 to run" in capsys.readouterr().out
        assert _snapshot(tmp_path / "store") == before
    finally:
        _make_writable(db)


def test_an_empty_file_becomes_a_new_store_and_says_so(capsys, tmp_path):
    db = tmp_path / "empty.sqlite"
    db.touch()
    assert main(["study", "--grid", _grid(tmp_path), "--db", str(db), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"{db} is an empty file: it becomes a new study store" in out and db.stat().st_size == 0
    lines = io.StringIO()
    res = run_study(fake_study(), db=str(db), workers=1, task=fake_task, progress=False, out=lines)
    assert res.ran == 8 and lines.getvalue().startswith(
        f"{db} is an empty file: it becomes a new study store\n"
    )
    with Store(str(db)) as s:
        assert len(s.statuses()) == 8
    assert store_note(str(db)) is None  # a store now, not an empty file
