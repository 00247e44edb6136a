"""``depthlab reproduce ladder``: run (or resume) the scale ladder into its study store and write
docs/reproductions-ladder.md, each training claim's effect sizes against width with their intervals.

The page is generated from the store alone (every number on it is a stored run's), so it can be
rewritten after each sitting: a rung not yet run shows as such. Beside it goes the ladder's run record
(:mod:`depthlab_lab.reproduce.ladder_record`), which ``--restore`` writes back into a store.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from depthlab.errors import InputError
from depthlab.intervals import AGREE, INCONCLUSIVE, MISMATCH
from depthlab.paths import check_output_file
from depthlab.study import Store
from depthlab.study.executors import default_workers
from depthlab_lab.reproduce.ladder import COMMITS, LADDER, LEFT_OUT, SEEDS, STEP_RULE
from depthlab_lab.reproduce.ladder_effects import AWAY, FLAT, TOWARD, ladder_effects
from depthlab_lab.reproduce.ladder_record import check_record_file, record_path, write_ladder_record
from depthlab_lab.reproduce.ladder_run import (
    commit_time,
    estimate,
    plan_lines,
    run_ladder,
    rungs,
    runs_before,
)

DEFAULT_DB = os.path.join("runs", "ladder.sqlite")
DEFAULT_DOC = os.path.join("docs", "reproductions-ladder.md")
TITLE = "# The reproductions' scale ladder"


def check_page(doc: str) -> None:
    """InputError (one line) for a ``--doc`` that cannot be written, or an existing file this command did
    not write (its first line is not the page's title): it is not replaced; the same of the run record
    beside it."""
    check_output_file(doc, "--doc")
    if os.path.isfile(doc):
        with open(doc, encoding="utf-8", errors="replace") as f:
            if f.readline().rstrip("\n") != TITLE:
                raise InputError(
                    f"--doc {doc}: exists and is not a ladder page; move it or name another file"
                )
    check_record_file(record_path(doc))


def _bounds(effect) -> str:
    lo, hi = effect.at_least, effect.at_most
    if lo is not None and hi is not None:
        return f"in [{lo:+g}, {hi:+g}]"
    return f">= {lo:+g}" if lo is not None else f"<= {hi:+g}"


def _cell(m) -> str:
    if m.interval is None:
        if all(v != v for v in m.values):  # every value nan: nothing stored yet
            return "not run yet"
        return "inconclusive (a seed gave no value)"
    i = m.interval
    return f"{i.mean:+.3f} [{i.low:+.3f}, {i.high:+.3f}] {m.result}"


def _same(a: tuple, b: tuple) -> bool:
    """Equal per seed, two NaNs (a seed that gave no value) counting as equal."""
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


def claim_table(rows: list[dict], widths) -> list[str]:
    """One claim's effects: a Markdown table, one column per width, then the trend with width."""
    head = "| effect | holds when | " + " | ".join(f"d {w}" for w in widths) + " | with width |"
    lines = [head, "|" + "---|" * (len(widths) + 3)]
    for row in rows:
        by_width = {m.width: m for m in row["measured"]}
        cells = [_cell(by_width[w]) if w in by_width else "(first rung only)" for w in widths]
        effect = row["effect"]
        lines.append(f"| {effect.name} | {_bounds(effect)} | " + " | ".join(cells) + f" | {row['trend']} |")
        capped = {m.width: m for m in row.get("capped", [])}
        if any(
            not _same(capped[w].values, by_width[w].values) for w in capped
        ):  # a loss above ln V was capped
            cells = [_cell(capped[w]) if w in capped else "(first rung only)" for w in widths]
            lines.append(
                f"| revised: {effect.name}, a loss above ln V counts as ln V | {_bounds(effect)} | "
                + " | ".join(cells)
                + f" | {row['capped_trend']} |"
            )
    return lines


def sweep_line(name: str, rows: list[dict], width: int) -> str | None:
    """Whether each of a claim's "fails" settings fails at every lr tried at the first rung: yes (every
    lr agrees), no (a MISMATCH: it trains at some lr), not run yet, or undecided; or None without a
    sweep."""
    sweep = LADDER[name].lr_sweep
    if not sweep:
        return None
    out = []
    for base in sorted({label.rsplit(", lr", 1)[0] for label in sweep}):
        group = [r for r in rows if r["effect"].a == base or r["effect"].a.startswith(base + ", lr")]
        cells = [
            (r["effect"].a.removeprefix(base).lstrip(", ") or "registered lr", r["measured"][0])
            for r in group
        ]
        results = [m.result for _, m in cells]
        if all(m.interval is None and all(v != v for v in m.values) for _, m in cells):
            verdict = "not run yet"
        else:
            verdict = (
                "yes" if all(v == AGREE for v in results) else "no" if MISMATCH in results else "undecided"
            )
        shown = ", ".join(f"{what} {m.result}" for what, m in cells)
        out.append(f"{base} fails at every lr tried: {verdict} ({shown})")
    return f"Learning-rate sweep (width {width}): " + "; ".join(out) + "."


@dataclass(frozen=True)
class Page:
    """What the page says besides the effects: per claim its widths, the seeds, the registration
    commits, the stored runs and how many of them started before their claim's registration commit,
    the plan's text (expected cost of what is not yet stored), how many of the plan's runs are not yet
    stored, and the run record's path."""

    widths: dict
    seeds: int
    commits: dict
    stored: int
    before: int
    plan_text: str
    left: int
    record: str = record_path(DEFAULT_DOC)
    spent: dict | None = None  # claim -> (runs stored, seconds of their own times, wall seconds)


def _commits_text(commits: dict) -> str:
    first = max(set(commits.values()), key=list(commits.values()).count)
    others = [f"{n}: {c[:7] or '(not recorded)'}" for n, c in commits.items() if c != first]
    return f"commit {first[:7] or '(not recorded)'}" + (f" ({'; '.join(others)})" if others else "")


def _plan_lines(page: Page) -> list[str]:
    """The expected cost of what is not yet stored, or one line saying that nothing is left."""
    if not page.left:
        return ["Nothing left to run: every run of the plan is stored."]
    return [
        "Expected cost of what is not yet stored (the cost model, step times measured when this page "
        "was written):",
        "",
        "```",
        page.plan_text.rstrip(),
        "```",
    ]


def render(effects: dict, page: Page) -> str:
    """The page's Markdown from measured effects (:func:`depthlab_lab.reproduce.ladder_effects.ladder_effects`)."""
    all_widths = sorted({w for ws in page.widths.values() for w in ws})
    lines = [
        TITLE,
        "",
        "Generated by `depthlab reproduce ladder` from its study store; do not edit by hand. Every "
        f"training claim's decisive runs at widths {', '.join(map(str, all_widths))} (d_model; the first "
        f"is the small regime), {page.seeds} seeds; steps: {STEP_RULE}. Why that rule, and what it costs: "
        "the module docstring of `lab/depthlab_lab/reproduce/ladder.py`. An upper rung sees more data than the "
        "first but fewer tokens per parameter (parameters grow as width squared), so an effect that needs "
        "training to convergence is read there as under-trained. Each cell: mean [95% t-interval] over "
        "seeds and the result against the registered bound; 'with width': from the narrowest to the "
        "widest width, whether the effect moved toward the claim's side of its bound, away from it, or "
        "not beyond the intervals. A final loss is the validation loss; a diverged run counts as ln V. "
        "Where a finite loss above ln V (worse than a uniform guess) changes an effect, a 'revised' row "
        "counts it as ln V, a rule added with results known: the first row decides.",
        "",
        f"Registered before any of its runs in {_commits_text(page.commits)}: {page.stored} runs stored, "
        f"{page.before} of them started before their claim's registration commit.",
        "",
        f"Every finished run is kept in `{page.record}` (its outcome, losses, times and the telemetry read "
        f"here); `depthlab reproduce ladder --restore {page.record}` writes those runs back into the store "
        "before the ladder resumes, so that no recorded run is trained again and this page is re-derived "
        "from the record (training only the runs it lacks).",
        "",
        *_plan_lines(page),
    ]
    lines += cost_lines(page.spent or {})
    lines += summary_lines(effects)
    for name, rows in effects.items():
        widths = page.widths[name]
        lines += ["", f"## {name}", "", f"Runs: {LADDER[name].subset}.", ""]
        lines += claim_table(rows, widths)
        sweep = sweep_line(name, rows, widths[0])
        if sweep:
            lines += ["", sweep]
    if LEFT_OUT:
        lines += ["", "## Training claims not on the ladder", ""]
        lines += [f"- {name}: {why}." for name, why in LEFT_OUT.items()]
    return "\n".join(lines) + "\n"


def summary_lines(effects: dict) -> list[str]:
    """What the ladder shows over all its claims, under the first registration: of the effects measured
    at two widths or more, how many moved toward the claim with width, away from it, or not beyond the
    intervals; and their results at the narrowest and the widest width (nothing when none is measured
    at two widths)."""
    rows = [r for rows in effects.values() for r in rows]
    spanning = [r for r in rows if r["trend"] in (TOWARD, AWAY, FLAT)]
    if not spanning:
        return []

    def tally(results: list[str]) -> str:
        return ", ".join(f"{results.count(k)} {k}" for k in (AGREE, MISMATCH, INCONCLUSIVE))

    def done(r) -> list:
        return [m for m in r["measured"] if m.interval is not None]

    trends = [r["trend"] for r in spanning]
    claims = sum(1 for rows in effects.values() if any(r in spanning for r in rows))
    return [
        "",
        "## What the ladder shows",
        "",
        f"Of the {len(rows)} effects, {len(spanning)}, in {claims} claims, are measured at two widths or "
        f"more (the others run at the first rung only, or are not yet stored). From the narrowest to the "
        f"widest width: {trends.count(TOWARD)} moved toward the claim's side of its bound, "
        f"{trends.count(AWAY)} away from it, {trends.count(FLAT)} not beyond the intervals. Results at the "
        f"narrowest width: {tally([done(r)[0].result for r in spanning])}; at the widest: "
        f"{tally([done(r)[-1].result for r in spanning])} (95% t-intervals over "
        "the seeds, each against its registered bound; were every effect's true value on its bound, "
        "about 2.5% of them would read agree and 2.5% MISMATCH by chance).",
        *changed_lines(effects, done),
    ]


def changed_lines(effects: dict, done) -> list[str]:
    """The effects whose result differs between the narrowest and the widest width measured, or that
    moved away from the claim: one bullet each (nothing when none)."""
    out = []
    for name, rows in effects.items():
        for r in rows:
            m = done(r)
            if len(m) < 2 or (m[0].result == m[-1].result and r["trend"] != AWAY):
                continue
            out.append(
                f"- {name}, {r['effect'].name}: {m[0].result} at d {m[0].width}, {m[-1].result} at "
                f"d {m[-1].width} ({r['trend']})"
            )
    return (
        ["", "Effects whose result changes with width, or that move away from the claim:", "", *out]
        if out
        else []
    )


def cost_lines(spent: dict) -> list[str]:
    """The measured cost of what is stored: per claim its runs, the sum of their own times (one core
    each) and its busy wall time (:func:`busy_seconds`); nothing when none is stored."""
    rows = [(n, *v) for n, v in spent.items() if v[0]]
    if not rows:
        return []
    lines = [
        "",
        "Measured cost of what is stored (each run's own time on one core, one torch thread; wall: the "
        "time during which at least one of the claim's runs was training, two at a time on two cores):",
        "",
        "| claim | runs | one core | wall |",
        "|---|---|---|---|",
    ]
    lines += [f"| {n} | {runs} | {_minutes(s)} | {_minutes(w)} |" for n, runs, s, w in rows]
    runs, seconds = sum(r[1] for r in rows), sum(r[2] for r in rows)
    lines.append(f"| all | {runs} | {_minutes(seconds)} | {_minutes(sum(r[3] for r in rows))} |")
    return lines


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def spent_by_claim(db: str, todo: list) -> dict:
    """Per claim of ``todo``: (runs stored, sum of their own times, busy wall seconds), from the store
    (its runs' recorded times)."""
    out: dict = {}
    if not (os.path.isfile(db) and os.path.getsize(db) > 0):
        return out
    with Store(db, create=False) as store:
        ids = {s["name"]: s["id"] for s in store.studies()}
        for r in todo:
            runs = store.runs(ids[r.study.name]) if r.study.name in ids else []
            done = [x for x in runs if x.get("seconds") is not None]
            acc = out.setdefault(r.claim, [0, 0.0, []])
            acc[0] += len(done)
            acc[1] += sum(x["seconds"] for x in done)
            acc[2] += [
                (x["started_at"], x["finished_at"])
                for x in done
                if x.get("started_at") is not None and x.get("finished_at") is not None
            ]
    return {n: (runs, seconds, busy_seconds(spans)) for n, (runs, seconds, spans) in out.items()}


def busy_seconds(spans: list[tuple[float, float]]) -> float:
    """The length of the union of the (start, end) intervals: wall time with at least one run going, so
    that a pause between sittings does not count."""
    total, end = 0.0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def stored_runs(db: str, todo: list) -> tuple[int, int]:
    """(runs stored for these rungs, how many started before their claim's registration commit)."""
    if not (os.path.isfile(db) and os.path.getsize(db) > 0):
        return 0, 0
    stored = before = 0
    times = {name: commit_time(COMMITS[name]) for name in {r.claim for r in todo}}
    with Store(db, create=False) as store:
        ids = {s["name"]: s["id"] for s in store.studies()}
        for r in todo:
            if r.study.name in ids:
                runs = store.runs(ids[r.study.name])
                stored += len(runs)
                before += len(runs_before(runs, times[r.claim]))
    return stored, before


def write_ladder(
    db: str = DEFAULT_DB,
    doc: str | None = DEFAULT_DOC,
    names: list[str] | None = None,
    quick: bool = False,
    workers: int | None = None,
    run: bool = True,
) -> dict:
    """Run (or resume, unless ``run`` is False) the ladder of ``names`` into ``db``, then write ``doc``
    (None: none) and its run record; returns the effects by claim."""
    names = names or list(LADDER)
    if doc:
        check_page(doc)
    todo = run_ladder(db, names, quick, workers) if run else rungs(names, quick)
    rows = estimate(todo, db)
    plan_text = "\n".join(plan_lines(rows, workers or default_workers()))
    left = sum(n - done for _, n, done, _ in rows)
    effects = ladder_effects(db, todo)
    if doc:
        stored, before = stored_runs(db, todo)
        widths = {n: sorted({r.width for r in todo if r.claim == n}) for n in names}
        seeds = len(todo[0].seeds) if todo else len(SEEDS)
        record = record_path(doc)
        commits = {n: COMMITS[n] for n in names}
        spent = spent_by_claim(db, todo)
        page = Page(widths, seeds, commits, stored, before, plan_text, left, record, spent)
        with open(doc, "w") as f:
            f.write(render(effects, page))
        write_ladder_record(db, doc, quick)
    return effects
