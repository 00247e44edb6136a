"""The Markdown of docs/reproductions.md, from the reproductions' results (see :mod:`depthlab_lab.docgen.reproductions`)."""

from __future__ import annotations

import json
import re
import sys

from depthlab.intervals import AGREE, INCONCLUSIVE, METHOD, MISMATCH
from depthlab_lab.docgen.reproductions_answers import answer_rows, evidence_reasons, evidence_table, reading
from depthlab_lab.docgen.reproductions_intro import INTRO, OPENING
from depthlab_lab.docgen.reproductions_origin import origin, parts_runs, time_line
from depthlab_lab.reproduce.check_code import claim_pins
from depthlab_lab.reproduce.evidence import BLIND, EVIDENCE
from depthlab_lab.reproduce.lm_runs import BOTH_TRAINED
from depthlab_lab.reproduce.registration import SHARED_REVISIONS
from depthlab_lab.reproduce.reproduction import REGISTRATIONS, Reproduction, counts, family_results


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
    """The page's provenance: the command, where and when it ran, its training runs (a page rendered
    from the committed parts: where those were computed, and how many under code that changed since)."""
    if context.get("rendered"):
        return rendered_header(context)
    load = context.get("load_at_start")
    return [
        f"- command: `{context['command']}` (scale: {context.get('scale', 'small')})",
        f"- machine: {context['host']}, {context['cpu']}, {context['cores']} cores"
        + (f" (load average {load} at the start: the machine was shared)" if load else ""),
        f"- software: torch {context['torch']} (torch threads: {context['torch_threads']}), Python {context['python']}",
        time_line(context),
        runs_line(context.get("cache")) + parts_runs(context.get("parts")),
        "",
    ]


def rendered_header(context: dict) -> list[str]:
    """The provenance of a page rendered from the committed parts alone (no claim ran)."""
    where, info = context["rendered"], context.get("parts") or {}
    loaded = info.get("loaded") or {}
    stale = sorted(n for n, p in loaded.items() if p.get("changed"))
    return [
        f"- command: `{context['command']}` (scale: {context.get('scale', 'small')}): every claim rendered "
        "from its committed part; no claim was run",
        f"- machine: the parts were computed on {'; '.join(where['hosts']) or 'an unrecorded machine'}",
        f"- software: torch {', '.join(where['torch'])} (torch threads: {', '.join(where['threads'])}), "
        f"Python {', '.join(where['python'])}",
        time_line(context),
        "- training runs: none in this rendering" + parts_runs(info),
        f"- code since: {len(stale)} of {len(loaded)} claims were computed under code (or another input to "
        "their key) that has changed since; none was rerun, and each one's section names what changed",
        "",
    ]


def runs_line(cache: dict | None) -> str:
    """How many training runs were trained in this sitting and how many loaded from the run cache."""
    if not cache or not cache.get("folder"):
        return "- training runs: all trained in this sitting (no run cache)"
    return (
        f"- training runs: {cache['trained']} trained in this sitting, {cache['loaded']} loaded from the run "
        f"cache `{cache['folder']}` (trained earlier with the same configs, threads and "
        "training code; the record beside this page gives each run's commit). Not counted: the runs of "
        "claims that train outside the cache (batchnorm, batchnorm-same, model-update, "
        "model-update-stream, coord-depth's coordinate checks) and of the study claims, which resume from their own store"
    )


def _tally(parts: list[Reproduction], registration: str) -> dict:
    total = {AGREE: 0, MISMATCH: 0, INCONCLUSIVE: 0, "sanity": 0}
    for p in parts:
        n = counts(p.checks, registration)
        total = {k: total[k] + n[k] for k in total}
    return total


def _holm_tally(parts: list[Reproduction]) -> dict:
    total = {AGREE: 0, MISMATCH: 0, INCONCLUSIVE: 0}
    for p in parts:
        for r in family_results(p.checks):
            if r:
                total[r] += 1
    return total


