"""The lab's side of the library/lab split: a document generator never changes what the library does (it
reads the doctor's record; only `depthlab calibrate` writes it), and the lab's size is stated."""

from __future__ import annotations

import re
from pathlib import Path

LAB = Path(__file__).resolve().parents[1] / "depthlab_lab"


def test_no_document_generator_writes_the_librarys_record():
    for path in (LAB / "docgen").glob("*.py"):
        text = path.read_text()
        assert not re.search(r"\bwrite_record\b", text), f"{path.name} writes a calibration record"
        assert 'RECORD_PATH, "w"' not in text and "open(RECORD_PATH" not in text, path.name


def test_only_calibrate_writes_the_record():
    writers = {p.relative_to(LAB).as_posix() for p in LAB.rglob("*.py") if "write_record(" in p.read_text()}
    assert writers <= {"calibrate/calibration.py", "cli/calibrate.py"}, writers
