"""The Markdown of docs/reproductions.md, from the reproductions' results (see :mod:`depthlab.docs.reproductions`)."""

from __future__ import annotations

import re
import sys

from depthlab.reproduce.claim import Reproduction

INTRO = """\
# Reproductions

What depthlab measured for each number of the source texts (the seeds) and each published claim they
rest on (docs/references.md, "Published results"), at small scale on the machine below. Each claim's
expected outcome is a constant in its module under `depthlab/reproduce/`, written before anything ran;
each verdict is computed from the measurement. Each section opens with the claim as its source states
it, then how many of its checks agree: the claim is what was tested, not what was found. **MISMATCH**
is a result, not an error: the claim did not reproduce at this scale (or, where the measured column
says so, the runs it needed did not train, so no comparison could be made), and the measured value
says by how much.
"""


def cell(text) -> str:
    """A Markdown table cell: pipes escaped, newlines flattened."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def plain(doc: str | None) -> str:
    """A docstring as Markdown: ``x`` -> `x`, :mod:`x` -> `x`, dedented."""
    if not doc:
        return ""
    lines = doc.strip("\n").splitlines()
    indent = min((len(ln) - len(ln.lstrip()) for ln in lines[1:] if ln.strip()), default=0)
    text = "\n".join([lines[0].strip()] + [ln[indent:] for ln in lines[1:]])
    text = re.sub(r":\w+:`([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def header(context: dict) -> list[str]:
    load = context.get("load_at_start")
    return [
        INTRO,
        f"- command: `{context['command']}`",
        f"- machine: {context['host']}, {context['cpu']}, {context['cores']} cores"
        + (f" (load average {load} at the start: the machine was shared)" if load else ""),
        f"- software: torch {context['torch']} (torch threads: {context['torch_threads']}), Python {context['python']}",
        f"- date: {context['date']}; total time {context['seconds'] / 60:.1f} min",
        "",
    ]


def summary(parts: list[Reproduction], seconds: dict) -> list[str]:
    lines = ["## Summary", "", "| reproduction | source | checks that agree | time |", "|---|---|---|---|"]
    for p in parts:
        passed = sum(c.ok for c in p.checks)
        lines.append(
            f"| [{p.name}](#{p.name}) | {cell(p.source)} | {passed} / {len(p.checks)} | {seconds[p.name]:.0f} s |"
        )
    return lines + [""]


def section(p: Reproduction, fn, images: list[str], seconds: float, quick: bool) -> list[str]:
    module_doc = plain(getattr(sys.modules.get(fn.__module__), "__doc__", None))
    command = f"depthlab reproduce {p.name}" + (" --quick" if quick else "")
    agree = sum(c.ok for c in p.checks)
    lines = [f"## {p.name}", "", f"**The claim:** {cell(plain(fn.__doc__))}", ""]
    lines += [
        f"**Result:** {agree} of {len(p.checks)} checks agree"
        + (" (see MISMATCH rows)." if agree < len(p.checks) else "."),
        "",
    ]
    if p.source:
        lines.append(f"Source: {p.source}. ")
    lines += [f"Command: `{command}` ({seconds:.0f} s).", ""]
    if module_doc:
        lines += [
            "<details><summary>What is measured, and how</summary>",
            "",
            module_doc,
            "",
            "</details>",
            "",
        ]
    if "regime" in p.data:
        lines += [f"Regime: {p.data['regime']}", ""]
    lines += ["| claim | expected | measured | verdict |", "|---|---|---|---|"]
    for c in p.checks:
        verdict = "ok" if c.ok else "**MISMATCH**"
        lines.append(f"| {cell(c.claim)} | {cell(c.stated)} | {cell(c.measured)} | {verdict} |")
    lines.append("")
    for img in images:
        lines += [f"![{p.name}]({img})", ""]
    return lines


def render(
    parts: list[Reproduction], registry: dict, seconds: dict, images: dict, context: dict, quick: bool
) -> str:
    """The whole document (without the marker line)."""
    lines = header(context) + summary(parts, seconds)
    for p in parts:
        lines += section(p, registry[p.name], images.get(p.name, []), seconds[p.name], quick)
    return "\n".join(lines).rstrip() + "\n"
