"""How often advise was right on runs it had never seen: its held-out grids at depth, per wrapping.

Each grid's predictions were frozen before its runs (docs/advise.md has the rules, every run and the
lookups beside it); ``track_record.json``, shipped beside this file, keeps the counts per wrapping of the
latest finished grid and of every finished grid together ("every_grid": each run called by the predictor
registered for it, beside the lookup of measured runs that did best over them all), so that the screen
can say, under its probability, how advise did on held-out runs of the same wrapping; and, where its call
is not the nearest runs', how often it was right where the two differed ("where_calls_differ").
The lab writes the file from the committed run record (``python -m depthlab_lab.calibrate.advise_track``)
and a test checks that it still matches. The line over every grid counts each run as the predictor
registered for its grid called it (most of them an earlier predictor than the one shipped; a grid that
repeats another at another seed counts at each seed). A record without "every_grid" gives the latest
grid's line, which says "an earlier fit" where that grid's runs have since joined the atlas.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

PATH = Path(__file__).resolve().with_name("track_record.json")


@cache
def load(path: str | Path = PATH) -> dict:
    """The shipped track record: {"layers", "widths", "runs", "right", "by_wrap": {wrap: {"runs",
    "right", "outcomes": {outcome: count}}}}; {} where no file is shipped."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def for_wrap(wrap: str, record: dict | None = None) -> dict | None:
    """``wrap``'s counts on the latest grid ("runs", "right", "outcomes") with the grid's ("layers",
    "widths", "runs_all", "right_all", "earlier_predictor") and, where every finished grid together held
    out runs of it, theirs ("every_grid", the wrapping's own counts under "mine"); None when no grid held out a run of it."""
    record = load() if record is None else record
    mine = record.get("by_wrap", {}).get(wrap)
    every = record.get("every_grid") or {}
    if mine is None and wrap not in every.get("by_wrap", {}):
        return None
    out = {"wrap": wrap}
    if mine is not None:
        out.update(mine, layers=record["layers"], widths=record["widths"], runs_all=record["runs"],
                   right_all=record["right"], earlier_predictor=record.get("earlier_predictor", False))  # fmt: skip
    if record.get("where_calls_differ"):
        out["where_calls_differ"] = record["where_calls_differ"]
    if wrap in every.get("by_wrap", {}):
        out["every_grid"] = {
            **{k: v for k, v in every.items() if k != "by_wrap"},
            "mine": every["by_wrap"][wrap],
        }
    return out


def line(held: dict | None) -> str | None:
    """One line for the screen. Over every finished grid at depth placed by the limit (a grid drawn where
    the calls differ is counted by ``differ_line`` only): 'held out near the limit (6 grids, 8-32
    layers): 23 of 38 rezero right, nearest runs 25; 220 of 266 (83%) in all'. Else the latest grid's:
    'held out (8-32 layers, registered): 4 of 8 admin right (8 stalled); 40 of 56 (71%) in all', with 'an
    earlier fit' for 'registered' where the grid's runs have since joined the predictor's fit (its calls
    were an earlier predictor's)."""
    if not held:
        return None
    every = held.get("every_grid")
    if every:
        lo, hi = every["layers"]
        grids = f"{every['grids']} grid{'s' if every['grids'] > 1 else ''}"
        return (
            f"held out near the limit ({grids}, {lo}-{hi} layers): {every['mine']['right']} of {every['mine']['runs']} "
            f"{held['wrap']} right, {every['lookup']} {every['mine']['lookup_right']}; {every['right']} of "
            f"{every['runs']} ({every['right'] / every['runs']:.0%}) in all"
        )
    lo, hi = held["layers"]
    outcomes = ", ".join(f"{n} {o}" for o, n in held["outcomes"].items())
    then = ", an earlier fit" if held.get("earlier_predictor") else ", registered"
    return (
        f"held out ({lo}-{hi} layers{then}): {held['right']} of {held['runs']} {held['wrap']} right "
        f"({outcomes}); {held['right_all']} of {held['runs_all']} "
        f"({held['right_all'] / held['runs_all']:.0%}) in all"
    )


def differ_line(held: dict | None, call: str, nearest_call: str) -> str | None:
    """Where advise's call is not the nearest runs' (the lookup it is scored against), how often advise
    was right on the held-out runs where the two differed: 'nearest runs alone: TRAINS; where they and
    advise differed at depth (7 grids), advise was right on 40 of 62';
    None where the calls agree or no grid is finished."""
    differ = (held or {}).get("where_calls_differ")
    if call == nearest_call or not differ or not differ["runs"]:
        return None
    grids = f"{differ['grids']} grid{'s' if differ['grids'] > 1 else ''}"
    return (
        f"nearest runs alone: {nearest_call.upper()}; where they and advise differed at depth ({grids}), "
        f"advise was right on {differ['advise']} of {differ['runs']}"
    )
