"""The tables that documents show of the code's own declarations, rewritten from those declarations.

A document marks each generated table with a pair of comments::

    <!-- generated: wrappings (python -m depthlab_lab.docgen.tables) -->
    ...the table...
    <!-- end generated -->

and ``python -m depthlab_lab.docgen.tables`` rewrites what lies between them in README.md and docs/*.md:
``wrappings`` from each wrapping class's ``FORMULA`` (as under sp, m = 1), ``SOURCE`` and ``CONSTANTS``
(:mod:`depthlab.model.wrappings`), ``branch-multiplier`` from each class's ``FORMULA`` with the branch
multiplier m, its ``BRANCH_END`` and its ``DEPTH_RULE_REFUSED``, ``topologies`` from each residual topology's class (its state, read, write, source and references),
``families`` from each Hugging Face family's declaration
(:class:`depthlab.interop.hf.family.Family`), ``transfer`` from the registered transfer claims' run records
(:mod:`depthlab_lab.docgen.transfer_table`). ``--check`` rewrites nothing and exits 1 when a committed
copy differs from what the code would write (lab/tests/test_docs.py runs the same check).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Callable
from pathlib import Path

from depthlab.interop.hf import FAMILIES
from depthlab.model.wrappings import WRAPPINGS
from depthlab_lab import REPOSITORY
from depthlab_lab.docgen import transfer_table

ROOT = REPOSITORY
COMMAND = "python -m depthlab_lab.docgen.tables"
BLOCK = re.compile(
    r"(?P<open><!-- generated: (?P<name>[a-z-]+)[^>]*-->\n)(?P<body>.*?)(?P<close><!-- end generated -->)",
    re.DOTALL,
)


def _cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def wrappings_table() -> str:
    """The Markdown table of every registered wrapping: its ``--wrap`` name, formula (under sp: the
    branch multiplier is 1), source and depth-dependent constants, in registration order."""
    rows = [
        (f"`{name}`", f"`{cls.formula_at(1.0)}`", cls.SOURCE, ", ".join(getattr(cls, "CONSTANTS", ())) or "-")
        for name, cls in WRAPPINGS.items()
    ]
    return _table(("`--wrap`", "one sublayer", "source", "constants"), rows)


def branch_multiplier_table() -> str:
    """The Markdown table of where each wrapping's branch multiplier m enters: its formula with m, the
    module whose output m multiplies, and whether a depth rule (depth_mup, completep) is defined or
    refused, with the reason the class declares."""
    rows = []
    for name, cls in WRAPPINGS.items():
        refused = getattr(cls, "DEPTH_RULE_REFUSED", None)
        end = getattr(cls, "BRANCH_END", None)
        if refused:
            rows.append((f"`{name}`", f"`{cls.FORMULA}` (no m)", "-", f"refused: {refused}"))
        elif end is None:  # a choice of class per layer (Mix-LN): each layer follows its class's row
            rows.append((f"`{name}`", f"`{cls.FORMULA}`", "each layer's class", "defined"))
        else:
            rows.append((f"`{name}`", f"`{cls.FORMULA}`", f"`{end}`", "defined"))
    return _table(
        ("`--wrap`", "with the branch multiplier m", "m multiplies the output of", "under a depth rule"), rows
    )


def families_table() -> str:
    """The Markdown table of every imported Hugging Face family: its name and transformers classes, its
    ``model_type`` values, what is imported exactly and what is approximated, refused or left out."""
    rows = [
        (
            f"{f.name} ({', '.join(f'`{c}`' for c in f.classes)})",
            ", ".join(f"`{t}`" for t in f.model_types),
            f.exact,
            f.approximated or "-",
        )
        for f in FAMILIES
    ]
    return _table(
        ("family (transformers class)", "model_type", "imported exactly", "approximated or refused"), rows
    )


def topologies_table() -> str:
    """The Markdown table of every residual topology (a wrapping that carries a state): its ``--wrap``
    name, the state, what each sublayer reads and writes, its paper and the implementations it is tested
    against (:mod:`depthlab.model.topology_base`)."""
    rows = [
        (f"`{name}`", cls.STATE.WORDS.format(n="n"), cls.READS, cls.WRITES, cls.SOURCE, cls.REFERENCES)
        for name, cls in WRAPPINGS.items()
        if getattr(cls, "STATE", None) is not None
    ]
    return _table(
        ("`--wrap`", "residual state", "each sublayer reads", "and writes", "source", "tested against"), rows
    )


def _first_sentence(path: Path) -> str:
    """The first sentence of a module's docstring (one line, at most 110 characters)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = " ".join(doc.split())
    cut = re.search(r"(?<=[a-z0-9)`'])\. ", text)
    first = text[: cut.start()] if cut else text.rstrip(".")
    return first if len(first) <= 110 else first[:107].rsplit(" ", 1)[0] + "..."


def files_map(package: str) -> str:
    """One line per file of ``package`` ("depthlab" or "lab/depthlab_lab"): its path and what it holds
    (its docstring's first sentence), folder by folder."""
    root = ROOT / package
    lines = []
    for path in sorted(
        root.rglob("*.py"), key=lambda p: (p.parent.relative_to(root).parts, p.name != "__init__.py", p.name)
    ):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(ROOT).as_posix()
        lines.append(f"{rel:<58} {_first_sentence(path)}")
    return "```\n" + "\n".join(lines) + "\n```\n"


def advise_heldout_table() -> str:
    """advise's finished held-out grids, scored from the committed record (README's trust table)."""
    from depthlab_lab.docgen.advise_page import readme_table

    return readme_table()


TABLES: dict[str, Callable[[], str]] = {
    "library-files": lambda: files_map("depthlab"),
    "lab-files": lambda: files_map("lab/depthlab_lab"),
    "wrappings": wrappings_table,
    "branch-multiplier": branch_multiplier_table,
    "families": families_table,
    "topologies": topologies_table,
    "transfer": transfer_table.table,
    "advise-heldout": advise_heldout_table,
}


def render(text: str, where: str = "the document") -> str:
    """``text`` with every generated block rewritten from the code (ValueError for an unknown name)."""

    def fill(m: re.Match) -> str:
        name = m.group("name")
        if name not in TABLES:
            raise ValueError(f"{where}: generated block {name!r} is not one of {', '.join(TABLES)}")
        return m.group("open") + TABLES[name]() + m.group("close")

    return BLOCK.sub(fill, text)


def documents(root: Path = ROOT) -> list[Path]:
    """README.md and docs/*.md under ``root``: the documents that may hold generated blocks."""
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.is_file()]


def stale(root: Path = ROOT) -> list[Path]:
    """The documents under ``root`` whose generated blocks differ from what the code would write."""
    return [p for p in documents(root) if render(p.read_text(), str(p)) != p.read_text()]


def main(argv: list[str] | None = None) -> int:
    """Rewrite the generated blocks (or, with --check, report the stale ones); returns the exit code."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if a table is stale")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        out_of_date = stale(args.root)
    except ValueError as e:
        sys.stderr.write(f"{COMMAND}: error: {e}\n")
        return 2
    for path in out_of_date:
        if args.check:
            sys.stderr.write(f"{path}: a generated table differs from the code (run {COMMAND})\n")
        else:
            path.write_text(render(path.read_text(), str(path)))
            print(f"rewrote {path}")
    return 1 if args.check and out_of_date else 0


if __name__ == "__main__":
    raise SystemExit(main())
