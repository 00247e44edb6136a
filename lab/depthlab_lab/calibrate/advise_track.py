"""Write advise's held-out track record into the library (``depthlab/advise/track_record.json``).

From the registrations of the held-out grids at depth (every prediction frozen before the runs) and
the committed run record (``docs/advise-heldout-runs.json``): for the latest grid whose every run is
recorded, per wrapping, how many runs advise called right and how they ended, with the grid's depths,
widths and totals, marked where the grid's runs have since joined the atlas (its calls were then an
earlier predictor's); and, under "every_grid", every finished grid at depth together (each run called by
the predictor registered for it), per wrapping, advise's hits beside those of the lookup that hit most
over them all (what the screen prints), over the grids placed by the limit (a grid drawn where advise's
and the nearest runs' calls differ is not a sample of such runs); and, under "where_calls_differ", on
every finished grid's runs where those two calls differed, how often advise was right (the screen prints
it where they differ on the question). ``python -m depthlab_lab.calibrate.advise_track`` writes it, and a test checks
that the shipped file is what the committed record gives.
"""

from __future__ import annotations

import json
import os
import sys

from depthlab.advise.track_record import PATH
from depthlab.doctor.atlas import Atlas
from depthlab.intervals import wilson_interval
from depthlab.paths import replace_file
from depthlab.report.doctor_score import expected
from depthlab_lab import REPOSITORY, lab_file
from depthlab_lab.calibrate.heldout_depth import GRIDS_AT_DEPTH, RECORD
from depthlab_lab.calibrate.lookups import LOOKUPS


def run_field(run: str, name: str) -> str:
    """A field of a run's label: 'post' from ('wrap=post d_model=96 ...', 'wrap')."""
    return next(part.split("=", 1)[1] for part in run.split() if part.startswith(f"{name}="))


def build(reg: dict, record: dict, in_fit: bool = False) -> dict | None:
    """The track record, or None while a run of the grid is missing from the record; ``in_fit``: the
    grid's runs have since joined the atlas the predictor is fitted on (its calls were an earlier
    predictor's)."""
    done = {r["config_hash"]: r for r in record["runs"]}
    runs = reg["runs"]
    if any(p["config_hash"] not in done for p in runs):
        return None
    by_wrap: dict[str, dict] = {}
    for p in runs:
        outcome = done[p["config_hash"]]["outcome"]
        right = (p["advise"] == "trains") == (expected(outcome) == "trains")
        w = by_wrap.setdefault(run_field(p["run"], "wrap"), {"runs": 0, "right": 0, "outcomes": {}})
        w["runs"] += 1
        w["right"] += right
        w["outcomes"][outcome] = w["outcomes"].get(outcome, 0) + 1
    for w in by_wrap.values():
        w["outcomes"] = dict(sorted(w["outcomes"].items(), key=lambda kv: (-kv[1], kv[0])))
    layers = [int(run_field(p["run"], "n_layers")) for p in runs]
    widths = [int(run_field(p["run"], "d_model")) for p in runs]
    return {
        "grid": "held-out grid at depth for depthlab advise (docs/advise.md)",
        "earlier_predictor": in_fit,
        "layers": [min(layers), max(layers)],
        "widths": [min(widths), max(widths)],
        "runs": len(runs),
        "right": sum(w["right"] for w in by_wrap.values()),
        "by_wrap": by_wrap,
    }


def finished_grids(regs: list[dict], done: dict[str, dict]) -> list[dict]:
    """The registrations of ``regs`` with runs, every one of them in ``done`` (finished runs by config hash)."""
    return [reg for reg in regs if reg["runs"] and all(p["config_hash"] in done for p in reg["runs"])]


