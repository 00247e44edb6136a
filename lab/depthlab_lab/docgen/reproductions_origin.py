"""What docs/reproductions.md says of where each claim's result comes from: this sitting, or its part
committed at an earlier sitting (:mod:`depthlab_lab.reproduce.parts`), with the time, commits and hosts of
those sittings, so that a page assembled over several sittings says how it was made."""

from __future__ import annotations

import os

from depthlab_lab.reproduce.parts import short_commit as short


def parts_context(
    folder: str,
    doc: str,
    loaded: dict,
    kept: list[str],
    computed: list[str],
    commit: str | None,
    changed: dict | None = None,
) -> dict:
    """What the page says of the parts: their folder as seen from the page, each claim loaded from its
    part (commit, seconds, when and where it was computed, its run cache tally, and, for a page rendered
    from parts whatever their key, what changed since: ``changed``), the claims computed in this
    sitting, those whose part it wrote, and this sitting's commit."""
    where = os.path.relpath(folder, os.path.dirname(os.path.abspath(doc)))
    each = {
        name: {
            "commit": p.commit,
            "seconds": p.seconds,
            "finished": p.finished,
            "host": p.sitting.get("host"),
            "cache": p.cache,
            "changed": (changed or {}).get(name, ""),
        }
        for name, p in loaded.items()
    }
    return {
        "folder": where.replace(os.sep, "/"),
        "loaded": each,
        "kept": kept,
        "computed": computed,
        "commit": commit,
    }


def rendered_machine(loaded: dict) -> dict:
    """Where the parts of a rendered page were computed: their hosts (with CPU and cores), torch
    versions and threads, and Python versions, each list sorted and without repeats."""

    def each(values) -> list[str]:
        return sorted({str(v) for v in values if v is not None})

    parts = list(loaded.values())
    return {
        "hosts": each(
            f"{p.sitting.get('host')}, {p.sitting.get('cpu')}, {p.sitting.get('cores')} cores" for p in parts
        ),
        "torch": each(p.inputs.get("torch") for p in parts),
        "threads": each(p.inputs.get("threads") for p in parts),
        "python": each(p.sitting.get("python") for p in parts),
    }


def time_line(context: dict) -> str:
    """The date and the time of this sitting; with claims loaded from their parts, how many were computed
    in it, and the loaded ones' own time at the sittings that computed them (when, at which commits, on
    which other hosts)."""
    info = context.get("parts") or {}
    loaded = info.get("loaded") or {}
    if not loaded:
        return f"- date: {context['date']}; total time {context['seconds'] / 60:.1f} min"
    own = sum(p["seconds"] for p in loaded.values())
    when = sorted(p["finished"] for p in loaded.values() if p["finished"]) or ["an unknown date"]
    span = when[0] if when[0] == when[-1] else f"{when[0]} to {when[-1]}"
    commits = sorted({short(p["commit"]) for p in loaded.values()})
    hosts = sorted({p["host"] for p in loaded.values() if p["host"] and p["host"] != context.get("host")})
    elsewhere = f"; on {', '.join(hosts)}, not the machine above" if hosts else ""
    return (
        f"- date: {context['date']} (this sitting); this sitting took {context['seconds'] / 60:.1f} min and "
        f"computed {len(info.get('computed', []))} claims; {len(loaded)} were loaded from their committed "
        f"parts (`{info['folder']}/`), computed by earlier runs of this command ({span}; commit{'s' * (len(commits) > 1)} "
        f"{', '.join(commits)}{elsewhere}) in {own / 60:.1f} min of their own"
    )


def parts_runs(info: dict | None) -> str:
    """The training runs of the claims loaded from their parts, as their parts counted them ("" if none)."""
    tallies = [p["cache"] for p in ((info or {}).get("loaded") or {}).values()]
    if not tallies:
        return ""
    counted = [t for t in tallies if t]
    trained, stored = sum(t["trained"] for t in counted), sum(t["loaded"] for t in counted)
    return (
        f". The {len(tallies)} claims loaded from their parts trained {trained} runs and loaded {stored} "
        "from the run cache at the sittings that computed them"
    )


def origin(name: str, info: dict | None, seconds: float) -> str:
    """Where claim ``name``'s result comes from: this sitting, or its committed part (the commit and the
    date it was computed at); "" without parts."""
    if not info:
        return ""
    part = f"`{info['folder']}/{name}.json`"
    if name in info["loaded"]:
        p = info["loaded"][name]
        if p.get("changed"):
            return (
                f"Loaded from its committed part {part}: computed at commit {short(p['commit'])}, "
                f"finished {p['finished'] or 'at an unknown time'}, {seconds:.0f} s. Not rerun, though the code "
                f"it depends on (or another input to its key) changed since: {p['changed']}."
            )
        return (
            f"Loaded from its committed part {part}: computed at commit {short(p['commit'])}, "
            f"finished {p['finished'] or 'at an unknown time'}, {seconds:.0f} s, under today's key (the same "
            "code, registration, torch version and threads), so not run again."
        )
    kept = f" and kept in its part {part}" if name in info["kept"] else " (no part written)"
    return f"Computed in this sitting (commit {short(info.get('commit'))}){kept}."
