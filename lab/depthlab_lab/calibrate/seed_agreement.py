"""How often the seed alone changes a run's outcome, on a held-out grid trained twice.

A grid that repeats another (the same configurations, learning rates included, at another seed) pairs
each configuration's two runs. Where the two outcomes differ, any call made from the configuration is
right on exactly one of them; where they agree, the best call is right on both. So on the two grids'
runs together no such call scores more than ``(2 x agreeing + disagreeing) / (2 x configurations)``:
the ceiling that advise's and every lookup's accuracy are read against. The lookups' calls depend on
the configuration alone; advise's probe sees each seed's own initialisation, so its call can change
with the seed (counted), and only such a call can pass the ceiling. The rule is the repeating grid's
registration's ("seed agreement"), committed before its runs.
"""

from __future__ import annotations

from depthlab.intervals import wilson_interval
from depthlab.report.doctor_score import expected
from depthlab_lab.calibrate.advise_track import run_field
from depthlab_lab.calibrate.lookups import LOOKUPS

CALLERS = ("advise", *LOOKUPS)


def _call(p: dict, name: str) -> bool:
    return (p["advise"] if name == "advise" else p["lookups"][name]) == "trains"


def agreement(first: dict, again: dict, done: dict[str, dict]) -> dict | None:
    """The two registrations' runs paired by configuration, once every run of both is in ``done``
    ({config hash: record row}); None before. Returns the counts, the ceiling, each caller's hits on
    all runs and on the configurations whose outcome held, per wrapping, and the pairs that differ."""
    by_run = {p["run"]: p for p in first["runs"]}
    pairs = [(by_run[p["run"]], p) for p in again["runs"]]
    if any(a["config_hash"] not in done or b["config_hash"] not in done for a, b in pairs):
        return None
    rows = []
    for a, b in pairs:
        ta, tb = (expected(done[p["config_hash"]]["outcome"]) == "trains" for p in (a, b))
        rows.append({"run": a["run"], "wrap": run_field(a["run"], "wrap"), "pair": (a, b), "truth": (ta, tb),
                     "agree": ta == tb, "outcomes": tuple(done[p["config_hash"]]["outcome"] for p in (a, b))})  # fmt: skip
    n = len(rows)
    agree = sum(r["agree"] for r in rows)
    hits = {c: sum(_call(p, c) == t for r in rows for p, t in zip(r["pair"], r["truth"])) for c in CALLERS}
    held = {c: sum(_call(p, c) == t for r in rows if r["agree"] for p, t in zip(r["pair"], r["truth"]))
            for c in CALLERS}  # fmt: skip
    by_wrap: dict[str, dict] = {}
    for r in rows:
        w = by_wrap.setdefault(r["wrap"], {"configs": 0, "agree": 0, "advise": 0})
        w["configs"] += 1
        w["agree"] += r["agree"]
        w["advise"] += sum(_call(p, "advise") == t for p, t in zip(r["pair"], r["truth"]))
    return {
        "configs": n,
        "agree": agree,
        "agree_interval": wilson_interval(agree, n),
        "ceiling": (2 * agree + (n - agree)) / (2 * n),
        "hits": hits,
        "held_runs": 2 * agree,
        "held_hits": held,
        "by_wrap": by_wrap,
        "differ": [r for r in rows if not r["agree"]],
        "seed_dependent": sum(_call(r["pair"][0], "advise") != _call(r["pair"][1], "advise") for r in rows),
    }
