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


def git(*args: str) -> str:
    """``git ARGS``' output in the repository; the test skips without git or its history."""
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"no git history here: {e}")
    return done.stdout


def show(commit: str, path: str) -> str | None:
    """The file at ``path`` as committed at ``commit``; None where that commit has no such file."""
    done = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


@functools.cache
def past_names(path: str) -> tuple[str, ...]:
    """``path`` and every name git's rename detection finds it had before, newest first."""
    names = git("log", "--follow", "--format=", "--name-only", "--", path).split()
    return tuple(dict.fromkeys([path, *names]))


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
