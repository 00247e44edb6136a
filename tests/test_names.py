"""The names of the files say what is in them: a newcomer's questions, answered by the file its name points
to (docs/design.md, "Where things are: a newcomer's lookup"), each checked against the file's content."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOOKUP = [
    ("DeepNorm's alpha and beta", "depthlab/model/wrappings.py", r"def deepnorm_constants\("),
    ("muP's per-parameter learning rate", "depthlab/model/parametrization.py", r"hidden_lr"),
    (
        "a claim's expected value",
        "lab/depthlab_lab/reproduce/claims/warmup.py",
        r"REGISTRATION = Registration\(",
    ),
    ("the Hugging Face Llama mapping", "depthlab/interop/hf/llama.py", r'"llama"'),
    ("the rule that labels a run stalled", "depthlab/watch/outcome.py", r"def decide\("),
    ("the learning-rate limit the doctor applies", "depthlab/doctor/lr_limit.py", r"def limit_of\("),
    ("the measured runs advise shows", "depthlab/doctor/atlas.py", r"class Atlas"),
    ("pre-LN's forward", "depthlab/model/wrappings.py", r"class PreLN"),
]


@pytest.mark.parametrize("question, path, holds", LOOKUP)
def test_the_file_a_name_points_to_holds_the_answer(question, path, holds):
    assert re.search(holds, (ROOT / path).read_text()), f"{question}: not in {path}"


def test_the_design_page_gives_the_same_answers():
    text = (ROOT / "docs" / "design.md").read_text()
    table = text.split("## Where things are: a newcomer's lookup", 1)[1].split("\n## ", 1)[0]
    for question, path, _ in LOOKUP:
        row = next((line for line in table.splitlines() if question in line), None)
        folder, name = path.rsplit("/", 1)
        assert row is not None and (name in row or f"{folder}/" in row), question


def test_no_two_library_files_share_a_name_that_means_two_things():
    names = {}
    for p in (ROOT / "depthlab").rglob("*.py"):
        if p.name not in ("__init__.py", "__main__.py"):
            names.setdefault(p.name, []).append(p.relative_to(ROOT).as_posix())
    # a command's module and the library module it calls may share a subject (cli/probe.py, probe/)
    twice = {
        n: ps for n, ps in names.items() if len([q for q in ps if not q.startswith("depthlab/cli/")]) > 1
    }
    assert not twice, twice
