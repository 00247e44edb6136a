"""The repository's git history for the tests that check registrations against it: a test skips where
there is none (an sdist or an unpacked archive)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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
