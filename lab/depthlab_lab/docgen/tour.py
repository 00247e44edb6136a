"""``depthlab reproduce tour``: regenerate docs/tour.md by re-running every command it shows.

The tour walks through the argument of the four source texts (sections and commands in
:mod:`depthlab_lab.docgen.tour_text`). Each command runs in a fresh process, ``python -m depthlab ...``,
from the repository root; its standard output is pasted under it and its plots land in docs/tour_img/.
Nothing in the document is typed by hand except the prose, so the outputs cannot drift from the code:
regenerate after a change (``depthlab reproduce tour``). Everything runs into a temporary folder first;
docs/tour.md and docs/tour_img/ are replaced only when every command succeeded, so a failed run leaves
the previous tour in place. lab/tests/test_tour.py runs the same commands. The tour is a document, not a
claim: it is not in the reproductions' registry, and ``depthlab reproduce all`` leaves it out.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from depthlab.errors import InputError
from depthlab_lab import REPOSITORY
from depthlab_lab.docgen.tour_checks import contradicted
from depthlab_lab.docgen.tour_text import SECTIONS

IMG = "tour_img"  # the plots' folder, beside tour.md
TEXT_FILE = "lab/depthlab_lab/docgen/tour_text.py"  # the prose the footer sends an editor to, from the root
MAX_LINES = 80  # longer outputs are cut in the middle, saying how many lines were left out
TIMEOUT_S = 600


@dataclass
class Ran:
    """One command as run: its display form, exit code, standard output and error, seconds."""

    command: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def repo_root() -> Path:
    """The depthlab checkout this package is installed from (editable install); InputError if none."""
    root = REPOSITORY
    if not (root / "pyproject.toml").is_file() or not (root / "depthlab").is_dir():
        raise InputError(
            f"depthlab reproduce tour writes docs/tour.md of a depthlab checkout; none at {root}"
        )
    return root


def tour_commands() -> list[str]:
    """Every command the tour shows, in order, as typed after ``depthlab`` (with ``{img}`` unfilled)."""
    return [c for s in SECTIONS for c in s.commands]


def command_keys() -> list[tuple[int, int]]:
    """(section number from 1, command index in the section) of every command, in tour order."""
    return [(i, j) for i, s in enumerate(SECTIONS, 1) for j in range(len(s.commands))]


def outputs_in(text: str) -> dict[tuple[int, int], str]:
    """The outputs a tour document shows, by (section number, command index): each console block's body."""
    blocks = re.findall(r"```console\n\$ depthlab [^\n]*\n(.*?)```", text, flags=re.S)
    return dict(zip(command_keys(), blocks))


