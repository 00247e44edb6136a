"""What ``import depthlab`` gives a reader: the names of ``depthlab.__all__``, each listed on the Python
page (docs/python.md), and each one that ``dir(depthlab)`` (a notebook's tab completion) shows."""

from __future__ import annotations

import re
from pathlib import Path

import depthlab

PAGE = Path(__file__).resolve().parents[1] / "docs" / "python.md"


def _listed() -> set[str]:
    """The names in the first column of the page's "What import depthlab gives" table."""
    section = PAGE.read_text().split("## What `import depthlab` gives", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`(\w+)", row.split("|")[1])}


def test_the_python_page_lists_every_exported_name_and_nothing_else():
    assert _listed() == set(depthlab.__all__) | {"open"}


def test_dir_shows_every_exported_name_the_lazy_advise_among_them():
    assert set(depthlab.__all__) <= set(dir(depthlab))


def test_both_nested_option_groups_of_a_model_config_are_exported():
    cfg = depthlab.ModelConfig(wrap="mhc", topology=depthlab.TopologyOptions(streams=2))
    assert cfg == depthlab.ModelConfig(wrap="mhc").replace(streams=2)
    assert depthlab.FamilyOptions is type(cfg.family) and depthlab.TopologyOptions is type(cfg.topology)
