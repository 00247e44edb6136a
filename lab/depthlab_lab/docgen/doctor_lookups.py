"""The doctor's earlier held-out grids against the stronger lookups advise registers (docs/doctor.md).

The doctor's grids registered one baseline: a wrapping x lr lookup pooled over every width, where most
tuning runs are at width 32, so beating it says little. Here the same held-out runs are answered by the
three lookups of :mod:`depthlab_lab.calibrate.lookups` (wrapping x lr; wrapping x width x lr x warmup;
the nearest runs), each reading only the tuning runs committed before that grid (:data:`POOLS`), from
the shipped atlas. They were chosen after these grids' outcomes were known: the comparison is
indicative, not a registered test. Everything is read from committed files (the atlas and
``docs/doctor-runs.json``), so the lines re-derive without a store.
"""

from __future__ import annotations

import json
import os

from depthlab.doctor.atlas import Atlas
from depthlab.doctor.predict import Query
from depthlab.intervals import paired_counts, paired_difference_interval, wilson_interval
from depthlab.report.doctor_score import expected
from depthlab_lab import REPOSITORY
from depthlab_lab.calibrate.lookups import LOOKUPS

RECORD = os.path.join("docs", "doctor-runs.json")

# Each held-out grid, newest first, with the tuning studies committed before it (git log of lab/grids).
POOLS = {
    "doctor-scale-heldout-families": (
        "doctor-tuning",
        "doctor-scale-tuning",
        "doctor-scale-tuning-wide",
        "doctor-scale-tuning-wide-deep",
        "doctor-scale-tuning-families",
    ),
    "doctor-scale-heldout": ("doctor-tuning", "doctor-scale-tuning", "doctor-scale-tuning-wide"),
    "doctor-heldout": ("doctor-tuning",),
}


def _label(rows: list[dict]) -> str:
    """'d_model 192, 384; 3 layers': the grid's widths and depths, from its runs."""
    widths = ", ".join(str(w) for w in sorted({r["d_model"] for r in rows}))
    depths = sorted({r["n_layers"] for r in rows})
    layers = f"{depths[0]}" if len(depths) == 1 else f"{depths[0]}-{depths[-1]}"
    return f"d_model {widths}; {layers} layers"


def scores(atlas: Atlas, record: dict) -> list[dict]:
    """Per held-out grid: its runs, the doctor's hits, each lookup's, and the doctor's paired
    difference with the lookup that hits most (Newcombe's interval)."""
    by_hash = {r.config_hash: r for r in atlas.runs}
    out = []
    for grid, sources in POOLS.items():
        rows = record["studies"].get(grid, [])
        if not rows:
            continue
        pool = [r for r in atlas.runs if r.source in sources]
        truth = [expected(r["outcome"]) == "trains" for r in rows]
        right = {"doctor": [(r["predicted"] == "trains") == t for r, t in zip(rows, truth)]}
        for name, lookup in LOOKUPS.items():
            calls = [lookup(pool, Query.of(by_hash[r["config_hash"]])) == "trains" for r in rows]
            right[name] = [c == t for c, t in zip(calls, truth)]
        best = max(LOOKUPS, key=lambda k: sum(right[k]))
        counts = paired_counts(right["doctor"], right[best])
        out.append({"grid": grid, "label": _label(rows), "runs": len(rows), "tuning_runs": len(pool),
                    "hits": {k: sum(v) for k, v in right.items()}, "best": best,
                    "difference": paired_difference_interval(*counts)})  # fmt: skip
    return out


def _cell(hits: int, n: int) -> str:
    lo, hi = wilson_interval(hits, n)
    return f"{hits} ({hits / n:.0%} [{lo:.0%}, {hi:.0%}])"


def _names(labels: list[str]) -> str:
    return "no grid" if not labels else "; ".join(f"`{x}`" for x in labels)


def lines(rows: list[dict]) -> list[str]:
    """The paragraph and table docs/doctor.md shows under its score table."""
    ahead = [r["label"] for r in rows if r["difference"][1] > 0]
    behind = [r for r in rows if r["hits"]["doctor"] < r["hits"][r["best"]]]
    clear = all(r["difference"][2] >= 0 for r in behind)
    out = [
        "The same held-out runs against the stronger lookups that advise's grids register, each reading "
        "only the tuning runs committed before its grid. They were chosen after these outcomes were known: "
        "indicative, not a registered test. The doctor is ahead of the best lookup beyond the interval on "
        f"{_names(ahead)}; it hits fewer runs than the best lookup on {_names([r['label'] for r in behind])}"
        + (" (within the intervals)." if behind and clear else "."),
        "",
        "| held-out grid | runs | tuning runs | doctor | "
        + " | ".join(LOOKUPS)
        + " | doctor - best lookup |",
        "|---|---|---|---|" + "---|" * len(LOOKUPS) + "---|",
    ]
    for r in rows:
        n, (d, lo, hi) = r["runs"], r["difference"]
        cells = " | ".join(_cell(r["hits"][k], n) for k in LOOKUPS)
        out.append(
            f"| {r['label']} | {n} | {r['tuning_runs']} | {_cell(r['hits']['doctor'], n)} | {cells} "
            f"| {d:+.0%} [{lo:+.0%}, {hi:+.0%}] ({r['best']}) |"
        )
    return out


def committed_lines() -> list[str]:
    """The lines from the shipped atlas and the committed run record."""
    with open(os.path.join(REPOSITORY, RECORD), encoding="utf-8") as f:
        record = json.load(f)
    return lines(scores(Atlas.load(), record))
