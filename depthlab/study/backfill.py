"""The escape step of runs stored before the store kept it (the store's version 5 migration).

:func:`fill_escape_steps` computes :func:`depthlab.watch.outcome.escape_step` for every finished run
from the training losses the store logged for it and its unigram loss, inside the caller's transaction.
A run without logged losses or without a unigram loss keeps NULL (it never had a band to leave).
"""

from __future__ import annotations

import sqlite3

from depthlab.watch.outcome import escape_step


def fill_escape_steps(conn: sqlite3.Connection) -> int:
    """Write the escape step of every run whose row has none; returns how many runs got one."""
    runs = conn.execute(
        "SELECT id, unigram_loss FROM runs WHERE escape_step IS NULL AND unigram_loss IS NOT NULL"
    ).fetchall()
    filled = 0
    for rid, unigram in runs:
        if not isinstance(unigram, (int, float)):
            continue  # a value depthlab did not write: left for the store's checks to name
        logged = conn.execute(
            "SELECT step, loss FROM metrics WHERE run_id = ? AND loss IS NOT NULL ORDER BY step", (rid,)
        ).fetchall()
        step = escape_step([(s, v) for s, v in logged if isinstance(v, (int, float))], float(unigram))
        if step is not None:
            conn.execute("UPDATE runs SET escape_step = ? WHERE id = ?", (step, rid))
            filled += 1
    return filled
