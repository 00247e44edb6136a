"""The measured runs ``depthlab advise`` rests on: the atlas shipped with depthlab, and a user's own study
stores read the same way (``--atlas my.sqlite``), so that a team's runs become evidence too."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

from depthlab.doctor.atlas import Atlas, MeasuredRun, from_run
from depthlab.errors import InputError, as_flags
from depthlab.study.store import Store


def atlas_from_store(db: str, flag: str = "--atlas") -> Atlas:
    """Every finished run of every study in the study store ``db``, with its at-init probe where the
    study took one (InputError, one line, for a path that is not a readable store; ``flag``: how the
    refusal names the path, ``--atlas`` on the command line, the argument's name from Python)."""
    runs = []
    with Store(db, create=False, flag=flag) as store:
        for study in store.studies():
            for r in store.runs(study["id"]):
                if r.get("status") == "done" and r.get("outcome"):
                    runs.append(from_run(f"{db}:{study['name']}", r, store.probe(r["id"])))
    if not runs:
        raise InputError(f"{flag} {db}: the store holds no finished run")
    return Atlas(tuple(runs))


def load_atlas(stores: str | os.PathLike | Sequence[str | os.PathLike] = (), name: str = "stores") -> Atlas:
    """The shipped atlas with the finished runs of the study stores ``stores`` added (a path or a list
    of them); ``name``: what a refusal calls them from Python (``advise`` passes ``atlas``), ``--atlas``
    on the command line."""
    flag = "--atlas" if as_flags() else name
    if isinstance(stores, (str, os.PathLike)):
        stores = [stores]  # one store, not the characters of its path
    try:
        stores = [os.fspath(db) if isinstance(db, os.PathLike) else db for db in stores]
    except TypeError:
        raise TypeError(
            f"{name} must be a study store's path or a list of them, not {type(stores).__name__}"
        ) from None
    atlas = Atlas.load()
    seen = {r.config_hash for r in atlas.runs}
    for db in stores:  # a run held already (the same configuration and seed, in any study) is counted once
        new = []
        for r in atlas_from_store(db, flag).runs:
            if r.config_hash not in seen:
                seen.add(r.config_hash)
                new.append(r)
        atlas = atlas + Atlas(tuple(new))
    return atlas


@functools.lru_cache(maxsize=1)
def shipped_hashes() -> frozenset[str]:
    """The config hashes of the shipped atlas's runs: a run of any other is one a user's store added."""
    return frozenset(r.config_hash for r in Atlas.load().runs)


def disagreements(
    atlas: Atlas, evidence
) -> tuple[tuple[tuple[MeasuredRun, ...], tuple[MeasuredRun, ...]], ...]:
    """The settings of the evidence rows (nearest first, each once) where the runs a user's store added
    and the shipped atlas's runs went opposite ways (every one of the first trained and none of the
    second, or the reverse), as (the user's runs, the shipped runs): the call then weighs two
    accounts of one setting that contradict each other, which a user should know."""
    shipped, out, seen = shipped_hashes(), [], set()
    for _, run in evidence:
        if run.setting() in seen:
            continue
        seen.add(run.setting())
        twins = [r for r in atlas.runs if r.setting() == run.setting()]
        mine = tuple(r for r in twins if r.config_hash not in shipped)
        theirs = tuple(r for r in twins if r.config_hash in shipped)
        ways = {r.trained for r in mine}, {r.trained for r in theirs}
        if mine and theirs and len(ways[0]) == len(ways[1]) == 1 and ways[0] != ways[1]:
            out.append((mine, theirs))
    return tuple(out)
