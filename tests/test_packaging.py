"""What `pip install depthlab` gives: the library, and none of the lab (the claims, their registrations,
the calibration pipeline, the document generators), which stays beside it in lab/."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
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
    made = [p for p in (REPO / "build", REPO / "depthlab.egg-info") if not p.exists()]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    finally:  # setuptools builds in the source tree: leave it as it was
        for p in made:
            shutil.rmtree(p, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("depthlab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # the version pip shows is the one depthlab --version, run folders and reports say
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert f"\nVersion: {__version__}\n" in meta and wheel.name.startswith(f"depthlab-{__version__}-")
    code = [n for n in names if n.endswith(".py")]
    assert "depthlab/model/wrappings.py" in code and "depthlab/cli/__init__.py" in code
    # every data file the library keeps beside its code (the doctor's record, the atlas advise reads, ...)
    data = subprocess.run(["git", "ls-files", "depthlab"], cwd=REPO, capture_output=True, text=True).stdout
    data = [n for n in data.split() if not n.endswith(".py")]
    assert "depthlab/doctor/calibration.json" in data and "depthlab/doctor/atlas.csv.gz" in data
    assert [n for n in data if n not in names] == [], "data the library reads is missing from the wheel"
    lab = [n for n in names if LAB_PARTS & set(n.split("/"))]
    assert lab == [], f"the wheel carries the lab: {lab[:10]}"
    tops = {n.split("/")[0] for n in names}
    assert tops <= {"depthlab", next(t for t in tops if t.endswith(".dist-info"))}, tops


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
