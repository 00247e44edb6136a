"""How often advise was right on runs it had never seen: its latest finished held-out grid at depth, per wrapping.

The grid's predictions were frozen before its runs (docs/advise.md has the rules, every run and the
lookups beside it); ``track_record.json``, shipped beside this file, keeps the counts per wrapping, so
that the screen can say, under its probability, how advise did on held-out runs of the same wrapping.
The lab writes the file from the committed run record (``python -m depthlab_lab.calibrate.advise_track``)
and a test checks that it still matches. Where the grid's runs have since joined the atlas the predictor
is fitted on, its calls were an earlier predictor's, and the line says so ("an earlier fit").
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
    """``wrap``'s counts on the grid ("runs", "right", "outcomes") with the grid's ("layers", "widths",
    "runs_all", "right_all", "earlier_predictor"); None when the grid held out no run of it."""
    record = load() if record is None else record
    mine = record.get("by_wrap", {}).get(wrap)
    if mine is None:
        return None
    return {"wrap": wrap, **mine, "layers": record["layers"], "widths": record["widths"],
            "runs_all": record["runs"], "right_all": record["right"],
            "earlier_predictor": record.get("earlier_predictor", False)}  # fmt: skip


def line(held: dict | None) -> str | None:
    """One line for the screen: 'held out (8-32 layers, registered): 4 of 8 admin right (8 stalled); 40
    of 56 (71%) in all', with 'an earlier fit' for 'registered' where the grid's runs have since joined the
    predictor's fit (its calls were an earlier predictor's)."""
    if not held:
        return None
    lo, hi = held["layers"]
    outcomes = ", ".join(f"{n} {o}" for o, n in held["outcomes"].items())
    then = ", an earlier fit" if held.get("earlier_predictor") else ", registered"
    return (
        f"held out ({lo}-{hi} layers{then}): {held['right']} of {held['runs']} {held['wrap']} right "
        f"({outcomes}); {held['right_all']} of {held['runs_all']} "
        f"({held['right_all'] / held['runs_all']:.0%}) in all"
    )
