"""The repository's git history for the tests that check registrations against it: a test skips where
there is none (an sdist or an unpacked archive).

The lab's files moved out of the library package (depthlab/reproduce -> lab/depthlab_lab/reproduce,
tests/registered_*.json -> lab/tests/): :func:`show_followed` reads a file at a commit under the name it
had then, through ``git log --follow``, so that a registration's history reads the same after the move."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def _whole_history() -> bool:
    """Whether the repository's whole history is here (not an archive, not a shallow clone)."""
    try:
        done = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True,
                              text=True, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return False
    return done.stdout.strip() == "false"


def git(*args: str) -> str:
    """``git ARGS``' output in the repository; the test skips without git or its whole history, and
    fails where git, with the whole history here, refuses (a commit or path the test got wrong)."""
    if not _whole_history():
        pytest.skip("no git history here (an archive, or a shallow clone)")
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def show(commit: str, path: str) -> str | None:
    """The file at ``path`` as committed at ``commit``; None where that commit has no such file."""
    done = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


@functools.cache
def past_names(path: str) -> tuple[str, ...]:
    """``path`` and every name git's rename detection finds it had before, newest first. A file that
    began as a copy of another (git's C status: a new grid's registration drawn like an earlier one's)
    has no history before the copy: the other file's commits are not its."""
    names = [path]
    for line in git("log", "--follow", "--format=", "--name-status", "--", path).splitlines():
        status, *paths = line.split("\t")
        if status.startswith("C") or status == "A":
            break
        if status.startswith("R"):
            names.append(paths[0])
    return tuple(dict.fromkeys(names))


def commits_of(path: str) -> list[str]:
    """Every commit that touched ``path`` under any of its past names, oldest first (full history: a
    merged branch's commits included, which ``git log --follow`` alone would simplify away)."""
    return git("log", "--full-history", "--reverse", "--format=%H", "--", *past_names(path)).split()


def show_followed(commit: str, path: str) -> str | None:
    """The file at ``path`` as committed at ``commit`` under any of its past names; None if none."""
    for p in past_names(path):
        if (src := show(commit, p)) is not None:
            return src
    return None


def module_path(module: str) -> str:
    """The repository path of a module of the library or of the lab (its name as imported today)."""
    rel = module.replace(".", "/") + ".py"
    return "lab/" + rel if module.split(".")[0] == "depthlab_lab" else rel
