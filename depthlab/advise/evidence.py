"""The measured runs ``depthlab advise`` rests on: the atlas shipped with depthlab, and a user's own study
stores read the same way (``--atlas my.sqlite``), so that a team's runs become evidence too."""

from __future__ import annotations

import os
from collections.abc import Sequence

from depthlab.doctor.atlas import Atlas, from_run
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