def every_grid(regs: list[dict], record: dict) -> dict | None:
    """Every grid of ``regs`` whose every run ``record`` holds, together: {"grids", "layers", "runs",
    "right", "lookup" (the lookup right on most runs over them all; on a tie the first in ``LOOKUPS``, as
    docs/advise.md's score picks it: a 0/1 call's Brier score is its error rate, so its tie-break agrees),
    "lookup_right", "by_wrap": {wrap: {"runs", "right", "lookup_right"}}}; None while no grid is finished."""
    done = {r["config_hash"]: r for r in record["runs"]}
    finished = finished_grids(regs, done)
    if not finished:
        return None
    runs = [p for reg in finished for p in reg["runs"]]
    truth = [expected(done[p["config_hash"]]["outcome"]) == "trains" for p in runs]
    hits = {k: sum((p["lookups"][k] == "trains") == t for p, t in zip(runs, truth)) for k in LOOKUPS}
    best = max(LOOKUPS, key=hits.__getitem__)  # on a tie, the first in LOOKUPS
    by_wrap: dict[str, dict] = {}
    for p, t in zip(runs, truth):
        w = by_wrap.setdefault(run_field(p["run"], "wrap"), {"runs": 0, "right": 0, "lookup_right": 0})
        w["runs"] += 1
        w["right"] += (p["advise"] == "trains") == t
        w["lookup_right"] += (p["lookups"][best] == "trains") == t
    layers = [int(run_field(p["run"], "n_layers")) for p in runs]
    return {"grids": len(finished), "layers": [min(layers), max(layers)], "runs": len(runs),
            "right": sum(w["right"] for w in by_wrap.values()), "lookup": best, "lookup_right": hits[best],
            "by_wrap": by_wrap}  # fmt: skip


def placed(regs: list) -> list:
    """The registrations (or grids) of ``regs`` placed by the limit: not drawn where the calls differ, so a
    sample of the runs at depth."""
    return [r for r in regs if not (r.get("drawn") if isinstance(r, dict) else r.differ)]


def differ_reading(reg: dict, done: dict[str, dict]) -> dict:
    """On a registration's finished runs (``done``: by config hash) where advise's call is not the nearest
    runs': {"runs", "advise": how many advise called right (the nearest runs the rest), "interval": its
    95% interval (None without such a run)}."""
    differ = [
        p for p in reg["runs"] if p["config_hash"] in done and p["lookups"]["nearest runs"] != p["advise"]
    ]
    right = sum(p["advise"] == expected(done[p["config_hash"]]["outcome"]) for p in differ)
    return {
        "runs": len(differ),
        "advise": right,
        "interval": wilson_interval(right, len(differ)) if differ else None,
    }


def where_calls_differ(regs: list[dict], record: dict) -> dict | None:
    """Every finished grid of ``regs`` (a grid drawn where the calls differ included): on the runs where
    advise's registered call was not the nearest runs', {"grids", "runs", "advise": how many advise called
    right (the nearest runs called the others right)}; None while no grid is finished."""
    done = {r["config_hash"]: r for r in record["runs"]}
    finished = finished_grids(regs, done)
    if not finished:
        return None
    readings = [differ_reading(reg, done) for reg in finished]
    return {"grids": len(finished), "runs": sum(r["runs"] for r in readings),
            "advise": sum(r["advise"] for r in readings)}  # fmt: skip


def committed(
    record: dict | None = None, grids=GRIDS_AT_DEPTH, sources: set[str] | None = None
) -> dict | None:
    """The track record of the latest of ``grids`` whose every run ``record`` holds (default: the
    committed record; None while no grid is finished), marked where its runs are among the atlas's
    ``sources`` (default: the shipped atlas's)."""
    if record is None:
        with open(os.path.join(REPOSITORY, RECORD), encoding="utf-8") as f:
            record = json.load(f)
    if sources is None:
        sources = {r.source for r in Atlas.load().runs}
    regs = []
    for g in grids:
        with open(lab_file(g.registration), encoding="utf-8") as f:
            regs.append((g, json.load(f)))
    sample = [(g, reg) for g, reg in regs if placed([g])]  # a grid drawn where the calls differ is no sample
    for g, reg in reversed(sample):
        track = build(reg, record, in_fit=g.name in sources)
        if track is not None:
            return {**track, "every_grid": every_grid([reg for _, reg in sample], record),
                    "where_calls_differ": where_calls_differ([reg for _, reg in regs], record)}  # fmt: skip
    return None


def main() -> int:
    track = committed()
    if track is None:
        print(
            "track_record: no held-out grid at depth is finished in the committed record",
            file=sys.stderr,
        )
        return 2
    replace_file(str(PATH), json.dumps(track, indent=1) + "\n")
    print(f"wrote {PATH}: {track['right']} of {track['runs']} held-out runs called right")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
