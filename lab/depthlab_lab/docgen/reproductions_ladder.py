"""The scale ladder inside docs/reproductions.md: in the section of each training claim that is on the
ladder, its effect sizes against width (the table of docs/reproductions-ladder.md, drawn by the same
code: :func:`depthlab_lab.docgen.ladder_doc.claim_table`), read from the ladder's study store, with a link
to the ladder page for the details. Without a store, the section says the ladder was not run.
"""

from __future__ import annotations

import os

from depthlab.errors import InputError
from depthlab_lab.docgen.ladder_doc import DEFAULT_DOC as LADDER_DOC
from depthlab_lab.docgen.ladder_doc import claim_table
from depthlab_lab.reproduce.ladder import LADDER
from depthlab_lab.reproduce.ladder_effects import ladder_effects
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


def ladder_blocks(db: str, names: list[str], doc: str, page: str = LADDER_DOC) -> dict[str, list[str]]:
    """{claim: Markdown lines} for each of ``names`` on the ladder: its table from the store ``db`` (or
    "not run" without one), linked to the ladder ``page`` relative to the document ``doc``."""
    on = [n for n in names if n in LADDER]
    link = os.path.relpath(page, os.path.dirname(os.path.abspath(doc)) or ".").replace(os.sep, "/")
    if not on:
        return {}
    if not has_store(db):
        return {
            n: [f"**On the scale ladder:** not run (no store at `{db}`; `depthlab reproduce ladder`).", ""]
            for n in on
        }
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
    return out
