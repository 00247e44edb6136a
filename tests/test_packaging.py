"""What `pip install depthlab` gives: the library, and none of the lab (the claims, their registrations,
the calibration pipeline, the document generators), which stays beside it in lab/."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from depthlab.cli import main
from depthlab.version import __version__

REPO = Path(__file__).resolve().parent.parent
# the lab's packages and files, by path component: none may ship in the library's wheel
LAB_PARTS = {"depthlab_lab", "reproduce", "docgen", "claims", "calibrate", "grids", "records", "forecast",
             "registration.py", "check_code.py", "restore.py"}  # fmt: skip


@pytest.mark.slow
def test_the_wheel_holds_the_library_and_nothing_of_the_lab(tmp_path):
    pytest.importorskip("setuptools", minversion="77")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(tmp_path),
        str(REPO),
    ]
    _build(cmd)
    (wheel,) = tmp_path.glob("depthlab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # the version pip shows is the one depthlab --version, run folders and reports say
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert f"\nVersion: {__version__}\n" in meta and wheel.name.startswith(f"depthlab-{__version__}-")
    code = [n for n in names if n.endswith(".py")]
    assert "depthlab/model/wrappings.py" in code and "depthlab/cli/__init__.py" in code
    # every data file the library keeps beside its code (the doctor's record, the atlas advise reads, ...)
    data = [n for n in _tracked("depthlab") if not n.endswith(".py")]
    assert "depthlab/doctor/calibration.json" in data and "depthlab/doctor/atlas.csv.gz" in data
    assert [n for n in data if n not in names] == [], "data the library reads is missing from the wheel"
    lab = [n for n in names if LAB_PARTS & set(n.split("/"))]
    assert lab == [], f"the wheel carries the lab: {lab[:10]}"
    tops = {n.split("/")[0] for n in names}
    assert tops <= {"depthlab", next(t for t in tops if t.endswith(".dist-info"))}, tops


@pytest.mark.slow
def test_the_sdist_holds_the_library_and_its_data_and_not_the_tests(tmp_path):
    """What `pip install` builds from when it has no wheel: every library file, the data included, and
    not the test suite (setuptools adds tests/test*.py by default, without the conftest.py and the lab
    they need to run)."""
    pytest.importorskip("setuptools", minversion="77")
    _build(
        [
            sys.executable,
            "-c",
            f"from setuptools import build_meta; build_meta.build_sdist({str(tmp_path)!r})",
        ]
    )
    (sdist,) = tmp_path.glob("depthlab-*.tar.gz")
    assert sdist.name == f"depthlab-{__version__}.tar.gz"
    with tarfile.open(sdist) as tar:
        names = [m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()]
    library = _tracked("depthlab")
    assert [n for n in library if n not in names] == [], "library files missing from the sdist"
    extra = {"PKG-INFO", "README.md", "pyproject.toml", "setup.cfg", "MANIFEST.in"}
    other = [
        n for n in names if n not in library and n not in extra and not n.startswith("depthlab.egg-info/")
    ]
    assert other == [], f"the sdist carries what is not the library: {other[:10]}"


def _build(cmd: list[str]) -> None:
    """Run a build command in the repository; setuptools builds in the source tree: leave it as it was."""
    made = [p for p in (REPO / "build", REPO / "depthlab.egg-info") if not p.exists()]
    try:
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    finally:
        for p in made:
            shutil.rmtree(p, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]


def _tracked(folder: str) -> list[str]:
    return subprocess.run(
        ["git", "ls-files", folder], cwd=REPO, capture_output=True, text=True
    ).stdout.split()


# Each integration, the modules whose absence it must survive (set to None in sys.modules, importing
# one fails as when it is not installed) and the one line it then says, naming the extra to install.
INTEGRATIONS = [
    ("depthlab.integrations.lightning", ("lightning", "lightning.pytorch", "pytorch_lightning"),
     "depthlab.integrations.lightning needs Lightning: pip install 'depthlab[lightning]'"),
    ("depthlab.integrations.hf_trainer", ("transformers",),
     "depthlab.integrations.hf_trainer needs transformers: pip install 'depthlab[hf]'"),
]  # fmt: skip


@pytest.mark.parametrize(("module", "missing", "said"), INTEGRATIONS)
def test_an_integration_without_its_library_names_the_extra_to_install(monkeypatch, module, missing, said):
    monkeypatch.delitem(sys.modules, module, raising=False)
    for name in missing:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ModuleNotFoundError) as e:
        importlib.import_module(module)
    assert str(e.value) == said and e.value.name == missing[0]


def test_depthlab_version_says_the_version_of_the_package(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"depthlab {__version__}\n"