def run_command(command: str, img_dir: str, cwd: str | Path) -> Ran:
    """Run ``python -m depthlab COMMAND`` (``{img}`` -> img_dir) in ``cwd``; returns what happened."""
    argv = command.format(img=img_dir).split()
    # One intra-op thread: the tour's models are tiny, and a second thread only waits on a busy machine.
    env = {**os.environ, "TQDM_DISABLE": "1", "COLUMNS": "110", "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "depthlab", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    shown = "depthlab " + command.format(img=f"docs/{IMG}")
    stdout = proc.stdout.replace(img_dir, f"docs/{IMG}")  # the paths the document shows, not the temp ones
    return Ran(shown, proc.returncode, stdout, proc.stderr, time.perf_counter() - start)


def excerpt(text: str, max_lines: int = MAX_LINES) -> str:
    """``text`` without trailing blank lines; past ``max_lines``, its head and tail around a marker."""
    lines = text.rstrip().splitlines()
    if len(lines) <= max_lines:
        return "\n".join(lines)
    head, tail = lines[: max_lines // 2], lines[-(max_lines // 2) :]
    return "\n".join([*head, f"... ({len(lines) - len(head) - len(tail)} lines left out) ...", *tail])


def plots_in(stdout: str) -> list[str]:
    """The tour's plots a command reports writing: its ``plot: docs/tour_img/...png`` lines, relative to docs/."""
    prefix = f"plot: docs/{IMG}/"
    lines = (line.strip() for line in stdout.splitlines())
    return [line[len("plot: docs/") :] for line in lines if line.startswith(prefix) and line.endswith(".png")]


def render(results: list[Ran], seconds: float) -> str:
    """The Markdown of the tour from the commands' results (in ``tour_commands()`` order)."""
    out = [_HEADER]
    it = iter(results)
    for section in SECTIONS:
        out += [f"## {section.title}", "", section.text, ""]
        for _ in section.commands:
            ran = next(it)
            out += ["```console", f"$ {ran.command}", excerpt(ran.stdout), "```", ""]
            for path in plots_in(ran.stdout):
                out += [f"![{os.path.basename(path)}]({path})", ""]
        if section.reading:
            out += [f"*What the texts predict:* {section.reading}", ""]
    versions = f"Python {platform.python_version()}, torch {torch.__version__}, on {platform.machine()}"
    out += [
        "---",
        "",
        f"Generated by `depthlab reproduce tour` ({len(results)} commands, {seconds:.0f} s; "
        f"{versions}). Do not edit by hand: change {TEXT_FILE} and regenerate.",
        "",
    ]
    return "\n".join(out)


_HEADER = """# A guided tour of depth: the four source texts, command by command

depthlab was founded on four texts about why Transformers can be stacked deep (described in
[sources.md](sources.md): the stacks article, "Encoder and Decoder Stacks"; the stream chapter, a
book chapter on the residual stream; "Residual Connections Explained"; and the interview answer, on
residual connections). This page follows their argument section by section and, under
each step, runs the depthlab command that shows it. The prose says what the texts claim and predict;
every output below was produced by the command above it when this page was generated, and every figure
or trend the prose states about an output is checked against that output before the page is written.
Where the texts and the outputs disagree, the prose says so. The reproductions with registered
expectations, several seeds and stated and measured values side by side are in
[reproductions.md](reproductions.md).
"""


def write_tour(root: Path | None = None) -> tuple[list[Ran], Path]:
    """Run every tour command, then write docs/tour.md and docs/tour_img/ under ``root``.

    Returns the results and the path of tour.md. Raises RuntimeError naming the first command that
    failed (the previous tour is left untouched).
    """
    root = root or repo_root()
    docs = root / "docs"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="depthlab-tour-") as tmp:
        img_dir = os.path.join(tmp, IMG)
        os.makedirs(img_dir)
        results = []
        for command in tour_commands():
            ran = run_command(command, img_dir, root)
            if ran.returncode != 0:
                raise RuntimeError(f"`{ran.command}` exited {ran.returncode}: {ran.stderr.strip()[-500:]}")
            print(f"  {ran.seconds:5.1f} s  {ran.command}", file=sys.stderr, flush=True)
            results.append(ran)
        wrong = contradicted(dict(zip(command_keys(), (r.stdout for r in results))))
        if wrong:  # the prose would state what its own output contradicts: change the prose first
            raise RuntimeError("the tour's prose is contradicted by its outputs: " + "; ".join(wrong))
        text = render(results, time.perf_counter() - start)
        docs.mkdir(exist_ok=True)
        shutil.rmtree(docs / IMG, ignore_errors=True)
        shutil.copytree(img_dir, docs / IMG)
    path = docs / "tour.md"
    path.write_text(text)
    return results, path


def check_written(results: list[Ran], path: Path) -> list[str]:
    """The commands whose output's first line is missing from the document at ``path`` (none when the
    tour was written as run)."""
    text = path.read_text()
    return [r.command for r in results if _first_line(r.stdout) not in text]


def _first_line(stdout: str) -> str:
    return next((line for line in stdout.splitlines() if line.strip()), "")
