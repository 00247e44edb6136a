"""The documents stay true to the code: the generated tables match the declarations they come from,
every `depthlab` command shown parses, every flag is named in docs/cli.md, the Python shown imports
names that exist (and the README's snippet runs), and the README keeps its shape."""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from depthlab.cli import LAB_COMMANDS, build_parser
from depthlab_lab.docgen import tables

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
SHELL_LANGS = {"", "console", "bash", "sh", "shell", "text"}
# what may stand before the command itself on a shown line: a prompt, VAR=value, nice -n N
PREFIX = re.compile(r"^(\$\s+)?((\w+=\S*\s+)|(nice\s+-n\s+\d+\s+))*")


def _blocks(path: Path) -> list[tuple[str, int, list[str]]]:
    """(language, line of the first body line, body lines) of every fenced code block of ``path``."""
    out, lang, start, body = [], None, 0, []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if m and lang is None:
            lang, start, body = m.group(2), n + 1, []
        elif m:
            out.append((lang, start, body))
            lang = None
        elif lang is not None:
            body.append(line)
    return out


def _shell_lines(lines: list[str], start: int) -> list[tuple[int, str]]:
    """(line number, logical line) with backslash continuations joined. In a block that shows prompts
    (``$ cmd`` then its output) only the prompted lines are commands."""
    prompted = any(line.startswith("$ ") for line in lines)
    out, pending, first = [], "", 0
    for n, line in enumerate(lines, start):
        if prompted and not pending and not line.startswith("$ "):
            continue
        if not pending:
            first = n
        pending += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            out.append((first, pending))
            pending = ""
    return out


def _argv(line: str) -> list[str] | None:
    """The depthlab arguments of a shown shell line, or None when it runs no depthlab command
    (ValueError for a command whose quotes do not close)."""
    line = PREFIX.sub("", line)
    if not re.match(r"(depthlab\s|\S+\s.*-m\s+depthlab\s)", line):
        return None
    words = shlex.split(line, comments=True)
    for i, w in enumerate(words):
        if w == "depthlab" and i == 0:
            return words[1:]
        if w == "-m" and i + 1 < len(words) and words[i + 1] == "depthlab":
            return words[i + 2 :]
    return None


def _commands() -> list[tuple[str, list[str]]]:
    """(file:line, argv) of every depthlab command in a shell code block or an inline code span."""
    found = []
    for path in DOCS:
        rel = path.relative_to(ROOT)
        for lang, start, body in _blocks(path):
            if lang in SHELL_LANGS:
                for n, line in _shell_lines(body, start):
                    argv = _argv(line)
                    if argv is not None:
                        found.append((f"{rel}:{n}", argv))
        fenced = {n for _, start, body in _blocks(path) for n in range(start - 1, start + len(body) + 1)}
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if n in fenced:
                continue
            for span in re.findall(r"`(depthlab [^`]+)`", line):
                if len(span.split()) > 2:  # `depthlab probe` names a command; longer spans run one
                    found.append((f"{rel}:{n}", shlex.split(span)[1:]))
    return found


