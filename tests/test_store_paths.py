"""A --db where no result could be kept is refused before any run, in one line with the reason."""

from __future__ import annotations

import io
import os

import pytest
from test_study_fakes import fake_study, fake_task

from depthlab import InputError
from depthlab.cli import main
from depthlab.study import Store, run_study


def _called(*_):
    raise AssertionError("a run started")


@pytest.mark.parametrize(
    "path,reason",
    [
        ("", "empty path"),
        ("   ", "empty path"),
        (":memory:", "in-memory"),
        ("file:s.sqlite?mode=memory", "URI"),
        ("FILE:x.sqlite", "URI"),
        ("/proc/self/status", "/proc"),
        ("/dev/shm/x.sqlite", "/dev"),
        (".", "folder"),
    ],
)
def test_a_store_path_that_keeps_nothing_is_refused_before_any_run(tmp_path, monkeypatch, path, reason):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=reason):
        run_study(
            fake_study(depths=(2,), warmups=(0,)), db=path, task=_called, progress=False, out=io.StringIO()
        )
    with pytest.raises(InputError, match=reason):
        Store(path)
    assert os.listdir(tmp_path) == []


def test_a_dangling_symlink_is_named_not_called_damaged(tmp_path, capsys):
    (tmp_path / "s.sqlite").symlink_to(tmp_path / "gone" / "s.sqlite")
    code = main(["study", "--preset", "smoke", "--db", str(tmp_path / "s.sqlite"), "--no-report"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "symbolic link" in err and "does not exist" in err
    assert "damaged" not in err and sorted(os.listdir(tmp_path)) == ["s.sqlite"]


@pytest.mark.parametrize("db", ["", ":memory:"])
def test_the_cli_refuses_before_training(tmp_path, capsys, monkeypatch, db):
    monkeypatch.chdir(tmp_path)
    code = main(["study", "--preset", "smoke", "--db", db, "--no-report"])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.count("\n") == 1 and "--db" in captured.err
    assert "study 'smoke'" not in captured.out and os.listdir(tmp_path) == []


def test_a_path_with_control_characters_is_shown_escaped(tmp_path, capsys):
    db = str(tmp_path / "a\nb\x1b[31m.sqlite")
    assert main(["study", "--preset", "smoke", "--db", db, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "a\\nb\\x1b[31m.sqlite" in out
    assert main(["report", "--db", db]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "a\\nb" in err


def test_a_good_store_still_runs(tmp_path):
    res = run_study(fake_study(depths=(2,), warmups=(0,)), db=str(tmp_path / "s.sqlite"), task=fake_task,
                    progress=False, out=io.StringIO())  # fmt: skip
    assert res.ran == res.total
