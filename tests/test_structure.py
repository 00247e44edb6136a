"""The package's structure stays as docs/design.md draws it: imports point down the data path, form no
cycle, and sit at module top except the optional extras.

Layers, bottom to top (a module may import its own layer and those below, never above):

    foundation (errors, version, jsonable, fit, intervals, paths, config_base, config_family, config, corpus,
    display, frames, progress, words)
    -> model -> interop -> probe -> watch -> train -> integrations -> study -> report -> advise -> cli

The lab (lab/depthlab_lab: the claims, the doctor's calibration, the document generators) sits above all
of it: it imports depthlab, and no library module imports it (checked here, statically and in a fresh
interpreter).

``depthlab/__init__.py`` (the public API) and ``__main__`` sit above everything and are not imported
from inside the package.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "depthlab"
LAYERS = [
    {
        "errors",
        "version",
        "jsonable",
        "fit",
        "intervals",
        "paths",
        "config_base",
        "config_family",
        "config_topology",
        "config",
        "corpus",
        "display",
        "frames",
        "progress",
        "words",
        "callable_package",
    },
    {"model"},
    {"interop"},
    {"probe", "doctor"},
    {"watch"},
    {"train"},
    {"integrations"},
    {"study"},
    {"report"},
    {"advise"},
    {"cli"},
    {"__init__", "__main__"},
]
# Imported inside the function that needs them, so that depthlab imports without them (optional
# extras) or does not pay their import time on every command (tensorboard).
# huggingface_hub: what transformers is built on (its config validation errors), installed with it.
# matplotlib: imported when a figure is drawn, so that ``import depthlab`` (and every command that draws
# nothing) does not load it.
LAZY_OK = ("transformers", "huggingface_hub", "ray", "tensorboard", "torch.utils.tensorboard", "lightning",
           "pytorch_lightning", "pandas", "accelerate", "IPython", "nbclient", "nbformat",
           "matplotlib", "wandb", "mlflow")  # fmt: skip
# What ``import depthlab`` must not load: the plotting and table libraries are needed only when a figure
# or a DataFrame is asked for, transformers only for a Hugging Face model.
NOT_ON_IMPORT = ("matplotlib", "pandas", "transformers")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _layer(module: str) -> int:
    top = module.split(".")[1] if module.count(".") else "__init__"
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module}: its top-level name {top!r} is in no layer of test_structure.LAYERS")


def _imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported depthlab module or other top-level name, line, inside a function) for every import."""
    tree = ast.parse(MODULES[module].read_text())
    is_pkg = MODULES[module].name == "__init__.py"
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative import
                    pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                    base = ".".join(pkg[: len(pkg) - child.level + 1] + ([base] if base else []))
                for a in child.names:
                    target = f"{base}.{a.name}"
                    out.append((target if target in MODULES else base, child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return out


def test_every_module_has_a_layer():
    for module in MODULES:
        _layer(module)


def test_imports_point_down_the_layers():
    bad = []
    for module in MODULES:
        for target, line, _ in _imports(module):
            if target.split(".")[0] != "depthlab":
                continue
            if _layer(target) > _layer(module):
                bad.append(f"{module}:{line} imports {target} (layer {_layer(target)} > {_layer(module)})")
    assert not bad, "imports that point up the layers:\n" + "\n".join(bad)


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def dfs(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state and (found := dfs(m)):
                return found
        state[n] = 2
        stack.pop()
        return None

    for n in sorted(edges):
        if n not in state and (found := dfs(n)):
            return found
    return None


def test_no_import_cycle():
    edges = {
        m: {t for t, _, _ in _imports(m) if t in MODULES and t != "depthlab" and t != m}
        for m in MODULES
        if m != "depthlab"
    }
    cycle = _cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_detector_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) is None


def test_layer_check_catches_an_upward_import(tmp_path):
    # the check reads real files: an upward import in a model module would be reported
    assert _layer("depthlab.model.stack") < _layer("depthlab.train.loop")


def test_imports_sit_at_module_top_except_optional_extras():
    bad = [
        f"{module}:{line} imports {target} inside a function"
        for module in MODULES
        for target, line, lazy in _imports(module)
        if lazy and not any(target == n or target.startswith(n + ".") for n in LAZY_OK)
    ]
    assert not bad, (
        "imports inside functions (allowed only for " + ", ".join(LAZY_OK) + "):\n" + "\n".join(bad)
    )


def test_no_library_module_imports_the_lab():
    bad = [
        f"{module}:{line} imports {target}"
        for module in MODULES
        for target, line, _ in _imports(module)
        if target.split(".")[0] == "depthlab_lab"
    ]
    assert not bad, "the library imports the lab:\n" + "\n".join(bad)


def test_importing_every_library_module_loads_nothing_of_the_lab():
    """In a fresh interpreter: every module of depthlab imported, depthlab_lab never loaded (the lab
    may be installed beside it, as make test installs it)."""
    code = (
        "import importlib, pkgutil, sys, depthlab\n"
        "for m in pkgutil.walk_packages(depthlab.__path__, 'depthlab.'):\n"
        "    if not m.name.endswith('__main__'): importlib.import_module(m.name)\n"
        "print(len([m for m in sys.modules if m.startswith('depthlab.')]), "
        "[m for m in sys.modules if m.split('.')[0] == 'depthlab_lab'])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT.parent)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    count, lab = done.stdout.strip().split(" ", 1)
    assert int(count) > 100 and lab == "[]", done.stdout


@pytest.mark.parametrize("module", ["depthlab", "depthlab.cli"])
def test_import_loads_no_plotting_table_or_hf_library(module):
    """In a fresh interpreter (this one has imported everything already). The command line builds every
    command's parser on each call (``depthlab advise``, ``probe``): matplotlib alone took half a second of
    each, before any work; a command loads it when it draws."""
    code = (
        f"import sys, {module}; "
        f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({NOT_ON_IMPORT!r}))))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT.parent)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "", f"import {module} loaded {done.stdout.strip()}"


def test_a_figure_still_draws_and_shows_in_a_notebook():
    from depthlab.display import InlineFigure, inline_figure

    fig = inline_figure(figsize=(2, 1))
    fig.subplots().plot([1, 2])
    assert isinstance(fig, InlineFigure) and fig._repr_png_().startswith(b"\x89PNG")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "depthlab.__main__"))
def test_every_module_imports(module):
    importlib.import_module(module)


def test_nothing_refers_to_a_document_outside_the_repository():
    """What contributors and users need is in docs/ (design.md, references.md, sources.md)."""
    import re

    outside = re.compile(r"DESIGN\.md|REFERENCES\.md|STYLE\.md|\.\./shared|\b[Ii]ssue \d")
    repo = ROOT.parent
    files = [repo / "README.md", repo / "Makefile", *repo.glob("docs/*.md"), *repo.glob("benchmarks/*")]
    files += [
        *ROOT.rglob("*.py"),
        *(repo / "lab").rglob("*.py"),
        *(p for p in (repo / "tests").glob("*.py") if p.name != "test_structure.py"),
    ]
    bad = [
        f"{p.relative_to(repo)}:{i}: {line.strip()[:80]}"
        for p in files
        if p.is_file()
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if outside.search(line)
    ]
    assert not bad, "references to documents outside the repository:\n" + "\n".join(bad)
    for name in ("design.md", "references.md", "sources.md"):
        assert (repo / "docs" / name).is_file(), name