def _parse_error(argv: list[str]) -> str | None:
    """argparse's complaint about ``argv`` (None when it parses; --help counts as parsing)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser(load=tuple(LAB_COMMANDS)).parse_args(argv)
    except SystemExit as e:
        return None if e.code == 0 else err.getvalue().strip() or f"exit {e.code}"
    return None


def test_the_commands_are_found():
    commands = _commands()
    where = {w.split(":")[0] for w, _ in commands}
    assert {"README.md", "docs/cli.md", "docs/tour.md", "docs/reproductions.md", "docs/watch.md"} <= where
    assert len(commands) > 60


def test_every_documented_command_parses():
    bad = [
        f"{where}: depthlab {shlex.join(argv)}: {err}"
        for where, argv in _commands()
        if (err := _parse_error(argv))
    ]
    assert not bad, "documented commands that do not parse:\n" + "\n".join(bad)


def test_a_command_that_does_not_parse_is_caught():
    assert _parse_error(["probe", "--layers"]) is not None
    assert _parse_error(["study", "--no-such-flag"]) is not None
    assert _parse_error(["train", "--help"]) is None
    assert _argv("$ OMP_NUM_THREADS=1 nice -n 10 depthlab study --grid g.yaml  # why") == [
        "study",
        "--grid",
        "g.yaml",
    ]
    assert _argv("torchrun --standalone -m depthlab train --out d") == ["train", "--out", "d"]
    assert _argv("python benchmarks/gpu.py --reproduce") is None


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser(load=tuple(LAB_COMMANDS))
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_flag_is_named_in_cli_md():
    text = (ROOT / "docs" / "cli.md").read_text()
    missing = []
    for name, parser in _subcommands().items():
        if f"depthlab {name}" not in text:
            missing.append(f"the command depthlab {name}")
        for action in parser._actions:
            for flag in action.option_strings:
                if (
                    flag.startswith("--")
                    and flag != "--help"
                    and not re.search(re.escape(flag) + r"(?![\w-])", text)
                ):
                    missing.append(f"depthlab {name} {flag}")
    assert not missing, "docs/cli.md does not name:\n" + "\n".join(missing)


def test_generated_tables_match_the_code():
    stale = [str(p.relative_to(ROOT)) for p in tables.stale(ROOT)]
    assert not stale, f"generated tables differ from the code in {stale}: run {tables.COMMAND}"
    blocks = {p.name: set(tables.BLOCK.findall(p.read_text())) for p in tables.documents(ROOT)}
    names = {p: {m[1] for m in found} for p, found in blocks.items()}
    assert "wrappings" in names["README.md"] and "wrappings" in names["wrappings.md"]
    assert "families" in names["families.md"]


def test_a_stale_table_is_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "wrappings.md"
    text = (ROOT / "docs" / "wrappings.md").read_text()
    page.write_text(text.replace("Vaswani et al. 2017", "Someone 1999", 1))
    assert tables.stale(tmp_path) == [page]
    assert tables.main(["--root", str(tmp_path), "--check"]) == 1
    assert tables.main(["--root", str(tmp_path)]) == 0
    assert page.read_text() == text and tables.stale(tmp_path) == []
    page.write_text("<!-- generated: nonsense -->\n| x |\n<!-- end generated -->\n")
    assert tables.main(["--root", str(tmp_path), "--check"]) == 2


def test_every_wrapping_and_family_is_in_the_tables():
    wrappings, families = tables.wrappings_table(), tables.families_table()
    for name, cls in tables.WRAPPINGS.items():
        assert f"| `{name}` | `{cls.formula_at(1.0)}` |" in wrappings
    for family in tables.FAMILIES:
        assert f"| {family.name} (" in families and family.exact in families


def _python_blocks() -> list[tuple[str, int, str]]:
    return [
        (str(p.relative_to(ROOT)), start, "\n".join(body))
        for p in DOCS
        for lang, start, body in _blocks(p)
        if lang == "python"
    ]


def _defines(module: str, name: str) -> bool:
    """Whether depthlab module ``module`` (a file or a package) defines or imports ``name`` at its top."""
    base = ROOT / Path(*module.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    if (base / f"{name}.py").is_file() or (base / name).is_dir():
        return True
    if not path.is_file():
        return False
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
    return False


def test_python_shown_imports_names_that_exist():
    bad = []
    for where, start, code in _python_blocks():
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "depthlab":
                bad += [
                    f"{where}:{start + node.lineno - 1}: from {node.module} import {a.name}"
                    for a in node.names
                    if not _defines(node.module, a.name)
                ]
    assert not bad, "documented imports of names that do not exist:\n" + "\n".join(bad)


def test_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines (at most 250: the rest belongs in docs/)"
    lang, _, first = _blocks(README)[0]
    assert "make run" in "\n".join(first) and "make test" in "\n".join(first)
    assert any(lang == "python" and start <= 80 for lang, start, _ in _blocks(README))
    for target in re.findall(r"\]\(((?:docs|examples)/[^)#]+)\)", README.read_text()):
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


@pytest.mark.slow
def test_readme_python_snippet_runs(tmp_path, monkeypatch, one_thread):
    _, start, code = next(b for b in _python_blocks() if b[0] == "README.md")
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
        exec(compile(code, f"README.md:{start}", "exec"), {})
    assert "vanishing-gradient" in out.getvalue()
    assert (tmp_path / "runs" / "mine" / "metrics.jsonl").is_file()


def test_the_data_path_names_real_files():
    text = (ROOT / "docs" / "design.md").read_text()
    picture = text.split("## The data path", 1)[1].split("## Layers", 1)[0]
    named = set(re.findall(r"\b([a-z_]+(?:/[a-z_*]+)*\.py)\b", picture))
    assert len(named) > 20
    roots = (ROOT / "depthlab", ROOT / "lab" / "depthlab_lab")
    missing = [n for n in sorted(named) if not any(list(r.glob(n)) for r in roots)]
    assert not missing, f"docs/design.md's data path names files that do not exist: {missing}"
