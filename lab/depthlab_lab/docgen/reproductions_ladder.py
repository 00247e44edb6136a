"""The scale ladder inside docs/reproductions.md: in the section of each training claim that is on the
ladder, its effect sizes against width (the table of docs/reproductions-ladder.md, drawn by the same
code: :func:`depthlab_lab.docgen.ladder_doc.claim_table`), read from the ladder's study store, with a link
to the ladder page for the details. Without a store, the section says the ladder was not run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from depthlab.errors import InputError
from depthlab.intervals import AGREE, INCONCLUSIVE, MISMATCH
from depthlab_lab.docgen.ladder_doc import DEFAULT_DOC as LADDER_DOC
from depthlab_lab.docgen.ladder_doc import claim_table
from depthlab_lab.reproduce.ladder import LADDER
from depthlab_lab.reproduce.ladder_effects import AWAY, FLAT, TOWARD, ladder_effects
from depthlab_lab.reproduce.ladder_run import check_db, rungs


def check_ladder_db(db: str) -> None:
    """InputError (one line, naming --ladder-db) when ``db`` exists and is not a study store."""
    try:
        check_db(db)
    except InputError as e:
        raise InputError(str(e).replace("--db", "--ladder-db")) from None


def has_store(db: str) -> bool:
    """Whether ``db`` holds a store (a non-empty file)."""
    return os.path.isfile(db) and os.path.getsize(db) > 0


@dataclass(frozen=True)
class LadderAnswer:
    """A claim on the ladder in one line: its widest width measured, how many of its effects were
    measured there and their results, and how many effects moved toward the claim with width, away
    from it, or not beyond the intervals ("flat"), from the narrowest width to the widest."""

    width: int | None
    effects: int
    results: dict
    trends: dict


def answer(rows: list[dict]) -> LadderAnswer:
    """The :class:`LadderAnswer` of a claim's effects (:func:`ladder_effects`'s rows)."""
    done = [
        [m for m in r["measured"] if m.interval is not None or any(v == v for v in m.values)] for r in rows
    ]
    width = max((m.width for ms in done for m in ms), default=None)
    results = dict.fromkeys((AGREE, MISMATCH, INCONCLUSIVE), 0)
    for ms in done:
        for m in ms:
            if m.width == width:
                results[m.result] += 1
    names = {TOWARD: "toward", AWAY: "away", FLAT: "flat"}
    trends = dict.fromkeys(names.values(), 0)
    for r in rows:
        if r["trend"] in names:
            trends[names[r["trend"]]] += 1
    return LadderAnswer(width, sum(results.values()), results, trends)


def ladder_blocks(db: str, names: list[str], doc: str, page: str = LADDER_DOC) -> dict[str, list[str]]:
    """{claim: Markdown lines} for each of ``names`` on the ladder (see :func:`ladder_view`)."""
    return ladder_view(db, names, doc, page)[0]


def ladder_view(
    db: str, names: list[str], doc: str, page: str = LADDER_DOC
) -> tuple[dict[str, list[str]], dict[str, LadderAnswer]]:
    """({claim: Markdown lines}, {claim: LadderAnswer}) for each of ``names`` on the ladder: its table
    from the store ``db`` (or "not run" without one, and no answer), linked to the ladder ``page``
    relative to the document ``doc``."""
    on = [n for n in names if n in LADDER]
    link = os.path.relpath(page, os.path.dirname(os.path.abspath(doc)) or ".").replace(os.sep, "/")
    if not on:
        return {}, {}
    if not has_store(db):
        return {
            n: [f"**On the scale ladder:** not run (no store at `{db}`; `depthlab reproduce ladder`).", ""]
            for n in on
        }, {}
    todo = rungs(on)
    effects = ladder_effects(db, todo)
    out = {}
    for name in on:
        widths = sorted({r.width for r in todo if r.claim == name})
        intro = (
            f"**On the scale ladder** (the decisive runs at widths {', '.join(map(str, widths))}, from `{db}`; "
            f"each cell: mean [95% t-interval] over seeds and the result; details and the steps per width: "
            f"[the ladder page]({link}#{name})):"
        )
        out[name] = [intro, "", *claim_table(effects[name], widths), ""]
    return out, {name: answer(effects[name]) for name in on}