def summary(parts: list[Reproduction], seconds: dict) -> list[str]:
    lines = [
        "### Counts per claim",
        "",
        "| reproduction | source | registered | agree | MISMATCH | inconclusive | revised rules (a/M/i) "
        "| Holm (a/M/i) | sanity (not counted) | time |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in parts:
        n, rev = counts(p.checks), counts(p.checks, "revised")
        holm_n = _holm_tally([p])
        reg = REGISTRATIONS.get(p.name)
        lines.append(
            f"| [{p.name}](#{p.name}) | {cell(p.source)} | {reg.commit[:7] if reg else '-'} | {n[AGREE]} "
            f"| {n[MISMATCH]} | {n[INCONCLUSIVE]} | {_abbrev(rev) if rev != n else 'same'} | {_abbrev(holm_n)} "
            f"| {n['sanity']} | {seconds[p.name]:.0f} s |"
        )
    total, revised, holm_total = _tally(parts, "first"), _tally(parts, "revised"), _holm_tally(parts)
    lines.append(
        f"| **all** | | | **{total[AGREE]}** | **{total[MISMATCH]}** | **{total[INCONCLUSIVE]}** "
        f"| {_abbrev(revised)} | {_abbrev(holm_total)} | **{total['sanity']}** "
        f"| {sum(seconds.values()) / 60:.0f} min |"
    )
    return lines + [""]


def _abbrev(n: dict) -> str:
    return f"{n[AGREE]}/{n[MISMATCH]}/{n[INCONCLUSIVE]}"


def _moved_text(first: dict, revised: dict) -> str:
    """How many more checks the revised rules leave out as sanity checks ("" if none)."""
    moved = revised["sanity"] - first["sanity"]
    return f", {moved} more moved to sanity with results known (counted under the first)" if moved else ""


def totals_text(total: dict, revised: dict, holm_total: dict, counted: int) -> list[str]:
    """The headline counts under the first registrations and the revised rules, Holm's, and chance's."""
    lines = [
        f"Under the first registrations: {total[AGREE]} of {counted} counted checks agree, "
        f"{total[MISMATCH]} MISMATCH, {total[INCONCLUSIVE]} inconclusive; {total['sanity']} sanity checks are "
        "shown apart.",
    ]
    if revised != total:
        lines += [
            "",
            f"Under the rules revised with results known (shown, never deciding): {revised[AGREE]} agree, "
            f"{revised[MISMATCH]} MISMATCH, {revised[INCONCLUSIVE]} inconclusive"
            + _moved_text(total, revised)
            + ".",
        ]
    lines += [
        "",
        f"Chance alone: were every counted check's true value on its threshold, about {0.025 * counted:.1f} "
        f"of the {counted} would read agree and {0.025 * counted:.1f} MISMATCH by chance (2.5% each at 95% "
        f"per check). With Holm's rule per claim: {holm_total[AGREE]} agree, {holm_total[MISMATCH]} MISMATCH, "
        f"{holm_total[INCONCLUSIVE]} inconclusive.",
    ]
    return lines


def _value(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return json.dumps(v) if isinstance(v, (list, dict)) else str(v)


def registration_block(name: str, scale: str) -> list[str]:
    """The claim's registration: date, expectation, the regime that ran, notes, and a pointer to revisions."""
    reg = REGISTRATIONS.get(name)
    if reg is None:
        return []
    lines = [
        f"**Registered** in commit {reg.commit[:7]}"
        + (
            f' (typed in the code as "{reg.typed_date}", a hand-written label, not a timestamp)'
            if reg.typed_date
            else ""
        )
        + (f" ({len(reg.revisions)} revisions, listed at the end)." if reg.revisions else "."),
        "",
    ]
    exp = "; ".join(f"`{k}` = {_value(v)}" for k, v in reg.expectation.items() if k != "decision")
    lines += [f"- expectation: {exp}" if exp else "- expectation: as stated in the checks"]
    if scale in reg.regimes:
        lines.append(
            f"- regime ({scale}): " + "; ".join(f"`{k}` = {_value(v)}" for k, v in reg.regimes[scale].items())
        )
    others = [s for s in reg.regimes if s != scale]
    if others:
        lines.append("- also registered: " + ", ".join(f"`--scale {s}`" for s in others))
    if reg.notes:
        lines.append(f"- how the regime was chosen: {reg.notes}")
    return lines + [""]


def _shown(result: str) -> str:
    return {AGREE: "agree", MISMATCH: "**MISMATCH**", INCONCLUSIVE: "*inconclusive*", "": "-"}[result]


def _revised_cell(c) -> str:
    """The result under the revised rules and the revision that gives it ("-" when none touches it); a
    close or no-worse check with a side that did not train says so."""
    if not c.revised:
        return "-"
    if c.revised == INCONCLUSIVE and BOTH_TRAINED in c.revision:
        return f"*inconclusive*: a side did not train ({BOTH_TRAINED}; {cell(c.revision)})"
    return f"{_shown(c.revised)} ({cell(c.revision)})" if c.revision else _shown(c.revised)


def check_rows(checks) -> list[str]:
    """The counted checks of one claim: the result under the first registration, the result under a
    rule revised with results known (if any), and the result under Holm's rule over the claim."""
    family = family_results(checks)
    lines = [
        "| claim | expected | measured | result | revised | Holm |",
        "|---|---|---|---|---|---|",
    ]
    for c, h in zip(checks, family):
        if not c.counted:
            continue
        revised = _revised_cell(c)
        if c.revised_sanity:  # moved to sanity with results known: counted here, not under the revised rules
            revised = f"sanity, not counted ({cell(c.revised_sanity)})"
        lines.append(
            f"| {cell(c.claim)} | {cell(c.stated)} | {cell(c.measured)} | {_shown(c.result)} | {revised} "
            f"| {_shown(h)} |"
        )
    return lines + [""]


def result_line(checks) -> str:
    """'**Result:** N of M counted checks agree (k MISMATCH, j inconclusive); s sanity checks apart.',
    with the counts under rules revised with results known when they differ."""
    n, rev = counts(checks), counts(checks, "revised")
    counted_n = n[AGREE] + n[MISMATCH] + n[INCONCLUSIVE]
    result = f"**Result:** {n[AGREE]} of {counted_n} counted checks agree"
    extra = [f"{n[k]} {k}" for k in (MISMATCH, INCONCLUSIVE) if n[k]]
    result += f" ({', '.join(extra)})" if extra else ""
    if rev != n:
        result += (
            f"; under rules revised with results known {rev[AGREE]} agree, {rev[MISMATCH]} MISMATCH, "
            f"{rev[INCONCLUSIVE]} inconclusive" + _moved_text(n, rev)
        )
    return result + (f"; {n['sanity']} sanity checks apart." if n["sanity"] else ".")


def sanity_rows(checks) -> list[str]:
    """The checks not counted, with their result and why they are not counted (empty if none)."""
    if not checks:
        return []
    lines = [
        "Sanity checks (not counted):",
        "",
        "| claim | expected | measured | result | why not counted |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {cell(c.claim)} | {cell(c.stated)} | {cell(c.measured)} | {c.result} | {cell(c.sanity)} |"
        for c in checks
    ]
    return lines + [""]


def measured_tables(tables: list[dict]) -> list[str]:
    """A reproduction's measured tables ({"title", "columns", "rows"}) as Markdown."""
    lines = []
    for table in tables:
        lines += [
            table["title"],
            "",
            "| " + " | ".join(table["columns"]) + " |",
            "|" + "---|" * len(table["columns"]),
        ]
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table["rows"]]
        lines.append("")
    return lines


def section(
    p: Reproduction,
    fn,
    images: list[str],
    seconds: float,
    quick: bool,
    scale: str,
    ladder: list[str] = (),
    came_from: str = "",
) -> list[str]:
    """One reproduction's section: claim, result, source, command, registration, method, checks, the
    measured tables, its scale-ladder table (``ladder``: Markdown lines), plots; ``came_from``: where its
    result comes from (this sitting or its committed part), after the command."""
    module = sys.modules.get(fn.__module__)
    module_doc = plain(getattr(module, "__doc__", None))
    command = f"depthlab reproduce {p.name}" + (" --quick" if quick else "")
    command += f" --scale {scale}" if scale != "small" else ""
    lines = [f"## {p.name}", "", f"**The claim:** {cell(plain(fn.__doc__))}", "", result_line(p.checks), ""]
    if p.source:
        lines.append(f"Source: {p.source}. ")
    lines += [f"Command: `{command}` ({seconds:.0f} s)." + (f" {came_from}" if came_from else ""), ""]
    reg = REGISTRATIONS.get(p.name)
    if reg is not None:
        lines += [
            f"Registered in commit {reg.commit[:7]}: its expectation, regime, notes and revisions are in "
            f"the appendix ([registration of {p.name}](#registration-of-{p.name})).",
            "",
        ]
    if module_doc:
        lines += [
            "<details><summary>What is measured, and how</summary>",
            "",
            module_doc,
            "",
            "</details>",
            "",
        ]
    if any(c.counted for c in p.checks):
        lines += check_rows(p.checks)
    lines += sanity_rows([c for c in p.checks if not c.counted])
    lines += measured_tables(p.data.get("tables", []))
    lines += list(ladder)
    n = counts(p.checks)
    at_scale = getattr(module, "AT_SCALE", "")
    if at_scale and (n[MISMATCH] or n[INCONCLUSIVE]):
        lines += [f"*At a larger scale:* {at_scale}", ""]
    for img in images:
        lines += [f"![{p.name}]({img})", ""]
    return lines


def revisions(parts: list[Reproduction]) -> list[str]:
    """Every revision of every registration shown above, oldest first within each claim."""
    lines = [
        "### Revisions",
        "",
        "Every change to a registered expectation or regime after its registration. A revision made with the "
        "results known cannot count as a prediction; the column says which results were known.",
        "",
        "| reproduction | date | value | old | new | reason | results known |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in parts:
        reg = REGISTRATIONS.get(p.name)
        for r in reg.revisions if reg else ():
            old = "(none)" if r.old is None else _value(r.old)
            new = "(removed)" if r.new is None else _value(r.new)
            date = r.date + (f" (commit {r.commit[:10]}, before the registration's)" if r.commit else "")
            lines.append(
                f"| {p.name} | {date} | `{r.key}` | {cell(old)} | {cell(new)} | {cell(r.reason)} | {cell(r.results_known)} |"
            )
    return lines + shared_revision_rows() + [""]


def shared_revision_rows() -> list[str]:
    """The revisions of decision code every claim shares (the outcome classifier, the checks' counting),
    as rows of the revisions table; a pin of code unchanged since it was pinned is no revision."""
    return [
        f"| every claim (shared code) | {r.date} | `{r.key}` | {cell(_value(r.old))} | {cell(_value(r.new))} | "
        f"{cell(r.reason)} | {cell(r.results_known)} |"
        for r in SHARED_REVISIONS
        if r.old is not None
    ]


def headline(parts: list[Reproduction]) -> list[str]:
    """The headline counts under the first registrations, by the kind of evidence they are, then under
    the revised rules, Holm's and chance's."""
    total, revised, holm_total = _tally(parts, "first"), _tally(parts, "revised"), _holm_tally(parts)
    counted = total[AGREE] + total[MISMATCH] + total[INCONCLUSIVE]
    first, *rest = totals_text(total, revised, holm_total, counted)
    return [
        "## Counts",
        "",
        first,
        "",
        "What was known when each check was registered (a claim's reason is in the appendix):",
        "",
        *evidence_table(parts),
        "",
        *_largest_blind(parts),
        *rest[1:],
        "",
    ]


def _largest_blind(parts: list[Reproduction]) -> list[str]:
    """One line when a single claim holds most of the blind checks: they read one experiment."""
    blind = {p.name: counts(p.checks) for p in parts if p.name in EVIDENCE and EVIDENCE[p.name].kind == BLIND}
    sizes = {n: c[AGREE] + c[MISMATCH] + c[INCONCLUSIVE] for n, c in blind.items()}
    if not sizes:
        return []
    name = max(sizes, key=sizes.get)
    if 2 * sizes[name] <= sum(sizes.values()):
        return []
    return [
        f"{sizes[name]} of the {sum(sizes.values())} blind checks are one claim's, [{name}](#{name}): they "
        "read one experiment, so they are not independent predictions.",
        "",
    ]


def registrations(parts: list[Reproduction], registry: dict, scale: str) -> list[str]:
    """Every claim's registration (expectation, regime, how it was chosen) and its pinned code."""
    lines = ["### Registrations", ""]
    for p in parts:
        block = registration_block(p.name, scale)
        if not block:
            continue
        lines += [f"#### Registration of {p.name}", "", *block[:-1], *_pins_line(p.name, registry), ""]
    return lines


def _pins_line(name: str, registry: dict) -> list[str]:
    """How much of the claim's code is pinned, and how often that code was revised (nothing for code
    that cannot be read back: a claim defined outside a module file)."""
    reg = REGISTRATIONS.get(name)
    try:
        pins = claim_pins(registry[name])
    except (KeyError, OSError, TypeError, ImportError, SyntaxError):
        return []
    changed = sum(1 for r in reg.revisions if r.key.startswith("code.")) if reg else 0
    return [
        f"- code pinned: {len(pins)} functions and constants that compute and decide its checks, by digest "
        f"(lab/tests/registered_code.json); {changed} changes since, each a revision below"
    ]


def render(
    parts: list[Reproduction],
    registry: dict,
    seconds: dict,
    images: dict,
    context: dict,
    quick: bool,
    ladder: dict | None = None,
    answers: dict | None = None,
) -> str:
    """The whole document (without the marker line): the answers first (a row per claim, how to read
    them, the headline counts), then each claim's section, then the appendix (method, provenance, the
    counts per claim, what was known at registration, the registrations and every revision).
    ``ladder``: {claim: its scale-ladder lines}; ``answers``: {claim: its LadderAnswer}."""
    scale = context.get("scale", "small")
    lines = [*OPENING, *answer_rows(parts, registry, answers or {}), "", *reading(), *headline(parts)]
    for p in parts:
        lines += section(
            p,
            registry[p.name],
            images.get(p.name, []),
            seconds[p.name],
            quick,
            scale,
            (ladder or {}).get(p.name, ()),
            origin(p.name, context.get("parts"), seconds[p.name]),
        )
    lines += [
        "## Appendix: method, provenance, registrations",
        "",
        "### How a result is decided and counted",
        "",
        INTRO.format(method=METHOD),
        "### This page",
        "",
        *header(context),
        *summary(parts, seconds),
        *evidence_reasons(parts),
        *registrations(parts, registry, scale),
        *revisions(parts),
    ]
    return "\n".join(lines).rstrip() + "\n"
