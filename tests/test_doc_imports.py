"""Every import a docstring of the library shows a reader works: each ``from depthlab... import name``
and ``import depthlab...`` line in a module, class or function docstring names a module and a name that
exist. A reader copies these lines first; one that names a function where it no longer lives fails
before any of the example runs. (The pages' Python blocks are checked by the lab's test_docs.py.)"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FROM = re.compile(r"^\s*from (depthlab(?:\.\w+)*) import ([\w, ]+?)\s*(?:#.*)?$")
IMPORT = re.compile(r"^\s*import (depthlab(?:\.\w+)*)\s*(?:#.*)?$")


def _docstring_lines() -> list[tuple[str, str]]:
    """(where, line) for every line of every module, class and function docstring of the library."""
    found = []
    for path in sorted((ROOT / "depthlab").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False) or ""
                where = f"{path.relative_to(ROOT)}:{getattr(node, 'name', 'module')}"
                found += [(where, line) for line in doc.splitlines()]
    return found


def _imports(lines: list[tuple[str, str]]) -> list[tuple[str, str, str | None]]:
    """(where, module, name or None) for each import of depthlab among ``lines``."""
    out = []
    for where, line in lines:
        if m := FROM.match(line):
            names = [n.strip().split(" as ")[0] for n in m.group(2).split(",") if n.strip()]
            out += [(where, m.group(1), n) for n in names]
        elif m := IMPORT.match(line):
            out.append((where, m.group(1), None))
    return out


DOCSTRINGS = _imports(_docstring_lines())


def _check(module: str, name: str | None) -> None:
    mod = importlib.import_module(module)
    if name is not None and not hasattr(mod, name):
        importlib.import_module(f"{module}.{name}")  # a submodule is importable by name too


def test_the_scan_finds_the_imports_it_is_for():
    assert any(m == "depthlab.report" and n == "write_report" for _, m, n in DOCSTRINGS)
    with pytest.raises((ImportError, AttributeError)):  # and a name that is not there fails
        _check("depthlab.report.run_page", "write_nothing")


@pytest.mark.parametrize("where, module, name", DOCSTRINGS)
def test_a_shown_import_names_what_exists(where, module, name):
    try:
        _check(module, name)
    except ImportError as e:
        pytest.fail(f"{where}: from {module} import {name}: {e}")
