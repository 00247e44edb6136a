"""Re-keying a store's runs by the canonical form of their configs (the store's version 4 migration).

Stores written before version 4 keyed a run by its config as it was spelled: ``weight_decay: 0`` and
``weight_decay: 0.0`` were two keys of one configuration. :func:`rekey_runs` recomputes each run's key
with :func:`depthlab.study.grid.run_hash` from the config it stored, so a study resumes every run it
already has, whichever spelling wrote it. Nothing is deleted: when two stored runs turn out to be one
configuration, the canonical key goes to the finished one (else the first), and the other keeps its
old key, still listed by the studies that ran it. A row whose config no longer loads keeps its key.
"""

from __future__ import annotations

import json
import sqlite3

from depthlab.config import ModelConfig, TrainConfig
from depthlab.study.grid import run_hash


def canonical_run_key(config_json: str) -> str | None:
    """The run key today's depthlab gives the stored ``config_json`` (None when it does not load)."""
    try:
        cfg = json.loads(config_json)
        model, train = ModelConfig.from_dict(cfg["model"]), TrainConfig.from_dict(cfg["train"])
        return run_hash(model, train, cfg.get("data_sha256"))
    except (ValueError, TypeError, KeyError, AttributeError):  # ConfigError and JSON errors are ValueErrors
        return None


def rekey_runs(conn: sqlite3.Connection) -> int:
    """Give every run of the store its canonical key, inside the caller's transaction; returns how
    many keys changed."""
    rows = conn.execute("SELECT id, config_hash, config_json, status FROM runs ORDER BY id").fetchall()
    groups: dict[str, list[tuple[int, str, str]]] = {}
    kept = set()  # keys of rows whose config does not load: never handed to another row
    for rid, old, text, status in rows:
        new = canonical_run_key(text) if isinstance(text, str) else None
        if new is None:
            kept.add(old)
        else:
            groups.setdefault(new, []).append((rid, old, status))
    changes = {}
    for new, members in groups.items():
        if new in kept:
            continue
        winner = min(members, key=lambda m: (m[2] != "done", m[1] != new, m[0]))[0]
        for rid, old, _ in members:
            want = new if rid == winner else (old if old != new else f"{old}-{rid}")
            if want != old:
                changes[rid] = want
    for rid in changes:  # two passes: a key handed from one row to another never meets itself
        conn.execute("UPDATE runs SET config_hash = ? WHERE id = ?", (f"rekeying-{rid}", rid))
    for rid, key in changes.items():
        conn.execute("UPDATE runs SET config_hash = ? WHERE id = ?", (key, rid))
    return len(changes)
