"""What a newcomer gets from a fresh clone: no tracked link that points outside the repository, and the
main job (`make run`'s recipe, through the same default store and report paths) runs there.

`make run` once failed on every new machine because the repository tracked `runs` as a link to a folder
of one developer's machine; CI never ran the main job, so nothing caught it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _git(*args, cwd=REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def _checkout() -> bool:
    return shutil.which("git") is not None and (REPO / ".git").exists()


@pytest.mark.skipif(not _checkout(), reason="not a git checkout")
def test_no_tracked_link_points_outside_the_repository():
    outside = []
    for line in _git("ls-files", "-s").splitlines():
        mode, _, _, path = line.split(maxsplit=3)
        if mode != "120000":
            continue
        target = (
            os.readlink(REPO / path) if (REPO / path).is_symlink() else _git("cat-file", "-p", f"HEAD:{path}")
        )
        resolved = (REPO / path).parent.joinpath(target).resolve()
        if os.path.isabs(target) or not resolved.is_relative_to(REPO):
            outside.append(f"{path} -> {target}")
    assert not outside, f"tracked links that point outside the repository: {outside}"


@pytest.mark.slow
@pytest.mark.skipif(not _checkout() or shutil.which("make") is None, reason="needs git and make")
def test_main_job_runs_on_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    _git("clone", "-q", str(REPO), str(clone))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = ["make", "--no-print-directory", "-C", str(clone), "job", "PRESET=smoke",
           f"DEPTHLAB={sys.executable} -m depthlab"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (clone / "runs" / "depthlab.sqlite").is_file()
    assert (clone / "runs" / "report" / "smoke" / "index.html").is_file()
    assert "report: runs/report/smoke/index.html" in done.stdout
    # nothing the main job writes is tracked or left for `git add`
    assert _git("status", "--porcelain", cwd=clone) == ""


def test_a_store_under_a_dangling_link_is_named(tmp_path, monkeypatch):
    from depthlab.errors import InputError
    from depthlab.study.store import check_store_path

    monkeypatch.chdir(tmp_path)
    os.symlink(tmp_path / "gone", "runs")
    with pytest.raises(InputError, match="runs is a link to .*gone, a folder that does not exist"):
        check_store_path(os.path.join("runs", "depthlab.sqlite"))
