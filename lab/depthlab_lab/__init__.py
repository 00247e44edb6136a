"""depthlab's lab: what proves depthlab's claims, kept apart from the library a user installs.

- :mod:`depthlab_lab.reproduce`: one module per claim of the source texts and papers (``claims/``), each
  with its registration (the values fixed before its runs), its pinned decision code and its revisions.
- :mod:`depthlab_lab.calibrate`: the fitting of the doctor's rules on tuning studies; it writes the record
  the library's doctor reads (``depthlab/doctor/calibration.json``) and nothing else of the library.
- :mod:`depthlab_lab.docgen`: the generators of docs/ pages made of real runs, and of the generated tables.
- :mod:`depthlab_lab.restore`: a study store rebuilt from a committed run record.
- ``grids/``: the grids the doctor was tuned and scored on; ``records/``: the doctor's records as each
  held-out grid was registered.

The lab imports :mod:`depthlab`; :mod:`depthlab` never imports the lab (tests/test_structure.py). Its
two commands, ``depthlab reproduce`` and ``depthlab calibrate``, are found by the library's command
line through the ``depthlab.commands`` entry points when the lab is installed (``pip install -e lab``).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parents[1]  # the checkout the lab is installed from (make installs it editable)
GRIDS = HERE / "grids"
RECORDS = HERE / "records"


PREFIX = "lab/depthlab_lab/"  # how the lab's files are named in documents: their path in the repository


def lab_file(path: str) -> str:
    """A lab file named by its path in the repository ("lab/depthlab_lab/grids/doctor-tuning.yaml"): that
    path where it exists (run from the repository's root), else the same file of the installed lab, so
    that the lab's commands find their grids from any folder. Any other path is returned as it is."""
    if path.startswith(PREFIX) and not Path(path).exists():
        return str(HERE / path[len(PREFIX) :])
    return path
